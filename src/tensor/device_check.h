// Operand checks shared by the native kernels: every message names the op and both sides.
#pragma once

#include <string_view>

#include "tessera/tensor/tensor.h"

namespace tessera {

inline void check_defined(const Tensor& tensor, std::string_view op, std::string_view what = "input") {
  TS_CHECK(tensor.defined(), ValueError, op, ": ", what, " is an undefined tensor");
}

inline void check_same_device(const Tensor& a, const Tensor& b, std::string_view op) {
  TS_CHECK(a.device() == b.device(), DeviceError, op, ": expected both tensors on one device, got ",
           a.device().str(), " and ", b.device().str());
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, std::string_view op) {
  TS_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": expected both tensors of one dtype, got ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
}

// The gradient a backward kernel receives for an output of `input`'s shape: defined, on
// input's device, of its dtype and shape.
inline void check_gradient_of(const Tensor& grad_output, const Tensor& input, std::string_view op) {
  check_defined(grad_output, op, "grad_output");
  check_same_device(grad_output, input, op);
  check_same_dtype(grad_output, input, op);
  TS_CHECK(grad_output.sizes() == input.sizes(), ShapeError, op, ": gradient of shape ", shape_str(grad_output.sizes()),
           " for an input of shape ", shape_str(input.sizes()));
}

// The CPU kernels' entry check; CUDA tensors are routed to cuda/ before reaching it.
inline void check_cpu(const Tensor& tensor, std::string_view op) {
  TS_CHECK(tensor.device().is_cpu(), DeviceError, op, ": no kernel for ", tensor.device().str(),
           " tensors");
}

// The CUDA kernels' entry check, the mirror of check_cpu.
inline void check_cuda(const Tensor& tensor, std::string_view op) {
  TS_CHECK(tensor.device().is_cuda(), DeviceError, op, ": the CUDA kernel was given a ", tensor.device().str(),
           " tensor");
}

}  // namespace tessera
