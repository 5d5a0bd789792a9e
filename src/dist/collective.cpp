// Names of collectives and reduce ops, as messages print them.
#include "tessera/dist/collective.h"

#include "tessera/dist/fingerprint.h"

namespace tessera::dist {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "unknown";
}

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::duplicate: return "duplicate";
    case CollectiveKind::split: return "split";
  }
  return "unknown";
}

bool memory_overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.storage() != b.storage()) return false;
  auto* a_begin = static_cast<const char*>(a.data_ptr());
  auto* b_begin = static_cast<const char*>(b.data_ptr());
  return a_begin < b_begin + b.nbytes() && b_begin < a_begin + a.nbytes();
}

std::string describe(const CollectiveCall& call) { return describe(fingerprint_of(call)); }

}  // namespace tessera::dist
