// The CPU kernels behind the op table's rows (native_ops.inc says what each computes).
// native_dispatch.cpp routes CPU tensors here; CUDA tensors go to cuda/.
#pragma once

#include "tessera/tensor/native.h"

namespace tessera::cpu {

#include "tessera/tensor/device_kernels.inc"

}  // namespace tessera::cpu
