// Differentiable reductions.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

namespace {

// The reduced dims of a tensor of rank `ndim` (all when `dims` is empty), sorted.
std::vector<int64_t> reduced_dims(const Shape& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
  } else {
    for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A reduced gradient with the reduced dims put back as size 1 (undoing keepdim=false).
Tensor unsqueeze_reduced(const Tensor& grad, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim) return grad;
  Tensor out = grad;
  for (int64_t d : dims) out = native::unsqueeze(out, d);
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  Tensor out = native::sum(x, dims, keepdim);
  if (needs_grad({x})) {
    record_unary("SumBackward", x, out,
                 [shape = x.sizes(), reduced = reduced_dims(dims, x.dim(), "sum"), keepdim](const Tensor& grad) {
                   return native::expand(unsqueeze_reduced(grad, reduced, keepdim), shape);
                 });
  }
  return out;
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  std::vector<int64_t> reduced = reduced_dims(dims, x.dim(), "mean");
  int64_t count = 1;
  for (int64_t d : reduced) count *= x.size(d);
  Tensor out = native::binary(BinaryOp::div, native::sum(x, dims, keepdim), static_cast<double>(count));
  if (needs_grad({x})) {
    record_unary("MeanBackward", x, out, [shape = x.sizes(), reduced, keepdim, count](const Tensor& grad) {
      Tensor scaled = native::binary(BinaryOp::div, grad, static_cast<double>(count));
      return native::expand(unsqueeze_reduced(scaled, reduced, keepdim), shape);
    });
  }
  return out;
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  Tensor out = native::amax(x, dims, keepdim);
  if (needs_grad({x})) {
    record_unary("AmaxBackward", x, out,
                 [x = saved(x), y = saved(out), reduced = reduced_dims(dims, x.dim(), "amax"),
                  keepdim](const Tensor& grad) {
                   // The gradient is shared evenly between tied maxima, as in PyTorch.
                   Tensor y_full = unsqueeze_reduced(y, reduced, keepdim);
                   Tensor is_max = native::to_dtype(native::binary(BinaryOp::eq, x, y_full), x.dtype());
                   Tensor ties = native::sum(is_max, Shape(reduced.begin(), reduced.end()), true);
                   Tensor share = native::binary(BinaryOp::div, unsqueeze_reduced(grad, reduced, keepdim), ties);
                   return native::binary(BinaryOp::mul, is_max, share);
                 });
  }
  return out;
}

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  auto [values, indices] = native::max_dim(x, dim, keepdim);
  if (needs_grad({x})) {
    int64_t d = wrap_dim(dim, x.dim(), "max");
    record_unary("MaxBackward", x, values, [x = saved(x), indices = saved(indices), d, keepdim](const Tensor& g) {
      // Route each gradient to the position its index names.
      Shape position_shape(x.dim(), 1);
      position_shape[d] = x.size(d);
      Tensor positions = native::view(native::arange(0, static_cast<double>(x.size(d)), 1, DType::i64, x.device()),
                                      position_shape);
      Tensor chosen = native::binary(BinaryOp::eq, positions, unsqueeze_reduced(indices, {d}, keepdim));
      Tensor zero = native::full({}, 0.0, x.dtype(), x.device());
      Tensor grad = native::expand(unsqueeze_reduced(g, {d}, keepdim), x.sizes());
      return native::where(chosen, grad, zero);
    });
  }
  return {values, indices};
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return native::argmax(x, dim, keepdim); }

Tensor Tensor::sum() const { return tessera::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return tessera::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return tessera::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return tessera::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return tessera::amax(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return tessera::max(*this, dim, keepdim); }
Tensor Tensor::amax(const Shape& dims, bool keepdim) const { return tessera::amax(*this, dims, keepdim); }
Tensor Tensor::argmax() const { return native::argmax(native::view(native::contiguous(*this), {-1}), 0, false); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return tessera::argmax(*this, dim, keepdim); }

}  // namespace tessera
