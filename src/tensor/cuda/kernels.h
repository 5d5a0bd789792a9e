// The CUDA kernels behind the op table's rows: the same list as the CPU's
// (device_kernels.inc), with the same results (native_ops.inc says what each computes).
// native_dispatch.cpp routes CUDA tensors here.
//
// Conventions: every function checks its operands (shapes through kernel_shapes.h, the
// same checks as the CPU; attention's arrive checked, see native_ops.inc), makes the
// operands' device current, and queues its work on that device's compute stream without
// waiting for it. Element-wise kernels, copies and reductions read strided and broadcast
// operands directly; GEMM, cuDNN, pooling, softmax, loss and dropout kernels make their
// inputs contiguous first. float32 and float64 everywhere; bfloat16 for what GPT-2 and
// the MNIST network run under mixed precision (docs/gpu.md lists the ops).
#pragma once

#include "tessera/tensor/native.h"

namespace tessera::cuda {

#include "tessera/tensor/device_kernels.inc"

// CUDA only: matmul with the product written in `result_dtype`, a's dtype or, for bfloat16
// operands, float32, their accumulation type (attention's scores and their gradients).
Tensor matmul(const Tensor& a, const Tensor& b, DType result_dtype);

}  // namespace tessera::cuda
