// Operand checks and geometry for the transformer layers' kernels (embedding, layer_norm,
// gelu), shared by every backend (cpu/, cuda/) as kernel_shapes.h is for the older ops.
// Every check throws with the op's name and the shapes or dtypes involved.
#pragma once

#include "tessera/tensor/device_check.h"
#include "tessera/tensor/native.h"

namespace tessera::native {

// ---- Embedding ----

inline void check_embedding_indices(const Tensor& indices, const char* op) {
  check_defined(indices, op, "indices");
  TS_CHECK(indices.dtype() == DType::i64, DTypeError, op, ": indices must be int64, got ",
           dtype_name(indices.dtype()), " of shape ", shape_str(indices.sizes()));
}

// What every embedding kernel checks first: a 2-D weight, and int64 indices on its device.
inline void check_embedding_operands(const Tensor& weight, const Tensor& indices, const char* op) {
  check_defined(weight, op, "weight");
  check_embedding_indices(indices, op);
  check_same_device(weight, indices, op);
  TS_CHECK(weight.dim() == 2, ShapeError, op, ": weight must be 2-D [num_embeddings, embedding_dim], got ",
           shape_str(weight.sizes()));
}

// Returns the output shape [*indices.shape, dim].
inline Shape embedding_shape(const Tensor& weight, const Tensor& indices) {
  check_embedding_operands(weight, indices, "embedding");
  Shape out = indices.sizes();
  out.push_back(weight.size(1));
  return out;
}

// The rows of grad_output [*indices.shape, dim] and its dim.
struct EmbeddingGradLayout {
  int64_t rows = 0, dim = 0;
};

inline EmbeddingGradLayout check_embedding_backward_operands(const Tensor& grad_output, const Tensor& indices,
                                                             int64_t num_weights, int64_t padding_idx) {
  const char* op = "embedding_backward";
  check_defined(grad_output, op, "grad_output");
  check_embedding_indices(indices, op);
  check_same_device(grad_output, indices, op);
  TS_CHECK(is_floating(grad_output.dtype()), DTypeError, op, ": expected a floating gradient, got ",
           dtype_name(grad_output.dtype()));
  Shape expected = indices.sizes();
  TS_CHECK(grad_output.dim() == indices.dim() + 1 &&
               Shape(grad_output.sizes().begin(), grad_output.sizes().end() - 1) == expected,
           ShapeError, op, ": gradient of shape ", shape_str(grad_output.sizes()), " does not match indices of shape ",
           shape_str(indices.sizes()), " (expected [*indices.shape, embedding_dim])");
  TS_CHECK(num_weights >= 0, ValueError, op, ": num_weights must be non-negative, got ", num_weights);
  TS_CHECK(padding_idx < num_weights, ValueError, op, ": padding_idx ", padding_idx, " is out of range for ",
           num_weights, " embeddings");
  return {indices.numel(), grad_output.size(-1)};
}

inline void check_embedding_renorm_operands(const Tensor& weight, const Tensor& indices, double max_norm,
                                            double norm_type) {
  const char* op = "embedding_renorm_";
  check_embedding_operands(weight, indices, op);
  TS_CHECK(weight.is_contiguous(), ValueError, op, ": weight must be contiguous (it is renormalised in place)");
  TS_CHECK(max_norm >= 0, ValueError, op, ": max_norm must be non-negative, got ", max_norm);
  TS_CHECK(norm_type > 0, ValueError, op, ": norm_type must be positive, got ", norm_type);
}

// ---- Layer normalisation ----

// The input viewed as [rows, cols]: cols = numel(normalized_shape), rows the rest.
struct LayerNormLayout {
  int64_t rows = 0, cols = 0;
};

inline LayerNormLayout layer_norm_layout(const Tensor& input, const Shape& normalized_shape, const char* op) {
  check_defined(input, op);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  TS_CHECK(k >= 1, ValueError, op, ": normalized_shape must have at least one dim");
  for (int64_t size : normalized_shape) {
    TS_CHECK(size >= 0, ValueError, op, ": normalized_shape ", shape_str(normalized_shape), " has a negative size");
  }
  const bool matches = input.dim() >= k && Shape(input.sizes().end() - k, input.sizes().end()) == normalized_shape;
  TS_CHECK(matches, ShapeError, op, ": given normalized_shape=", shape_str(normalized_shape),
           ", expected input with shape [*, ", shape_str(normalized_shape).substr(1), ", but got input of size ",
           shape_str(input.sizes()));
  LayerNormLayout layout;
  layout.cols = shape_numel(normalized_shape);
  layout.rows = layout.cols == 0 ? shape_numel(Shape(input.sizes().begin(), input.sizes().end() - k))
                                 : input.numel() / layout.cols;
  return layout;
}

// weight/bias: undefined, or of normalized_shape on the input's device and dtype.
inline void check_layer_norm_parameter(const Tensor& t, const Tensor& input, const Shape& normalized_shape,
                                       const char* op, const char* what) {
  if (!t.defined()) return;
  check_same_device(t, input, op);
  TS_CHECK(t.dtype() == input.dtype(), DTypeError, op, ": ", what, " is ", dtype_name(t.dtype()), " but the input is ",
           dtype_name(input.dtype()));
  TS_CHECK(t.sizes() == normalized_shape, ShapeError, op, ": expected ", what,
           " of the same shape as normalized_shape ", shape_str(normalized_shape), ", got ", shape_str(t.sizes()));
}

// The dtype of mean and rstd: float32 for bfloat16 input (the accumulation type).
inline DType layer_norm_statistics_dtype(DType input) { return input == DType::bf16 ? DType::f32 : input; }

inline LayerNormLayout check_layer_norm_operands(const Tensor& input, const Shape& normalized_shape,
                                                 const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  const LayerNormLayout layout = layer_norm_layout(input, normalized_shape, op);
  TS_CHECK(is_floating(input.dtype()), DTypeError, op, ": expected a floating input, got ", dtype_name(input.dtype()));
  check_layer_norm_parameter(weight, input, normalized_shape, op, "weight");
  check_layer_norm_parameter(bias, input, normalized_shape, op, "bias");
  TS_CHECK(eps >= 0, ValueError, op, ": eps must be non-negative, got ", eps);
  return layout;
}

inline LayerNormLayout check_layer_norm_backward_operands(const Tensor& grad_output, const Tensor& input,
                                                          const Shape& normalized_shape, const Tensor& mean,
                                                          const Tensor& rstd, const Tensor& weight) {
  const char* op = "layer_norm_backward";
  const LayerNormLayout layout = layer_norm_layout(input, normalized_shape, op);
  check_gradient_of(grad_output, input, op);
  check_layer_norm_parameter(weight, input, normalized_shape, op, "weight");
  const DType statistics = layer_norm_statistics_dtype(input.dtype());
  for (const Tensor* t : {&mean, &rstd}) {
    const char* what = t == &mean ? "mean" : "rstd";
    check_defined(*t, op, what);
    check_same_device(*t, input, op);
    TS_CHECK(t->dtype() == statistics && t->numel() == layout.rows, ShapeError, op, ": ", what, " must be ",
             dtype_name(statistics), " with ", layout.rows, " elements, got ", dtype_name(t->dtype()), " ",
             shape_str(t->sizes()));
  }
  return layout;
}

// ---- GELU and erf ----

inline void check_floating_unary(const Tensor& input, const char* op) {
  check_defined(input, op);
  TS_CHECK(is_floating(input.dtype()), DTypeError, op, ": expected a floating tensor, got ", dtype_name(input.dtype()));
}

inline void check_gelu_backward_operands(const Tensor& grad_output, const Tensor& input) {
  const char* op = "gelu_backward";
  check_floating_unary(input, op);
  check_gradient_of(grad_output, input, op);
}

}  // namespace tessera::native
