// Tessera: one header for users.
//
//   #include <tessera/tessera.h>
//   namespace ts = tessera;
#pragma once

#include "tessera/config.h"
#include "tessera/autograd/engine.h"
#include "tessera/autograd/functions.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/tensor/allocator.h"
#include "tessera/tensor/cuda_api.h"
#include "tessera/tensor/device.h"
#include "tessera/tensor/dtype.h"
#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/parallel.h"
#include "tessera/tensor/random.h"
#include "tessera/tensor/state_dict.h"
#include "tessera/tensor/tensor.h"
#include "tessera/nn/nn.h"
