// 2-D max pooling on the CPU. Indices are flat positions (h * W + w) within each input
// plane, as PyTorch returns them; padding acts as -infinity. The first NaN of a window
// wins (NaN propagates, as in PyTorch).
//
// float32 2 x 2 windows with stride 2 (the MNIST network's, and the usual downsampling)
// have AVX-512 kernels (pool_avx512.cpp, chosen at run time: isa.h) and, for other CPUs, a
// forward written without branches, which the compiler vectorises (5.8x the general loop
// at the x86-64-v3 baseline, measured on a Zen 3 EPYC: MNIST's conv2 output).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/tensor/cpu/avx512_kernels.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/cpu/vector_math.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

bool is_pool2x2(const MaxPool2dWindow& o) {
  return o.kernel == Size2(2) && o.stride == Size2(2) && o.padding == Size2(0);
}

// One plane of float32 2 x 2 / stride 2 pooling by the rules above (each window read in
// order, a value taking the place of the best so far when greater or the first NaN), with
// masks instead of branches (vector_math::select), so the same bits as the general loop.
void pool2x2_plane(const float* x, int64_t width, int64_t out_h, int64_t out_w, float* y, int64_t* indices) {
  const int64_t offsets[3] = {1, width, width + 1};  // of the window's later three values
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const float* top = x + 2 * oy * width;
    const float* bottom = top + width;
    const int64_t row_start = 2 * oy * width;
    for (int64_t ox = 0; ox < out_w; ++ox) {
      const float later[3] = {top[2 * ox + 1], bottom[2 * ox], bottom[2 * ox + 1]};
      float best = top[2 * ox];
      int64_t offset = 0;
      for (int k = 0; k < 3; ++k) {
        const float v = later[k];
        const bool takes = (v > best) | ((v != v) & (best == best));
        best = vector_math::select(takes, v, best);
        offset = takes ? offsets[k] : offset;
      }
      y[oy * out_w + ox] = best;
      indices[oy * out_w + ox] = row_start + 2 * ox + offset;
    }
  }
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d(const Tensor& input_in, const MaxPool2dWindow& o) {
  check_defined(input_in, "max_pool2d");
  check_cpu(input_in, "max_pool2d");
  const PoolGeometry g = max_pool2d_geometry(input_in, o);
  Tensor input = contiguous(input_in);
  const int64_t planes = g.planes, height = g.height, width = g.width, out_h = g.out_h, out_w = g.out_w;
  Tensor out = empty({input.size(0), input.size(1), out_h, out_w}, input.dtype(), input.device());
  Tensor indices = empty(out.sizes(), DType::i64, input.device());
  if (is_pool2x2(o) && input.dtype() == DType::f32) {
    auto* plane_kernel = &pool2x2_plane;
#if TESSERA_X86_KERNELS
    // (The AVX-512 kernel computes indices in 32 bits.)
    if (height * width < (int64_t{1} << 31) && use_avx512()) plane_kernel = &avx512::pool2x2_plane;
#endif
    const float* x = static_cast<const float*>(input.data_ptr());
    float* y = out.data_ptr<float>();
    int64_t* idx = indices.data_ptr<int64_t>();
#pragma omp parallel for schedule(static) if (planes * height * width > cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      plane_kernel(x + p * height * width, width, out_h, out_w, y + p * out_h * out_w, idx + p * out_h * out_w);
    }
    return {out, indices};
  }
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
