// Batch normalisation on the CPU, following PyTorch's CPU kernels step by step so that
// float32 results agree to a few ulps: per channel, the batch mean is accumulated in
// double and rounded to T; the variance sum adds (x - mean)^2 (computed in T) in double;
// the output is x * alpha + beta with alpha = invstd * weight and beta = bias - mean * alpha.
// The backward reduces sum(dy) and sum((x - mean) * dy) per channel in double, then
//   train: dx = (dy - sum(dy) / n - (x - mean) * k) * invstd * w,  k = dot * invstd^2 / n
//   eval:  dx = dy * invstd * w
// Channels are independent, so the OpenMP loops run over channels. The input is viewed
// as [outer = N, C, inner = prod(dims 2..)] and made contiguous first.
#include <cmath>

#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in,
                                              const Tensor& running_mean, const Tensor& running_var,
                                              bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  const ChannelLayout layout =
      check_batch_norm_operands(input_in, weight_in, bias_in, running_mean, running_var, training, eps);
  check_cpu(input_in, op);
  const NormalizationTensors t =
      normalization_tensors(input_in, weight_in, bias_in, layout.channels, input_in.dtype());
  if (layout.channels == 0) return {t.output, t.mean, t.inverse_std};

  dispatch_floating(t.input.dtype(), op, [&]<class T>() {
    const T* x = t.input.numel() > 0 ? t.input.data_ptr<T>() : nullptr;
    T* y = t.input.numel() > 0 ? t.output.data_ptr<T>() : nullptr;
    const T* w = data_or_null<T>(t.weight);
    const T* b = data_or_null<T>(t.bias);
    T* mean_out = t.mean.data_ptr<T>();
    T* invstd_out = t.inverse_std.data_ptr<T>();
    T* run_mean = running_mean.defined() ? static_cast<T*>(running_mean.data_ptr()) : nullptr;
    T* run_var = running_var.defined() ? static_cast<T*>(running_var.data_ptr()) : nullptr;
    const int64_t channels = layout.channels, inner = layout.inner, outer = layout.outer;
    const int64_t n = layout.count();

#pragma omp parallel for if (t.input.numel() > cpu::kParallelGrain)
    for (int64_t c = 0; c < channels; ++c) {
      T mean, invstd;
      if (training) {
        double sum = 0;
        for (int64_t s = 0; s < outer; ++s) {
          const T* plane = x + (s * channels + c) * inner;
          for (int64_t i = 0; i < inner; ++i) sum += plane[i];
        }
        mean = static_cast<T>(sum / static_cast<double>(n));
        double square_sum = 0;
        for (int64_t s = 0; s < outer; ++s) {
          const T* plane = x + (s * channels + c) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            const T centred = plane[i] - mean;
            square_sum += centred * centred;
          }
        }
        const T var_sum = static_cast<T>(square_sum);
        const T biased_var = var_sum / static_cast<T>(n);
        invstd = static_cast<T>(1.0 / std::sqrt(static_cast<double>(biased_var) + eps));
        if (run_mean != nullptr) {
          const T unbiased_var = var_sum / static_cast<T>(n - 1);
          run_mean[c] = static_cast<T>(momentum * mean + (1 - momentum) * run_mean[c]);
          run_var[c] = static_cast<T>(momentum * unbiased_var + (1 - momentum) * run_var[c]);
        }
      } else {
        mean = run_mean[c];
        invstd = static_cast<T>(1) / std::sqrt(run_var[c] + static_cast<T>(eps));
      }
      mean_out[c] = mean;
      invstd_out[c] = invstd;
      const T alpha = invstd * (w != nullptr ? w[c] : static_cast<T>(1));
      const T beta = (b != nullptr ? b[c] : static_cast<T>(0)) - mean * alpha;
      for (int64_t s = 0; s < outer; ++s) {
        const int64_t base = (s * channels + c) * inner;
        for (int64_t i = 0; i < inner; ++i) y[base + i] = x[base + i] * alpha + beta;
      }
    }
  });
  return {t.output, t.mean, t.inverse_std};
}

// Operands checked, made contiguous and the gradients allocated by the dispatch layer.
void batch_norm_backward(const BatchNormBackwardCall& call) {
  const Tensor &grad_output = call.grad_output, &input = call.input, &weight = call.weight;
  const Tensor &grad_input = call.grad_input, &grad_weight = call.grad_weight, &grad_bias = call.grad_bias;
  const ChannelLayout& layout = call.layout;
  const bool training = call.training;
  dispatch_floating(input.dtype(), "batch_norm_backward", [&]<class T>() {
    const T* x = input.numel() > 0 ? input.data_ptr<T>() : nullptr;
    const T* dy = input.numel() > 0 ? grad_output.data_ptr<T>() : nullptr;
    T* dx = grad_input.defined() && input.numel() > 0 ? grad_input.data_ptr<T>() : nullptr;
    T* dw = grad_weight.defined() ? grad_weight.data_ptr<T>() : nullptr;
    T* db = grad_bias.defined() ? grad_bias.data_ptr<T>() : nullptr;
    const T* w = data_or_null<T>(weight);
    const T* means = call.save_mean.data_ptr<T>();
    const T* invstds = call.save_invstd.data_ptr<T>();
    const int64_t channels = layout.channels, inner = layout.inner, outer = layout.outer;
    const int64_t n = layout.count();

#pragma omp parallel for if (input.numel() > cpu::kParallelGrain)
    for (int64_t c = 0; c < channels; ++c) {
      const T mean = means[c], invstd = invstds[c];
      const T scale = w != nullptr ? w[c] : static_cast<T>(1);
      double sum = 0, dot = 0;
      for (int64_t s = 0; s < outer; ++s) {
        const int64_t base = (s * channels + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          sum += dy[base + i];
          dot += static_cast<T>(x[base + i] - mean) * dy[base + i];
        }
      }
      if (dx != nullptr) {
        if (training) {
          const T k = static_cast<T>(dot) * invstd * invstd / static_cast<T>(n);
          const T grad_mean = static_cast<T>(sum / static_cast<double>(n));
          for (int64_t s = 0; s < outer; ++s) {
            const int64_t base = (s * channels + c) * inner;
            for (int64_t i = 0; i < inner; ++i) {
              const T projection = (x[base + i] - mean) * k;
              dx[base + i] = (dy[base + i] - grad_mean - projection) * invstd * scale;
            }
          }
        } else {
          for (int64_t s = 0; s < outer; ++s) {
            const int64_t base = (s * channels + c) * inner;
            for (int64_t i = 0; i < inner; ++i) dx[base + i] = dy[base + i] * invstd * scale;
          }
        }
      }
      if (dw != nullptr) dw[c] = static_cast<T>(dot * invstd);
      if (db != nullptr) db[c] = static_cast<T>(sum);
    }
  });
}

}  // namespace tessera::cpu
