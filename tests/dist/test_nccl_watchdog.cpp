// The NCCL watchdog's rule, without NCCL or a GPU: the hooks are flags and the clock is
// the test's. A collective past the timeout, or an asynchronous error, aborts the
// communicator once, posts the error where stuck waits see it, and fails the group for
// good with a message naming the collective, the group and the timeout.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <tessera/dist/nccl_watchdog.h>
#include <tessera/tessera.h>
#include <thread>

#include "test_support.h"

namespace ts = tessera;
using ts::dist::NcclWatchdog;
using std::chrono::milliseconds;

using test_support::contains;

namespace {

struct Fake {
  std::string async;
  std::atomic<int> aborts{0};
  std::exception_ptr posted;

  NcclWatchdog::Hooks hooks() {
    return {[this] { return async; }, [this] { ++aborts; }, [this](std::exception_ptr e) { posted = std::move(e); }};
  }
};

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const ts::dist::DistError& e) {
    return e.what();
  } catch (...) {
    return "not a DistError";
  }
}

const std::string kWhere = "rank 1 of group 'world.nccl' (size 2)";

}  // namespace

TEST_CASE("the NCCL watchdog forgets finished collectives and lets the rest run until the timeout") {
  Fake fake;
  NcclWatchdog watchdog(kWhere, milliseconds(10'000), fake.hooks(), milliseconds(100), /*start_thread=*/false);
  const auto t0 = NcclWatchdog::Clock::now();
  bool first_done = false;
  watchdog.watch("#0 all_gather float32 x 8", [&] { return first_done; }, t0);
  watchdog.watch("#1 reduce_scatter float32 x 8", [] { return false; }, t0 + milliseconds(5));
  watchdog.poll(t0 + milliseconds(9'000));
  CHECK(watchdog.watched() == 2);
  first_done = true;
  watchdog.poll(t0 + milliseconds(9'500));
  CHECK(watchdog.watched() == 1);
  CHECK(fake.aborts == 0);
  CHECK(watchdog.failure() == nullptr);
  CHECK_NOTHROW(watchdog.check());
}

TEST_CASE("a collective past the timeout aborts the communicator and fails the group with its name") {
  Fake fake;
  NcclWatchdog watchdog(kWhere, milliseconds(10'000), fake.hooks(), milliseconds(100), false);
  const auto t0 = NcclWatchdog::Clock::now();
  watchdog.watch("#7 all_gather float32 x 1024", [] { return false; }, t0);
  watchdog.poll(t0 + milliseconds(10'001));
  CHECK(fake.aborts == 1);
  REQUIRE(fake.posted != nullptr);
  const std::string message = message_of(watchdog.failure());
  CHECK(message == message_of(fake.posted));
  CHECK(contains(message, "#7 all_gather float32 x 1024 on rank 1 of group 'world.nccl' (size 2)"));
  CHECK(contains(message, "did not complete within the timeout of 10 s"));
  CHECK(contains(message, "TESSERA_DIST_TIMEOUT"));
  CHECK_THROWS_AS(watchdog.check(), ts::dist::DistError);
  // Once is enough: later rounds and failures do not abort again.
  watchdog.poll(t0 + milliseconds(20'000));
  watchdog.fail("again");
  CHECK(fake.aborts == 1);
  CHECK(message_of(watchdog.failure()) == message);
}

TEST_CASE("an asynchronous NCCL error aborts at once, naming the error and the collective in flight") {
  Fake fake;
  NcclWatchdog watchdog(kWhere, milliseconds(600'000), fake.hooks(), milliseconds(100), false);
  watchdog.watch("#3 all_reduce float32 x 1", [] { return false; });
  watchdog.poll();
  CHECK(fake.aborts == 0);
  fake.async = "NCCL status 6 (remote process exited or there was a network error)";
  watchdog.poll();
  CHECK(fake.aborts == 1);
  const std::string message = message_of(watchdog.failure());
  CHECK(contains(message, "asynchronous error on rank 1 of group 'world.nccl' (size 2)"));
  CHECK(contains(message, "remote process exited"));
  CHECK(contains(message, "#3 all_reduce float32 x 1"));
}

TEST_CASE("the group's own timed waits fail it through the watchdog, and a stopped watchdog aborts nothing") {
  Fake fake;
  {
    NcclWatchdog watchdog(kWhere, milliseconds(1'000), fake.hooks(), milliseconds(100), false);
    std::lock_guard call(watchdog.call_lock());
    watchdog.fail("#2 broadcast was not issued within the timeout");
    CHECK(fake.aborts == 1);
    CHECK(contains(message_of(watchdog.failure()), "#2 broadcast"));
  }
  Fake stopped;
  NcclWatchdog watchdog(kWhere, milliseconds(1), stopped.hooks(), milliseconds(100), false);
  watchdog.watch("#0 barrier", [] { return false; });
  watchdog.stop();
  watchdog.poll(NcclWatchdog::Clock::now() + milliseconds(1'000));
  CHECK(stopped.aborts == 0);
  CHECK(watchdog.failure() == nullptr);
}

TEST_CASE("the watchdog's thread polls by itself, but never while the group is inside an NCCL call") {
  Fake fake;
  NcclWatchdog watchdog(kWhere, milliseconds(50), fake.hooks(), milliseconds(5), /*start_thread=*/true);
  {
    std::lock_guard call(watchdog.call_lock());  // the group is issuing a call
    watchdog.watch("#0 all_gather float32 x 4", [] { return false; });
    std::this_thread::sleep_for(milliseconds(200));
    CHECK(watchdog.failure() == nullptr);
  }
  // Released: the thread aborts within a few rounds (bounded generously for a loaded machine).
  for (int i = 0; i < 1000 && watchdog.failure() == nullptr; ++i) std::this_thread::sleep_for(milliseconds(5));
  CHECK(watchdog.failure() != nullptr);
  CHECK(fake.aborts == 1);
}

TEST_CASE("a collective whose completion cannot be queried counts as done, and its error fails the group") {
  // After a sticky CUDA error every cudaEventQuery throws: the rule must not stop at the
  // first one (it did: the exception left poll() and the next round threw again).
  Fake fake;
  NcclWatchdog watchdog(kWhere, milliseconds(10'000), fake.hooks(), milliseconds(100), false);
  const auto t0 = NcclWatchdog::Clock::now();
  int queries = 0;
  watchdog.watch("#4 all_gather float32 x 16", [] { return true; }, t0);
  watchdog.watch("#5 reduce_scatter float32 x 16", [&]() -> bool {
    ++queries;
    throw std::runtime_error("cudaEventQuery(event_) failed: cudaErrorIllegalAddress (an illegal memory access was encountered)");
  }, t0);
  watchdog.watch("#6 all_gather float32 x 16", [] { return false; }, t0);
  CHECK_NOTHROW(watchdog.poll(t0 + milliseconds(100)));
  CHECK(queries == 1);
  CHECK(watchdog.watched() == 0);  // the one that threw is done; the abort cleared the rest
  CHECK(fake.aborts == 1);
  REQUIRE(fake.posted != nullptr);
  const std::string message = message_of(watchdog.failure());
  CHECK(message == message_of(fake.posted));
  CHECK(contains(message, "#5 reduce_scatter float32 x 16 on rank 1 of group 'world.nccl' (size 2)"));
  CHECK(contains(message, "its completion could not be queried"));
  CHECK(contains(message, "cudaErrorIllegalAddress"));
  CHECK_THROWS_AS(watchdog.check(), ts::dist::DistError);
}

TEST_CASE("the watchdog's thread runs its start hook (the group's cudaSetDevice) before its first query") {
  Fake fake;
  NcclWatchdog::Hooks hooks = fake.hooks();
  std::atomic<bool> started{false}, queried_before_start{false}, queried{false};
  std::atomic<std::thread::id> hook_thread{};
  hooks.thread_start = [&] {
    hook_thread = std::this_thread::get_id();
    started = true;
  };
  NcclWatchdog watchdog(kWhere, milliseconds(600'000), std::move(hooks), milliseconds(5), /*start_thread=*/true);
  watchdog.watch("#0 all_gather float32 x 4", [&] {
    if (!started) queried_before_start = true;
    queried = true;
    return false;
  });
  for (int i = 0; i < 1000 && !queried; ++i) std::this_thread::sleep_for(milliseconds(5));
  CHECK(queried);
  CHECK(started);
  CHECK_FALSE(queried_before_start);
  CHECK(hook_thread.load() != std::this_thread::get_id());
  watchdog.stop();
}
