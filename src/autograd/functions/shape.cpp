// Differentiable views, copies, conversions and joins; and Tensor's in-place updates.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

namespace {

// A gradient reshaped to `shape` (copied when its strides do not allow a view).
Tensor reshape_grad(const Tensor& grad, const Shape& shape) {
  return native::viewable(grad, shape) ? native::view(grad, shape) : native::view(native::contiguous(grad), shape);
}

// Records a view whose backward is a reshape back to the input's shape.
Tensor record_reshape(const char* name, const Tensor& input, Tensor out) {
  if (needs_grad({input})) {
    record(name, {input}, {out}, [shape = input.sizes()](const TensorList& g) {
      return TensorList{reshape_grad(g[0], shape)};
    });
  }
  return out;
}

void check_inplace(const Tensor& self, const char* op) {
  TS_CHECK(!(self.requires_grad() && GradMode::is_enabled()), ValueError, op, " on ", self.str(),
           " which requires grad: in-place updates are not recorded; use a NoGradGuard (as optimizers do) "
           "or an out-of-place op");
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const { return record_reshape("ViewBackward", *this, native::view(*this, shape)); }

Tensor Tensor::reshape(const Shape& shape) const {
  Tensor out = native::viewable(*this, shape) ? native::view(*this, shape)
                                               : native::view(native::contiguous(*this), shape);
  return record_reshape("ReshapeBackward", *this, out);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t start = wrap_dim(start_dim, dim(), "flatten"), end = wrap_dim(end_dim, dim(), "flatten");
  TS_CHECK(start <= end, ValueError, "flatten: start_dim ", start, " is after end_dim ", end);
  Shape shape(sizes().begin(), sizes().begin() + start);
  int64_t middle = 1;
  for (int64_t d = start; d <= end; ++d) middle *= sizes()[d];
  shape.push_back(middle);
  shape.insert(shape.end(), sizes().begin() + end + 1, sizes().end());
  return reshape(shape);
}

Tensor Tensor::squeeze() const {
  Shape shape;
  for (int64_t s : sizes()) if (s != 1) shape.push_back(s);
  return record_reshape("SqueezeBackward", *this, native::view(*this, shape));
}

Tensor Tensor::squeeze(int64_t dim) const {
  return record_reshape("SqueezeBackward", *this, native::squeeze(*this, dim));
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  return record_reshape("UnsqueezeBackward", *this, native::unsqueeze(*this, dim));
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  Tensor out = native::narrow(*this, dim, start, length);
  if (needs_grad({*this})) {
    int64_t d = wrap_dim(dim, this->dim(), "narrow");
    int64_t begin = start < 0 ? start + size(d) : start;
    record("NarrowBackward", {*this}, {out}, [shape = sizes(), d, begin, length](const TensorList& g) {
      Tensor grad = native::zeros(shape, g[0].dtype(), g[0].device());
      Tensor slot = native::narrow(grad, d, begin, length);
      native::copy_(slot, g[0]);
      return TensorList{grad};
    });
  }
  return out;
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  Tensor out = native::select(*this, dim, index);
  if (needs_grad({*this})) {
    int64_t d = wrap_dim(dim, this->dim(), "select");
    int64_t i = index < 0 ? index + size(d) : index;
    record("SelectBackward", {*this}, {out}, [shape = sizes(), d, i](const TensorList& g) {
      Tensor grad = native::zeros(shape, g[0].dtype(), g[0].device());
      Tensor slot = native::select(grad, d, i);
      native::copy_(slot, g[0]);
      return TensorList{grad};
    });
  }
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  Tensor out = native::transpose(*this, dim0, dim1);
  if (needs_grad({*this})) {
    record("TransposeBackward", {*this}, {out},
           [dim0, dim1](const TensorList& g) { return TensorList{native::transpose(g[0], dim0, dim1)}; });
  }
  return out;
}

Tensor Tensor::t() const {
  TS_CHECK(dim() <= 2, ShapeError, "t() expects a tensor of at most 2 dims, got shape ", shape_str(sizes()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(const Shape& dims) const {
  Tensor out = native::permute(*this, dims);
  if (needs_grad({*this})) {
    Shape inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], dim(), "permute")] = static_cast<int64_t>(i);
    record("PermuteBackward", {*this}, {out},
           [inverse](const TensorList& g) { return TensorList{native::permute(g[0], inverse)}; });
  }
  return out;
}

Tensor Tensor::expand(const Shape& shape) const {
  Tensor out = native::expand(*this, shape);
  if (needs_grad({*this})) {
    record("ExpandBackward", {*this}, {out},
           [shape = sizes()](const TensorList& g) { return TensorList{native::sum_to(g[0], shape)}; });
  }
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = native::clone(*this);
  if (needs_grad({*this})) record("ContiguousBackward", {*this}, {out}, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = native::clone(*this);
  if (needs_grad({*this})) record("CloneBackward", {*this}, {out}, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  Tensor out = native::to_dtype(*this, dtype);
  if (needs_grad({*this}) && is_floating(dtype)) {
    record("ToDTypeBackward", {*this}, {out},
           [from = this->dtype()](const TensorList& g) { return TensorList{native::to_dtype(g[0], from)}; });
  }
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = native::to_device(*this, device);
  if (needs_grad({*this})) {
    record("ToDeviceBackward", {*this}, {out},
           [from = this->device()](const TensorList& g) { return TensorList{native::to_device(g[0], from)}; });
  }
  return out;
}

Tensor Tensor::pin_memory() const {
  if (is_pinned()) return *this;
  Tensor out = native::pin_memory(*this);
  if (needs_grad({*this})) record("PinMemoryBackward", {*this}, {out}, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = native::cat(tensors, dim);
  if (needs_grad(tensors)) {
    int64_t d = wrap_dim(dim, tensors.front().dim(), "cat");
    std::vector<int64_t> lengths;
    for (const Tensor& t : tensors) lengths.push_back(t.size(d));
    record("CatBackward", tensors, {out}, [d, lengths](const TensorList& g) {
      TensorList grads;
      int64_t offset = 0;
      for (int64_t length : lengths) {
        grads.push_back(native::narrow(g[0], d, offset, length));
        offset += length;
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TS_CHECK(!tensors.empty(), ValueError, "stack: expected at least one tensor");
  int64_t d = wrap_dim(dim, tensors.front().dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TS_CHECK(tensors[i].sizes() == tensors.front().sizes(), ShapeError, "stack: tensor ", i, " has shape ",
             shape_str(tensors[i].sizes()), " but tensor 0 has shape ", shape_str(tensors.front().sizes()));
    expanded.push_back(tensors[i].unsqueeze(d));
  }
  return cat(expanded, d);
}

// In-place updates.
Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  native::copy_(*this, src);
  return *this;
}
Tensor& Tensor::zero_() { return fill_(0.0); }
Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  native::fill_(*this, value);
  return *this;
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace(*this, "add_");
  native::add_scaled_(*this, other, alpha);
  return *this;
}
Tensor& Tensor::add_(double value) {
  check_inplace(*this, "add_");
  native::binary_(native::BinaryOp::add, *this, value);
  return *this;
}
Tensor& Tensor::sub_(const Tensor& other, double alpha) { return add_(other, -alpha); }
Tensor& Tensor::mul_(const Tensor& other) {
  check_inplace(*this, "mul_");
  native::binary_(native::BinaryOp::mul, *this, other);
  return *this;
}
Tensor& Tensor::mul_(double value) {
  check_inplace(*this, "mul_");
  native::binary_(native::BinaryOp::mul, *this, value);
  return *this;
}
Tensor& Tensor::div_(const Tensor& other) {
  check_inplace(*this, "div_");
  native::binary_(native::BinaryOp::div, *this, other);
  return *this;
}
Tensor& Tensor::div_(double value) {
  check_inplace(*this, "div_");
  native::binary_(native::BinaryOp::div, *this, value);
  return *this;
}

}  // namespace tessera
