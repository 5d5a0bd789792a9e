// 2-D max pooling on the CPU. Indices are flat positions (h * W + w) within each input
// plane, as PyTorch returns them; padding acts as -infinity. The first NaN of a window
// wins (NaN propagates, as in PyTorch).
//
// float32 2 x 2 windows with stride 2 (the MNIST network's, and the usual downsampling)
// have AVX-512 kernels (chosen at run time, isa.h): 16 windows per step, and a backward
// that writes every input gradient element once (windows do not overlap) instead of
// zero-filling and scattering.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/tensor/cpu/avx512_intrinsics.h"
#include "tessera/tensor/cpu/isa.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/kernel_shapes.h"

#if TESSERA_X86_KERNELS

TESSERA_AVX512_BEGIN

namespace tessera::cpu::avx512 {

namespace {

inline __mmask16 lanes_below(int64_t count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1u << count) - 1);
}

// Lanes where `value` replaces `best`: greater, or the first NaN.
inline __mmask16 replaces(__m512 value, __m512 best) {
  return _mm512_cmp_ps_mask(value, best, _CMP_GT_OQ) |
         (_mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q) & ~_mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q));
}

// One plane of 2 x 2 / stride 2 pooling: 16 output columns per step.
void pool2x2_plane(const float* x, int64_t width, int64_t out_h, int64_t out_w, float* y, int64_t* indices) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const float* top = x + 2 * oy * width;
    const float* bottom = top + width;
    for (int64_t ox = 0; ox < out_w; ox += 16) {
      const int64_t count = std::min<int64_t>(16, out_w - ox);
      const __mmask16 first_half = lanes_below(2 * count), second_half = lanes_below(2 * count - 16);
      const __m512 t0 = _mm512_maskz_loadu_ps(first_half, top + 2 * ox);
      const __m512 t1 = _mm512_maskz_loadu_ps(second_half, top + 2 * ox + 16);
      const __m512 b0 = _mm512_maskz_loadu_ps(first_half, bottom + 2 * ox);
      const __m512 b1 = _mm512_maskz_loadu_ps(second_half, bottom + 2 * ox + 16);
      // The window's four values in reading order: top-left, top-right, bottom-left, bottom-right.
      const __m512 v[4] = {_mm512_permutex2var_ps(t0, even, t1), _mm512_permutex2var_ps(t0, odd, t1),
                           _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1)};
      const int32_t offsets[4] = {0, 1, static_cast<int32_t>(width), static_cast<int32_t>(width) + 1};
      __m512 best = v[0];
      __m512i choice = _mm512_setzero_si512();
      for (int k = 1; k < 4; ++k) {
        const __mmask16 take = replaces(v[k], best);
        best = _mm512_mask_blend_ps(take, best, v[k]);
        choice = _mm512_mask_blend_epi32(take, choice, _mm512_set1_epi32(offsets[k]));
      }
      // index = (2 oy) * W + 2 (ox + lane) + offset
      const __m512i base = _mm512_set1_epi32(static_cast<int32_t>(2 * oy * width + 2 * ox));
      const __m512i index = _mm512_add_epi32(_mm512_add_epi32(base, _mm512_slli_epi32(lane, 1)), choice);
      const __mmask16 valid = lanes_below(count);
      _mm512_mask_storeu_ps(y + oy * out_w + ox, valid, best);
      int64_t* out_index = indices + oy * out_w + ox;
      _mm512_mask_storeu_epi64(out_index, static_cast<__mmask8>(valid), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(index)));
      _mm512_mask_storeu_epi64(out_index + 8, static_cast<__mmask8>(valid >> 8),
                               _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(index, 1)));
    }
  }
}

// The backward of one plane: each input element gets its window's gradient if it was the
// window's choice, else zero; rows and columns outside every window get zero too. Returns
// false if an index lies outside its 2 x 2 window (the indices came from other options).
bool pool2x2_backward_plane(const float* dy, const int64_t* indices, int64_t height, int64_t width, int64_t out_h,
                            int64_t out_w, float* dx) {
  const __m512i low_interleave = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high_interleave = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t oy = 0; oy < out_h; ++oy) {
    float* top = dx + 2 * oy * width;
    float* bottom = top + width;
    for (int64_t ox = 0; ox < out_w; ox += 16) {
      const int64_t count = std::min<int64_t>(16, out_w - ox);
      const __mmask16 valid = lanes_below(count);
      const __m512 g = _mm512_maskz_loadu_ps(valid, dy + oy * out_w + ox);
      const int64_t* in_index = indices + oy * out_w + ox;
      const __m256i low = _mm512_cvtepi64_epi32(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(valid), in_index));
      const __m256i high = _mm512_cvtepi64_epi32(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(valid >> 8), in_index + 8));
      // Offset of the choice within its window: index - (2 oy W + 2 (ox + lane)).
      const __m512i base = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * oy * width + 2 * ox)),
                                            _mm512_slli_epi32(lane, 1));
      const __m512i offset = _mm512_sub_epi32(_mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1), base);
      const int32_t offsets[4] = {0, 1, static_cast<int32_t>(width), static_cast<int32_t>(width) + 1};
      __m512 v[4];
      __mmask16 matched = 0;
      for (int k = 0; k < 4; ++k) {
        const __mmask16 here = _mm512_cmpeq_epi32_mask(offset, _mm512_set1_epi32(offsets[k]));
        v[k] = _mm512_maskz_mov_ps(here, g);
        matched |= here;
      }
      if ((matched & valid) != valid) return false;
      const __mmask16 first_half = lanes_below(2 * count), second_half = lanes_below(2 * count - 16);
      _mm512_mask_storeu_ps(top + 2 * ox, first_half, _mm512_permutex2var_ps(v[0], low_interleave, v[1]));
      _mm512_mask_storeu_ps(top + 2 * ox + 16, second_half, _mm512_permutex2var_ps(v[0], high_interleave, v[1]));
      _mm512_mask_storeu_ps(bottom + 2 * ox, first_half, _mm512_permutex2var_ps(v[2], low_interleave, v[3]));
      _mm512_mask_storeu_ps(bottom + 2 * ox + 16, second_half, _mm512_permutex2var_ps(v[2], high_interleave, v[3]));
    }
    // An odd width leaves a last column outside every window.
    for (int64_t column = 2 * out_w; column < width; ++column) top[column] = bottom[column] = 0.0f;
  }
  // An odd height leaves rows below the last window.
  std::fill(dx + 2 * out_h * width, dx + height * width, 0.0f);
  return true;
}

}  // namespace

}  // namespace tessera::cpu::avx512

TESSERA_AVX512_END
#endif  // TESSERA_X86_KERNELS

namespace tessera::cpu {

using namespace native;

namespace {

bool is_pool2x2(const MaxPool2dOptions& o) {
  return o.kernel == Size2(2) && o.stride == Size2(2) && o.padding == Size2(0);
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d(const Tensor& input_in, const MaxPool2dOptions& o) {
  check_defined(input_in, "max_pool2d");
  check_cpu(input_in, "max_pool2d");
  const PoolGeometry g = max_pool2d_geometry(input_in, o);
  Tensor input = contiguous(input_in);
  const int64_t planes = g.planes, height = g.height, width = g.width, out_h = g.out_h, out_w = g.out_w;
  Tensor out = empty({input.size(0), input.size(1), out_h, out_w}, input.dtype(), input.device());
  Tensor indices = empty(out.sizes(), DType::i64, input.device());
  // (The kernels compute indices in 32 bits.)
#if TESSERA_X86_KERNELS
  if (is_pool2x2(o) && input.dtype() == DType::f32 && height * width < (int64_t{1} << 31) && use_avx512()) {
    const float* x = static_cast<const float*>(input.data_ptr());
    float* y = out.data_ptr<float>();
    int64_t* idx = indices.data_ptr<int64_t>();
#pragma omp parallel for schedule(static) if (planes * height * width > cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      avx512::pool2x2_plane(x + p * height * width, width, out_h, out_w, y + p * out_h * out_w,
                            idx + p * out_h * out_w);
    }
    return {out, indices};
  }
#endif
  dispatch_floating(input.dtype(), "max_pool2d", [&]<class T>() {
    const T* x = static_cast<const T*>(input.data_ptr());
    T* y = out.data_ptr<T>();
    int64_t* idx = indices.data_ptr<int64_t>();
#pragma omp parallel for if (planes * height * width > cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      const T* plane = x + p * height * width;
      for (int64_t oy = 0; oy < out_h; ++oy) {
        const int64_t y0 = oy * o.stride[0] - o.padding[0];
        for (int64_t ox = 0; ox < out_w; ++ox) {
          const int64_t x0 = ox * o.stride[1] - o.padding[1];
          T best = -std::numeric_limits<T>::infinity();
          int64_t best_index = -1;
          for (int64_t ky = std::max<int64_t>(y0, 0); ky < std::min(y0 + o.kernel[0], height); ++ky) {
            for (int64_t kx = std::max<int64_t>(x0, 0); kx < std::min(x0 + o.kernel[1], width); ++kx) {
              const T v = plane[ky * width + kx];
              if (v > best || std::isnan(v) || best_index < 0) {
                best = v;
                best_index = ky * width + kx;
                if (std::isnan(v)) goto done;
              }
            }
          }
        done:
          y[(p * out_h + oy) * out_w + ox] = best;
          idx[(p * out_h + oy) * out_w + ox] = best_index;
        }
      }
    }
  });
  return {out, indices};
}

Tensor max_pool2d_backward(const Tensor& grad_output_in, const Tensor& indices_in, const Shape& input_shape) {
  check_max_pool2d_backward_operands(grad_output_in, indices_in, input_shape);
  check_cpu(grad_output_in, "max_pool2d_backward");
  Tensor grad_output = contiguous(grad_output_in), indices = contiguous(indices_in);
  const int64_t planes = input_shape[0] * input_shape[1];
  const int64_t in_plane = input_shape[2] * input_shape[3];
  const int64_t out_plane = grad_output.size(2) * grad_output.size(3);
  const int64_t out_h = grad_output.size(2), out_w = grad_output.size(3);
  // Non-overlapping 2 x 2 windows (what the forward's fast path made): write each element once.
  // If some index is outside its window, other options made them: take the general path.
#if TESSERA_X86_KERNELS
  if (grad_output.dtype() == DType::f32 && indices.dtype() == DType::i64 && out_h == input_shape[2] / 2 &&
      out_w == input_shape[3] / 2 && in_plane < (int64_t{1} << 31) && use_avx512()) {
    Tensor grad_input = empty(input_shape, grad_output.dtype(), grad_output.device());
    const float* dy = static_cast<const float*>(grad_output.data_ptr());
    const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
    float* dx = grad_input.data_ptr<float>();
    bool all_in_windows = true;
#pragma omp parallel for schedule(static) if (planes * in_plane > cpu::kParallelGrain) reduction(&& : all_in_windows)
    for (int64_t p = 0; p < planes; ++p) {
      all_in_windows = avx512::pool2x2_backward_plane(dy + p * out_plane, idx + p * out_plane, input_shape[2],
                                                      input_shape[3], out_h, out_w, dx + p * in_plane) &&
                       all_in_windows;
    }
    if (all_in_windows) return grad_input;
  }
#endif
  Tensor grad_input = zeros(input_shape, grad_output.dtype(), grad_output.device());
  dispatch_floating(grad_output.dtype(), "max_pool2d_backward", [&]<class T>() {
    const T* dy = static_cast<const T*>(grad_output.data_ptr());
    const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
    T* dx = grad_input.data_ptr<T>();
#pragma omp parallel for if (planes * in_plane > cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t i = 0; i < out_plane; ++i) dx[p * in_plane + idx[p * out_plane + i]] += dy[p * out_plane + i];
    }
  });
  return grad_input;
}

}  // namespace tessera::cpu
