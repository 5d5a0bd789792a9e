// register_fsdp_forward_method's scope: a method other than forward run as the model's
// forward (the root gathered, the units allowed to run; see fully_shard.h).
#include "tessera/fsdp/state.h"

namespace tessera::fsdp {

ForwardMethodScope::ForwardMethodScope(nn::Module& root) : root_(root) {
  detail::state_of(root_).begin_forward_method();
}

ForwardMethodScope::~ForwardMethodScope() { detail::state_of(root_).end_forward_method(); }

nn::Module& ForwardMethodScope::check_sharded(nn::Module& root) {
  (void)detail::state_of(root);
  return root;
}

}  // namespace tessera::fsdp
