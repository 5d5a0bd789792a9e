// Native kernels: the raw computations behind every op, with no autograd recording.
//
// Each function checks its operands (shapes, dtypes, devices). The ops a device computes
// are declared in the op table, native_ops.inc (included at the end): native_dispatch.cpp
// routes each to its CPU kernel in cpu/ (Eigen, OpenMP) or CUDA kernel in cuda/ (cuBLAS,
// cuDNN) by its operand's device. The rest, declared here, are built on those (views,
// copies, composites). Differentiable ops (autograd/functions/) call these for their
// forward and backward.
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

// Results of the ops with several outputs.
using TensorPair = std::tuple<Tensor, Tensor>;
using TensorTriple = std::tuple<Tensor, Tensor, Tensor>;

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
const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);

// Reductions (sum, amax and max_dim are in the op table).
Tensor argmax(const Tensor& self, int64_t dim, bool keepdim);
// Sums `self` down to `shape` (the inverse of broadcasting `shape` up to self's shape).
Tensor sum_to(const Tensor& self, const Shape& shape);

// The window max_pool2d slides: its size, stride and padding (nn::MaxPool2dOptions is the
// layer's, without the size).
struct MaxPool2dWindow {
  Size2 kernel = 2;
  Size2 stride = 2;
  Size2 padding = 0;
};

// Joining.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);

// ---- Masks, selection and sampling ----
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

// The op table: each op a device computes (TS_BACKEND_OP rows are the backends' own).
#define TS_NATIVE_OP(result, name, parameters, arguments, operand) result name parameters;
#define TS_PREPARED_OP(result, name, parameters, arguments, Call) \
  struct Call;                                                    \
  result name parameters;
#define TS_BACKEND_OP(result, name, parameters)
#include "tessera/tensor/native_ops.inc"

}  // namespace tessera::native
