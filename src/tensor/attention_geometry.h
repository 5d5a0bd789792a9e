// Scaled dot-product attention's operand checks and shapes, and where a weight sits in
// dropout's [rows, cols] reading of the weights, which both backends key their masks by.
// native_dispatch.cpp runs the checks once, before it routes, and hands the backends the
// checked operands with their geometry (AttentionOperands), so no backend repeats or
// skips them.
#pragma once

#include "tessera/tensor/kernel_shapes.h"

namespace tessera::native {

// True for a mask whose elements say whether a key takes part (PyTorch's bool masks).
inline bool is_boolean_mask(DType dtype) { return dtype == DType::boolean; }

// The dtype attention's scores, softmax and log-sum-exp are computed and kept in: float32
// for bfloat16 operands (8 bits of mantissa would round exp's argument by up to 2^-9 of
// the row maximum; PyTorch's flash kernels keep float32 too), else the operands'.
inline DType attention_score_dtype(DType dtype) { return dtype == DType::bf16 ? DType::f32 : dtype; }

struct AttentionGeometry {
  Shape batch_shape;      // the leading dims q, k and v share
  int64_t batches = 1;    // their product, N
  int64_t queries = 0;    // L
  int64_t keys = 0;       // S
  int64_t head_dim = 0;   // E
  int64_t value_dim = 0;  // Ev

  Shape with(std::initializer_list<int64_t> last) const {
    Shape shape = batch_shape;
    shape.insert(shape.end(), last);
    return shape;
  }
  Shape output_shape() const { return with({queries, value_dim}); }
  Shape logsumexp_shape() const { return with({queries}); }
  Shape weights_shape() const { return with({queries, keys}); }

  // Dropout reads the weights [..., L, S] as [rows, cols] (dropout_layout): weight (n, i, j)
  // of batch n is element `col` of row `row`. Both backends draw its keep bit there.
  int64_t dropout_cols() const {
    const int64_t rows = batch_shape.empty() ? queries : batch_shape.front();
    return rows == 0 ? 0 : batches * queries * keys / rows;
  }
};

inline AttentionGeometry check_attention_operands(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const AttentionOptions& options, const char* op) {
  check_defined(q, op, "query");
  check_defined(k, op, "key");
  check_defined(v, op, "value");
  check_same_device(q, k, op);
  check_same_device(q, v, op);
  check_same_dtype(q, k, op);
  check_same_dtype(q, v, op);
  TS_CHECK(is_floating(q.dtype()), DTypeError, op, ": expected floating query, key and value, got ",
           dtype_name(q.dtype()));
  TS_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError, op,
           ": expected query [..., L, E], key [..., S, E] and value [..., S, Ev] with the same number of dims, got ",
           shape_str(q.sizes()), ", ", shape_str(k.sizes()), " and ", shape_str(v.sizes()));
  AttentionGeometry g;
  g.batch_shape.assign(q.sizes().begin(), q.sizes().end() - 2);
  g.batches = shape_numel(g.batch_shape);
  g.queries = q.size(-2);
  g.head_dim = q.size(-1);
  g.keys = k.size(-2);
  g.value_dim = v.size(-1);
  const Shape k_batch(k.sizes().begin(), k.sizes().end() - 2), v_batch(v.sizes().begin(), v.sizes().end() - 2);
  TS_CHECK(k_batch == g.batch_shape && v_batch == g.batch_shape && k.size(-1) == g.head_dim &&
               v.size(-2) == g.keys,
           ShapeError, op, ": query ", shape_str(q.sizes()), ", key ", shape_str(k.sizes()), " and value ",
           shape_str(v.sizes()), " do not fit [..., L, E], [..., S, E], [..., S, Ev] with equal leading dims");
  check_dropout_probability(options.dropout_p);
  const Tensor& mask = options.attn_mask;
  if (mask.defined()) {
    TS_CHECK(!options.is_causal, ValueError, op,
             ": an explicit attn_mask must not be given together with is_causal (as in PyTorch)");
    check_same_device(q, mask, op);
    TS_CHECK(is_boolean_mask(mask.dtype()) || mask.dtype() == q.dtype(), DTypeError, op,
             ": attn_mask must be boolean or of the query's dtype (", dtype_name(q.dtype()), "), got ",
             dtype_name(mask.dtype()));
    const Shape weights = g.weights_shape();
    bool fits = mask.dim() <= static_cast<int64_t>(weights.size());
    for (int64_t d = 1; fits && d <= mask.dim(); ++d) {
      const int64_t size = mask.size(-d);
      fits = size == 1 || size == weights[weights.size() - d];
    }
    TS_CHECK(fits, ShapeError, op, ": attn_mask of shape ", shape_str(mask.sizes()),
             " does not broadcast to the attention weights' shape ", shape_str(weights));
  }
  return g;
}

// What a backend's attention kernels receive: the operands, checked, and their geometry.
struct AttentionOperands {
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  const AttentionOptions& options;
  AttentionGeometry geometry;
};

struct AttentionBackwardOperands {
  AttentionOperands forward;
  const Tensor& grad_output;
  const Tensor& output;     // what the forward returned
  const Tensor& logsumexp;
};

// The backward's operands: those of the forward, then the gradient and what the forward
// returned (output, logsumexp) on q's device and of their shapes, all of q's dtype but the
// log-sum-exp, of attention_score_dtype.
inline AttentionGeometry check_attention_backward_operands(const Tensor& grad_output, const Tensor& q, const Tensor& k,
                                                           const Tensor& v, const Tensor& output,
                                                           const Tensor& logsumexp, const AttentionOptions& options,
                                                           const char* op) {
  const AttentionGeometry g = check_attention_operands(q, k, v, options, op);
  check_defined(grad_output, op, "gradient");
  check_defined(output, op, "output");
  check_defined(logsumexp, op, "logsumexp");
  for (const Tensor* t : {&grad_output, &output, &logsumexp}) check_same_device(q, *t, op);
  check_same_dtype(q, grad_output, op);
  check_same_dtype(q, output, op);
  TS_CHECK(logsumexp.dtype() == attention_score_dtype(q.dtype()), DTypeError, op, ": expected the log-sum-exp in ",
           dtype_name(attention_score_dtype(q.dtype())), " for ", dtype_name(q.dtype()), " operands, got ",
           dtype_name(logsumexp.dtype()));
  TS_CHECK(grad_output.sizes() == g.output_shape() && output.sizes() == g.output_shape() &&
               logsumexp.sizes() == g.logsumexp_shape(),
           ShapeError, op, ": expected gradient and output ", shape_str(g.output_shape()), " and logsumexp ",
           shape_str(g.logsumexp_shape()), ", got ", shape_str(grad_output.sizes()), ", ",
           shape_str(output.sizes()), " and ", shape_str(logsumexp.sizes()));
  return g;
}

}  // namespace tessera::native
