// What the examples share about ranks and devices: which group carries FSDP's collectives
// (NCCL with a GPU per rank, else the MPI world) and sums over every rank read on the host.
//
//   const ts::Device device = example::training_device(options.device, *world);
//   auto group = example::collective_group(options.dist_backend, world, device);
//   double loss = example::global_sum(*world, local_loss);
#pragma once

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include <tessera/tessera.h>

namespace example {

// Ranks on this host: launchers say so; without one, every rank of the world is here.
inline int local_world_size(const tessera::dist::ProcessGroup& world) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* value = std::getenv(name)) return std::max(1, std::atoi(value));
  }
  return world.size();
}

// "cpu", or "cuda": the GPU of this rank's local rank.
inline tessera::Device training_device(const std::string& name, const tessera::dist::ProcessGroup& world) {
  return name == "cuda" ? tessera::Device::cuda(tessera::dist::default_cuda_device(world)) : tessera::Device::cpu();
}

// The group FSDP's collectives run on, for --dist-backend auto|nccl|world: NCCL when every
// rank has a GPU of its own (or when asked for), else the world, which stages CUDA tensors
// through host memory.
inline std::shared_ptr<tessera::dist::ProcessGroup> collective_group(
    const std::string& backend, const std::shared_ptr<tessera::dist::ProcessGroup>& world, tessera::Device device) {
  if (!device.is_cuda() || backend == "world") return world;
  const bool nccl = backend == "nccl" ||
                    (tessera::dist::nccl_is_compiled() && local_world_size(*world) <= tessera::cuda::device_count());
  if (!nccl) return world;
  return tessera::dist::new_group(world, tessera::dist::Backend::nccl, {.device = device.index});
}

// `local` summed over every rank, read on the host (the world group carries CPU tensors).
inline double global_sum(tessera::dist::ProcessGroup& world, const tessera::Tensor& local) {
  tessera::Tensor value = local.detach().to(tessera::DType::f64).cpu().contiguous().clone();
  world.all_reduce(value);
  return value.item<double>();
}

}  // namespace example
