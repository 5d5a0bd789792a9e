// The CUDA backend's bookkeeping that needs no device, on any machine: the caching pools'
// splitting, merging and stream-aware reuse (BlockPool over a fake memory source whose
// "streams" are flags the test sets), the choice of the first cuDNN candidate that runs,
// and the errors kernels report (their messages must be the CPU's).
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tessera/tensor/cuda/block_pool.h>
#include <tessera/tensor/cuda/device_error_record.h>
#include <tessera/tensor/cuda/first_that_runs.h>
#include <tessera/tensor/native.h>
#include <tessera/tessera.h>
#include <vector>

#include "test_support.h"

namespace ts = tessera;
using ts::cuda::BlockPool;

using test_support::contains;
using test_support::error_of;

namespace {

constexpr size_t MiB = size_t{1} << 20;

// Segments are address ranges handed out from a counter (never dereferenced); a budget
// makes the source run dry. A pending use is done when its stream's flag says so.
struct FakeSource final : ts::cuda::MemorySource {
  size_t budget = size_t{1} << 40;
  uintptr_t next = uintptr_t{1} << 32;
  std::map<uintptr_t, size_t> live;
  std::map<void*, bool> stream_busy;  // stream -> its work is not done yet
  int waits = 0;

  void* allocate_segment(size_t bytes) override {
    if (bytes > budget) return nullptr;
    budget -= bytes;
    const uintptr_t address = next;
    next += bytes + 4096;
    live[address] = bytes;
    return reinterpret_cast<void*>(address);
  }
  void free_segment(void* segment, size_t bytes) override {
    auto it = live.find(reinterpret_cast<uintptr_t>(segment));
    REQUIRE(it != live.end());
    CHECK(it->second == bytes);
    budget += bytes;
    live.erase(it);
  }
  struct Use final : ts::cuda::PendingUse {
    FakeSource* source;
    void* stream;
    Use(FakeSource* source, void* stream) : source(source), stream(stream) {}
    bool done() override { return !source->stream_busy[stream]; }
    void wait() override {
      if (source->stream_busy[stream]) ++source->waits;
      source->stream_busy[stream] = false;
    }
  };
  std::unique_ptr<ts::cuda::PendingUse> pending_use(void* stream) override { return std::make_unique<Use>(this, stream); }
};

void* stream_a = reinterpret_cast<void*>(0xa);

}  // namespace

TEST_CASE("the block pool splits segments, reuses freed blocks and merges neighbours") {
  FakeSource source;
  BlockPool pool(source);
  // Small requests share one 2 MiB segment, 512-byte aligned.
  void* a = pool.allocate(100);
  void* b = pool.allocate(1000);
  void* c = pool.allocate(512);
  CHECK(source.live.size() == 1);
  CHECK(pool.figures().segment_allocations == 1);
  CHECK(pool.figures().reserved_bytes == static_cast<int64_t>(BlockPool::kSmallSegment));
  CHECK(static_cast<char*>(b) - static_cast<char*>(a) == 512);
  CHECK(static_cast<char*>(c) - static_cast<char*>(b) == 1024);
  CHECK(pool.block_size(b) == 1024);
  CHECK(pool.figures().allocated_bytes == 512 + 1024 + 512);
  CHECK(pool.figures().cached_bytes == static_cast<int64_t>(BlockPool::kSmallSegment) - 2048);
  // A freed block goes to the next request that fits it, with no new segment.
  pool.deallocate(b);
  void* d = pool.allocate(900);
  CHECK(d == b);
  // Freed neighbours merge: a, d and c together make room for 2048 bytes at a's address.
  pool.deallocate(a);
  pool.deallocate(d);
  pool.deallocate(c);
  CHECK(pool.figures().allocated_bytes == 0);
  void* e = pool.allocate(2048);
  CHECK(e == a);
  pool.deallocate(e);
  // The segment is whole again, so it can go back to the source.
  pool.release_free_segments();
  CHECK(source.live.empty());
  CHECK(pool.figures().segment_frees == 1);
  CHECK(pool.figures().reserved_bytes == 0);
  CHECK(pool.figures().cached_bytes == 0);
}

TEST_CASE("large requests take 20 MiB segments below 10 MiB and their own above, split only by more than 1 MiB") {
  FakeSource source;
  BlockPool pool(source);
  CHECK(BlockPool::segment_size_for(BlockPool::rounded(MiB + 1)) == 20 * MiB);
  CHECK(BlockPool::segment_size_for(11 * MiB) == 12 * MiB);
  void* a = pool.allocate(3 * MiB);
  void* b = pool.allocate(3 * MiB);  // from the rest of a's 20 MiB segment
  CHECK(source.live.size() == 1);
  CHECK(static_cast<char*>(b) - static_cast<char*>(a) == static_cast<ptrdiff_t>(3 * MiB));
  // 14 MiB are left; a 13.5 MiB request leaves 0.5 MiB, too little to split off.
  void* c = pool.allocate(13 * MiB + MiB / 2);
  CHECK(source.live.size() == 1);
  CHECK(pool.block_size(c) == 14 * MiB);
  void* big = pool.allocate(30 * MiB);
  CHECK(source.live.size() == 2);
  // Small and large blocks never mix: a small request does not cut into the free large rest.
  pool.deallocate(c);
  void* small = pool.allocate(4096);
  CHECK(source.live.size() == 3);
  for (void* p : {a, b, big, small}) pool.deallocate(p);
  pool.release_free_segments();
  CHECK(source.live.empty());
}

TEST_CASE("a block used by another stream is reused only once that stream's work is done") {
  FakeSource source;
  BlockPool pool(source);
  void* a = pool.allocate(4096);
  pool.record_use(a, stream_a);
  source.stream_busy[stream_a] = true;
  pool.deallocate(a);
  CHECK(pool.figures().cached_bytes == static_cast<int64_t>(BlockPool::kSmallSegment));  // held, not lost
  void* b = pool.allocate(4096);
  CHECK(b != a);  // a is still being read on stream_a
  source.stream_busy[stream_a] = false;
  void* c = pool.allocate(4096);  // the pending use is polled (never waited for) and a is free again
  CHECK(c == a);
  CHECK(source.waits == 0);
  // A use recorded on a block is forgotten once the block is freed and reused.
  pool.deallocate(c);
  void* d = pool.allocate(4096);
  CHECK(d == a);
  pool.deallocate(b);
  pool.deallocate(d);
}

TEST_CASE("short of memory, the pool waits for pending uses, then returns free segments, then gives up") {
  FakeSource source;
  source.budget = 20 * MiB;
  BlockPool pool(source);
  void* a = pool.allocate(6 * MiB);  // a 20 MiB segment: the whole budget
  void* b = pool.allocate(6 * MiB);
  pool.record_use(a, stream_a);
  pool.record_use(b, stream_a);
  source.stream_busy[stream_a] = true;
  pool.deallocate(a);
  pool.deallocate(b);
  // 8 MiB are free, 12 MiB wait for stream_a: a 16 MiB request waits for it and merges.
  void* c = pool.allocate(16 * MiB);
  REQUIRE(c != nullptr);
  CHECK(source.waits == 1);
  CHECK(c == a);
  CHECK(source.live.size() == 1);
  // No budget left for a small segment: the wholly free large one goes back to make room.
  pool.deallocate(c);
  void* small = pool.allocate(1000);
  REQUIRE(small != nullptr);
  CHECK(pool.figures().segment_frees == 1);
  CHECK(source.live.size() == 1);
  // More than the source has, even with everything free returned: null, for the caller to report.
  CHECK(pool.allocate(30 * MiB) == nullptr);
  pool.deallocate(small);
}

TEST_CASE("the first cuDNN candidate that runs is the one chosen") {
  std::vector<int> candidates = {3, 1, 4, 5};
  std::vector<int> tried;
  std::string report;
  const int chosen = ts::cuda::first_that_runs(
      candidates,
      [&](int& algorithm) -> std::string {
        tried.push_back(algorithm);
        if (algorithm == 3) return "algorithm 3: CUDNN_STATUS_NOT_SUPPORTED";
        if (algorithm == 1) return "algorithm 1: its 9000000000-byte workspace does not fit";
        algorithm *= 10;  // an attempt may note what it learnt (the workspace size)
        return "";
      },
      report);
  CHECK(chosen == 2);
  CHECK(candidates[2] == 40);
  CHECK(tried == std::vector<int>{3, 1, 4});  // stops at the first that runs
  CHECK(report == "algorithm 3: CUDNN_STATUS_NOT_SUPPORTED; algorithm 1: its 9000000000-byte workspace does not fit");
  std::vector<int> none = {7};
  CHECK(ts::cuda::first_that_runs(none, [](int&) { return std::string("no"); }, report) == -1);
  CHECK(report == "no");
  std::vector<int> empty;
  CHECK(ts::cuda::first_that_runs(empty, [](int&) { return std::string(); }, report) == -1);
}

TEST_CASE("a kernel's report of an out-of-range target is the CPU's IndexError") {
  ts::cuda::DeviceErrorRecord record;
  record.code = static_cast<uint64_t>(ts::cuda::DeviceErrorCode::nll_loss_target);
  record.values[0] = 7;
  record.values[1] = 1;
  record.values[2] = 3;
  CHECK_THROWS_AS(ts::cuda::throw_device_error(record), ts::IndexError);
  const std::string device = error_of([&] { ts::cuda::throw_device_error(record); });
  const std::string cpu = error_of([] {
    ts::nll_loss(ts::zeros({2, 3}), ts::tensor<int64_t>({0, 7}));
  });
  CHECK(device == cpu);
  CHECK(contains(device, "nll_loss: target 7 at position 1 is out of range for 3 classes"));
  record.code = 99;
  CHECK(contains(error_of([&] { ts::cuda::throw_device_error(record); }), "error code 99"));
}

TEST_CASE("a kernel's report of an embedding index out of range is the CPU's IndexError, with its context") {
  ts::cuda::DeviceErrorRecord record;
  record.code = static_cast<uint64_t>(ts::cuda::DeviceErrorCode::embedding_index);
  record.values[0] = 5;
  record.values[1] = 1;
  record.values[2] = 5;
  const ts::cuda::DeviceErrorContext context{.op = "embedding", .index_shape = {1, 3}};
  const std::string device = error_of([&] { ts::cuda::throw_device_error(record, &context); });
  const std::string cpu = error_of([] {
    ts::native::embedding(ts::zeros({5, 2}), ts::tensor<int64_t>({0, 5, 1}).view({1, 3}));
  });
  CHECK(device == cpu);
  CHECK(contains(device, "embedding: index 5 at position 1 of indices [1, 3] is out of range for 5 embeddings"));
  CHECK_THROWS_AS(ts::cuda::throw_device_error(record, &context), ts::IndexError);
  // Without its context (evicted), the message still names the index, the position and the bound.
  CHECK(contains(error_of([&] { ts::cuda::throw_device_error(record); }), "index 5 at position 1 of indices (shape unknown)"));
}

TEST_CASE("a kernel's report of an index out of range is the CPU's IndexError: index_select, index_add_, gather, scatter_add_") {
  namespace native = ts::native;
  ts::cuda::DeviceErrorRecord record;
  record.code = static_cast<uint64_t>(ts::cuda::DeviceErrorCode::index_out_of_range);
  record.values[0] = 7;  // the index, its position, the dim's size
  record.values[1] = 1;
  record.values[2] = 5;
  const ts::cuda::DeviceErrorContext selecting{.op = "index_select", .index_shape = {4}, .dim = 0, .self_shape = {5, 4}};
  const ts::Tensor self = ts::zeros({5, 4});
  const ts::Tensor index = ts::tensor<int64_t>({0, 7, 2, -1});
  CHECK(error_of([&] { ts::cuda::throw_device_error(record, &selecting); }) ==
        error_of([&] { native::index_select(self, 0, index); }));
  const ts::cuda::DeviceErrorContext adding{.op = "index_add", .index_shape = {4}, .dim = 0, .self_shape = {5, 4}};
  ts::Tensor into = ts::zeros({5, 4});
  CHECK(error_of([&] { ts::cuda::throw_device_error(record, &adding); }) ==
        error_of([&] { native::index_add_(into, 0, index, ts::ones({4, 4})); }));
  CHECK_THROWS_AS(ts::cuda::throw_device_error(record, &selecting), ts::IndexError);
  CHECK(contains(error_of([&] { ts::cuda::throw_device_error(record); }), "index 7 at position 1 is out of range"));

  // gather and scatter_add_: the position is the element of the walk (line * length + j),
  // named by its coordinates in the index, as the CPU names it.
  record.code = static_cast<uint64_t>(ts::cuda::DeviceErrorCode::gather_index);
  record.values[0] = 9;
  record.values[1] = 4;  // line 1, j = 1 of an index [2, 3] walked along dim 1: [1, 1]
  record.values[2] = 4;
  const ts::Tensor pick = ts::tensor<int64_t>({0, 3, 1, 2, 9, 0}, {2, 3});
  const ts::cuda::DeviceErrorContext gathering{.op = "gather", .index_shape = {2, 3}, .dim = 1, .self_shape = {5, 4}};
  const std::string device = error_of([&] { ts::cuda::throw_device_error(record, &gathering); });
  CHECK(device == error_of([&] { native::gather(self, 1, pick); }));
  CHECK(contains(device, "gather: index 9 at [1, 1] of the index of shape [2, 3] is out of range for dim 1 of size 4"));
  // Along dim 0 the walk's lines are the columns: element 3 of [2, 3] along dim 0 is [1, 1].
  record.values[1] = 3;
  ts::Tensor scattered = ts::zeros({4, 3});
  const ts::Tensor place = ts::tensor<int64_t>({0, 1, 2, 3, 9, 0}, {2, 3});
  const ts::cuda::DeviceErrorContext scattering{.op = "scatter_add", .index_shape = {2, 3}, .dim = 0, .self_shape = {4, 3}};
  CHECK(error_of([&] { ts::cuda::throw_device_error(record, &scattering); }) ==
        error_of([&] { native::scatter_add_(scattered, 0, place, ts::ones({2, 3})); }));
}
