// DeviceMesh: a group's ranks arranged as replicas x shard group, for hybrid sharding
// (PyTorch's DeviceMesh with dims ("replicate", "shard"), FSDP2's HSDP).
//
//   auto world = ts::dist::init(argc, argv);                 // 8 ranks: 2 nodes x 4 GPUs
//   auto mesh = ts::dist::init_device_mesh(world, {2, 4});   // 2 replicas of a 4-way shard group
//   ts::fsdp::fully_shard(model, mesh);                      // sharded within, all-reduced across
//
// Rank r of the world is replica r / S, shard index r % S (S = shard group size; row-major,
// as PyTorch's mesh): each shard group is S consecutive ranks (one node, where the
// all-gathers and reduce-scatters are cheap), and each replica group takes one rank of
// every shard group (the ranks that hold the same shards and all-reduce their gradients,
// the only traffic that crosses nodes).
//
// The groups come from split() of the world. With DeviceMeshOptions::backend nccl, each
// part becomes an NCCL group (new_group) on the rank's GPU.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "tessera/dist/process_group.h"

namespace tessera::dist {

struct DeviceMeshOptions {
  // The backend of the mesh's groups; unset: the world's own (single or mpi).
  std::optional<Backend> backend{};
  // Options of the groups made (debug mode, timeout, nccl device).
  GroupOptions group_options{};
};

class DeviceMesh {
 public:
  // Collective over `world`. shape = {replicas, shard group size}, whose product is the
  // world's size.
  DeviceMesh(std::shared_ptr<ProcessGroup> world, std::array<int, 2> shape, const DeviceMeshOptions& options = {});

  const std::shared_ptr<ProcessGroup>& world() const { return world_; }
  std::array<int, 2> shape() const { return shape_; }
  int replicas() const { return shape_[0]; }
  int shard_size() const { return shape_[1]; }
  // This rank's coordinates: which replica, and its place within the shard group.
  int replica_index() const { return world_->rank() / shape_[1]; }
  int shard_index() const { return world_->rank() % shape_[1]; }
  // The ranks that shard parameters among themselves (this rank's row of the mesh).
  const std::shared_ptr<ProcessGroup>& shard_group() const { return shard_group_; }
  // The ranks that hold the same shards (this rank's column).
  const std::shared_ptr<ProcessGroup>& replicate_group() const { return replicate_group_; }
  // group(0) is replicate_group(), group(1) shard_group(); also by name ("replicate", "shard").
  const std::shared_ptr<ProcessGroup>& group(int dim) const;
  const std::shared_ptr<ProcessGroup>& group(const std::string& dim_name) const;
  // "DeviceMesh(2 x 2: replicate 'world.mesh0.replicate.1', shard 'world.mesh0.shard.0')".
  std::string str() const;

 private:
  std::shared_ptr<ProcessGroup> world_;
  std::array<int, 2> shape_;
  std::shared_ptr<ProcessGroup> shard_group_;
  std::shared_ptr<ProcessGroup> replicate_group_;
};

// PyTorch's init_device_mesh(device_type, (replicas, shard), mesh_dim_names=("replicate", "shard")).
std::shared_ptr<DeviceMesh> init_device_mesh(std::shared_ptr<ProcessGroup> world, std::array<int, 2> shape,
                                             const DeviceMeshOptions& options = {});

}  // namespace tessera::dist
