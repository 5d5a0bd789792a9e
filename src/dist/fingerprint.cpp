// Building, printing and comparing call fingerprints (see fingerprint.h).
#include "tessera/dist/fingerprint.h"

#include <sstream>

namespace tessera::dist {

namespace {

bool reduces(CollectiveKind kind) {
  return kind == CollectiveKind::reduce_scatter || kind == CollectiveKind::all_reduce;
}

}  // namespace

CallFingerprint fingerprint_of(const CollectiveCall& call) {
  CallFingerprint fingerprint;
  fingerprint.sequence = call.sequence;
  fingerprint.count = call.count();
  fingerprint.kind = static_cast<uint8_t>(call.kind);
  if (call.has_tensors()) {
    fingerprint.dtype = static_cast<uint8_t>(call.input.dtype());
    fingerprint.device = static_cast<uint8_t>(1 + static_cast<int>(call.input.device().type));
  }
  if (reduces(call.kind)) fingerprint.reduce_op = static_cast<uint8_t>(call.reduce_op);
  if (call.kind == CollectiveKind::broadcast) fingerprint.root = call.root;
  return fingerprint;
}

std::string describe(const CallFingerprint& fingerprint) {
  auto kind = static_cast<CollectiveKind>(fingerprint.kind);
  std::ostringstream out;
  out << '#' << fingerprint.sequence << ' ' << collective_name(kind);
  if (reduces(kind)) out << '(' << reduce_op_name(static_cast<ReduceOp>(fingerprint.reduce_op)) << ')';
  if (fingerprint.device != 0) {
    out << ' ' << dtype_name(static_cast<DType>(fingerprint.dtype)) << " x " << fingerprint.count;
  }
  if (kind == CollectiveKind::broadcast) out << " from rank " << fingerprint.root;
  if (fingerprint.device == 1 + static_cast<int>(DeviceType::cuda)) out << " cuda";
  return out.str();
}

std::string mismatch_message(const std::vector<CallFingerprint>& per_rank, std::string_view group_name,
                             int seen_on_rank, bool debug_mode) {
  bool all_equal = true;
  for (const CallFingerprint& fingerprint : per_rank) all_equal = all_equal && fingerprint == per_rank.front();
  if (all_equal) return "";

  // Ranks in order of first appearance of their call, each call listed once.
  std::vector<std::vector<int>> ranks_of_call;
  std::vector<size_t> call_representative;
  for (size_t rank = 0; rank < per_rank.size(); ++rank) {
    size_t call = 0;
    while (call < call_representative.size() && !(per_rank[call_representative[call]] == per_rank[rank])) ++call;
    if (call == call_representative.size()) {
      call_representative.push_back(rank);
      ranks_of_call.emplace_back();
    }
    ranks_of_call[call].push_back(static_cast<int>(rank));
  }

  std::ostringstream out;
  out << "collective mismatch on group '" << group_name << "' (seen on rank " << seen_on_rank
      << (debug_mode ? ", TESSERA_DIST_DEBUG" : "") << "): the ranks issued different collectives: ";
  for (size_t call = 0; call < call_representative.size(); ++call) {
    if (call > 0) out << "; ";
    const std::vector<int>& ranks = ranks_of_call[call];
    out << (ranks.size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < ranks.size(); ++i) out << (i > 0 ? ", " : "") << ranks[i];
    out << ": " << describe(per_rank[call_representative[call]]);
  }
  out << ". Every rank must issue the same collectives in the same order with the same dtype, element "
         "count and root.";
  return out.str();
}

}  // namespace tessera::dist
