// A program that misbehaves on purpose, run by test_misuse under `mpirun -np 2`. Each
// scenario marks its moment of failure with "event <nanoseconds since the epoch>" on
// stderr, so the driver can measure how long the job takes to end after it.
//
//   mismatch  (with TESSERA_DIST_DEBUG=1) rank 0 all-gathers, rank 1 all-reduces; both
//             catch CollectiveMismatch, print it and return 3
//   exit      rank 1 calls _exit(7) mid-step while rank 0 waits in an all-reduce
//   sigkill   rank 1 raises SIGKILL mid-step while rank 0 waits in an all-reduce
//   throw     rank 1 throws an uncaught exception mid-step while rank 0 waits
//   return    rank 1 returns from main mid-step while rank 0 waits in an all-reduce
//   return_then_issue  rank 1 returns from main; rank 0 computes a while, then issues one
//   uneven_finish      a correct job: rank 1 ends early, rank 0 later; both must exit 0
//   sigstop   rank 1 stops itself (SIGSTOP) mid-step: the others' collective times out
//             (run with a short TESSERA_DIST_TIMEOUT)
//   compute_forever    rank 1 computes (sleeps) for a minute mid-step: a timeout naming it
//   cross_group        rank 0 waits on a duplicate group, rank 1 on the world: a deadlock
//   mismatch_silent    (debug mode off) rank 0 broadcasts from rank 0, rank 1 from rank 1;
//             both catch CollectiveMismatch, print it and return 3
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include <tessera/tessera.h>

namespace ts = tessera;

namespace {

void mark_event(int rank, const char* what) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  std::fprintf(stderr, "rank %d: %s; event %lld\n", rank, what,
               static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  std::fflush(stderr);
}

int mismatch(ts::dist::ProcessGroup& world) {
  if (!world.debug_checks()) {
    std::fprintf(stderr, "the mismatch scenario needs TESSERA_DIST_DEBUG=1\n");
    return 2;
  }
  try {
    mark_event(world.rank(), "issuing a mismatched collective");
    if (world.rank() == 0) {
      world.all_gather_into(ts::zeros({1024 * world.size()}), ts::zeros({1024}));
    } else {
      world.all_reduce(ts::zeros({10}));
    }
  } catch (const ts::dist::CollectiveMismatch& error) {
    std::fprintf(stderr, "rank %d caught: %s\n", world.rank(), error.what());
    return 3;
  }
  std::fprintf(stderr, "rank %d finished normally\n", world.rank());
  return 0;
}

// Two good steps, then rank 1 fails in `fail` while rank 0 waits in an all-reduce.
template <class Fail>
int fail_mid_step(ts::dist::ProcessGroup& world, Fail fail) {
  ts::Tensor gradient = ts::ones({1000});
  for (int step = 0; step < 2; ++step) world.all_reduce(gradient);
  if (world.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 is inside its all-reduce by now
    if (fail()) return 0;
  }
  std::fprintf(stderr, "rank %d: waiting in an all-reduce\n", world.rank());
  world.all_reduce(gradient);
  std::fprintf(stderr, "rank %d finished normally\n", world.rank());
  return 0;
}

// Rank 0 waits on a duplicate of the world while rank 1 waits on the world itself: each
// group's call waits for a rank that is in the other's.
int cross_group(ts::dist::ProcessGroup& world) {
  std::shared_ptr<ts::dist::ProcessGroup> copy = world.duplicate();
  world.barrier();
  mark_event(world.rank(), "waiting on a group the other rank is not in");
  if (world.rank() == 0) {
    copy->barrier();
    world.barrier();
  } else {
    world.barrier();
    copy->barrier();
  }
  std::fprintf(stderr, "rank %d finished normally\n", world.rank());
  return 0;
}

int mismatch_silent(ts::dist::ProcessGroup& world) {
  ts::Tensor values = ts::full({4}, static_cast<double>(world.rank()));
  try {
    mark_event(world.rank(), "broadcasting from a root the other rank does not name");
    world.broadcast(values, world.rank());
  } catch (const ts::dist::CollectiveMismatch& error) {
    std::fprintf(stderr, "rank %d caught: %s\n", world.rank(), error.what());
    return 3;
  }
  std::fprintf(stderr, "rank %d finished normally (values %g)\n", world.rank(), values.sum().item<double>());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = ts::dist::init(argc, argv);
  std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "mismatch") return mismatch(*world);
  if (scenario == "exit") {
    return fail_mid_step(*world, [&]() -> bool {
      mark_event(world->rank(), "calling _exit(7)");
      _exit(7);
    });
  }
  if (scenario == "sigkill") {
    return fail_mid_step(*world, [&]() -> bool {
      mark_event(world->rank(), "raising SIGKILL");
      std::raise(SIGKILL);
      return false;  // not reached
    });
  }
  if (scenario == "return") {
    return fail_mid_step(*world, [&]() -> bool {
      mark_event(world->rank(), "returning from main");
      return true;
    });
  }
  if (scenario == "return_then_issue" || scenario == "uneven_finish") {
    ts::Tensor gradient = ts::ones({1000});
    for (int step = 0; step < 2; ++step) world->all_reduce(gradient);
    if (world->rank() == 1) {
      mark_event(1, "returning from main");
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // computing while rank 1 leaves
    if (scenario == "return_then_issue") {
      std::fprintf(stderr, "rank 0: issuing an all-reduce after rank 1 left\n");
      world->all_reduce(gradient);
    }
    std::fprintf(stderr, "rank %d finished normally\n", world->rank());
    return 0;
  }
  if (scenario == "sigstop") {
    return fail_mid_step(*world, [&]() -> bool {
      mark_event(world->rank(), "stopping itself (SIGSTOP)");
      std::raise(SIGSTOP);
      return false;
    });
  }
  if (scenario == "compute_forever") {
    return fail_mid_step(*world, [&]() -> bool {
      mark_event(world->rank(), "computing for a minute");
      std::this_thread::sleep_for(std::chrono::seconds(60));
      return false;
    });
  }
  if (scenario == "cross_group") return cross_group(*world);
  if (scenario == "mismatch_silent") return mismatch_silent(*world);
  if (scenario == "throw") {
    return fail_mid_step(*world, [&]() -> bool {
      mark_event(world->rank(), "throwing");
      throw std::runtime_error("deliberate failure in step 3");
    });
  }
  std::fprintf(stderr,
               "usage: %s mismatch|exit|sigkill|throw|return|return_then_issue|uneven_finish|sigstop|compute_forever|"
               "cross_group|mismatch_silent\n",
               argv[0]);
  return 2;
}
