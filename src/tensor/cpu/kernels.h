// The CPU kernels behind the device-specific native ops (see native.h for what each
// computes). native_dispatch.cpp routes CPU tensors here; CUDA tensors go to cuda/.
#pragma once

#include "tessera/tensor/native.h"

namespace tessera::cpu {

#include "tessera/tensor/device_kernels.inc"

// CPU-only kernels (native_dispatch.cpp composes CUDA's from the list above).
void cross_entropy_backward_(Tensor& log_probs, const Tensor& grad_output, const Tensor& target,
                             const Tensor& weight, Reduction reduction, int64_t ignore_index,
                             const Tensor& total_weight);

}  // namespace tessera::cpu
