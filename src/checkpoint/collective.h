// Collective steps of checkpointing (internal): every rank runs its part of a step, then
// all ranks learn whether it failed anywhere, so that an error on one rank (a full disk, a
// corrupt file only it reads) fails the save or load on every rank instead of leaving the
// others waiting in the next collective.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"

namespace tessera::checkpoint::detail {

// Every rank's `mine`, in rank order (two all-gathers: the lengths, then the bytes).
std::vector<std::string> all_gather_strings(dist::ProcessGroup& group, const std::string& mine);

// Whether `mine` is true on every rank of `group` (one all-reduce of one integer).
bool true_on_every_rank(dist::ProcessGroup& group, bool mine);

// Runs `part` on this rank and gathers what it returns from every rank. When `part` threw on
// any rank, every rank throws: a rank whose part failed rethrows its own exception, the
// others a CheckpointError "<what> failed on rank(s) ...: <the first failure's message>".
std::vector<std::string> run_on_every_rank(dist::ProcessGroup& group, const std::string& what,
                                           const std::function<std::string()>& part);

}  // namespace tessera::checkpoint::detail
