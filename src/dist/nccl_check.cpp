// Decoding NCCL statuses into DistError messages (see nccl_check.h).
#include "tessera/dist/nccl_check.h"

#include <nccl.h>

#include "tessera/dist/errors.h"

namespace tessera::detail {

void check_nccl_status(int status, const char* expression, const char* file, int line) {
  if (status == ncclSuccess) return;
  const char* last = ncclGetLastError(nullptr);
  const bool has_details = last != nullptr && last[0] != '\0';
  throw dist::DistError(concat(expression, " failed at ", file, ":", line, ": NCCL status ", status, " (",
                                          ncclGetErrorString(static_cast<ncclResult_t>(status)), ")",
                                          has_details ? ": " : "", has_details ? last : ""));
}

}  // namespace tessera::detail
