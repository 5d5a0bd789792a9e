// What a sharded model holds, for the OutOfMemoryError of a memory limit (memory_limit.h):
// each unit's parameter and gradient shards, its gathered parameters (and the part it keeps
// after forward with reshard_after_forward = N) and its unsharded gradient while they exist. The report only reads sizes; it may run on a collective's
// thread while the training thread changes them, so a figure can be a moment old.
#include "tessera/fsdp/state.h"

namespace tessera::fsdp::detail {

void FsdpState::register_memory_holders() {
  memory_holders_ = std::make_unique<MemoryHolderRegistration>([this](Device device, std::vector<MemoryHolder>& out) {
    const std::string of = mesh_ != nullptr ? " (hybrid-sharded)" : "";
    for (auto& unit : units_) {
      if (unit->device() != device) continue;
      const std::string name = "FSDP unit '" + unit->name() + "'" + of;
      const int64_t element = static_cast<int64_t>(element_size(unit->layout().dtype()));
      // CPU offload: the shards are in host memory, not in this device's allocator.
      const bool shards_here = unit->shard().device() == device && !unit->shard().is_pinned();
      if (shards_here) out.push_back({"parameter shard of " + name, unit->shard().numel() * element});
      const Tensor gradient = unit->shard().grad();
      if (shards_here && gradient.defined()) out.push_back({"gradient shard of " + name, gradient.numel() * element});
      if (unit->sharded() && unit->gathered_bytes() > 0) out.push_back({"gathered parameters of " + name, unit->gathered_bytes()});
      if (unit->post_forward_shard_bytes() > 0) {
        out.push_back({"parameters kept after forward (reshard_after_forward = N) of " + name,
                       unit->post_forward_shard_bytes()});
      }
      if (unit->unsharded_gradient_bytes() > 0) out.push_back({"unsharded gradient of " + name, unit->unsharded_gradient_bytes()});
    }
  });
}

}  // namespace tessera::fsdp::detail
