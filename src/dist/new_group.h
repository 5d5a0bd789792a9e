// new_group: a group over the same ranks as an existing one, with the backend you choose.
// The NCCL group is how CUDA tensors travel between GPUs at full speed:
//
//   auto world = ts::dist::init(argc, argv);                  // MPI under mpirun, else one rank
//   auto gpus = ts::dist::new_group(world, ts::dist::Backend::nccl);   // one GPU per rank
//   ts::Device device = ts::Device::cuda(ts::dist::nccl_device(*gpus));
//   model.to(device);
//   ts::fsdp::fully_shard(model, gpus);                      // collectives on NCCL
//
// Backend::nccl needs a Tessera built with NCCL (nccl_is_compiled()) and one GPU per rank;
// at one rank it needs no MPI. Several ranks sharing one GPU use the MPI world itself,
// which stages CUDA tensors through host memory (slower, but the same results).
// Asking for the parent's own backend is duplicate(). Collective over the parent's ranks.
#pragma once

#include <memory>

#include "tessera/dist/process_group.h"

namespace tessera::dist {

std::shared_ptr<ProcessGroup> new_group(const std::shared_ptr<ProcessGroup>& parent, Backend backend,
                                        const GroupOptions& options = {});

// True when this build of Tessera has the NCCL backend.
bool nccl_is_compiled();

// The CUDA device an NCCL group runs on; throws ValueError for other groups.
int nccl_device(const ProcessGroup& group);

// The device new_group picks for Backend::nccl when GroupOptions::device is unset: this
// rank's local rank on its host (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
// SLURM_LOCALID or LOCAL_RANK; else its rank in `group`) modulo the visible CUDA devices.
int default_cuda_device(const ProcessGroup& group);

}  // namespace tessera::dist
