// One collective call as a backend receives it: what to do, on which tensors, and its
// place in the group's sequence. ProcessGroup checks a call (shapes, dtypes, devices,
// contiguity) before a backend sees it, so backends only move bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/tensor/tensor.h"

namespace tessera::dist {

// avg is sum / world size, defined for floating dtypes only (an integer average would
// silently truncate); max works for every dtype.
enum class ReduceOp : uint8_t { sum, avg, max };

enum class CollectiveKind : uint8_t { all_gather, reduce_scatter, all_reduce, broadcast, barrier, duplicate, split };

std::string_view reduce_op_name(ReduceOp op);
std::string_view collective_name(CollectiveKind kind);

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::barrier;
  // all_gather and reduce_scatter read `input` and write `output`; all_reduce and
  // broadcast work in place on one tensor, held in both. barrier, duplicate and split hold none.
  Tensor input{};
  Tensor output{};
  ReduceOp reduce_op = ReduceOp::sum;
  int root = 0;            // broadcast only
  uint64_t sequence = 0;   // 0 for the group's first collective, counted per group

  bool has_tensors() const { return input.defined(); }
  // The element count every rank must agree on: the per-rank input of all_gather, the full
  // input of reduce_scatter, the tensor of all_reduce and broadcast; 0 without tensors.
  int64_t count() const { return has_tensors() ? input.numel() : 0; }
};

// True when the two (contiguous) tensors' bytes overlap: a collective cannot read and write
// the same memory unless the backend is told (MPI_IN_PLACE), so such inputs are staged.
bool memory_overlaps(const Tensor& a, const Tensor& b);

// "#5 all_gather float32 x 1024", as messages and the debug mode print it.
std::string describe(const CollectiveCall& call);

}  // namespace tessera::dist
