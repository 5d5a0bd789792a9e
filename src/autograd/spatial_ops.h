// Spatial and index-contraction ops with PyTorch's names, defaults and semantics:
// torch.einsum, F.pad, F.unfold / F.fold and F.interpolate. Each is a composite of the
// differentiable ops in functions.h (permute, reshape, matmul, index_select, scatter_add,
// cat, ...), so it runs wherever those run (CPU and CUDA) and autograd differentiates it
// without a backward of its own. docs/api/tensor-ops.md has examples.
//
//   ts::Tensor c = ts::einsum("bij,bjk->bik", {a, b});
//   ts::Tensor p = ts::pad(x, {1, 1, 2, 0}, "reflect");
//   ts::Tensor y = ts::interpolate(x, {.scale_factor = {2.0}, .mode = "bilinear"});
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tensor/size2.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

// Sums of products of the operands' elements over the indices the equation names, as
// torch.einsum: "bij,bjk->bik" (batched matmul), "ij->ji", "ii->i" (diagonal), "ii" (trace),
// "...ij,...jk" (broadcast batch dims). Without "->" the output has the ellipsis dims, then
// the letters that appear once, sorted (upper case before lower case, as PyTorch). Letters not
// in the output are summed; a letter of size 1 broadcasts against the same letter elsewhere.
// Two operands contract through one batched matmul; more contract pairwise, left to right.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);

// Pads (or, with negative amounts, crops) the last dims, as F.pad: pad = {left, right} of the
// last dim, then {top, bottom} of the one before it, and so on (an even count, at most two per
// dim). mode: "constant" (fills with value), "reflect" (mirrors without the edge; each amount
// below the dim's size), "replicate" (repeats the edge) or "circular" (wraps; each amount at
// most the dim's size). Unlike PyTorch, the non-constant modes take any number of dims.
Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, std::string_view mode = "constant",
           double value = 0.0);

// im2col, as F.unfold: the kernel_size blocks of an [N, C, H, W] (or [C, H, W]) input, sliding
// by stride over the input zero-padded by padding, with dilation between a block's taps, as the
// columns of [N, C * kh * kw, L] ([C * kh * kw, L]), L being the number of blocks; row
// c * kh * kw + i * kw + j holds tap (i, j) of channel c.
Tensor unfold(const Tensor& input, Size2 kernel_size, Size2 dilation = 1, Size2 padding = 0, Size2 stride = 1);
// col2im, as F.fold, unfold's adjoint: sums the columns of [N, C * kh * kw, L] back into an
// [N, C, output_size] image (overlapping taps add up, padding is cropped off).
Tensor fold(const Tensor& input, Size2 output_size, Size2 kernel_size, Size2 dilation = 1, Size2 padding = 0,
            Size2 stride = 1);

// Options of interpolate, as F.interpolate's arguments (give size or scale_factor).
struct InterpolateOptions {
  // The output's spatial sizes: one for every spatial dim, or one number for all of them.
  std::vector<int64_t> size{};
  // Multipliers of the spatial sizes (one, or one per spatial dim): the output size is
  // floor(in * scale_factor), and the source index uses 1 / scale_factor, as PyTorch does
  // when recompute_scale_factor is not set.
  std::vector<double> scale_factor{};
  // "nearest", "nearest-exact", "linear" (3-D input), "bilinear" (4-D) or "trilinear" (5-D).
  std::string mode = "nearest";
  // For the linear modes only (false when not given, as PyTorch); with nearest it throws.
  std::optional<bool> align_corners{};
};
// Resamples the spatial dims of an [N, C, d1, ...] input (1 to 3 of them) with PyTorch's
// source-index formulas: nearest takes floor(dst * scale), nearest-exact
// floor((dst + 0.5) * scale), the linear modes interpolate at (dst + 0.5) * scale - 0.5
// (clamped at 0), or dst * (in - 1) / (out - 1) with align_corners, one dim at a time.
Tensor interpolate(const Tensor& input, const InterpolateOptions& options);

}  // namespace tessera
