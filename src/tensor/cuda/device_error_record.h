// What a kernel reports when it finds bad input, and the host's exception for it.
//
// A kernel cannot throw, and making the host wait after a launch just to read a flag
// stalls the whole pipeline (nll_loss did that on every forward). So a kernel that finds
// bad input (a target outside [0, classes), an index out of range) writes one
// DeviceErrorRecord into a small slot of mapped host memory of its device (device_errors.h),
// and the next host wait on that device (item(), a copy to the host, synchronize())
// throws the error the CPU would have thrown at once, with the same message. The first
// report wins until the host has raised it. PyTorch's device-side asserts are raised late
// in the same way, but leave the device unusable; these do not.
//
// No CUDA here: the messages are tested on any machine (tests/tensor/test_cuda_machinery.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "tessera/tensor/shape.h"

namespace tessera::cuda {

// Codes of the records (0: none). Kernels of new ops add theirs here, with a message in
// device_error_record.cpp.
enum class DeviceErrorCode : uint64_t {
  none = 0,
  nll_loss_target = 1,  // values: target, position, classes
  embedding_index = 2,  // values: index, position, embeddings; context: op, the indices' shape
  index_out_of_range = 3,  // index_select, index_add_: values: index, position, size; context: op, dim, self's shape
  gather_index = 4,        // gather, scatter_add_: values: index, position in the walk, size; context: op,
                           // the index's shape, dim, self's shape
};

struct DeviceErrorRecord {
  uint64_t code = 0;  // a DeviceErrorCode; claimed first by atomicCAS (device_errors.cuh)
  int64_t values[3] = {0, 0, 0};
  uint64_t context = 0;  // what the host registered for the launch (device_errors.h), 0: none
};

// What a kernel's message needs beyond numbers (the op's name, shapes), kept on the host.
struct DeviceErrorContext {
  std::string op{};
  Shape index_shape{};  // the indices' shape
  int64_t dim = 0;      // the dim indexed (index and gather ops)
  Shape self_shape{};   // the shape of the tensor indexed (index and gather ops)
};

// Throws the exception the CPU throws for this record's condition (IndexError, ...), with
// the context registered for its launch (null if it is gone: the message then says less).
[[noreturn]] void throw_device_error(const DeviceErrorRecord& record, const DeviceErrorContext* context = nullptr);

}  // namespace tessera::cuda
