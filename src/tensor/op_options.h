// The option types a user passes to tensor ops (ts::conv2d, ts::gelu, ts::nll_loss,
// ts::dropout), with PyTorch's names and defaults. The native kernels take the same types.
#pragma once

#include <cstdint>

#include "tessera/tensor/size2.h"

namespace tessera {

// How ts::conv2d slides its kernel (F.conv2d's stride, padding, dilation). The layer's
// options, nn::Conv2dOptions, add what the layer owns (bias); libtorch names the pair the
// same way (Conv2dFuncOptions, Conv2dOptions).
struct Conv2dFuncOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
};

// GELU's two forms, as torch.nn.functional.gelu's approximate: none is x * Phi(x) =
// x / 2 * (1 + erf(x / sqrt(2))); tanh is x / 2 * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
enum class GeluApproximate { none, tanh };

// How a loss combines its elements: PyTorch's reduction='none' | 'mean' | 'sum'.
enum class Reduction { none, mean, sum };

// Where a dropout mask comes from: element (r, c) of a row-major [rows, cols] input (cols =
// numel of a row) is kept when Philox(seed, stream, step, first_row + r, c) >= p. So a mask
// depends on the sample's global row, never on how the batch was split (nn/batch_scope.h).
struct DropoutKey {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t step = 0;
  int64_t first_row = 0;
};

}  // namespace tessera
