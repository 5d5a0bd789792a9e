// Operand checks and output geometry shared by every backend's kernels (cpu/, cuda/).
//
// An op's shape logic lives here once; a backend adds only its device check and the
// arithmetic (Caffe's cuDNN layers override only the device-specific parts the same way).
// Every check throws with the op's name and the shapes or dtypes involved.
#pragma once

#include <algorithm>
#include <array>
#include <string_view>
#include <vector>

#include "tessera/tensor/device_check.h"
#include "tessera/tensor/index_errors.h"
#include "tessera/tensor/native.h"

namespace tessera::native {

// contiguous(t), or an undefined tensor for an undefined t (an optional weight or bias).
inline Tensor contiguous_if_defined(const Tensor& t) { return t.defined() ? contiguous(t) : Tensor(); }

// What every backend's normalisation forward (batch_norm, layer_norm) works on: its
// operands made contiguous (weight and bias may be undefined), the output, shaped as the
// input, and the two statistics it saves for backward (the mean and 1 / std of each of
// `groups` channels or rows), of dtype `statistics`.
struct NormalizationTensors {
  Tensor input, weight, bias;
  Tensor output, mean, inverse_std;
};

inline NormalizationTensors normalization_tensors(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                                  int64_t groups, DType statistics) {
  return {contiguous(input),
          contiguous_if_defined(weight),
          contiguous_if_defined(bias),
          empty(input.sizes(), input.dtype(), input.device()),
          empty({groups}, statistics, input.device()),
          empty({groups}, statistics, input.device())};
}

// ---- Element-wise ----

// Comparisons and logical ops: their result is bool, and they have no in-place form.
inline bool gives_bool(BinaryOp op) { return op >= BinaryOp::eq; }

inline void check_binary_operands(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_defined(a, op_name(op), "first operand");
  check_defined(b, op_name(op), "second operand");
  check_same_device(a, b, op_name(op));
  check_same_dtype(a, b, op_name(op));
  TS_CHECK(op != BinaryOp::pow || is_floating(a.dtype()), DTypeError, "pow: expected floating tensors, got ",
           dtype_name(a.dtype()));
  TS_CHECK(gives_bool(op) || a.dtype() != DType::boolean, DTypeError, op_name(op),
           ": arithmetic is not defined on bool tensors; use logical_and (&), logical_or (|), logical_xor (^), "
           "or convert with .to(DType) first");
}

// Integer tensors have neg, abs and sign; the rest need a floating dtype. bool has none
// (PyTorch refuses -mask too).
inline void check_unary_dtype(UnaryOp op, const Tensor& self) {
  TS_CHECK(self.dtype() != DType::boolean, DTypeError, op_name(op),
           ": not defined on bool tensors; logical_not (~) inverts a mask");
  bool integer_ok = op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::sign;
  TS_CHECK(integer_ok || is_floating(self.dtype()), DTypeError, op_name(op), ": expected a floating tensor, got ",
           dtype_name(self.dtype()));
}

// The shape `b` broadcasts into for an in-place `a op= b`; must be a's own shape.
inline void check_in_place_shape(const Tensor& a, const Tensor& b, std::string_view op) {
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op);
  TS_CHECK(shape == a.sizes(), ShapeError, op, "_: operand of shape ", shape_str(b.sizes()),
           " does not broadcast to the in-place shape ", shape_str(a.sizes()));
}

inline Shape where_shape(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined(cond, "where", "condition");
  check_defined(a, "where", "first operand");
  check_defined(b, "where", "second operand");
  check_same_device(a, b, "where");
  check_same_dtype(a, b, "where");
  check_same_device(cond, a, "where");
  TS_CHECK(cond.dtype() == DType::boolean, DTypeError, "where: condition must be bool, got ", dtype_name(cond.dtype()),
           " of shape ", shape_str(cond.sizes()), " (a comparison gives bool; or convert with .to(DType::boolean))");
  return broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
}

inline void check_relu_backward_operands(const Tensor& grad, const Tensor& input) {
  check_binary_operands(BinaryOp::mul, grad, input);
  TS_CHECK(grad.sizes() == input.sizes(), ShapeError, "relu_backward: gradient shape ", shape_str(grad.sizes()),
           " differs from input shape ", shape_str(input.sizes()));
}

// ---- Reductions ----

struct ReductionPlan {
  std::vector<bool> reduced;  // per input dim
  Shape out_shape;            // with keepdim applied
  Shape kept_shape;           // kept dims only
  int64_t outer = 1, inner = 1;
};

inline ReductionPlan plan_reduction(const Tensor& self, const Shape& dims, bool keepdim, std::string_view op) {
  ReductionPlan plan;
  plan.reduced.assign(self.dim(), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, self.dim(), op);
    TS_CHECK(!plan.reduced[w] || dims.empty(), ValueError, op, ": dim ", w, " appears twice in ", shape_str(dims));
    if (self.dim() > 0) plan.reduced[w] = true;
  }
  for (int64_t d = 0; d < self.dim(); ++d) {
    int64_t size = self.sizes()[d];
    if (plan.reduced[d]) {
      plan.inner *= size;
      if (keepdim) plan.out_shape.push_back(1);
    } else {
      plan.outer *= size;
      plan.out_shape.push_back(size);
      plan.kept_shape.push_back(size);
    }
  }
  return plan;
}

// max and amax order numbers; a bool mask has sum (a count) instead.
inline void check_max_dtype(const Tensor& self, const char* op) {
  TS_CHECK(self.dtype() != DType::boolean, DTypeError, op, ": not defined on bool tensors (shape ",
           shape_str(self.sizes()), "); sum() counts the true elements");
}

// The plan of amax and max: a defined, ordered input and no empty reduced dim (a max of
// nothing has no value).
inline ReductionPlan plan_max(const Tensor& self, const Shape& dims, bool keepdim, const char* op) {
  check_defined(self, op);
  check_max_dtype(self, op);
  ReductionPlan plan = plan_reduction(self, dims, keepdim, op);
  TS_CHECK(plan.inner > 0, ValueError, op, ": cannot reduce over an empty dimension of shape ",
           shape_str(self.sizes()));
  return plan;
}

// What the reduction kernels take, checked and allocated once for every backend by the
// dispatch layer (the op table's TS_PREPARED_OP rows): the input, its plan and the
// outputs. A backend runs only when there is something to reduce (has_work).
struct ReductionCall {
  Tensor self;
  ReductionPlan plan;
  Tensor values;
  Tensor indices;  // max_dim's int64 positions; undefined for sum and amax

  Device device() const { return self.device(); }
  bool has_work() const { return plan.outer > 0 && plan.inner > 0; }
};

// sum: integers (and bool) are summed in int64, as PyTorch sums them; an empty sum is 0.
struct SumCall : ReductionCall {
  static SumCall prepare(const Tensor& self, const Shape& dims, bool keepdim) {
    check_defined(self, "sum");
    SumCall call;
    call.self = is_floating(self.dtype()) ? self : to_dtype(self, DType::i64);
    call.plan = plan_reduction(self, dims, keepdim, "sum");
    call.values = empty(call.plan.out_shape, call.self.dtype(), self.device());
    if (call.plan.inner == 0) fill_(call.values, 0.0);
    return call;
  }
  Tensor result() const { return values; }
};

struct AmaxCall : ReductionCall {
  static AmaxCall prepare(const Tensor& self, const Shape& dims, bool keepdim) {
    AmaxCall call;
    call.self = self;
    call.plan = plan_max(self, dims, keepdim, "amax");
    call.values = empty(call.plan.out_shape, self.dtype(), self.device());
    return call;
  }
  Tensor result() const { return values; }
};

// max(dim): the values and their int64 positions along dim (the first of equal values).
struct MaxDimCall : ReductionCall {
  static MaxDimCall prepare(const Tensor& self, int64_t dim, bool keepdim) {
    MaxDimCall call;
    call.self = self;
    call.plan = plan_max(self, {wrap_dim(dim, self.dim(), "max")}, keepdim, "max");
    call.values = empty(call.plan.out_shape, self.dtype(), self.device());
    call.indices = empty(call.plan.out_shape, DType::i64, self.device());
    return call;
  }
  TensorPair result() const { return {values, indices}; }
};

// `self` laid out as a contiguous [outer, inner] matrix (reduced dims inner).
inline Tensor as_outer_inner(const Tensor& self, const ReductionPlan& plan) {
  Shape order;
  for (int64_t d = 0; d < self.dim(); ++d) if (!plan.reduced[d]) order.push_back(d);
  for (int64_t d = 0; d < self.dim(); ++d) if (plan.reduced[d]) order.push_back(d);
  return contiguous(permute(self, order));
}

// ---- Matrix products ----

inline void check_matmul_operands(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "first operand");
  check_defined(b, op, "second operand");
  check_same_device(a, b, op);
  check_same_dtype(a, b, op);
  TS_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, op, ": both operands need at least one dimension, got ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()));
}

// torch.matmul's shapes: vectors promoted to matrices, batch dims broadcast. The backend
// multiplies a3[i] (m x k) by b3[i] (k x n) into out3[i] for each of `batches`, then
// result() drops the dims the promotion added.
struct MatmulPlan {
  Tensor a3, b3;     // operands expanded to [batch..., m, k] and [batch..., k, n]
  Tensor out;        // [batch..., m, n], allocated
  int64_t batches = 1, m = 0, k = 0, n = 0;
  bool a_vector = false, b_vector = false;

  Tensor result() const {
    if (a_vector && b_vector) return view(out, {});
    if (a_vector) return squeeze(out, -2);
    if (b_vector) return squeeze(out, -1);
    return out;
  }
};

inline MatmulPlan plan_matmul(const Tensor& a_in, const Tensor& b_in) {
  check_matmul_operands(a_in, b_in, "matmul");
  MatmulPlan plan;
  plan.a_vector = a_in.dim() == 1;
  plan.b_vector = b_in.dim() == 1;
  Tensor a = plan.a_vector ? unsqueeze(a_in, 0) : a_in;
  Tensor b = plan.b_vector ? unsqueeze(b_in, 1) : b_in;
  plan.m = a.size(-2);
  plan.k = a.size(-1);
  plan.n = b.size(-1);
  TS_CHECK(b.size(-2) == plan.k, ShapeError, "matmul: shapes ", shape_str(a_in.sizes()), " and ",
           shape_str(b_in.sizes()), " cannot be multiplied (", plan.k, " != ", b.size(-2), ")");
  Shape batch_a(a.sizes().begin(), a.sizes().end() - 2), batch_b(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape out_shape = batch, a_shape = batch, b_shape = batch;
  out_shape.insert(out_shape.end(), {plan.m, plan.n});
  a_shape.insert(a_shape.end(), {plan.m, plan.k});
  b_shape.insert(b_shape.end(), {plan.k, plan.n});
  plan.out = empty(out_shape, a.dtype(), a.device());
  plan.a3 = expand(a, a_shape);
  plan.b3 = expand(b, b_shape);
  plan.batches = shape_numel(batch);
  return plan;
}

// Checks linear's operands; returns the output shape (x's with the last dim out_features).
inline Shape linear_shape(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_matmul_operands(x, weight, "linear");
  TS_CHECK(weight.dim() == 2, ShapeError, "linear: weight must be 2-D [out_features, in_features], got ",
           shape_str(weight.sizes()));
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  TS_CHECK(x.size(-1) == in_features, ShapeError, "linear: input of shape ", shape_str(x.sizes()),
           " does not match weight of shape ", shape_str(weight.sizes()), " (", x.size(-1), " != ", in_features, ")");
  if (bias.defined()) {
    check_same_dtype(x, bias, "linear");
    check_same_device(x, bias, "linear");
    TS_CHECK(bias.dim() == 1 && bias.size(0) == out_features, ShapeError, "linear: bias of shape ",
             shape_str(bias.sizes()), " does not match weight of shape ", shape_str(weight.sizes()));
  }
  Shape out_shape = x.sizes();
  out_shape.back() = out_features;
  return out_shape;
}

// ---- Convolution ----

struct ConvGeometry {
  int64_t batch, channels, height, width;
  int64_t out_channels, kernel_h, kernel_w;
  int64_t out_h, out_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int64_t patch() const { return channels * kernel_h * kernel_w; }
  int64_t positions() const { return out_h * out_w; }
};

inline ConvGeometry conv_geometry(const Shape& input, const Shape& weight, const Conv2dFuncOptions& o) {
  TS_CHECK(input.size() == 4, ShapeError, "conv2d: expected a 4-D input [N, C, H, W], got ", shape_str(input));
  TS_CHECK(weight.size() == 4, ShapeError, "conv2d: expected a 4-D weight [O, C, kh, kw], got ", shape_str(weight));
  TS_CHECK(input[1] == weight[1], ShapeError, "conv2d: input of shape ", shape_str(input), " has ", input[1],
           " channels but weight of shape ", shape_str(weight), " expects ", weight[1]);
  for (int i = 0; i < 2; ++i) {
    TS_CHECK(o.stride[i] > 0 && o.dilation[i] > 0 && o.padding[i] >= 0, ValueError,
             "conv2d: stride and dilation must be positive and padding non-negative");
  }
  ConvGeometry g{input[0], input[1], input[2], input[3], weight[0], weight[2], weight[3], 0, 0,
                 o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1]};
  g.out_h = (g.height + 2 * g.pad_h - g.dil_h * (g.kernel_h - 1) - 1) / g.stride_h + 1;
  g.out_w = (g.width + 2 * g.pad_w - g.dil_w * (g.kernel_w - 1) - 1) / g.stride_w + 1;
  TS_CHECK(g.out_h > 0 && g.out_w > 0, ShapeError, "conv2d: input of shape ", shape_str(input),
           " is too small for a kernel of shape ", shape_str(weight), " with this padding and dilation");
  return g;
}

inline void check_conv_operands(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "first operand");
  check_defined(b, op, "second operand");
  check_same_device(a, b, op);
  check_same_dtype(a, b, op);
}

inline void check_conv_bias(const Tensor& input, const Tensor& bias, const ConvGeometry& g) {
  if (!bias.defined()) return;
  check_same_dtype(input, bias, "conv2d");
  check_same_device(input, bias, "conv2d");
  TS_CHECK(bias.dim() == 1 && bias.size(0) == g.out_channels, ShapeError, "conv2d: bias of shape ",
           shape_str(bias.sizes()), " does not match ", g.out_channels, " output channels");
}

// What the conv2d kernels take (a TS_PREPARED_OP): the operands made contiguous (bias may
// be undefined), their geometry and the output [N, O, oh, ow], allocated.
struct Conv2dCall {
  Tensor input, weight, bias;
  Conv2dFuncOptions options;
  ConvGeometry geometry;
  Tensor out;

  static Conv2dCall prepare(const Tensor& input, const Tensor& weight, const Tensor& bias,
                            const Conv2dFuncOptions& options) {
    check_conv_operands(input, weight, "conv2d");
    Conv2dCall call;
    call.geometry = conv_geometry(input.sizes(), weight.sizes(), options);
    check_conv_bias(input, bias, call.geometry);
    call.input = contiguous(input);
    call.weight = contiguous(weight);
    call.bias = contiguous_if_defined(bias);
    call.options = options;
    const ConvGeometry& g = call.geometry;
    call.out = empty({g.batch, g.out_channels, g.out_h, g.out_w}, input.dtype(), input.device());
    return call;
  }
  Device device() const { return input.device(); }
  bool has_work() const { return out.numel() > 0; }
  Tensor result() const { return out; }
};

// ---- Pooling ----

struct PoolGeometry {
  int64_t planes, height, width, out_h, out_w;
};

inline PoolGeometry max_pool2d_geometry(const Tensor& input, const MaxPool2dWindow& o) {
  TS_CHECK(input.dim() == 4, ShapeError, "max_pool2d: expected a 4-D input [N, C, H, W], got ",
           shape_str(input.sizes()));
  for (int i = 0; i < 2; ++i) {
    TS_CHECK(o.kernel[i] > 0 && o.stride[i] > 0, ValueError, "max_pool2d: kernel and stride must be positive");
    TS_CHECK(o.padding[i] >= 0 && o.padding[i] * 2 <= o.kernel[i], ValueError,
             "max_pool2d: padding must be at most half the kernel size, got padding ", o.padding[i],
             " for kernel ", o.kernel[i]);
  }
  PoolGeometry g{input.size(0) * input.size(1), input.size(2), input.size(3), 0, 0};
  g.out_h = (g.height + 2 * o.padding[0] - o.kernel[0]) / o.stride[0] + 1;
  g.out_w = (g.width + 2 * o.padding[1] - o.kernel[1]) / o.stride[1] + 1;
  TS_CHECK(g.out_h > 0 && g.out_w > 0, ShapeError, "max_pool2d: input of shape ", shape_str(input.sizes()),
           " is smaller than the kernel");
  return g;
}

inline void check_max_pool2d_backward_operands(const Tensor& grad_output, const Tensor& indices,
                                               const Shape& input_shape) {
  check_defined(grad_output, "max_pool2d_backward");
  check_defined(indices, "max_pool2d_backward", "indices");
  check_same_device(grad_output, indices, "max_pool2d_backward");
  TS_CHECK(grad_output.sizes() == indices.sizes(), ShapeError, "max_pool2d_backward: gradient of shape ",
           shape_str(grad_output.sizes()), " does not match indices of shape ", shape_str(indices.sizes()));
  TS_CHECK(indices.dtype() == DType::i64, DTypeError, "max_pool2d_backward: indices must be int64, got ",
           dtype_name(indices.dtype()));
  TS_CHECK(input_shape.size() == 4 && grad_output.dim() == 4 && input_shape[0] == grad_output.size(0) &&
               input_shape[1] == grad_output.size(1),
           ShapeError, "max_pool2d_backward: gradient of shape ", shape_str(grad_output.sizes()),
           " does not belong to an input of shape ", shape_str(input_shape));
}

// ---- Softmax and losses ----

// A contiguous tensor addressed along one dim as [outer, size, inner]: element (o, d, i)
// sits at (o * size + d) * inner + i. A 0-d tensor is [1, 1, 1].
struct AxisLayout {
  int64_t outer = 1, size = 1, inner = 1;
};

inline AxisLayout axis_layout(const Shape& shape, int64_t dim, const char* op) {
  AxisLayout layout;
  if (shape.empty()) return layout;
  const int64_t ndim = static_cast<int64_t>(shape.size());
  int64_t d = wrap_dim(dim, ndim, op);
  for (int64_t i = 0; i < d; ++i) layout.outer *= shape[i];
  layout.size = shape[d];
  for (int64_t i = d + 1; i < ndim; ++i) layout.inner *= shape[i];
  return layout;
}

// The softmax dim, addressed as an AxisLayout.
using SoftmaxLayout = AxisLayout;

inline SoftmaxLayout softmax_layout(const Tensor& self, int64_t dim, const char* op) {
  return axis_layout(self.sizes(), dim, op);
}

inline void check_softmax_backward_operands(const Tensor& grad, const Tensor& output, const char* op) {
  check_defined(grad, op);
  check_defined(output, op, "output");
  check_same_device(grad, output, op);
  check_same_dtype(grad, output, op);
  TS_CHECK(grad.sizes() == output.sizes(), ShapeError, op, ": gradient of shape ", shape_str(grad.sizes()),
           " does not match output of shape ", shape_str(output.sizes()));
}

// nll_loss's operands as PyTorch takes them: input [C] with a 0-d target, [N, C] with
// target [N], or [N, C, d1, ...] with target [N, d1, ...]. Element (n, c, i) of the input
// (i over d1...) sits at (n * classes + c) * inner + i; target position p = n * inner + i.
struct NllLayout {
  int64_t batch = 1, classes = 0, inner = 1;
  int64_t positions() const { return batch * inner; }
};

inline NllLayout check_nll_operands(const Tensor& log_probs, const Tensor& target, const Tensor& weight) {
  check_defined(log_probs, "nll_loss", "input");
  check_defined(target, "nll_loss", "target");
  check_same_device(log_probs, target, "nll_loss");
  TS_CHECK(log_probs.dim() >= 1, ShapeError, "nll_loss: expected input of shape [C], [N, C] or [N, C, d1, ...], got ",
           shape_str(log_probs.sizes()));
  TS_CHECK(target.dtype() == DType::i64, DTypeError, "nll_loss: target must be int64, got ",
           dtype_name(target.dtype()));
  Shape expected_target;
  if (log_probs.dim() >= 2) {
    expected_target.push_back(log_probs.size(0));
    expected_target.insert(expected_target.end(), log_probs.sizes().begin() + 2, log_probs.sizes().end());
  }
  TS_CHECK(target.sizes() == expected_target, ShapeError, "nll_loss: target of shape ", shape_str(target.sizes()),
           " does not match input of shape ", shape_str(log_probs.sizes()), " (expected target shape ",
           shape_str(expected_target), ")");
  NllLayout layout;
  layout.classes = log_probs.size(log_probs.dim() == 1 ? 0 : 1);
  if (log_probs.dim() >= 2) layout.batch = log_probs.size(0);
  for (int64_t d = 2; d < log_probs.dim(); ++d) layout.inner *= log_probs.size(d);
  if (weight.defined()) {
    check_same_dtype(log_probs, weight, "nll_loss");
    check_same_device(log_probs, weight, "nll_loss");
    TS_CHECK(weight.dim() == 1 && weight.size(0) == layout.classes, ShapeError, "nll_loss: weight of shape ",
             shape_str(weight.sizes()), " does not match ", layout.classes, " classes");
  }
  return layout;
}

// The backward's operands (nll_loss_backward, cross_entropy_backward_): the forward's,
// and a gradient and total weight on log_probs' device and of its dtype, the gradient of
// the loss's shape under `reduction`.
inline NllLayout check_nll_backward_operands(const Tensor& grad_output, const Tensor& log_probs, const Tensor& target,
                                             const Tensor& weight, Reduction reduction, const Tensor& total_weight,
                                             const char* op) {
  const NllLayout layout = check_nll_operands(log_probs, target, weight);
  check_defined(grad_output, op, "gradient");
  check_defined(total_weight, op, "total weight");
  check_same_device(log_probs, grad_output, op);
  check_same_device(log_probs, total_weight, op);
  check_same_dtype(log_probs, grad_output, op);
  check_same_dtype(log_probs, total_weight, op);
  TS_CHECK(grad_output.numel() == (reduction == Reduction::none ? layout.positions() : 1), ShapeError, op,
           ": gradient of shape ", shape_str(grad_output.sizes()), " does not match target of shape ",
           shape_str(target.sizes()), " with this reduction");
  return layout;
}

// What the nll_loss_backward kernels take (a TS_PREPARED_OP): the operands made
// contiguous, their layout, and the input's gradient, allocated and zeroed (each position
// then writes its one non-zero, at its target's class).
struct NllLossBackwardCall {
  Tensor grad_output, target, weight, total_weight;
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  NllLayout layout;
  Tensor grad_input;

  static NllLossBackwardCall prepare(const Tensor& grad_output, const Tensor& log_probs, const Tensor& target,
                                     const Tensor& weight, Reduction reduction, int64_t ignore_index,
                                     const Tensor& total_weight) {
    NllLossBackwardCall call;
    call.layout = check_nll_backward_operands(grad_output, log_probs, target, weight, reduction, total_weight,
                                              "nll_loss_backward");
    call.grad_output = contiguous(grad_output);
    call.target = contiguous(target);
    call.weight = contiguous_if_defined(weight);
    call.total_weight = contiguous(total_weight);
    call.reduction = reduction;
    call.ignore_index = ignore_index;
    call.grad_input = zeros(log_probs.sizes(), log_probs.dtype(), log_probs.device());
    return call;
  }
  Device device() const { return grad_input.device(); }
  bool has_work() const { return layout.positions() > 0; }
  Tensor result() const { return grad_input; }
};

// The loss's shape: the target's for Reduction::none, else 0-d.
inline Shape nll_loss_shape(const Tensor& target, Reduction reduction) {
  return reduction == Reduction::none ? target.sizes() : Shape{};
}

// ---- Dropout ----

inline void check_dropout_probability(double p) {
  TS_CHECK(p >= 0 && p <= 1, ValueError, "dropout: probability must be in [0, 1], got ", p);
}

// Dropout reads its input as [rows, cols]: rows are samples (dim 0), cols the rest.
struct DropoutLayout {
  int64_t rows = 1, cols = 0;
};

inline DropoutLayout dropout_layout(const Tensor& input) {
  DropoutLayout layout;
  layout.rows = input.dim() == 0 ? 1 : input.size(0);
  layout.cols = layout.rows == 0 ? 0 : input.numel() / layout.rows;
  return layout;
}

inline void check_dropout_backward_operands(const Tensor& grad_output, const Tensor& mask) {
  check_defined(grad_output, "dropout_backward");
  check_defined(mask, "dropout_backward", "mask");
  check_same_device(grad_output, mask, "dropout_backward");
  TS_CHECK(mask.dtype() == DType::u8, DTypeError, "dropout_backward: mask must be uint8, got ",
           dtype_name(mask.dtype()));
  TS_CHECK(grad_output.sizes() == mask.sizes(), ShapeError, "dropout_backward: gradient of shape ",
           shape_str(grad_output.sizes()), " does not match mask of shape ", shape_str(mask.sizes()));
}

// ---- Batch normalisation ----

struct ChannelLayout {
  int64_t outer = 0;     // N
  int64_t channels = 0;  // C
  int64_t inner = 0;     // elements per channel per sample
  int64_t count() const { return outer * inner; }  // elements per channel
};

inline ChannelLayout channel_layout(const Tensor& input, const char* op) {
  TS_CHECK(input.dim() >= 2, ShapeError, op, ": expected an input [N, C, ...] of at least 2 dims, got ",
           shape_str(input.sizes()));
  ChannelLayout layout{input.size(0), input.size(1), 1};
  for (int64_t d = 2; d < input.dim(); ++d) layout.inner *= input.size(d);
  return layout;
}

// A per-channel tensor's check: defined ones must be [C], on the input's device and dtype.
inline void check_channel_tensor(const Tensor& t, const Tensor& input, int64_t channels, const char* op,
                                 const char* what) {
  if (!t.defined()) return;
  check_same_device(t, input, op);
  TS_CHECK(t.dtype() == input.dtype(), DTypeError, op, ": ", what, " is ", dtype_name(t.dtype()),
           " but the input is ", dtype_name(input.dtype()));
  TS_CHECK(t.dim() == 1 && t.size(0) == channels, ShapeError, op, ": ", what, " must be [", channels,
           "] for an input of shape ", shape_str(input.sizes()), ", got ", shape_str(t.sizes()));
}

inline ChannelLayout check_batch_norm_operands(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                               const Tensor& running_mean, const Tensor& running_var, bool training,
                                               double eps) {
  const char* op = "batch_norm";
  check_defined(input, op);
  const ChannelLayout layout = channel_layout(input, op);
  check_channel_tensor(weight, input, layout.channels, op, "weight");
  check_channel_tensor(bias, input, layout.channels, op, "bias");
  check_channel_tensor(running_mean, input, layout.channels, op, "running_mean");
  check_channel_tensor(running_var, input, layout.channels, op, "running_var");
  TS_CHECK(running_mean.defined() == running_var.defined(), ValueError, op,
           ": running_mean and running_var must be both given or both undefined");
  TS_CHECK(training || running_mean.defined(), ValueError, op,
           ": evaluation mode normalises with the running statistics, which are undefined");
  TS_CHECK(!running_mean.defined() || (running_mean.is_contiguous() && running_var.is_contiguous()), ValueError, op,
           ": the running statistics must be contiguous (they are updated in place)");
  TS_CHECK(eps >= 0, ValueError, op, ": eps must be non-negative, got ", eps);
  if (training) {
    // As PyTorch: one value per channel has no variance to normalise by.
    TS_CHECK(layout.count() > 1, ValueError, op,
             ": expected more than 1 value per channel when training, got input of shape ", shape_str(input.sizes()));
  }
  return layout;
}

inline ChannelLayout check_batch_norm_backward_operands(const Tensor& grad_output, const Tensor& input,
                                                        const Tensor& weight, const Tensor& save_mean,
                                                        const Tensor& save_invstd) {
  const char* op = "batch_norm_backward";
  check_defined(input, op);
  check_gradient_of(grad_output, input, op);
  const ChannelLayout layout = channel_layout(input, op);
  check_channel_tensor(weight, input, layout.channels, op, "weight");
  check_defined(save_mean, op, "save_mean");
  check_defined(save_invstd, op, "save_invstd");
  check_channel_tensor(save_mean, input, layout.channels, op, "save_mean");
  check_channel_tensor(save_invstd, input, layout.channels, op, "save_invstd");
  return layout;
}

// What the batch_norm_backward kernels take (a TS_PREPARED_OP): the operands made
// contiguous (weight may be undefined), their layout, and the gradients output_mask asks
// for, allocated (the others undefined).
struct BatchNormBackwardCall {
  Tensor grad_output, input, weight, save_mean, save_invstd;
  bool training = false;
  ChannelLayout layout;
  Tensor grad_input, grad_weight, grad_bias;

  static BatchNormBackwardCall prepare(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                       const Tensor& save_mean, const Tensor& save_invstd, bool training,
                                       std::array<bool, 3> output_mask) {
    BatchNormBackwardCall call;
    call.layout = check_batch_norm_backward_operands(grad_output, input, weight, save_mean, save_invstd);
    call.grad_output = contiguous(grad_output);
    call.input = contiguous(input);
    call.weight = contiguous_if_defined(weight);
    call.save_mean = contiguous(save_mean);
    call.save_invstd = contiguous(save_invstd);
    call.training = training;
    const Shape channels{call.layout.channels};
    if (output_mask[0]) call.grad_input = empty(input.sizes(), input.dtype(), input.device());
    if (output_mask[1]) call.grad_weight = empty(channels, input.dtype(), input.device());
    if (output_mask[2]) call.grad_bias = empty(channels, input.dtype(), input.device());
    return call;
  }
  Device device() const { return input.device(); }
  bool has_work() const { return layout.channels > 0; }
  TensorTriple result() const { return {grad_input, grad_weight, grad_bias}; }
};

// ---- Adaptive average pooling ----

// Output cell i of an axis of length L pooled to n cells averages [bin_start, bin_end).
inline int64_t adaptive_bin_start(int64_t cell, int64_t cells, int64_t length) { return (cell * length) / cells; }
inline int64_t adaptive_bin_end(int64_t cell, int64_t cells, int64_t length) {
  return ((cell + 1) * length + cells - 1) / cells;
}

inline void check_adaptive_avg_pool2d_input(const Tensor& input, Size2 output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_defined(input, op);
  TS_CHECK(input.dim() == 4, ShapeError, op, ": expected a 4-D input [N, C, H, W], got ", shape_str(input.sizes()));
  TS_CHECK(output_size.h > 0 && output_size.w > 0, ValueError, op, ": output size must be positive, got (",
           output_size.h, ", ", output_size.w, ")");
  TS_CHECK(input.size(2) > 0 && input.size(3) > 0, ShapeError, op, ": input of shape ", shape_str(input.sizes()),
           " has an empty plane");
}

inline void check_adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape) {
  const char* op = "adaptive_avg_pool2d_backward";
  check_defined(grad_output, op, "grad_output");
  TS_CHECK(input_shape.size() == 4 && grad_output.dim() == 4 && grad_output.size(0) == input_shape[0] &&
               grad_output.size(1) == input_shape[1],
           ShapeError, op, ": gradient of shape ", shape_str(grad_output.sizes()), " for an input of shape ",
           shape_str(input_shape));
}

// ---- Indexing, selection and scans (index_select, gather, topk, cumsum, ...) ----

inline void check_index_tensor(const Tensor& index, const Tensor& self, const char* op) {
  check_defined(index, op, "index");
  check_same_device(self, index, op);
  TS_CHECK(index.dtype() == DType::i64, DTypeError, op, ": index must be int64, got ", dtype_name(index.dtype()),
           " of shape ", shape_str(index.sizes()));
}

// index_select and index_add_ along `dim` of `self`, addressed as [outer, size, inner]
// (AxisLayout), `index` picking positions in `size`; out_shape is index_select's output.
struct IndexGeometry {
  Shape out_shape;
  AxisLayout layout;
  int64_t dim = 0;  // wrapped
};

// index_select: `index` 1-D (or 0-d), picking along `dim`.
inline IndexGeometry index_select_geometry(const Tensor& self, int64_t dim, const Tensor& index, const char* op) {
  check_defined(self, op);
  check_index_tensor(index, self, op);
  TS_CHECK(self.dim() >= 1, ShapeError, op, ": expected a tensor of at least 1 dimension, got shape ",
           shape_str(self.sizes()));
  TS_CHECK(index.dim() <= 1, ShapeError, op, ": index must be 1-D, got shape ", shape_str(index.sizes()));
  IndexGeometry g{.out_shape = self.sizes(),
                  .layout = axis_layout(self.sizes(), dim, op),
                  .dim = wrap_dim(dim, self.dim(), op)};
  g.out_shape[g.dim] = index.numel();
  return g;
}

// index_add_: self[.., index[k], ..] += source[.., k, ..] along `dim`.
inline IndexGeometry check_index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  const char* op = "index_add";
  IndexGeometry g = index_select_geometry(self, dim, index, op);
  check_defined(source, op, "source");
  check_same_device(self, source, op);
  check_same_dtype(self, source, op);
  TS_CHECK(source.sizes() == g.out_shape, ShapeError, op, ": source of shape ", shape_str(source.sizes()),
           " does not match self of shape ", shape_str(self.sizes()), " indexed by ", index.numel(),
           " positions along dim ", g.dim, " (expected ", shape_str(g.out_shape), ")");
  return g;
}

// gather and scatter_add: `index` has self's number of dims and, off `dim`, sizes no larger
// than self's (scatter_add: no larger than src's either). Returns `dim` wrapped.
inline int64_t check_gather_index(const Tensor& self, int64_t dim, const Tensor& index, const char* op) {
  check_defined(self, op);
  check_index_tensor(index, self, op);
  TS_CHECK(index.dim() == self.dim() || (index.dim() <= 1 && self.dim() <= 1), ShapeError, op,
           ": index of shape ", shape_str(index.sizes()), " must have as many dims as self of shape ",
           shape_str(self.sizes()));
  const int64_t d = wrap_dim(dim, self.dim(), op);
  for (int64_t k = 0; k < index.dim(); ++k) {
    TS_CHECK(k == d || index.size(k) <= self.size(k), ShapeError, op, ": index of shape ", shape_str(index.sizes()),
             " is larger than self of shape ", shape_str(self.sizes()), " in dim ", k, " (only dim ", d,
             " may differ)");
  }
  return d;
}

inline int64_t check_scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  const int64_t d = check_gather_index(self, dim, index, op);
  check_defined(src, op, "src");
  check_same_device(self, src, op);
  check_same_dtype(self, src, op);
  TS_CHECK(src.dim() == index.dim(), ShapeError, op, ": src of shape ", shape_str(src.sizes()),
           " and index of shape ", shape_str(index.sizes()), " differ in their number of dims");
  for (int64_t k = 0; k < index.dim(); ++k) {
    TS_CHECK(index.size(k) <= src.size(k), ShapeError, op, ": index of shape ", shape_str(index.sizes()),
             " is larger than src of shape ", shape_str(src.sizes()), " in dim ", k);
  }
  return d;
}

// The walk gather and scatter_add share: `index`'s elements as lines along `dim`, the other
// dims' coordinates giving each line's start in every operand (their own strides). Lines
// write disjoint parts of the output, so a line per thread is race-free and deterministic.
struct GatherLines {
  int64_t lines = 0, length = 0;   // lines = index.numel() / length; length = index.size(dim)
  Shape line_sizes;                // index's sizes without dim
  std::array<Shape, 3> strides;    // per operand (index, self, other), without dim
  std::array<int64_t, 3> dim_stride{};
  int64_t self_dim_size = 0;
};

inline GatherLines gather_lines(const Tensor& index, const Tensor& self, const Tensor& other, int64_t dim) {
  GatherLines g;
  const int64_t ndim = index.dim();
  const Tensor* operands[3] = {&index, &self, &other};
  if (ndim == 0) {
    g.length = 1;
    g.lines = 1;
    g.self_dim_size = self.dim() == 0 ? 1 : self.size(0);
    for (int k = 0; k < 3; ++k) g.dim_stride[k] = operands[k]->dim() == 0 ? 0 : operands[k]->stride(0);
    return g;
  }
  g.length = index.size(dim);
  g.self_dim_size = self.dim() == 0 ? 1 : self.size(dim);
  for (int64_t d = 0; d < ndim; ++d) {
    if (d == dim) {
      for (int k = 0; k < 3; ++k) g.dim_stride[k] = operands[k]->dim() == 0 ? 0 : operands[k]->stride(d);
      continue;
    }
    g.line_sizes.push_back(index.size(d));
    for (int k = 0; k < 3; ++k) g.strides[k].push_back(operands[k]->dim() == 0 ? 0 : operands[k]->stride(d));
  }
  g.lines = g.length == 0 ? 0 : index.numel() / g.length;
  return g;
}

// The IndexError for element `bad` of a gather walk (line * length + position along dim),
// from a CPU index (index_errors.h builds the message, which the CUDA backend's report shares).
[[noreturn]] inline void throw_bad_gather_index(const Tensor& index, const GatherLines& g, int64_t bad, int64_t dim,
                                                const Tensor& self, const char* op) {
  const Shape coordinates = gather_coordinates(index.sizes(), dim, bad);
  int64_t offset = 0;
  for (int64_t d = 0; d < index.dim(); ++d) offset += coordinates[d] * index.stride(d);
  const int64_t value = static_cast<const int64_t*>(index.data_ptr())[offset];
  throw_gather_index_out_of_range(op, value, bad, index.sizes(), dim, g.self_dim_size, self.sizes());
}

// topk: k in [0, size of dim].
inline AxisLayout check_topk(const Tensor& self, int64_t k, int64_t dim) {
  check_defined(self, "topk");
  TS_CHECK(self.dtype() != DType::boolean && self.dtype() != DType::bf16, DTypeError,
           "topk: expected a float32, float64, int64 or uint8 tensor, got ", dtype_name(self.dtype()));
  AxisLayout layout = axis_layout(self.sizes(), dim, "topk");
  TS_CHECK(k >= 0 && k <= layout.size, IndexError, "topk: k = ", k, " is out of range for dim ",
           self.dim() == 0 ? 0 : wrap_dim(dim, self.dim(), "topk"), " of size ", layout.size, " (shape ",
           shape_str(self.sizes()), ")");
  return layout;
}

// The values and indices shape of topk: self's with dim's size k.
inline Shape topk_shape(const Tensor& self, int64_t k, int64_t dim) {
  Shape out = self.sizes();
  if (!out.empty()) out[wrap_dim(dim, self.dim(), "topk")] = k;
  return out;
}

// cumsum: floating dtypes keep theirs; integers and bool accumulate in int64 (PyTorch).
inline DType cumsum_dtype(const Tensor& self) {
  check_defined(self, "cumsum");
  TS_CHECK(self.dtype() != DType::bf16, DTypeError, "cumsum: not implemented for bfloat16");
  return is_floating(self.dtype()) ? self.dtype() : DType::i64;
}

// The op a triangle kernel computes, as messages name it.
inline const char* triangle_name(Triangle part) { return part == Triangle::lower ? "tril" : "triu"; }

// tril and triu act on the last two dims of a tensor of at least 2.
inline void check_triangle(const Tensor& self, const char* op) {
  check_defined(self, op);
  TS_CHECK(self.dim() >= 2, ShapeError, op, ": expected a tensor of at least 2 dims (a matrix or a batch of them), "
           "got shape ", shape_str(self.sizes()));
}

// searchsorted: `sorted` [..., C] sorted along its last dim; `values` [..., S] with the same
// leading dims (or `sorted` 1-D and `values` any shape). Both are then read as matrices:
// values [rows, per_row] against sorted [rows, length] (or one shared row).
struct SearchLayout {
  int64_t rows = 1, length = 0, per_row = 0;
  bool shared = false;  // one sorted row for every value
};

inline SearchLayout check_searchsorted(const Tensor& sorted, const Tensor& values) {
  const char* op = "searchsorted";
  check_defined(sorted, op, "sorted sequence");
  check_defined(values, op, "values");
  check_same_device(sorted, values, op);
  check_same_dtype(sorted, values, op);
  TS_CHECK(is_floating(sorted.dtype()) || sorted.dtype() == DType::i64, DTypeError, op,
           ": expected floating or int64 tensors, got ", dtype_name(sorted.dtype()));
  TS_CHECK(sorted.dim() >= 1, ShapeError, op, ": the sorted sequence must have at least 1 dim, got shape ",
           shape_str(sorted.sizes()));
  SearchLayout layout;
  layout.length = sorted.size(-1);
  if (sorted.dim() == 1) {
    layout.shared = true;
    layout.per_row = values.numel();
    return layout;
  }
  const Shape leading(sorted.sizes().begin(), sorted.sizes().end() - 1);
  TS_CHECK(values.dim() == sorted.dim() && Shape(values.sizes().begin(), values.sizes().end() - 1) == leading,
           ShapeError, op, ": values of shape ", shape_str(values.sizes()), " do not share the leading dims of the "
           "sorted sequence of shape ", shape_str(sorted.sizes()));
  layout.rows = shape_numel(leading);
  layout.per_row = values.size(-1);
  return layout;
}

// ---- Reordering ----

// What the flip kernels take (a TS_PREPARED_OP): the input made contiguous, the output
// (contiguous, of its shape and dtype), and the geometry both are walked by: the shape
// with size-1 dims dropped and each run of neighbouring dims that are all flipped (or all
// kept) merged into one (reversing [a, b] along both dims reverses its a * b elements), so
// that flipped[d] says whether merged dim d is reversed. At most 16 merged dims (the CUDA
// kernel's limit, kMaxDims); a tensor needs 32 alternating dims of size > 1 to pass it.
struct FlipCall {
  Tensor self, out;
  Shape sizes;
  std::vector<bool> flipped;

  static FlipCall prepare(const Tensor& self, const Shape& dims) {
    check_defined(self, "flip");
    std::vector<bool> chosen(std::max<int64_t>(self.dim(), 1), false);
    for (int64_t d : dims) {
      const int64_t w = wrap_dim(d, self.dim(), "flip");
      TS_CHECK(!chosen[w], ValueError, "flip: dim ", w, " appears multiple times in the list of dims ",
               shape_str(dims));
      chosen[w] = true;
    }
    FlipCall call;
    call.self = contiguous(self);
    call.out = empty(self.sizes(), self.dtype(), self.device());
    for (int64_t d = 0; d < self.dim(); ++d) {
      const int64_t size = self.sizes()[d];
      if (size == 1) continue;
      if (!call.sizes.empty() && call.flipped.back() == chosen[d]) {
        call.sizes.back() *= size;
      } else {
        call.sizes.push_back(size);
        call.flipped.push_back(chosen[d]);
      }
    }
    TS_CHECK(call.sizes.size() <= 16, ShapeError, "flip: shape ", shape_str(self.sizes()), " with dims ",
             shape_str(dims), " alternates flipped and kept dims ", call.sizes.size(),
             " times; at most 16 are supported");
    return call;
  }
  Device device() const { return self.device(); }
  bool has_work() const { return out.numel() > 0; }
  Tensor result() const { return out; }
};

}  // namespace tessera::native
