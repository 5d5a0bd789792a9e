// FSDP's job-level failure guarantees, with fsdp_misuse_worker under `mpirun -np 2`:
// ranks whose models disagree fail together within 5 s (each naming its FSDP unit), and a rank that
// exits mid-step ends every rank within 10 s (measured from the failure's moment).
#include "../dist/mpi_job.h"

using mpi_job::check_failed_job;
using mpi_job::contains;
using mpi_job::JobResult;
using mpi_job::run_job;

TEST_CASE("ranks with different models fail on every rank within 5 s, each naming its unit and both calls") {
  JobResult job = run_job("FSDP_MISUSE_WORKER", "mismatch", false);  // the always-on check, no debug mode needed
  MESSAGE("mismatch: job ended ", job.seconds_after_event, " s after the later rank started (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 5.0);
  const std::string calls = "the ranks issued different collectives: rank 0: #1 all_gather float32 x 165; rank 1: #1 "
                            "all_gather float32 x 182.";
  CHECK(contains(job.output, "rank 0 caught: FSDP unit 'fc2' (fc2.weight [10, 32], fc2.bias [10]), all-gathering its "
                             "parameters on rank 0: collective mismatch on group 'world' (seen on rank 0): " + calls));
  CHECK(contains(job.output, "rank 1 caught: FSDP unit 'fc2' (fc2.weight [11, 32], fc2.bias [11]), all-gathering its "
                             "parameters on rank 1: collective mismatch on group 'world' (seen on rank 1): " + calls));
}

TEST_CASE("a rank that exits mid-step ends every rank within 10 s") {
  JobResult job = run_job("FSDP_MISUSE_WORKER", "exit", false);
  MESSAGE("exit: job ended ", job.seconds_after_event, " s after rank 1 exited (", job.seconds_total, " s from launch)");
  check_failed_job(job, 10.0);
}
