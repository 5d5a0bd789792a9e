// DeviceMesh: the shard and replica groups of a 2-D arrangement of ranks, split off the world.
#include "tessera/dist/device_mesh.h"

#include "tessera/dist/new_group.h"

namespace tessera::dist {

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, std::array<int, 2> shape, const DeviceMeshOptions& options)
    : world_(std::move(world)), shape_(shape) {
  TS_CHECK(world_ != nullptr, ValueError, "DeviceMesh: no world group given");
  TS_CHECK(shape[0] >= 1 && shape[1] >= 1, ValueError, "DeviceMesh: the shape {replicas, shard group size} must be "
           "positive, got {", shape[0], ", ", shape[1], "}");
  TS_CHECK(static_cast<int64_t>(shape[0]) * shape[1] == world_->size(), ValueError, "DeviceMesh: a mesh of ", shape[0],
           " replicas x ", shape[1], " ranks per shard group needs ", static_cast<int64_t>(shape[0]) * shape[1],
           " ranks, but group '", world_->name(), "' has ", world_->size());
  TS_CHECK(world_->backend() != Backend::nccl, ValueError, "DeviceMesh: build the mesh from the MPI world (or the "
           "single-rank group), not from the NCCL group '", world_->name(),
           "'; DeviceMeshOptions::backend = Backend::nccl makes its groups NCCL groups");
  const Backend backend = options.backend.value_or(world_->backend());
  // Every rank splits in the same order: rows (shard groups) first, then columns. Names
  // are unique per mesh ("world.mesh3.shard.0": the world's collective count, the same on
  // every rank here), since the exit watch tells groups apart by name.
  const std::string base = detail::concat(world_->name(), ".mesh", world_->next_sequence());
  std::shared_ptr<ProcessGroup> rows =
      world_->split(replica_index(), detail::concat(base, ".shard.", replica_index()), options.group_options);
  std::shared_ptr<ProcessGroup> columns =
      world_->split(shard_index(), detail::concat(base, ".replicate.", shard_index()), options.group_options);
  if (backend == rows->backend()) {
    shard_group_ = std::move(rows);
    replicate_group_ = std::move(columns);
    return;
  }
  TS_CHECK(backend == Backend::nccl, ValueError, "DeviceMesh: its groups can be ", world_->backend_name(),
           " or nccl groups, not ", backend_name(backend));
  GroupOptions nccl_options = options.group_options;
  if (!nccl_options.device) nccl_options.device = default_cuda_device(*world_);
  shard_group_ = new_group(rows, Backend::nccl, nccl_options);
  replicate_group_ = new_group(columns, Backend::nccl, nccl_options);
}

const std::shared_ptr<ProcessGroup>& DeviceMesh::group(int dim) const {
  TS_CHECK(dim == 0 || dim == 1, IndexError, "DeviceMesh::group: dim ", dim,
           " is out of range; the mesh has dims 0 (replicate) and 1 (shard)");
  return dim == 0 ? replicate_group_ : shard_group_;
}

const std::shared_ptr<ProcessGroup>& DeviceMesh::group(const std::string& dim_name) const {
  if (dim_name == "replicate") return replicate_group_;
  if (dim_name == "shard") return shard_group_;
  throw ValueError(detail::concat("DeviceMesh::group: no dim named '", dim_name, "'; the dims are 'replicate' and 'shard'"));
}

std::string DeviceMesh::str() const {
  return detail::concat("DeviceMesh(", shape_[0], " x ", shape_[1], ": replicate '", replicate_group_->name(),
                        "', shard '", shard_group_->name(), "')");
}

std::shared_ptr<DeviceMesh> init_device_mesh(std::shared_ptr<ProcessGroup> world, std::array<int, 2> shape,
                                             const DeviceMeshOptions& options) {
  return std::make_shared<DeviceMesh>(std::move(world), shape, options);
}

}  // namespace tessera::dist
