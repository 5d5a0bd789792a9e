// FSDP's job-level failure guarantees, with fsdp_misuse_worker under `mpirun -np 2`:
// ranks whose models disagree fail together within 5 s in debug mode, and a rank that
// exits mid-step ends every rank within 10 s (measured from the failure's moment).
#include "../dist/mpi_job.h"

using mpi_job::check_failed_job;
using mpi_job::contains;
using mpi_job::JobResult;
using mpi_job::run_job;

TEST_CASE("debug mode: ranks with different models fail on every rank within 5 s, naming both calls") {
  JobResult job = run_job("FSDP_MISUSE_WORKER", "mismatch", true);
  MESSAGE("mismatch: job ended ", job.seconds_after_event, " s after the later rank started (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 5.0);
  CHECK(contains(job.output, "rank 0 caught: collective mismatch"));
  CHECK(contains(job.output, "rank 1 caught: collective mismatch"));
  CHECK(contains(job.output, "all_gather"));
}

TEST_CASE("a rank that exits mid-step ends every rank within 10 s") {
  JobResult job = run_job("FSDP_MISUSE_WORKER", "exit", false);
  MESSAGE("exit: job ended ", job.seconds_after_event, " s after rank 1 exited (", job.seconds_total, " s from launch)");
  check_failed_job(job, 10.0);
}
