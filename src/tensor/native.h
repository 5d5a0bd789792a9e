// Native kernels: the raw computations behind every op, with no autograd recording.
//
// Each function checks its operands (shapes, dtypes, devices) and dispatches on their
// device: CPU kernels live in cpu/ (Eigen, OpenMP), CUDA kernels in cuda/ (cuBLAS, cuDNN).
// Differentiable ops (autograd/functions/) call these for their forward and backward.
#pragma once

#include <array>
#include <cstdint>
#include <tuple>
#include <vector>

#include "tessera/tensor/op_options.h"
#include "tessera/tensor/size2.h"
#include "tessera/tensor/tensor.h"

namespace tessera::native {

// The ops' option types are public (op_options.h; GeluApproximate stays outside native:: so
// that a call gelu(x, approximate) finds tessera::gelu only).
using ::tessera::Conv2dFuncOptions;
using ::tessera::DropoutKey;
using ::tessera::Reduction;

// Creation.
Tensor empty(const Shape& shape, DType dtype, Device device);
Tensor empty_like(const Tensor& like);
Tensor empty_pinned(const Shape& shape, DType dtype);  // host memory from pinned_host_allocator()
Tensor zeros(const Shape& shape, DType dtype, Device device);
Tensor full(const Shape& shape, double value, DType dtype, Device device);
Tensor arange(double start, double end, double step, DType dtype, Device device);
Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device);
void uniform_(Tensor& self, double low, double high, uint64_t seed, uint64_t stream, uint64_t first);
void normal_(Tensor& self, double mean, double std, uint64_t seed, uint64_t stream, uint64_t first);
void randint_(Tensor& self, int64_t low, int64_t high, uint64_t seed, uint64_t stream, uint64_t first);

// Views: new TensorImpls over the same storage.
Tensor as_strided(const Tensor& self, const Shape& sizes, const Shape& strides, int64_t offset);
Tensor view(const Tensor& self, const Shape& shape);  // shape may hold one -1
Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& self, const Shape& dims);
Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& self, int64_t dim, int64_t index);
Tensor squeeze(const Tensor& self, int64_t dim);
Tensor unsqueeze(const Tensor& self, int64_t dim);
Tensor expand(const Tensor& self, const Shape& shape);
// The shape `shape` with its -1 resolved against `numel`; throws naming both shapes.
Shape infer_shape(const Shape& shape, int64_t numel, const Shape& from);
// True when `self` can be viewed as `shape` without copying.
bool viewable(const Tensor& self, const Shape& shape);

// Copies and conversions.
void copy_(Tensor& dst, const Tensor& src);  // broadcasts src, converts dtype, crosses devices
void copy_on_device_(Tensor& dst, const Tensor& src);  // both on one device: the backend's copy
void fill_(Tensor& self, double value);
Tensor contiguous(const Tensor& self);  // self when already contiguous
Tensor clone(const Tensor& self);
Tensor to_dtype(const Tensor& self, DType dtype);
Tensor to_device(const Tensor& self, Device device);
Tensor pin_memory(const Tensor& self);  // a pinned copy (self when already pinned)

// Element-wise ops with NumPy broadcasting. Comparisons and the logical ops give bool (the
// logical ops read any dtype as "nonzero"); arithmetic is not defined on bool.
enum class UnaryOp { neg, abs, exp, log, sqrt, relu, sigmoid, tanh, sign, reciprocal, sin, cos };
enum class BinaryOp { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge, logical_and, logical_or,
                      logical_xor };
Tensor unary(UnaryOp op, const Tensor& self);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor binary(BinaryOp op, const Tensor& a, double b);
Tensor binary(BinaryOp op, double a, const Tensor& b);
// a = a op b, with b broadcast to a's shape.
void binary_(BinaryOp op, Tensor& a, const Tensor& b);
void binary_(BinaryOp op, Tensor& a, double b);
// self += alpha * other
void add_scaled_(Tensor& self, const Tensor& other, double alpha);
// cond ? a : b, with broadcasting; cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// grad * (input > 0): ReLU's backward in one pass.
Tensor relu_backward(const Tensor& grad, const Tensor& input);
// The same, written into grad (autograd uses it when nothing else holds the gradient).
void relu_backward_(Tensor& grad, const Tensor& input);
const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);

// Reductions. Empty `dims` reduces every dim.
Tensor sum(const Tensor& self, const Shape& dims, bool keepdim);
Tensor amax(const Tensor& self, const Shape& dims, bool keepdim);
std::tuple<Tensor, Tensor> max_dim(const Tensor& self, int64_t dim, bool keepdim);  // values, int64 indices
Tensor argmax(const Tensor& self, int64_t dim, bool keepdim);
// Sums `self` down to `shape` (the inverse of broadcasting `shape` up to self's shape).
Tensor sum_to(const Tensor& self, const Shape& shape);

// Matrix products. matmul: 1-D, 2-D and batched (batch dims broadcast), as torch.matmul.
Tensor matmul(const Tensor& a, const Tensor& b);
// x @ weight^T + bias over the last dim of x; bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// Convolution and pooling (NCHW).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dFuncOptions& options);
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape,
                             const Conv2dFuncOptions& options);
Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& input, const Shape& weight_shape,
                              const Conv2dFuncOptions& options);
// All three gradients (input, weight, bias) in one pass over grad_output; output_mask
// says which are wanted (the others come back undefined), as torch's convolution_backward.
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                                   const Conv2dFuncOptions& options, std::array<bool, 3> output_mask);

// The window max_pool2d slides: its size, stride and padding (nn::MaxPool2dOptions is the
// layer's, without the size).
struct MaxPool2dWindow {
  Size2 kernel = 2;
  Size2 stride = 2;
  Size2 padding = 0;
};
// Output and, for each output element, the flat index (h * W + w) of the chosen input.
std::tuple<Tensor, Tensor> max_pool2d(const Tensor& input, const MaxPool2dWindow& options);
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices, const Shape& input_shape);

// Adaptive average pooling (NCHW): output cell (i, j) averages input rows
// [floor(i * H / oh), ceil((i + 1) * H / oh)) and the matching columns, as PyTorch's bins.
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape);

// Batch normalisation of an [N, C, ...] input over every dim but C, as torch's
// native_batch_norm. Returns (output, save_mean, save_invstd), each statistic [C].
// Training: normalises with the batch mean and biased variance and, where the running
// statistics are defined, updates them in place with the unbiased variance:
//   running_mean = momentum * mean + (1 - momentum) * running_mean
//   running_var  = momentum * var * n / (n - 1) + (1 - momentum) * running_var
// Eval: normalises with the running statistics (save_* then hold running_mean and
// 1 / sqrt(running_var + eps)). weight and bias may be undefined (no affine transform).
std::tuple<Tensor, Tensor, Tensor> batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                              const Tensor& running_mean, const Tensor& running_var,
                                              bool training, double momentum, double eps);
// Gradients with respect to (input, weight, bias) where output_mask asks for them; save_*
// come from batch_norm. In eval the statistics are constants, so the input gradient is
// grad_output * weight * invstd.
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                                       const Tensor& weight, const Tensor& save_mean,
                                                       const Tensor& save_invstd, bool training,
                                                       std::array<bool, 3> output_mask);

// ---- Transformer layers: embedding, layer normalisation, GELU (nn::Embedding, ...) ----

// Rows of `weight` [num_embeddings, dim] picked by the int64 `indices` (any shape): the
// output is [*indices.shape, dim]. An index outside [0, num_embeddings) is an IndexError
// naming it and its position.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// The weight's gradient [num_weights, dim]: the rows of grad_output [*indices.shape, dim]
// summed per index, each sum taken in order of position (the same bits on every run, at
// any thread count). padding_idx (when >= 0) gets a zero row; with scale_grad_by_freq each
// term is scaled by 1 / (occurrences of its index), as torch's embedding_dense_backward.
Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx, bool scale_grad_by_freq);
// torch.embedding_renorm_: each row of `weight` named in `indices` whose norm_type-norm
// exceeds max_norm is scaled, in place, by max_norm / (norm + 1e-7).
void embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type);

// Layer normalisation over the trailing dims `normalized_shape` of `input`, viewed as
// [M, N] (N = numel(normalized_shape)): y = (x - mean) * rstd * weight + bias, with the
// biased variance and rstd = 1 / sqrt(var + eps). weight and bias ([normalized_shape])
// may be undefined. Returns (output, mean [M], rstd [M]); mean and rstd are float32 for
// bfloat16 input, else of the input's dtype.
std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& input, const Shape& normalized_shape,
                                              const Tensor& weight, const Tensor& bias, double eps);
// Gradients with respect to (input, weight, bias) where output_mask asks for them, from
// the forward's mean and rstd.
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output, const Tensor& input,
                                                       const Shape& normalized_shape, const Tensor& mean,
                                                       const Tensor& rstd, const Tensor& weight,
                                                       std::array<bool, 3> output_mask);

// GELU, as torch.nn.functional.gelu (GeluApproximate is declared above, outside native::).
Tensor gelu(const Tensor& input, GeluApproximate approximate);
Tensor gelu_backward(const Tensor& grad_output, const Tensor& input, GeluApproximate approximate);
// The error function, element-wise.
Tensor erf(const Tensor& input);

// Softmax family along `dim`, and the negative log-likelihood loss.
Tensor log_softmax(const Tensor& self, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);
Tensor softmax(const Tensor& self, int64_t dim);
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);
// log_probs [N, C], target int64 [N], weight [C] or undefined. Returns (loss, total_weight).
std::tuple<Tensor, Tensor> nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                                    Reduction reduction, int64_t ignore_index);
Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& log_probs, const Tensor& target,
                         const Tensor& weight, Reduction reduction, int64_t ignore_index,
                         const Tensor& total_weight);

// Dropout keyed by position (DropoutKey, op_options.h). Returns the scaled output and the
// uint8 keep-mask.
std::tuple<Tensor, Tensor> dropout(const Tensor& input, double p, const DropoutKey& key);
Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p);

// Joining.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);

// ---- Masks, indexing, selection and scans ----
// self with `value` where the bool `mask` is true; the two broadcast together, as
// torch.masked_fill (composed from where, on every device).
Tensor masked_fill(const Tensor& self, const Tensor& mask, double value);
// The lower (tril) or upper (triu) triangle of the last two dims: element (i, j) is kept
// where j - i <= diagonal (tril) or j - i >= diagonal (triu), zero elsewhere. Any dtype.
Tensor tril(const Tensor& self, int64_t diagonal);
Tensor triu(const Tensor& self, int64_t diagonal);
// Which triangle a backend's one `triangle` kernel keeps (tril: lower, triu: upper).
enum class Triangle { lower, upper };
// Views of consecutive pieces along dim with these lengths (which must sum to its size).
std::vector<Tensor> split_with_sizes(const Tensor& self, const std::vector<int64_t>& sizes, int64_t dim);
// The slices index[0], index[1], ... of self along dim; index int64, 1-D, in [0, size).
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index);
// self[.., index[k], ..] += source[.., k, ..] along dim, in place. Deterministic: every
// element adds its terms in the order of k, on every device and thread count.
void index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);
// out[p] = self[p with p[dim] replaced by index[p]], for every p of index's shape.
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index);
// self[p with p[dim] replaced by index[p]] += src[p] for every p of index's shape, in place;
// deterministic as index_add_ (each line along dim adds in order).
void scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// The k largest (largest = false: smallest) elements along dim, in order, and their int64
// positions. NaN is larger than every number; equal values come in the order of their
// positions (PyTorch leaves ties unspecified), the same on every device.
std::tuple<Tensor, Tensor> topk(const Tensor& self, int64_t k, int64_t dim, bool largest);
// Running sums along dim (reverse: from the last element back), accumulated in double for
// floating dtypes as PyTorch's CPU kernel does; integer and bool inputs give int64.
Tensor cumsum(const Tensor& self, int64_t dim, bool reverse = false);
// For each value, how many elements of its row of `sorted` are < it (right: <=), as
// torch.searchsorted: sorted [..., C] with values [..., S] of the same leading dims, or a
// 1-D sorted for values of any shape. int64, of values' shape.
Tensor searchsorted(const Tensor& sorted, const Tensor& values, bool right);
// num_samples category indices per row of probs ([C] or [N, C]: non-negative, finite, each
// row with a positive sum), int64 [num_samples] or [N, num_samples]. With replacement,
// sample s of row r inverts the row's CDF at uniform element r * num_samples + s of
// Philox(seed, stream, first + ...); without, row r takes the num_samples largest
// probs[r, c] / E[r, c] for exponential draws E from elements r * C + c (which is
// sequential sampling without replacement; PyTorch's CPU kernel uses the same race).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed, uint64_t stream,
                   uint64_t first);

// Scaled dot-product attention (attention_geometry.h checks the operands): q [..., L, E],
// k [..., S, E], v [..., S, Ev] with equal leading dims; output [..., L, Ev] =
// dropout(softmax(scale * q k^T + mask)) v, and the log-sum-exp of each row of the masked,
// scaled scores [..., L] (-inf for a row with no key left, whose output is 0). attn_mask
// (optional) broadcasts to [..., L, S]: boolean (true: the key takes part) or q's dtype
// (added to the scores). is_causal keeps keys j <= i (upper-left aligned, as torch's tril).
// Dropout drops weight (..., i, j) exactly as dropout() would drop it in the weights tensor
// [..., L, S] under dropout_key, and scales the kept ones by 1 / (1 - p).
struct AttentionOptions {
  Tensor attn_mask{};
  double dropout_p = 0.0;
  bool is_causal = false;
  double scale = 1.0;  // resolved by the caller (PyTorch's default is 1 / sqrt(E))
  DropoutKey dropout_key{};
  // Tile sizes of the blocked CPU kernel; 0 takes its defaults (tests set small ones to
  // cover several tiles with small tensors). The result does not depend on them beyond rounding.
  int64_t query_block = 0;
  int64_t key_block = 0;
};
std::tuple<Tensor, Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                        const AttentionOptions& options);
// Gradients (dq, dk, dv) from the forward's output and log-sum-exp; none for attn_mask.
std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(const Tensor& grad_output, const Tensor& q,
                                                                         const Tensor& k, const Tensor& v,
                                                                         const Tensor& output,
                                                                         const Tensor& logsumexp,
                                                                         const AttentionOptions& options);
// The checked operands the backends' attention kernels take (attention_geometry.h).
struct AttentionOperands;
struct AttentionBackwardOperands;

// ---- Cross entropy's backward in the log-probabilities' memory (activation memory, issue 13) ----
// log_softmax_backward(nll_loss_backward(grad_output, log_probs, target, weight, reduction,
// ignore_index, total_weight), log_probs, class dim), the same bits, written over log_probs
// (contiguous; the caller gives it up): cross entropy's gradient with respect to the scores
// in one [N, C] buffer instead of three. On the CPU one pass in place; CUDA composes the two
// kernels meanwhile (same values, no memory saved yet).
void cross_entropy_backward_(Tensor& log_probs, const Tensor& grad_output, const Tensor& target,
                             const Tensor& weight, Reduction reduction, int64_t ignore_index,
                             const Tensor& total_weight);

}  // namespace tessera::native
