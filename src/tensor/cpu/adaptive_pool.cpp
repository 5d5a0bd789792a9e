// Adaptive average pooling on the CPU. Output cell i of an axis of length L pooled to
// n cells averages inputs [floor(i * L / n), ceil((i + 1) * L / n)), as PyTorch bins them
// (neighbouring bins overlap when n does not divide L). Sums of float accumulate in double.
// The backward spreads each output gradient evenly over its bin, adding where bins overlap.
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;


Tensor adaptive_avg_pool2d(const Tensor& input_in, Size2 output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_adaptive_avg_pool2d_input(input_in, output_size);
  check_cpu(input_in, op);
  Tensor input = contiguous(input_in);
  const int64_t planes = input.size(0) * input.size(1), height = input.size(2), width = input.size(3);
  const int64_t out_h = output_size.h, out_w = output_size.w;
  Tensor out = empty({input.size(0), input.size(1), out_h, out_w}, input.dtype(), input.device());
  if (planes == 0) return out;
  dispatch_floating(input.dtype(), op, [&]<class T>() {
    const T* x = input.data_ptr<T>();
    T* y = out.data_ptr<T>();
#pragma omp parallel for if (input.numel() > cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      const T* plane = x + p * height * width;
      for (int64_t oy = 0; oy < out_h; ++oy) {
        const int64_t y0 = adaptive_bin_start(oy, out_h, height), y1 = adaptive_bin_end(oy, out_h, height);
        for (int64_t ox = 0; ox < out_w; ++ox) {
          const int64_t x0 = adaptive_bin_start(ox, out_w, width), x1 = adaptive_bin_end(ox, out_w, width);
          double sum = 0;
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) sum += plane[iy * width + ix];
          }
          y[(p * out_h + oy) * out_w + ox] = static_cast<T>(sum / static_cast<double>((y1 - y0) * (x1 - x0)));
        }
      }
    }
  });
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output_in, const Shape& input_shape) {
  const char* op = "adaptive_avg_pool2d_backward";
  check_adaptive_avg_pool2d_backward(grad_output_in, input_shape);
  check_cpu(grad_output_in, op);
  Tensor grad_output = contiguous(grad_output_in);
  const int64_t planes = input_shape[0] * input_shape[1], height = input_shape[2], width = input_shape[3];
  const int64_t out_h = grad_output.size(2), out_w = grad_output.size(3);
  Tensor grad_input = zeros(input_shape, grad_output.dtype(), grad_output.device());
  if (planes == 0 || height == 0 || width == 0) return grad_input;
  dispatch_floating(grad_output.dtype(), op, [&]<class T>() {
    const T* dy = grad_output.data_ptr<T>();
    T* dx = grad_input.data_ptr<T>();
#pragma omp parallel for if (grad_input.numel() > cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      T* plane = dx + p * height * width;
      for (int64_t oy = 0; oy < out_h; ++oy) {
        const int64_t y0 = adaptive_bin_start(oy, out_h, height), y1 = adaptive_bin_end(oy, out_h, height);
        for (int64_t ox = 0; ox < out_w; ++ox) {
          const int64_t x0 = adaptive_bin_start(ox, out_w, width), x1 = adaptive_bin_end(ox, out_w, width);
          const T share = dy[(p * out_h + oy) * out_w + ox] / static_cast<T>((y1 - y0) * (x1 - x0));
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) plane[iy * width + ix] += share;
          }
        }
      }
    }
  });
  return grad_input;
}

}  // namespace tessera::cpu
