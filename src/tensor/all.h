// tessera's tensor folder for users: Tensor, dtypes and devices, factories, the default
// generator, state dicts, threads and the CPU capability. (The folder's own tensor.h is the
// Tensor class; this is its umbrella, as nn/nn.h is nn's.) The differentiable ops on
// tensors (ts::relu, ts::conv2d, ...) are autograd's: tessera/autograd/autograd.h.
#pragma once

#include "tessera/tensor/allocator.h"
#include "tessera/tensor/cpu_capability.h"
#include "tessera/tensor/cuda_api.h"
#include "tessera/tensor/device.h"
#include "tessera/tensor/dtype.h"
#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/op_options.h"
#include "tessera/tensor/parallel.h"
#include "tessera/tensor/random.h"
#include "tessera/tensor/shape.h"
#include "tessera/tensor/size2.h"
#include "tessera/tensor/state_dict.h"
#include "tessera/tensor/tensor.h"
