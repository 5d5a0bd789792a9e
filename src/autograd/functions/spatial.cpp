// F.pad, F.unfold / F.fold and F.interpolate as composites of differentiable ops: constant
// padding is narrow + cat, the other pad modes and every resampling are index_select with
// indices computed here on the host (their backward is index_select's deterministic index_add),
// unfold is an index_select of the padded, flattened planes and fold its adjoint, a
// scatter_add into zeros.
#include <algorithm>
#include <cmath>

#include "tessera/autograd/functions.h"
#include "tessera/autograd/spatial_ops.h"
#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera {

namespace {

Tensor index_tensor(const std::vector<int64_t>& values, Device device) {
  return tensor<int64_t>(values, {static_cast<int64_t>(values.size())}, {.dtype = DType::i64, .device = device});
}

// ---- pad ----

enum class PadMode { constant, reflect, replicate, circular };

PadMode pad_mode_from(std::string_view mode) {
  if (mode == "constant") return PadMode::constant;
  if (mode == "reflect") return PadMode::reflect;
  if (mode == "replicate") return PadMode::replicate;
  if (mode == "circular") return PadMode::circular;
  throw ValueError(str("pad: mode must be \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"", mode,
                       "\""));
}

// Crops the negative amounts off dim, then cats blocks of `value` for the positive ones.
Tensor pad_constant_dim(const Tensor& x, int64_t dim, int64_t left, int64_t right, double value) {
  const int64_t n = x.size(dim);
  const int64_t start = std::max<int64_t>(-left, 0), stop = n - std::max<int64_t>(-right, 0);
  TS_CHECK(stop >= start, ShapeError, "pad: padding (", left, ", ", right, ") of dim ", dim, " (size ", n,
           ", input shape ", shape_str(x.sizes()), ") would leave a negative size");
  Tensor kept = start == 0 && stop == n ? x : x.narrow(dim, start, stop - start);
  std::vector<Tensor> pieces;
  auto block = [&](int64_t length) {
    Shape shape = x.sizes();
    shape[dim] = length;
    return full(shape, value, {.dtype = x.dtype(), .device = x.device()});
  };
  if (left > 0) pieces.push_back(block(left));
  pieces.push_back(kept);
  if (right > 0) pieces.push_back(block(right));
  return pieces.size() == 1 ? kept : cat(pieces, dim);
}

// Output position o of dim reads input position p = o - left, mapped into [0, n) by the mode.
Tensor pad_by_index_dim(const Tensor& x, int64_t dim, int64_t left, int64_t right, PadMode mode) {
  const int64_t n = x.size(dim);
  const int64_t out = n + left + right;
  TS_CHECK(out >= 0 && -left <= n && -right <= n, ShapeError, "pad: padding (", left, ", ", right, ") of dim ",
           dim, " (size ", n, ", input shape ", shape_str(x.sizes()), ") would leave a negative size");
  if (mode == PadMode::reflect) {
    TS_CHECK(left < n && right < n, ShapeError, "pad: reflect padding (", left, ", ", right, ") of dim ", dim,
             " must be less than its size ", n, " (input shape ", shape_str(x.sizes()), ")");
  } else if (mode == PadMode::circular) {
    TS_CHECK(left <= n && right <= n, ShapeError, "pad: circular padding (", left, ", ", right, ") of dim ", dim,
             " may not exceed its size ", n, " (it would wrap around more than once; input shape ",
             shape_str(x.sizes()), ")");
  } else {
    TS_CHECK(n > 0 || out == 0, ShapeError, "pad: replicate padding of the empty dim ", dim, " (input shape ",
             shape_str(x.sizes()), ")");
  }
  if (left == 0 && right == 0) return x;
  std::vector<int64_t> source(out);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t p = o - left;
    if (mode == PadMode::reflect) source[o] = p < 0 ? -p : (p >= n ? 2 * (n - 1) - p : p);
    else if (mode == PadMode::replicate) source[o] = std::clamp<int64_t>(p, 0, n - 1);
    else source[o] = ((p % n) + n) % n;
  }
  return x.index_select(dim, index_tensor(source, x.device()));
}

}  // namespace

Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, std::string_view mode, double value) {
  TS_CHECK(input.defined(), ValueError, "pad: the input is an undefined tensor");
  const PadMode pad_mode = pad_mode_from(mode);
  TS_CHECK(pad.size() % 2 == 0, ValueError, "pad: the pad list needs an even length (left, right per dim), got ",
           pad.size(), " amounts");
  const int64_t padded_dims = static_cast<int64_t>(pad.size()) / 2;
  TS_CHECK(padded_dims <= input.dim(), ValueError, "pad: ", pad.size(), " amounts pad ", padded_dims,
           " dims, but the input has only ", input.dim(), " (shape ", shape_str(input.sizes()), ")");
  Tensor out = input;
  for (int64_t i = 0; i < padded_dims; ++i) {
    const int64_t dim = input.dim() - 1 - i;
    const int64_t left = pad[2 * i], right = pad[2 * i + 1];
    out = pad_mode == PadMode::constant ? pad_constant_dim(out, dim, left, right, value)
                                        : pad_by_index_dim(out, dim, left, right, pad_mode);
  }
  return out;
}

namespace {

// ---- unfold and fold ----

// The sliding blocks of one spatial dim.
struct Window {
  int64_t kernel, dilation, padding, stride;
  int64_t blocks(int64_t size) const { return (size + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1; }
};

struct Windows {
  Window h, w;
};

Windows windows_of(const char* op, Size2 kernel_size, Size2 dilation, Size2 padding, Size2 stride) {
  const Windows windows{{kernel_size.h, dilation.h, padding.h, stride.h}, {kernel_size.w, dilation.w, padding.w, stride.w}};
  for (const Window& w : {windows.h, windows.w}) {
    TS_CHECK(w.kernel > 0 && w.dilation > 0 && w.stride > 0 && w.padding >= 0, ValueError, op,
             ": kernel_size, dilation and stride must be positive and padding non-negative, got kernel_size=(",
             kernel_size.h, ", ", kernel_size.w, "), dilation=(", dilation.h, ", ", dilation.w, "), padding=(",
             padding.h, ", ", padding.w, "), stride=(", stride.h, ", ", stride.w, ")");
  }
  return windows;
}

void check_blocks(const char* op, const Windows& windows, int64_t height, int64_t width) {
  const int64_t bh = windows.h.blocks(height), bw = windows.w.blocks(width);
  TS_CHECK(bh >= 1 && bw >= 1, ShapeError, op, ": spatial size (", height, ", ", width, ") with kernel_size=(",
           windows.h.kernel, ", ", windows.w.kernel, "), dilation=(", windows.h.dilation, ", ", windows.w.dilation,
           "), padding=(", windows.h.padding, ", ", windows.w.padding, ") gives (", bh, ", ", bw,
           ") sliding blocks; both must be at least one");
}

// For block l = (bi, bj) and tap (ki, kj): the flat position in the padded [Hp, Wp] plane,
// ordered tap-major ((ki * kw + kj) * L + l), as im2col's rows.
std::vector<int64_t> block_positions(const Windows& windows, int64_t height, int64_t width) {
  const Window &h = windows.h, &w = windows.w;
  const int64_t bh = h.blocks(height), bw = w.blocks(width), padded_width = width + 2 * w.padding;
  std::vector<int64_t> positions;
  positions.reserve(h.kernel * w.kernel * bh * bw);
  for (int64_t ki = 0; ki < h.kernel; ++ki)
    for (int64_t kj = 0; kj < w.kernel; ++kj)
      for (int64_t bi = 0; bi < bh; ++bi)
        for (int64_t bj = 0; bj < bw; ++bj)
          positions.push_back((bi * h.stride + ki * h.dilation) * padded_width + bj * w.stride + kj * w.dilation);
  return positions;
}

}  // namespace

Tensor unfold(const Tensor& input, Size2 kernel_size, Size2 dilation, Size2 padding, Size2 stride) {
  TS_CHECK(input.defined(), ValueError, "unfold: the input is an undefined tensor");
  TS_CHECK(input.dim() == 3 || input.dim() == 4, ShapeError,
           "unfold: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ", shape_str(input.sizes()));
  const Windows windows = windows_of("unfold", kernel_size, dilation, padding, stride);
  const Tensor x = input.dim() == 4 ? input : input.unsqueeze(0);
  const int64_t n = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  check_blocks("unfold", windows, height, width);
  const int64_t taps = windows.h.kernel * windows.w.kernel;
  const int64_t blocks = windows.h.blocks(height) * windows.w.blocks(width);
  const Tensor padded = tessera::pad(x, {windows.w.padding, windows.w.padding, windows.h.padding, windows.h.padding});
  const Tensor planes = padded.reshape({n, channels, padded.size(2) * padded.size(3)});
  const Tensor columns = planes.index_select(2, index_tensor(block_positions(windows, height, width), x.device()))
                             .reshape({n, channels * taps, blocks});
  return input.dim() == 4 ? columns : columns.squeeze(0);
}

Tensor fold(const Tensor& input, Size2 output_size, Size2 kernel_size, Size2 dilation, Size2 padding, Size2 stride) {
  TS_CHECK(input.defined(), ValueError, "fold: the input is an undefined tensor");
  TS_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError,
           "fold: expected a 2-D [C * kh * kw, L] or 3-D [N, C * kh * kw, L] input, got shape ",
           shape_str(input.sizes()));
  const Windows windows = windows_of("fold", kernel_size, dilation, padding, stride);
  const Tensor x = input.dim() == 3 ? input : input.unsqueeze(0);
  const int64_t height = output_size.h, width = output_size.w;
  check_blocks("fold", windows, height, width);
  const int64_t taps = windows.h.kernel * windows.w.kernel;
  const int64_t blocks = windows.h.blocks(height) * windows.w.blocks(width);
  TS_CHECK(x.size(1) % taps == 0, ShapeError, "fold: input dim 1 (shape ", shape_str(input.sizes()),
           ") must be divisible by kh * kw = ", taps);
  TS_CHECK(x.size(2) == blocks, ShapeError, "fold: input's last dim (shape ", shape_str(input.sizes()),
           ") must be the number of sliding blocks, ", blocks, ", for output_size (", height, ", ", width, ")");
  const int64_t n = x.size(0), channels = x.size(1) / taps;
  const int64_t padded_h = height + 2 * windows.h.padding, padded_w = width + 2 * windows.w.padding;
  const Tensor source = x.reshape({n, channels, taps * blocks});
  // scatter_add wants an index of src's shape: the same positions for every plane.
  const Tensor index = index_tensor(block_positions(windows, height, width), x.device())
                           .view({1, 1, taps * blocks})
                           .expand({n, channels, taps * blocks})
                           .contiguous();
  const Tensor sums = scatter_add(zeros({n, channels, padded_h * padded_w}, {.dtype = x.dtype(), .device = x.device()}),
                                  2, index, source);
  const Tensor image = tessera::pad(sums.view({n, channels, padded_h, padded_w}),
                                    {-windows.w.padding, -windows.w.padding, -windows.h.padding, -windows.h.padding});
  return input.dim() == 3 ? image : image.squeeze(0);
}

namespace {

// ---- interpolate ----

enum class InterpolateMode { nearest, nearest_exact, linear };

// PyTorch's area_pixel_compute_scale, in the precision its CPU kernels use (T: float for
// float32 and the half types, double for float64).
template <class T>
T pixel_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  if (scale_factor && *scale_factor > 0) return static_cast<T>(1.0 / *scale_factor);
  return static_cast<T>(in) / static_cast<T>(out);
}

// PyTorch's area_pixel_compute_source_index (not cubic): dst + 0.5 is a double there too.
template <class T>
T source_index(T scale, int64_t dst, bool align_corners) {
  if (align_corners) return scale * static_cast<T>(dst);
  const T src = static_cast<T>(scale * (static_cast<double>(dst) + 0.5) - 0.5);
  return src < 0 ? T(0) : src;
}

// The input index each output index copies (nearest: floorf(dst * scale); nearest-exact:
// floorf(src + 0.5) with src as for linear; both capped at in - 1), as PyTorch's helpers.
template <class T>
std::vector<int64_t> nearest_sources(int64_t in, int64_t out, std::optional<double> scale_factor, bool exact) {
  const T scale = pixel_scale<T>(in, out, false, scale_factor);
  std::vector<int64_t> sources(out);
  for (int64_t i = 0; i < out; ++i) {
    const auto index = exact ? static_cast<int64_t>(std::floor(static_cast<float>(source_index<T>(scale, i, false) + 0.5)))
                             : static_cast<int64_t>(std::floor(static_cast<float>(source_index<T>(scale, i, true))));
    sources[i] = std::min(index, in - 1);
  }
  return sources;
}

struct LinearTaps {
  std::vector<int64_t> first, second;
  std::vector<double> first_weight, second_weight;  // values of T
};

// PyTorch's compute_source_index_and_lambda: out[i] = w0 * in[i0] + w1 * in[i1].
template <class T>
LinearTaps linear_taps(int64_t in, int64_t out, std::optional<double> scale_factor, bool align_corners) {
  const T scale = pixel_scale<T>(in, out, align_corners, scale_factor);
  LinearTaps taps;
  for (int64_t i = 0; i < out; ++i) {
    const T real = source_index<T>(scale, i, align_corners);
    const auto i0 = static_cast<int64_t>(real);
    const T lambda1 = std::min(std::max(real - static_cast<T>(i0), T(0)), T(1));
    taps.first.push_back(i0);
    taps.second.push_back(i0 + (i0 < in - 1 ? 1 : 0));
    taps.first_weight.push_back(static_cast<T>(T(1) - lambda1));
    taps.second_weight.push_back(lambda1);
  }
  return taps;
}

// weights as x's dtype, shaped to broadcast along dim.
Tensor weights_along(const std::vector<double>& weights, const Tensor& x, int64_t dim) {
  Shape shape(x.dim() - dim, 1);
  shape[0] = static_cast<int64_t>(weights.size());
  return tensor<double>(weights, shape, {.dtype = DType::f64, .device = x.device()}).to(x.dtype());
}

Tensor resample_dim(const Tensor& x, int64_t dim, int64_t out, std::optional<double> scale_factor,
                    InterpolateMode mode, bool align_corners) {
  const int64_t in = x.size(dim);
  const bool as_double = x.dtype() == DType::f64;
  if (mode != InterpolateMode::linear) {
    const bool exact = mode == InterpolateMode::nearest_exact;
    const std::vector<int64_t> sources = as_double ? nearest_sources<double>(in, out, scale_factor, exact)
                                                   : nearest_sources<float>(in, out, scale_factor, exact);
    return x.index_select(dim, index_tensor(sources, x.device()));
  }
  if (out == in) return x;  // PyTorch copies then (weights 1 and 0), whatever the scale
  const LinearTaps taps = as_double ? linear_taps<double>(in, out, scale_factor, align_corners)
                                    : linear_taps<float>(in, out, scale_factor, align_corners);
  const Tensor first = x.index_select(dim, index_tensor(taps.first, x.device()));
  const Tensor second = x.index_select(dim, index_tensor(taps.second, x.device()));
  return first * weights_along(taps.first_weight, x, dim) + second * weights_along(taps.second_weight, x, dim);
}

InterpolateMode interpolate_mode_from(const std::string& mode, int64_t spatial_dims, const Shape& shape) {
  if (mode == "nearest") return InterpolateMode::nearest;
  if (mode == "nearest-exact") return InterpolateMode::nearest_exact;
  const std::vector<std::string> linear_modes = {"linear", "bilinear", "trilinear"};
  const auto found = std::find(linear_modes.begin(), linear_modes.end(), mode);
  TS_CHECK(found != linear_modes.end(), ValueError, "interpolate: mode must be \"nearest\", \"nearest-exact\", ",
           "\"linear\", \"bilinear\" or \"trilinear\", got \"", mode, "\"");
  const int64_t wanted = found - linear_modes.begin() + 1;
  TS_CHECK(wanted == spatial_dims, ShapeError, "interpolate: mode \"", mode, "\" needs a ", wanted + 2,
           "-D input, got shape ", shape_str(shape));
  return InterpolateMode::linear;
}

// The output size and the scale factor (if given) of each spatial dim.
void output_sizes(const Tensor& input, const InterpolateOptions& options, std::vector<int64_t>& sizes,
                  std::vector<std::optional<double>>& scales) {
  const int64_t spatial_dims = input.dim() - 2;
  const bool by_size = !options.size.empty(), by_scale = !options.scale_factor.empty();
  TS_CHECK(by_size != by_scale, ValueError, "interpolate: give exactly one of size and scale_factor");
  const size_t count = by_size ? options.size.size() : options.scale_factor.size();
  TS_CHECK(count == 1 || count == static_cast<size_t>(spatial_dims), ValueError, "interpolate: ",
           by_size ? "size" : "scale_factor", " has ", count, " values for the ", spatial_dims,
           " spatial dims of shape ", shape_str(input.sizes()), " (give one or one per dim)");
  for (int64_t d = 0; d < spatial_dims; ++d) {
    const size_t k = count == 1 ? 0 : static_cast<size_t>(d);
    const int64_t in = input.size(2 + d);
    if (by_size) {
      sizes.push_back(options.size[k]);
      scales.push_back(std::nullopt);
    } else {
      sizes.push_back(static_cast<int64_t>(static_cast<double>(in) * options.scale_factor[k]));
      scales.push_back(options.scale_factor[k]);
    }
    TS_CHECK(sizes.back() > 0 && in > 0, ShapeError, "interpolate: input spatial size ", in, " and output size ",
             sizes.back(), " of dim ", 2 + d, " must both be positive (input shape ", shape_str(input.sizes()), ")");
  }
}

}  // namespace

Tensor interpolate(const Tensor& input, const InterpolateOptions& options) {
  TS_CHECK(input.defined(), ValueError, "interpolate: the input is an undefined tensor");
  const int64_t spatial_dims = input.dim() - 2;
  TS_CHECK(spatial_dims >= 1 && spatial_dims <= 3, ShapeError,
           "interpolate: expected a 3-D, 4-D or 5-D input [N, C, ...], got shape ", shape_str(input.sizes()));
  const InterpolateMode mode = interpolate_mode_from(options.mode, spatial_dims, input.sizes());
  TS_CHECK(mode == InterpolateMode::linear || !options.align_corners.has_value(), ValueError,
           "interpolate: align_corners can only be set with the linear modes, not \"", options.mode, "\"");
  std::vector<int64_t> sizes;
  std::vector<std::optional<double>> scales;
  output_sizes(input, options, sizes, scales);
  // The last dim first: PyTorch's kernel interpolates the innermost dim, then the outer ones.
  Tensor out = input;
  for (int64_t d = spatial_dims - 1; d >= 0; --d)
    out = resample_dim(out, 2 + d, sizes[d], scales[d], mode, options.align_corners.value_or(false));
  return out;
}

}  // namespace tessera
