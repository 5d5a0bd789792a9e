// The job-level failure guarantees, checked by running misuse_worker under
// `mpirun -np 2` (paths from the MPIRUN and MISUSE_WORKER environment variables):
//   - a collective mismatch in debug mode fails on every rank within 5 s;
//   - a rank that exits, is killed, throws, or returns from main mid-step ends every rank
//     within 10 s;
//   - a correct job whose ranks finish at different times still exits 0;
//   - a stopped or late rank makes the others' collective time out, naming the call and
//     the rank; ranks waiting on different groups are a deadlock found within seconds;
//     mismatched calls fail on every rank even without debug mode.
// The bounds are the requirements, measured from the failure's moment (the
// worker's "event" stamp) to mpirun's exit, so mpirun's start-up time does not count.
// A job still running after 60 s is killed and reported as a hang.
#include "mpi_job.h"

using mpi_job::check_failed_job;
using mpi_job::contains;
using mpi_job::JobResult;
using mpi_job::run_job;

TEST_CASE("debug mode: a collective mismatch fails on every rank within 5 s, naming both calls") {
  JobResult job = run_job("MISUSE_WORKER", "mismatch", true);
  MESSAGE("mismatch: job ended ", job.seconds_after_event, " s after the later rank issued its call (",
          job.seconds_total, " s from launch)");
  check_failed_job(job, 5.0);
  for (std::string rank : {"0", "1"}) {
    std::string line_start = "rank " + rank + " caught: collective mismatch on group 'world'";
    CHECK(contains(job.output, line_start));
  }
  CHECK(contains(job.output, "rank 0: #0 all_gather float32 x 1024; rank 1: #0 all_reduce(sum) float32 x 10"));
}

TEST_CASE("a rank that calls _exit mid-step ends every rank within 10 s") {
  JobResult job = run_job("MISUSE_WORKER", "exit", false);
  MESSAGE("_exit: job ended ", job.seconds_after_event, " s after rank 1 exited (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output, "rank 0: waiting in an all-reduce"));
}

TEST_CASE("a rank killed by SIGKILL mid-step ends every rank within 10 s") {
  JobResult job = run_job("MISUSE_WORKER", "sigkill", false);
  MESSAGE("SIGKILL: job ended ", job.seconds_after_event, " s after rank 1 was killed (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output, "rank 0: waiting in an all-reduce"));
}

TEST_CASE("an uncaught exception on one rank aborts the job within 10 s, naming the rank and the error") {
  JobResult job = run_job("MISUSE_WORKER", "throw", false);
  MESSAGE("uncaught exception: job ended ", job.seconds_after_event, " s after rank 1 threw (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output,
                 "tessera::dist: rank 1 of 2: uncaught exception (std::runtime_error): deliberate failure in step 3"));
  CHECK(contains(job.output, "rank 0: waiting in an all-reduce"));
}

TEST_CASE("the program's own terminate handler still runs, and the job still ends within 10 s") {
  JobResult job = run_job("MISUSE_WORKER", "throw_with_handler", false);
  MESSAGE("uncaught exception with a program's handler: job ended ", job.seconds_after_event, " s after rank 1 threw");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output,
                 "tessera::dist: rank 1 of 2: uncaught exception (std::runtime_error): deliberate failure in step 3"));
  CHECK(contains(job.output, "the program's terminate handler ran"));
}

TEST_CASE("a rank that returns from main mid-step ends every rank within 10 s (the exit watch)") {
  JobResult job = run_job("MISUSE_WORKER", "return", false);
  MESSAGE("return from main: job ended ", job.seconds_after_event, " s after rank 1 returned (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output, "tessera::dist: rank 0 of 2: rank 1 exited after issuing 2 collectives on group "
                             "'world', but this rank issued 3: collective #2 can never complete."));
}

TEST_CASE("a collective issued after another rank returned from main is refused, and the job ends") {
  JobResult job = run_job("MISUSE_WORKER", "return_then_issue", false);
  MESSAGE("issue after a rank left: job ended ", job.seconds_after_event, " s after rank 1 returned (",
          job.seconds_total, " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output, "rank 0 of 2: uncaught exception (tessera::dist::DistError): #2 all_reduce(sum) "
                             "float32 x 1000 on group 'world', rank 0: rank 1 has already exited after issuing 2 "
                             "collectives on this group, so this one can never complete"));
}

TEST_CASE("ranks that finish at different times exit 0: the exit watch does not fire on a correct job") {
  JobResult job = run_job("MISUSE_WORKER", "uneven_finish", false);
  INFO("mpirun output:\n", job.output);
  CHECK_FALSE(job.hung);
  CHECK(job.exited);
  CHECK(job.status == 0);
  CHECK(contains(job.output, "rank 0 finished normally"));
}

// Collective timeouts (TESSERA_DIST_TIMEOUT=1): the bound is the timeout, the watchdog's
// two-second window for answers, its second for the others to print, and mpirun's teardown.
TEST_CASE("a stopped rank (SIGSTOP): the collective times out and the job ends, naming the call and the rank") {
  JobResult job = run_job("MISUSE_WORKER", "sigstop", false, {{"TESSERA_DIST_TIMEOUT", "1"}});
  MESSAGE("SIGSTOP: job ended ", job.seconds_after_event, " s after rank 1 stopped (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 15.0, /*resumed_rank=*/1);  // rank 1 is continued by mpirun's teardown
  CHECK(job.seconds_after_event > 1.0);  // not before the timeout
  CHECK(contains(job.output, "tessera::dist: rank 0 of 2: collective timeout on group 'world' (seen on rank 0 of 2): "
                             "#2 all_reduce(sum) float32 x 1000 waited more than 1 s for the other ranks. Did not "
                             "arrive: rank 1 (it did not answer: stopped, or stuck where Tessera cannot reach it)."));
  CHECK(contains(job.output, "tessera::dist: rank 0 aborts the MPI job"));
}

TEST_CASE("a rank that computes past the timeout: every rank fails naming the call and what the late rank has issued") {
  JobResult job = run_job("MISUSE_WORKER", "compute_forever", false, {{"TESSERA_DIST_TIMEOUT", "1"}});
  MESSAGE("computing: job ended ", job.seconds_after_event, " s after rank 1 began computing (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 15.0);
  const std::string message = "collective timeout on group 'world' (seen on rank 0 of 2): #2 all_reduce(sum) float32 x "
                              "1000 waited more than 1 s for the other ranks. Did not arrive: rank 1 (it has issued 2 "
                              "collectives on group 'world', not yet #2).";
  CHECK(contains(job.output, "tessera::dist: rank 0 of 2: " + message));
  CHECK(contains(job.output, "tessera::dist: rank 1 of 2: " + message));  // the late rank says so too
}

TEST_CASE("ranks waiting on different groups: the deadlock is found within seconds, without debug mode") {
  JobResult job = run_job("MISUSE_WORKER", "cross_group", false);
  MESSAGE("cross-group deadlock: job ended ", job.seconds_after_event, " s after the ranks began waiting (",
          job.seconds_total, " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output, "collectives that can never complete (seen on rank "));
  CHECK(contains(job.output, "rank 0 is in #0 barrier on group 'world.1', waiting for rank 1 (it has issued 0 "
                             "collectives on group 'world.1', not yet #0; it is in #2 barrier on group 'world')"));
  CHECK(contains(job.output, "rank 1 is in #2 barrier on group 'world', waiting for rank 0 (it has issued 2 "
                             "collectives on group 'world', not yet #2; it is in #0 barrier on group 'world.1')"));
}

TEST_CASE("without debug mode, a broadcast from different roots fails on every rank instead of diverging") {
  JobResult job = run_job("MISUSE_WORKER", "mismatch_silent", false);
  check_failed_job(job, 5.0);
  for (std::string rank : {"0", "1"}) {
    CHECK(contains(job.output, "rank " + rank + " caught: collective mismatch on group 'world' (seen on rank " + rank +
                                   "): the ranks issued different collectives: rank 0: #0 broadcast float32 x 4 from "
                                   "rank 0; rank 1: #0 broadcast float32 x 4 from rank 1."));
  }
}
