// 2-D convolution on the CPU.
//
// float32 with stride 1, no padding and no dilation (the common case, and the MNIST
// network's) runs the shifted-row direct kernels of conv_shifted.h on AVX-512 machines
// (chosen at run time: isa.h).
// Everything else is im2col + GEMM (and col2im for the input gradient): for one sample,
// im2col lays the input patches out as a [C*kh*kw, oh*ow] matrix, so the convolution is
// W[O, C*kh*kw] * col. Samples are spread across threads, each with its own column
// buffer; the GEMMs inside a thread then run single-threaded.
// bfloat16 sums in float32 and rounds each result once, as PyTorch's CPU: the forward is
// im2col + gemm<BFloat16> (the bias joins the float32 sum); the gradients, which col2im and
// the batch would otherwise sum in bfloat16, are the float32 backward of the widened
// operands, rounded.
#include <omp.h>

#include <vector>

#include "tessera/tensor/cpu/conv_shifted.h"
#include "tessera/tensor/cpu/gemm.h"
#include "tessera/tensor/cpu/isa.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

template <class T>
void im2col(const T* image, const ConvGeometry& g, T* col) {
  for (int64_t c = 0; c < g.channels; ++c) {
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        T* row = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * g.positions();
        for (int64_t oy = 0; oy < g.out_h; ++oy) {
          const int64_t y = oy * g.stride_h - g.pad_h + ki * g.dil_h;
          T* out = row + oy * g.out_w;
          if (y < 0 || y >= g.height) {
            std::fill(out, out + g.out_w, T(0));
            continue;
          }
          const T* in = image + (c * g.height + y) * g.width;
          for (int64_t ox = 0; ox < g.out_w; ++ox) {
            const int64_t x = ox * g.stride_w - g.pad_w + kj * g.dil_w;
            out[ox] = (x >= 0 && x < g.width) ? in[x] : T(0);
          }
        }
      }
    }
  }
}

// The adjoint of im2col: adds each column entry back onto the pixel it came from.
template <class T>
void col2im(const T* col, const ConvGeometry& g, T* image) {
  std::fill(image, image + g.channels * g.height * g.width, T(0));
  for (int64_t c = 0; c < g.channels; ++c) {
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const T* row = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * g.positions();
        for (int64_t oy = 0; oy < g.out_h; ++oy) {
          const int64_t y = oy * g.stride_h - g.pad_h + ki * g.dil_h;
          if (y < 0 || y >= g.height) continue;
          T* out = image + (c * g.height + y) * g.width;
          const T* in = row + oy * g.out_w;
          for (int64_t ox = 0; ox < g.out_w; ++ox) {
            const int64_t x = ox * g.stride_w - g.pad_w + kj * g.dil_w;
            if (x >= 0 && x < g.width) out[x] += in[ox];
          }
        }
      }
    }
  }
}

// The shifted-row kernels apply (float32, stride 1, no padding, no dilation) and may run.
bool use_shifted(DType dtype, const Conv2dFuncOptions& o) {
  return dtype == DType::f32 && o.stride == Size2(1) && o.padding == Size2(0) && o.dilation == Size2(1) &&
         use_avx512();
}

shifted::Geometry shifted_geometry(const ConvGeometry& g) {
  return {g.batch, g.channels, g.height, g.width, g.out_channels, g.kernel_h, g.kernel_w};
}

}  // namespace

// Operands checked, made contiguous and the output allocated by the dispatch layer.
void conv2d(const Conv2dCall& call) {
  const Tensor &input = call.input, &weight = call.weight, &bias = call.bias, &out = call.out;
  const ConvGeometry& g = call.geometry;
#if TESSERA_X86_KERNELS
  if (use_shifted(input.dtype(), call.options)) {
    shifted::forward(shifted_geometry(g), static_cast<const float*>(input.data_ptr()),
                     static_cast<const float*>(weight.data_ptr()),
                     bias.defined() ? static_cast<const float*>(bias.data_ptr()) : nullptr, out.data_ptr<float>());
    return;
  }
#endif
  dispatch_gemm(input.dtype(), "conv2d", [&]<class T>() {
    const T* x = static_cast<const T*>(input.data_ptr());
    const T* w = static_cast<const T*>(weight.data_ptr());
    const T* b = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    T* y = out.data_ptr<T>();
    const int64_t positions = g.positions(), patch = g.patch();
#pragma omp parallel
    {
      std::vector<T> col(static_cast<size_t>(patch * positions));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < g.batch; ++n) {
        im2col(x + n * g.channels * g.height * g.width, g, col.data());
        T* yn = y + n * g.out_channels * positions;
        T beta = T(0);
        if (b != nullptr) {
          for (int64_t o = 0; o < g.out_channels; ++o) std::fill(yn + o * positions, yn + (o + 1) * positions, b[o]);
          beta = T(1);
        }
        cpu::gemm<T>(false, false, g.out_channels, positions, patch, T(1), w, patch, col.data(), positions, beta, yn,
                     positions);
      }
    }
  });
}

Tensor conv2d_backward_input(const Tensor& grad_output_in, const Tensor& weight_in, const Shape& input_shape,
                             const Conv2dFuncOptions& options) {
  check_conv_operands(grad_output_in, weight_in, "conv2d_backward_input");
  check_cpu(grad_output_in, "conv2d_backward_input");
  if (grad_output_in.dtype() == DType::bf16) {
    return to_dtype(cpu::conv2d_backward_input(to_dtype(grad_output_in, DType::f32),
                                               to_dtype(weight_in, DType::f32), input_shape, options),
                    DType::bf16);
  }
  ConvGeometry g = conv_geometry(input_shape, weight_in.sizes(), options);
  Tensor grad_output = contiguous(grad_output_in), weight = contiguous(weight_in);
  Tensor grad_input = empty(input_shape, grad_output.dtype(), grad_output.device());
#if TESSERA_X86_KERNELS
  if (use_shifted(grad_output.dtype(), options)) {
    shifted::backward(shifted_geometry(g), static_cast<const float*>(grad_output.data_ptr()), nullptr,
                      static_cast<const float*>(weight.data_ptr()), grad_input.data_ptr<float>(), nullptr, nullptr);
    return grad_input;
  }
#endif
  dispatch_floating(grad_output.dtype(), "conv2d_backward_input", [&]<class T>() {
    const T* dy = static_cast<const T*>(grad_output.data_ptr());
    const T* w = static_cast<const T*>(weight.data_ptr());
    T* dx = grad_input.data_ptr<T>();
    const int64_t positions = g.positions(), patch = g.patch();
#pragma omp parallel
    {
      std::vector<T> col(static_cast<size_t>(patch * positions));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < g.batch; ++n) {
        // col[patch, L] = W^T[patch, O] * dY[O, L]
        cpu::gemm<T>(true, false, patch, positions, g.out_channels, T(1), w, patch,
                     dy + n * g.out_channels * positions, positions, T(0), col.data(), positions);
        col2im(col.data(), g, dx + n * g.channels * g.height * g.width);
      }
    }
  });
  return grad_input;
}

Tensor conv2d_backward_weight(const Tensor& grad_output_in, const Tensor& input_in, const Shape& weight_shape,
                              const Conv2dFuncOptions& options) {
  check_conv_operands(grad_output_in, input_in, "conv2d_backward_weight");
  check_cpu(grad_output_in, "conv2d_backward_weight");
  if (grad_output_in.dtype() == DType::bf16) {
    return to_dtype(cpu::conv2d_backward_weight(to_dtype(grad_output_in, DType::f32),
                                                to_dtype(input_in, DType::f32), weight_shape, options),
                    DType::bf16);
  }
  ConvGeometry g = conv_geometry(input_in.sizes(), weight_shape, options);
  Tensor grad_output = contiguous(grad_output_in), input = contiguous(input_in);
#if TESSERA_X86_KERNELS
  if (use_shifted(input.dtype(), options)) {
    Tensor grad_weight = empty(weight_shape, input.dtype(), input.device());
    shifted::backward(shifted_geometry(g), static_cast<const float*>(grad_output.data_ptr()),
                      static_cast<const float*>(input.data_ptr()), nullptr, nullptr, grad_weight.data_ptr<float>(),
                      nullptr);
    return grad_weight;
  }
#endif
  Tensor grad_weight = zeros(weight_shape, input.dtype(), input.device());
  if (g.batch == 0) return grad_weight;  // a rank's empty share of a batch: no samples, zero gradient
  dispatch_floating(input.dtype(), "conv2d_backward_weight", [&]<class T>() {
    const T* dy = static_cast<const T*>(grad_output.data_ptr());
    const T* x = static_cast<const T*>(input.data_ptr());
    T* dw = grad_weight.data_ptr<T>();
    const int64_t positions = g.positions(), patch = g.patch();
    const int threads = std::min<int64_t>(omp_get_max_threads(), g.batch);
    // Each thread accumulates its samples into its own buffer; the buffers are summed after.
    std::vector<std::vector<T>> partial(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
    {
      std::vector<T>& mine = partial[omp_get_thread_num()];
      mine.assign(static_cast<size_t>(g.out_channels * patch), T(0));
      std::vector<T> col(static_cast<size_t>(patch * positions));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < g.batch; ++n) {
        im2col(x + n * g.channels * g.height * g.width, g, col.data());
        // dW[O, patch] += dY[O, L] * col^T[L, patch]
        cpu::gemm<T>(false, true, g.out_channels, patch, positions, T(1), dy + n * g.out_channels * positions,
                     positions, col.data(), positions, T(1), mine.data(), patch);
      }
    }
    for (const auto& buffer : partial) {
      for (size_t i = 0; i < buffer.size(); ++i) dw[i] += buffer[i];
    }
  });
  return grad_weight;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output_in, const Tensor& input_in,
                                                   const Tensor& weight_in, const Conv2dFuncOptions& options,
                                                   std::array<bool, 3> output_mask) {
  check_conv_operands(grad_output_in, input_in, "conv2d_backward");
  check_conv_operands(input_in, weight_in, "conv2d_backward");
  check_cpu(grad_output_in, "conv2d_backward");
  ConvGeometry g = conv_geometry(input_in.sizes(), weight_in.sizes(), options);
  const Shape output_shape{g.batch, g.out_channels, g.out_h, g.out_w};
  TS_CHECK(grad_output_in.sizes() == output_shape, ShapeError, "conv2d_backward: gradient of shape ",
           shape_str(grad_output_in.sizes()), " does not match the output shape ", shape_str(output_shape));
  const auto [want_input, want_weight, want_bias] = output_mask;
#if TESSERA_X86_KERNELS
  if (use_shifted(input_in.dtype(), options)) {
    // One pass over the batch: each sample's gradient is read once for all three results.
    Tensor grad_output = contiguous(grad_output_in), input = contiguous(input_in), weight = contiguous(weight_in);
    Tensor grad_input = want_input ? empty(input.sizes(), input.dtype(), input.device()) : Tensor();
    Tensor grad_weight = want_weight ? empty(weight.sizes(), input.dtype(), input.device()) : Tensor();
    Tensor grad_bias = want_bias ? empty({g.out_channels}, input.dtype(), input.device()) : Tensor();
    shifted::backward(shifted_geometry(g), static_cast<const float*>(grad_output.data_ptr()),
                      static_cast<const float*>(input.data_ptr()), static_cast<const float*>(weight.data_ptr()),
                      want_input ? grad_input.data_ptr<float>() : nullptr,
                      want_weight ? grad_weight.data_ptr<float>() : nullptr,
                      want_bias ? grad_bias.data_ptr<float>() : nullptr);
    return {grad_input, grad_weight, grad_bias};
  }
#endif
  Tensor grad_input, grad_weight, grad_bias;
  if (want_input) grad_input = cpu::conv2d_backward_input(grad_output_in, weight_in, input_in.sizes(), options);
  if (want_weight) grad_weight = cpu::conv2d_backward_weight(grad_output_in, input_in, weight_in.sizes(), options);
  if (want_bias) grad_bias = native::sum(grad_output_in, {0, 2, 3}, false);
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace tessera::cpu
