// Differentiable masks and indexing: masked_fill, flip, tril, triu, index_select, gather,
// scatter_add, and one_hot (integers, not differentiable). The backward of a pick is an add into zeros at the picked places
// (index_add_ / scatter_add_, both deterministic); the backward of a mask is the same mask.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  Tensor out = native::masked_fill(x, mask, value);
  if (needs_grad({x})) {
    record_unary("MaskedFillBackward", x, out, [mask = saved(mask), shape = x.sizes()](const Tensor& grad) {
      Tensor zero = native::zeros({}, grad.dtype(), grad.device());
      return native::sum_to(native::where(mask, zero, grad), shape);
    });
  }
  return out;
}

Tensor flip(const Tensor& x, const Shape& dims) {
  Tensor out = native::flip(x, dims);
  if (needs_grad({x})) record_unary("FlipBackward", x, out, [dims](const Tensor& grad) { return native::flip(grad, dims); });
  return out;
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  Tensor out = native::tril(x, diagonal);
  if (needs_grad({x})) {
    record_unary("TrilBackward", x, out, [diagonal](const Tensor& grad) { return native::tril(grad, diagonal); });
  }
  return out;
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  Tensor out = native::triu(x, diagonal);
  if (needs_grad({x})) {
    record_unary("TriuBackward", x, out, [diagonal](const Tensor& grad) { return native::triu(grad, diagonal); });
  }
  return out;
}

namespace {

// Records a pick `out` of x along dim at `index` (index_select, gather) whose backward adds
// the gradient into zeros of x's shape with `add_at(grad, dim, index, g)`.
template <class AddAt>
void record_pick(const char* name, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, AddAt add_at) {
  record(name, {x}, {out}, [index = saved(index), dim, shape = x.sizes(), add_at](const TensorList& g) {
    Tensor grad = native::zeros(shape, g[0].dtype(), g[0].device());
    add_at(grad, dim, index, g[0]);
    return TensorList{grad};
  });
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = native::index_select(x, dim, index);
  if (needs_grad({x})) record_pick("IndexSelectBackward", x, dim, index, out, native::index_add_);
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = native::gather(x, dim, index);
  if (needs_grad({x})) record_pick("GatherBackward", x, dim, index, out, native::scatter_add_);
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = native::clone(x);
  native::scatter_add_(out, dim, index, src);
  if (needs_grad({x, src})) {
    record("ScatterAddBackward", {x, src}, {out},
           [index = saved(index), dim, src_shape = src.sizes(), need_src = src.requires_grad()](const TensorList& g) {
             if (!need_src) return TensorList{g[0], Tensor()};
             // src's elements beyond index's extent were never added: they get zeros.
             Tensor picked = native::gather(g[0], dim, index);
             if (picked.sizes() == src_shape) return TensorList{g[0], picked};
             Tensor grad_src = native::zeros(src_shape, g[0].dtype(), g[0].device());
             Tensor region = grad_src;
             for (int64_t d = 0; d < picked.dim(); ++d) region = native::narrow(region, d, 0, picked.size(d));
             native::copy_(region, picked);
             return TensorList{g[0], grad_src};
           });
  }
  return out;
}

Tensor one_hot(const Tensor& x, int64_t num_classes) {
  TS_CHECK(x.defined() && x.dtype() == DType::i64, DTypeError, "one_hot: expected int64 class indices, got ",
           x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  TS_CHECK(num_classes == -1 || num_classes >= 1, ValueError, "one_hot: num_classes must be -1 or positive, got ",
           num_classes);
  if (x.numel() > 0) {
    const int64_t smallest = -native::amax(native::unary(UnaryOp::neg, x), {}, false).item<int64_t>();
    const int64_t largest = native::amax(x, {}, false).item<int64_t>();
    TS_CHECK(smallest >= 0, IndexError, "one_hot: class values must be non-negative, got ", smallest);
    if (num_classes == -1) num_classes = largest + 1;  // as PyTorch: one more than the largest
    TS_CHECK(largest < num_classes, IndexError, "one_hot: class value ", largest, " is not below num_classes ",
             num_classes);
  }
  TS_CHECK(num_classes != -1, ValueError, "one_hot: an empty input needs num_classes given");
  const Tensor classes = native::arange(0, static_cast<double>(num_classes), 1, DType::i64, x.device());
  return native::to_dtype(native::binary(BinaryOp::eq, native::unsqueeze(x, x.dim()), classes), DType::i64);
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return tessera::masked_fill(*this, mask, value); }
Tensor Tensor::tril(int64_t diagonal) const { return tessera::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return tessera::triu(*this, diagonal); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return tessera::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return tessera::gather(*this, dim, index); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return tessera::scatter_add(*this, dim, index, src);
}

}  // namespace tessera
