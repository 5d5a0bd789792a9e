// Adaptive average pooling on the CPU. Output cell i of an axis of length L pooled to
// n cells averages inputs [floor(i * L / n), ceil((i + 1) * L / n)), as PyTorch bins them
// (neighbouring bins overlap when n does not divide L). Sums of float accumulate in double.
// The backward spreads each output gradient evenly over its bin, adding where bins overlap.
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/device_check.h"

namespace tessera::cpu {

using namespace native;

namespace {

int64_t bin_start(int64_t cell, int64_t cells, int64_t length) { return (cell * length) / cells; }
int64_t bin_end(int64_t cell, int64_t cells, int64_t length) { return ((cell + 1) * length + cells - 1) / cells; }

void check_input(const Tensor& input, Size2 output_size, const char* op) {
  TS_CHECK(input.dim() == 4, ShapeError, op, ": expected a 4-D input [N, C, H, W], got ", shape_str(input.sizes()));
  TS_CHECK(output_size.h > 0 && output_size.w > 0, ValueError, op, ": output size must be positive, got (",
           output_size.h, ", ", output_size.w, ")");
  TS_CHECK(input.size(2) > 0 && input.size(3) > 0, ShapeError, op, ": input of shape ", shape_str(input.sizes()),
           " has an empty plane");
}

}  // namespace

Tensor adaptive_avg_pool2d(const Tensor& input_in, Size2 output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_defined(input_in, op);
  check_cpu(input_in, op);
  check_input(input_in, output_size, op);
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
        const int64_t y0 = bin_start(oy, out_h, height), y1 = bin_end(oy, out_h, height);
        for (int64_t ox = 0; ox < out_w; ++ox) {
          const int64_t x0 = bin_start(ox, out_w, width), x1 = bin_end(ox, out_w, width);
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
  check_defined(grad_output_in, op, "grad_output");
  check_cpu(grad_output_in, op);
  TS_CHECK(input_shape.size() == 4 && grad_output_in.dim() == 4 && grad_output_in.size(0) == input_shape[0] &&
               grad_output_in.size(1) == input_shape[1],
           ShapeError, op, ": gradient of shape ", shape_str(grad_output_in.sizes()), " for an input of shape ",
           shape_str(input_shape));
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
        const int64_t y0 = bin_start(oy, out_h, height), y1 = bin_end(oy, out_h, height);
        for (int64_t ox = 0; ox < out_w; ++ox) {
          const int64_t x0 = bin_start(ox, out_w, width), x1 = bin_end(ox, out_w, width);
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
