// Decoding NCCL statuses into DistError messages (see nccl_check.h).
#include "tessera/dist/nccl_check.h"

#include <nccl.h>

#include "tessera/dist/errors.h"

namespace tessera::detail {

std::string describe_nccl_status(int status, void* communicator) {
  const char* last = ncclGetLastError(static_cast<ncclComm_t>(communicator));
  const bool has_details = last != nullptr && last[0] != '\0';
  return concat("NCCL status ", status, " (", ncclGetErrorString(static_cast<ncclResult_t>(status)), ")",
                has_details ? ": " : "", has_details ? last : "");
}

void check_nccl_status(int status, const char* expression, const char* file, int line) {
  if (status == ncclSuccess) return;
  throw dist::DistError(concat(expression, " failed at ", file, ":", line, ": ", describe_nccl_status(status)));
}

}  // namespace tessera::detail
