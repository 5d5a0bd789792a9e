// The differentiable ops users call: ts::relu(x), ts::conv2d(x, w, b), ... Each records
// its backward when an input requires grad (see function.h). Tensor's methods and
// operators call these.
#pragma once

#include <optional>
#include <vector>

#include "tessera/tensor/native.h"
#include "tessera/tensor/size2.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

using native::Conv2dOptions;
using native::DropoutKey;
using native::Reduction;

// Element-wise, with broadcasting.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& base, const Tensor& exponent);
Tensor pow(const Tensor& base, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
// cond (bool) ? a : b
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Comparisons: bool tensors, not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Logical ops: bool results; any dtype is read as "nonzero" (NaN is true), as in PyTorch.
// Both operands of one dtype.
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);

// Reductions; empty dims reduce everything.
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

// Linear algebra.
Tensor matmul(const Tensor& a, const Tensor& b);
// x @ weight^T + bias (bias optional), as torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// Convolution and pooling, NCHW.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});
// stride defaults to kernel_size, as in PyTorch.
Tensor max_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                  Size2 padding = 0);

// Averages each plane down to `output_size` (PyTorch's bins), as F.adaptive_avg_pool2d.
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);

// Batch normalisation of an [N, C, ...] input, as F.batch_norm: in training, with the
// batch's statistics (and, when given, running_mean/running_var updated in place with
// `momentum`); otherwise with the running statistics. weight and bias are optional.
// Differentiable in input, weight and bias; the running statistics are not.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

// Softmax family and losses.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
struct NllLossOptions {
  Tensor weight{};  // per-class weights, optional
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
};
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const NllLossOptions& options = {});

// Dropout: in training, zeroes elements with probability p (keyed by position, see
// DropoutKey) and scales the rest by 1 / (1 - p); the identity otherwise.
Tensor dropout(const Tensor& x, double p, bool training, const DropoutKey& key = {});

// Joining.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Scaled dot-product attention, as PyTorch 2.x's F.scaled_dot_product_attention:
//   softmax(q k^T * scale + mask) v, with dropout on the weights,
// over q [..., L, E], k [..., S, E], v [..., S, Ev] (equal leading dims, e.g. [B, H, T, D]);
// the output is [..., L, Ev]. The CPU kernel is blocked (flash attention): it never stores
// the [L, S] weights, and its backward recomputes them. docs/api/attention.md has examples.
//
//   ts::Tensor y = ts::scaled_dot_product_attention(q, k, v, {.is_causal = true});
struct ScaledDotProductAttentionOptions {
  // Broadcasts to [..., L, S]: boolean (true: the key takes part) or q's dtype (added to the
  // scores). No gradient reaches a mask through the kernel; a floating mask that requires
  // grad takes the unblocked path, which materialises the weights.
  Tensor attn_mask{};
  // Applied whenever > 0, as in PyTorch (pass 0 in eval; nn::scaled_dot_product_attention
  // does that for you). Keyed by dropout_key exactly as dropout() of the weights would be.
  double dropout_p = 0.0;
  // Keys j <= i only (torch's tril, upper-left aligned when L != S); not with attn_mask.
  bool is_causal = false;
  std::optional<double> scale = std::nullopt;  // 1 / sqrt(E) when not given
  DropoutKey dropout_key{};
};
// A row whose keys are all masked gives 0 (PyTorch >= 2.5; earlier versions give NaN).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const ScaledDotProductAttentionOptions& options = {});

}  // namespace tessera
