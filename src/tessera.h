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
#include "tessera/io/atomic_file.h"
#include "tessera/io/errors.h"
#include "tessera/io/json.h"
#include "tessera/io/safetensors.h"
#include "tessera/data/dataloader.h"
#include "tessera/data/dataset.h"
#include "tessera/data/error.h"
#include "tessera/data/idx.h"
#include "tessera/data/mnist.h"
#include "tessera/data/sampler.h"
#include "tessera/data/transforms.h"
#include "tessera/dist/dist.h"
#include "tessera/tensor/allocator.h"
#include "tessera/tensor/device.h"
#include "tessera/tensor/dtype.h"
#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/parallel.h"
#include "tessera/tensor/random.h"
#include "tessera/tensor/state_dict.h"
#include "tessera/tensor/tensor.h"
#include "tessera/nn/nn.h"
#include "tessera/optim/optim.h"
