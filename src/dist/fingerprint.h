// The summary of one collective call that ranks compare before running it. MPI groups
// always check that every rank's is the same (one small all-reduce, mpi_process_group.h);
// with TESSERA_DIST_DEBUG=1 every rank all-gathers the fingerprint of its next call before
// running it. Either exchange is the same fixed-size call on every rank, so it completes
// even when the ranks' real calls differ, and every rank then sees the same table and
// fails with the same message.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/dist/collective.h"

namespace tessera::dist {

// Trivially copyable and of fixed size: it travels as raw bytes.
struct CallFingerprint {
  uint64_t sequence = 0;
  int64_t count = 0;
  int32_t root = 0;
  uint8_t kind = 0;        // CollectiveKind
  uint8_t dtype = 0;       // DType; 0 when the call has no tensors
  uint8_t reduce_op = 0;   // ReduceOp; 0 when the call does not reduce
  uint8_t device = 0;      // 0: no tensors; else 1 + DeviceType (a CPU tensor on one rank and
                           // a CUDA tensor on another would go to different backends)

  bool operator==(const CallFingerprint&) const = default;
};
static_assert(sizeof(CallFingerprint) == 24, "the fingerprint is exchanged as 24 raw bytes");

CallFingerprint fingerprint_of(const CollectiveCall& call);

// "#5 all_reduce(sum) float32 x 10", "#2 broadcast float64 x 3 from rank 1", "#7 barrier";
// CUDA calls end in " cuda".
std::string describe(const CallFingerprint& fingerprint);

// Empty when every rank's fingerprint is equal; otherwise the CollectiveMismatch message
// (saying TESSERA_DIST_DEBUG when debug mode found it),
// grouping ranks that issued the same call: "... ranks 0, 2: #5 all_gather float32 x 1024;
// rank 1: #5 all_reduce(sum) float32 x 10".
std::string mismatch_message(const std::vector<CallFingerprint>& per_rank, std::string_view group_name,
                             int seen_on_rank, bool debug_mode = true);

}  // namespace tessera::dist
