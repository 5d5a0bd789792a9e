// The CPU kernels behind the device-specific native ops (see native.h for what each
// computes). native_dispatch.cpp routes CPU tensors here; CUDA tensors go to cuda/.
#pragma once

#include "tessera/tensor/native.h"

namespace tessera::cpu {

#include "tessera/tensor/device_kernels.inc"

}  // namespace tessera::cpu
