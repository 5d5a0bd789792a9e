// Softmax, log-softmax and the negative log-likelihood loss on the CPU.
//
// The softmax dim is addressed as [outer, dim, inner]: element (o, d, i) sits at
// (o * dim + d) * inner + i of the contiguous input. Row statistics run in double.
#include <cmath>
#include <limits>

#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

template <class T, bool Log>
void softmax_forward(const T* x, T* y, const SoftmaxLayout& l) {
#pragma omp parallel for collapse(2) if (l.outer * l.size * l.inner > cpu::kParallelGrain)
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t i = 0; i < l.inner; ++i) {
      const T* in = x + o * l.size * l.inner + i;
      T* out = y + o * l.size * l.inner + i;
      T max_value = -std::numeric_limits<T>::infinity();
      for (int64_t d = 0; d < l.size; ++d) max_value = std::max(max_value, in[d * l.inner]);
      double total = 0;
      for (int64_t d = 0; d < l.size; ++d) total += std::exp(static_cast<double>(in[d * l.inner] - max_value));
      if constexpr (Log) {
        const T log_total = static_cast<T>(std::log(total));
        for (int64_t d = 0; d < l.size; ++d) out[d * l.inner] = in[d * l.inner] - max_value - log_total;
      } else {
        const double scale = 1.0 / total;
        for (int64_t d = 0; d < l.size; ++d) {
          out[d * l.inner] = static_cast<T>(std::exp(static_cast<double>(in[d * l.inner] - max_value)) * scale);
        }
      }
    }
  }
}

// log_softmax: dx = dy - exp(y) * sum(dy);  softmax: dx = y * (dy - sum(dy * y)).
template <class T, bool Log>
void softmax_backward_kernel(const T* dy, const T* y, T* dx, const SoftmaxLayout& l) {
#pragma omp parallel for collapse(2) if (l.outer * l.size * l.inner > cpu::kParallelGrain)
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t i = 0; i < l.inner; ++i) {
      const int64_t base = o * l.size * l.inner + i;
      double total = 0;
      for (int64_t d = 0; d < l.size; ++d) {
        const int64_t at = base + d * l.inner;
        total += Log ? static_cast<double>(dy[at]) : static_cast<double>(dy[at]) * y[at];
      }
      for (int64_t d = 0; d < l.size; ++d) {
        const int64_t at = base + d * l.inner;
        if constexpr (Log) {
          dx[at] = static_cast<T>(dy[at] - std::exp(static_cast<double>(y[at])) * total);
        } else {
          dx[at] = static_cast<T>(y[at] * (dy[at] - total));
        }
      }
    }
  }
}

template <bool Log>
Tensor softmax_impl(const Tensor& self_in, int64_t dim, const char* op) {
  check_defined(self_in, op);
  check_cpu(self_in, op);
  Tensor self = contiguous(self_in);
  SoftmaxLayout layout = softmax_layout(self, dim, op);
  Tensor out = empty(self.sizes(), self.dtype(), self.device());
  dispatch_floating(self.dtype(), op, [&]<class T>() {
    softmax_forward<T, Log>(static_cast<const T*>(self.data_ptr()), out.data_ptr<T>(), layout);
  });
  return out;
}

template <bool Log>
Tensor softmax_backward_impl(const Tensor& grad_in, const Tensor& output_in, int64_t dim, const char* op) {
  check_softmax_backward_operands(grad_in, output_in, op);
  check_cpu(grad_in, op);
  Tensor grad = contiguous(grad_in), output = contiguous(output_in);
  SoftmaxLayout layout = softmax_layout(output, dim, op);
  Tensor grad_input = empty(output.sizes(), output.dtype(), output.device());
  dispatch_floating(output.dtype(), op, [&]<class T>() {
    softmax_backward_kernel<T, Log>(static_cast<const T*>(grad.data_ptr()), static_cast<const T*>(output.data_ptr()),
                                    grad_input.data_ptr<T>(), layout);
  });
  return grad_input;
}

}  // namespace

Tensor log_softmax(const Tensor& self, int64_t dim) { return softmax_impl<true>(self, dim, "log_softmax"); }
Tensor softmax(const Tensor& self, int64_t dim) { return softmax_impl<false>(self, dim, "softmax"); }

Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  return softmax_backward_impl<true>(grad_output, output, dim, "log_softmax_backward");
}

Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  return softmax_backward_impl<false>(grad_output, output, dim, "softmax_backward");
}

std::tuple<Tensor, Tensor> nll_loss(const Tensor& log_probs_in, const Tensor& target_in, const Tensor& weight_in,
                                    Reduction reduction, int64_t ignore_index) {
  const NllLayout layout = check_nll_operands(log_probs_in, target_in, weight_in);
  check_cpu(log_probs_in, "nll_loss");
  Tensor log_probs = contiguous(log_probs_in), target = contiguous(target_in);
  Tensor weight = weight_in.defined() ? contiguous(weight_in) : Tensor();
  const int64_t positions = layout.positions(), classes = layout.classes, inner = layout.inner;
  Tensor loss = empty(nll_loss_shape(target, reduction), log_probs.dtype(), log_probs.device());
  Tensor total_weight = empty({}, log_probs.dtype(), log_probs.device());
  dispatch_floating(log_probs.dtype(), "nll_loss", [&]<class T>() {
    const T* lp = static_cast<const T*>(log_probs.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    const T* w = weight.defined() ? static_cast<const T*>(weight.data_ptr()) : nullptr;
    double total = 0, weight_sum = 0;
    for (int64_t p = 0; p < positions; ++p) {
      const int64_t cls = t[p];
      double term = 0, row_weight = 0;
      if (cls != ignore_index) {
        TS_CHECK(cls >= 0 && cls < classes, IndexError, "nll_loss: target ", cls, " at position ", p,
                 " is out of range for ", classes, " classes");
        row_weight = w ? static_cast<double>(w[cls]) : 1.0;
        term = -static_cast<double>(lp[((p / inner) * classes + cls) * inner + p % inner]) * row_weight;
      }
      if (reduction == Reduction::none) loss.data_ptr<T>()[p] = static_cast<T>(term);
      total += term;
      weight_sum += row_weight;
    }
    total_weight.data_ptr<T>()[0] = static_cast<T>(weight_sum);
    if (reduction == Reduction::sum) loss.data_ptr<T>()[0] = static_cast<T>(total);
    if (reduction == Reduction::mean) loss.data_ptr<T>()[0] = static_cast<T>(total / weight_sum);
  });
  return {loss, total_weight};
}

// Operands checked, made contiguous and the gradient allocated by the dispatch layer.
void nll_loss_backward(const NllLossBackwardCall& call) {
  const int64_t positions = call.layout.positions(), classes = call.layout.classes, inner = call.layout.inner;
  const Reduction reduction = call.reduction;
  dispatch_floating(call.grad_input.dtype(), "nll_loss_backward", [&]<class T>() {
    const T* g = static_cast<const T*>(call.grad_output.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(call.target.data_ptr());
    const T* w = call.weight.defined() ? static_cast<const T*>(call.weight.data_ptr()) : nullptr;
    T* dx = call.grad_input.data_ptr<T>();
    const T scale = reduction == Reduction::mean ? g[0] / call.total_weight.item<T>() : g[0];
    for (int64_t p = 0; p < positions; ++p) {
      const int64_t cls = t[p];
      if (cls == call.ignore_index || cls < 0 || cls >= classes) continue;  // the forward refused those
      const T row_scale = reduction == Reduction::none ? g[p] : scale;
      dx[((p / inner) * classes + cls) * inner + p % inner] = -(w ? w[cls] : T(1)) * row_scale;
    }
  });
}

void cross_entropy_backward_(Tensor& log_probs, const Tensor& grad_output_in, const Tensor& target_in,
                             const Tensor& weight_in, Reduction reduction, int64_t ignore_index,
                             const Tensor& total_weight) {
  const char* op = "cross_entropy_backward_";
  const NllLayout layout =
      check_nll_backward_operands(grad_output_in, log_probs, target_in, weight_in, reduction, total_weight, op);
  check_cpu(log_probs, op);
  TS_CHECK(log_probs.is_contiguous(), ShapeError, op, ": log_probs of shape ", shape_str(log_probs.sizes()),
           " must be contiguous (it becomes the gradient in place)");
  Tensor grad_output = contiguous(grad_output_in), target = contiguous(target_in);
  Tensor weight = weight_in.defined() ? contiguous(weight_in) : Tensor();
  const int64_t positions = layout.positions(), classes = layout.classes, inner = layout.inner;
  dispatch_floating(log_probs.dtype(), op, [&]<class T>() {
    const T* g = static_cast<const T*>(grad_output.data_ptr());
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    const T* w = weight.defined() ? static_cast<const T*>(weight.data_ptr()) : nullptr;
    T* lp = log_probs.data_ptr<T>();
    // nll_loss_backward's arithmetic for the one non-zero of each position's gradient, then
    // log_softmax_backward's over the position's classes, whose sum of that gradient is
    // the one term (zeros add nothing; 0 + x is what the sum starting from zero gives).
    const T scale = reduction == Reduction::mean ? g[0] / total_weight.item<T>() : g[0];
#pragma omp parallel for if (positions * classes > cpu::kParallelGrain)
    for (int64_t p = 0; p < positions; ++p) {
      const int64_t cls = t[p];
      const bool counted = !(cls == ignore_index || cls < 0 || cls >= classes);
      T nll_grad = 0;
      if (counted) {
        const T row_scale = reduction == Reduction::none ? g[p] : scale;
        nll_grad = -(w ? w[cls] : T(1)) * row_scale;
      }
      const double total = 0.0 + static_cast<double>(nll_grad);
      T* row = lp + (p / inner) * classes * inner + p % inner;
      for (int64_t d = 0; d < classes; ++d) {
        const T dy = counted && d == cls ? nll_grad : T(0);
        row[d * inner] = static_cast<T>(dy - std::exp(static_cast<double>(row[d * inner])) * total);
      }
    }
  });
}

}  // namespace tessera::cpu
