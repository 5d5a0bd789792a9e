// new_group: choosing and building a group of another backend over the same ranks.
#include "tessera/dist/new_group.h"

#include <cstdlib>
#include <string>

#include "tessera/config.h"
#include "tessera/tensor/cuda_api.h"

#if TESSERA_HAS_NCCL
#include "tessera/dist/nccl_process_group.h"
#endif

namespace tessera::dist {

bool nccl_is_compiled() { return TESSERA_HAS_NCCL != 0; }

int default_cuda_device(const ProcessGroup& group) {
  const int count = cuda::device_count();
  TS_CHECK(count > 0, DeviceError, "no CUDA device for rank ", group.rank(), " of group '", group.name(), "' (",
           cuda::unavailable_reason(), ")");
  int local_rank = group.rank();
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* value = std::getenv(name)) {
      char* end = nullptr;
      long parsed = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && parsed >= 0) {
        local_rank = static_cast<int>(parsed);
        break;
      }
    }
  }
  return local_rank % count;
}

int nccl_device(const ProcessGroup& group) {
#if TESSERA_HAS_NCCL
  if (const auto* nccl = dynamic_cast<const NcclProcessGroup*>(&group)) return nccl->device();
#endif
  throw ValueError(detail::concat("nccl_device: group '", group.name(), "' is a ", group.backend_name(),
                                  " group, not an NCCL group"));
}

std::shared_ptr<ProcessGroup> new_group(const std::shared_ptr<ProcessGroup>& parent, Backend backend,
                                        const GroupOptions& options) {
  TS_CHECK(parent != nullptr, ValueError, "new_group: no parent group given");
  if (backend == parent->backend()) return parent->duplicate(options);
  TS_CHECK(backend == Backend::nccl, ValueError, "new_group: cannot make a ", backend_name(backend),
           " group from the ", parent->backend_name(), " group '", parent->name(),
           "'; the world from dist::init is the MPI or single-rank group, and NCCL groups are made from it");
#if TESSERA_HAS_NCCL
  int device = options.device.has_value() ? *options.device : default_cuda_device(*parent);
  std::string name = detail::concat(parent->name(), ".nccl");
  return NcclProcessGroup::create(*parent, device, std::move(name),
                                  options.debug_checks.value_or(parent->debug_checks()),
                                  options.timeout.value_or(parent->timeout()));
#else
  throw NotCompiledError(detail::concat("new_group(Backend::nccl): this Tessera was built without NCCL",
                                        cuda::is_compiled() ? "" : " (and without CUDA)",
                                        "; the ", parent->backend_name(), " group '", parent->name(),
                                        "' carries CUDA tensors too (staged through host memory)"));
#endif
}

}  // namespace tessera::dist
