// TS_NCCL_CHECK(call): runs an NCCL call and throws DistError naming the call (its source
// text), the file and the line, NCCL's name for the status and its last error message.
// The header needs no NCCL header, so a test can check the message without one; the
// status is passed as an int and decoded in nccl_check.cpp (built with NCCL only).
//
//   TS_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm, stream));
#pragma once

#include <string>

namespace tessera::detail {

void check_nccl_status(int status, const char* expression, const char* file, int line);
// "NCCL status 6 (remote process exited or there was a network error): <last error>", for
// a status of `communicator` (an ncclComm_t; null: the thread's last error).
std::string describe_nccl_status(int status, void* communicator = nullptr);

}  // namespace tessera::detail

#define TS_NCCL_CHECK(expression) \
  ::tessera::detail::check_nccl_status(static_cast<int>(expression), #expression, __FILE__, __LINE__)
