// Hybrid sharding (HSDP): fully_shard over a DeviceMesh. The units are built over the
// mesh's shard group exactly as plain FSDP builds them (layouts sharded over the shard
// group's size, every all-gather and reduce-scatter within it); the only addition is one
// all-reduce per unit and backward, of the reduced gradient shard across the replica group,
// in the reduction dtype and with the unit's gradient_reduction. Replicas start equal
// (initialisation is a function of seed, name and element, never of the rank) and step on
// equal gradients, so they stay equal without ever exchanging parameters.
#include "tessera/autograd/grad_mode.h"
#include "tessera/fsdp/state.h"

namespace tessera::fsdp {

void fully_shard(nn::Module& root, std::shared_ptr<dist::DeviceMesh> mesh, const FullyShardOptions& options) {
  TS_CHECK(mesh != nullptr, ValueError, "fully_shard: no device mesh given");
  fully_shard(root, mesh->shard_group(), options);
  detail::state_of(root).set_mesh(std::move(mesh));
}

namespace detail {

void FsdpState::set_mesh(std::shared_ptr<dist::DeviceMesh> mesh) {
  mesh_ = std::move(mesh);
  dist::ProcessGroup* replicas = replica_group();
  for (auto& unit : units_) unit->set_replica_group(replicas);
}

dist::ProcessGroup* FsdpState::replica_group() const {
  if (mesh_ == nullptr || mesh_->replicas() == 1) return nullptr;
  return mesh_->replicate_group().get();
}

void Unit::all_reduce_across_replicas(const Tensor& reduced) {
  if (replica_group_ == nullptr) return;
  NoGradGuard no_grad;
  replica_group_->all_reduce(reduced, gradient_reduction_);
  counters_.replica_all_reduced_bytes += static_cast<int64_t>(reduced.nbytes());
  ++counters_.replica_all_reduces;
}

}  // namespace detail

}  // namespace tessera::fsdp
