// NoSyncScope: gradient accumulation without communication.
#include "tessera/fsdp/state.h"

namespace tessera::fsdp {

NoSyncScope::NoSyncScope(nn::Module& root) : root_(root) {
  detail::FsdpState& state = detail::state_of(root_);
  TS_CHECK(!state.no_sync, ValueError, "fsdp::NoSyncScope: already inside a no-sync scope");
  state.no_sync = true;
}

NoSyncScope::~NoSyncScope() { detail::state_of(root_).no_sync = false; }

bool is_sharded(nn::Module& root) { return root.find_attachment<detail::FsdpState>() != nullptr; }

}  // namespace tessera::fsdp
