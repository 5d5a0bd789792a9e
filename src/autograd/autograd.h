// tessera::autograd for users: the differentiable ops (ts::relu, ts::matmul, ts::conv2d,
// ts::cross_entropy, ...; ts::einsum, ts::pad, ts::interpolate, ... in spatial_ops.h),
// backward, no_grad/enable_grad, record() for ops of one's own, and gradcheck.
#pragma once

#include "tessera/autograd/engine.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/functions.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/autograd/spatial_ops.h"
