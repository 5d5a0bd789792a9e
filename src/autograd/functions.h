// The differentiable ops users call: ts::relu(x), ts::conv2d(x, w, b), ... Each records
// its backward when an input requires grad (see function.h). Tensor's methods and
// operators call these.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "tessera/tensor/op_options.h"
#include "tessera/tensor/random.h"
#include "tessera/tensor/size2.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

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
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
// Each element limited to [min, max] (either bound may be left out, not both), as
// torch.clamp: min > max gives max everywhere; NaN stays NaN. The gradient passes where
// min <= x <= max, bounds included, as PyTorch's.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);
// x * sigmoid(x), as F.silu (nn::SiLU).
Tensor silu(const Tensor& x);
// Float classes, as torch.isnan/isinf/isfinite: bool of x's shape (integers are always
// finite). Never recorded.
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
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
// Whole tensors compared, as torch.equal and torch.allclose. equal: the same shape and
// every element equal. allclose: every |a - b| <= atol + rtol * |b| or a == b (equal
// infinities), a and b broadcast together; NaN is never close. Never recorded.
bool equal(const Tensor& a, const Tensor& b);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// The flat (row-major) index of x's first NaN or infinity, nullopt when every element is
// finite (torch.isfinite(x).all()) or x is not floating-point: for messages that name where
// a tensor stopped being finite. Never recorded.
std::optional<int64_t> first_non_finite(const Tensor& x);

// Reductions; empty dims reduce everything.
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
// The minimum family, as torch.amin / torch.min(dim) / torch.argmin (ties: the gradient
// shared evenly by amin, given to the first index by min, as in PyTorch).
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Variance and standard deviation over dims (all when empty) with Bessel's correction by
// default, as torch.var/std(dim, correction=1, keepdim): the sum of squared deviations
// from the mean divided by max(0, N - correction).
Tensor var(const Tensor& x, const Shape& dims = {}, double correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims = {}, double correction = 1, bool keepdim = false);
// log(sum(exp(x))) over dims without overflow, as torch.logsumexp.
Tensor logsumexp(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

// Linear algebra.
Tensor matmul(const Tensor& a, const Tensor& b);
// x @ weight^T + bias (bias optional), as torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// Convolution and pooling, NCHW.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv2dFuncOptions& options = {});
// stride defaults to kernel_size, as in PyTorch.
Tensor max_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                  Size2 padding = 0);

// 1-D convolution of [N, C, L] (or unbatched [C, L]) by weight [out, C, k], as F.conv1d.
struct Conv1dFuncOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
};
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv1dFuncOptions& options = {});
// The mean of each kernel_size window of [N, C, H, W] (or [C, H, W]), as F.avg_pool2d;
// stride defaults to kernel_size, padding counts as zeros unless count_include_pad is off.
struct AvgPool2dOptions {
  bool ceil_mode = false;  // true is not supported (throws)
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override{};
};
Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                  Size2 padding = 0, const AvgPool2dOptions& options = {});
// Normalises each sample's channels in num_groups groups over (channels of the group,
// positions) with the biased variance, then scales and shifts per channel (weight and bias
// [C], optional), as F.group_norm.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

// Averages each plane down to `output_size` (PyTorch's bins), as F.adaptive_avg_pool2d.
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);

// Batch normalisation of an [N, C, ...] input, as F.batch_norm: in training, with the
// batch's statistics (and, when given, running_mean/running_var updated in place with
// `momentum`); otherwise with the running statistics. weight and bias are optional.
// Differentiable in input, weight and bias; the running statistics are not.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

// Transformer layers, as torch.nn.functional's embedding, layer_norm, gelu and torch.erf.

// Options of embedding (and nn::Embedding), with PyTorch's names and defaults.
struct EmbeddingOptions {
  // This row gets no gradient (nn::Embedding also initialises it to zeros); negative
  // values count from the end, as in PyTorch.
  std::optional<int64_t> padding_idx{};
  // Rows looked up whose norm_type-norm exceeds max_norm are rescaled to it in place
  // (under no-grad, before the lookup), as torch.embedding_renorm_.
  std::optional<double> max_norm{};
  double norm_type = 2.0;
  // Scales each index's gradient by 1 / (its occurrences in the batch).
  bool scale_grad_by_freq = false;
  // Sparse gradients are not supported: true throws.
  bool sparse = false;
};
// Rows of weight [num_embeddings, dim] picked by int64 `input` (any shape): the output is
// [*input.shape, dim]. Differentiable in weight; the backward is a deterministic
// scatter-add (the same bits at any thread count).
Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingOptions& options = {});

// Normalises over the trailing dims `normalized_shape`, then scales by weight and shifts by
// bias (both optional, of normalized_shape): F.layer_norm.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// GELU: x * Phi(x) (approximate none) or its tanh approximation, as F.gelu.
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::none);
// approximate "none" or "tanh" (PyTorch's strings); anything else throws.
Tensor gelu(const Tensor& x, std::string_view approximate);
GeluApproximate gelu_approximate_from(std::string_view approximate);
std::string_view gelu_approximate_name(GeluApproximate approximate);
// The error function, element-wise (torch.erf).
Tensor erf(const Tensor& x);

// Softmax family and losses. softmax and log_softmax take any dim (negative from the end),
// contiguous or not.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Losses on class scores [C], [N, C] or [N, C, d1, ...] (classes in dim 1) and int64
// targets [], [N] or [N, d1, ...]; Reduction::none gives the target's shape. mean divides by
// the summed weight of the targets not equal to ignore_index (their count without weights),
// as PyTorch does.
struct NllLossOptions {
  Tensor weight{};  // per-class weights, optional
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
};
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});
struct CrossEntropyOptions {
  Tensor weight{};  // per-class weights, optional
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  // In [0, 1]: the target becomes (1 - s) one-hot + s / C uniform, computed as torch 1.13
  // does (the smoothing term weighted per class and normalised like the loss itself).
  double label_smoothing = 0.0;
};
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});

// Element-wise losses, as F.mse_loss, F.l1_loss, F.binary_cross_entropy and
// F.binary_cross_entropy_with_logits. input and target share one shape (PyTorch would
// broadcast them with a warning; here a mismatch is an error). binary_cross_entropy takes
// probabilities in [0, 1] (checked) and clamps each log at -100, as PyTorch; weight
// (optional) broadcasts to the input.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::mean);
struct BinaryCrossEntropyWithLogitsOptions {
  Tensor weight{};      // broadcasts to the input
  Tensor pos_weight{};  // the positives' weight per class (broadcasts along the last dim)
  Reduction reduction = Reduction::mean;
};
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BinaryCrossEntropyWithLogitsOptions& options = {});

// Dropout: in training, zeroes elements with probability p (keyed by position, see
// DropoutKey) and scales the rest by 1 / (1 - p); the identity otherwise. Without a key,
// each call in training draws one from the default generator (next_dropout_key), as
// F.dropout draws from torch.default_generator.
Tensor dropout(const Tensor& x, double p, bool training, const DropoutKey& key);
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);

// Joining.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// ---- Masks, indexing, selection and scans, with PyTorch's names and semantics ----
// x with `value` where the bool mask is true (mask and x broadcast together), as
// torch.masked_fill; differentiable in x (the filled places get no gradient).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// x with the order of its elements reversed along each of `dims` (negative dims wrap; a
// repeated dim is an error), as a new contiguous tensor, as torch.flip. Its backward flips
// the gradient over the same dims.
Tensor flip(const Tensor& x, const Shape& dims);
// The lower/upper triangle of the last two dims (j - i <= diagonal / >= diagonal kept).
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// Views of x along dim: pieces of split_size (the last one shorter), or of the given sizes
// (summing to the dim's size); chunk makes ceil(size / chunks)-long pieces, so it may give
// fewer than `chunks` of them, as torch.chunk. One backward node for all the pieces.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// The slices index[k] (int64, 1-D) of x along dim.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (likewise for every dim); out has
// index's shape. Its backward is a deterministic scatter_add.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// x with src[i][j][k] added at [i][index[i][j][k]][k] (dim 1), as Tensor.scatter_add;
// deterministic (the same bits on every device and thread count).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// The k largest (or smallest) along dim with their int64 indices. NaN counts as the
// largest value; equal values come in index order. Results are always sorted (sorted =
// false is accepted, as PyTorch allows any order then). Differentiable in the values.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);
// x sorted along dim with the int64 indices that sort it, as torch.sort: always stable
// (equal values keep their order; stable=false is accepted); NaN counts as the largest.
// Differentiable in the values. argsort gives the indices alone.
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// Running sums along dim; integer and bool inputs give int64.
Tensor cumsum(const Tensor& x, int64_t dim);
// int64 class indices (any shape) as int64 one-hot rows [*x.shape, num_classes], as
// F.one_hot; num_classes -1 takes one more than the largest index.
Tensor one_hot(const Tensor& x, int64_t num_classes = -1);
// Category indices drawn from the rows of probs ([C] or [N, C], non-negative weights, not
// necessarily normalised), as torch.multinomial: int64 [num_samples] or [N, num_samples].
// The draws come from `generator`, or else the default generator (random.h); they are
// counter-based, like every random op here, so they differ from PyTorch's while the
// distribution is the same: with replacement, sample s of row r inverts the row's CDF at
// uniform element r * num_samples + s; without, row r keeps the num_samples largest
// probs[r, c] / E[r, c] for exponential draws E (sequential sampling without replacement).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator& generator);
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);

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
  // does that for you). Keyed by dropout_key exactly as dropout() of the weights would be:
  // the key is the caller's (ts::next_dropout_key() draws one as F.dropout would).
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
