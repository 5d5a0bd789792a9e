// Native ops composed of other native ops, the same on every device: copies across
// devices, conversions, joins, and reductions built on the device kernels.
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/native.h"

namespace tessera::native {

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::abs: return "abs";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::relu: return "relu";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sign: return "sign";
    case UnaryOp::reciprocal: return "reciprocal";
    case UnaryOp::sin: return "sin";
    case UnaryOp::cos: return "cos";
  }
  return "unary";
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::pow: return "pow";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
    case BinaryOp::eq: return "eq";
    case BinaryOp::ne: return "ne";
    case BinaryOp::lt: return "lt";
    case BinaryOp::le: return "le";
    case BinaryOp::gt: return "gt";
    case BinaryOp::ge: return "ge";
    case BinaryOp::logical_and: return "logical_and";
    case BinaryOp::logical_or: return "logical_or";
    case BinaryOp::logical_xor: return "logical_xor";
  }
  return "binary";
}

void copy_(Tensor& dst, const Tensor& src) {
  check_defined(dst, "copy_", "destination");
  check_defined(src, "copy_", "source");
  Shape shape = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  TS_CHECK(shape == dst.sizes(), ShapeError, "copy_: source of shape ", shape_str(src.sizes()),
           " does not broadcast to destination shape ", shape_str(dst.sizes()));
  if (dst.numel() == 0) return;
  if (dst.device() != src.device()) {
    // Cross-device: stage a contiguous copy of the source with the destination's dtype.
    // A pinned host side is transferred directly (and waited for, as torch's default).
    Tensor staged = contiguous(to_dtype(src, dst.dtype()));
    auto host_side = [](const Tensor& host) { return host.is_pinned() ? HostSide::pinned : HostSide::pageable; };
    if (staged.sizes() == dst.sizes() && dst.is_contiguous()) {
      copy_bytes(dst.data_ptr(), dst.device(), staged.data_ptr(), staged.device(), dst.nbytes(),
                 host_side(dst.device().is_cpu() ? dst : staged));
      return;
    }
    Tensor moved = empty(staged.sizes(), staged.dtype(), dst.device());
    copy_bytes(moved.data_ptr(), moved.device(), staged.data_ptr(), staged.device(), staged.nbytes(),
               host_side(staged.device().is_cpu() ? staged : moved));
    copy_(dst, moved);
    return;
  }
  check_same_device(dst, src, "copy_");
  copy_on_device_(dst, src);
}

Tensor contiguous(const Tensor& self) {
  if (self.is_contiguous()) return self;
  return clone(self);
}

Tensor clone(const Tensor& self) {
  Tensor out = empty(self.sizes(), self.dtype(), self.device());
  copy_(out, self);
  return out;
}

Tensor to_dtype(const Tensor& self, DType dtype) {
  if (self.dtype() == dtype) return self;
  Tensor out = empty(self.sizes(), dtype, self.device());
  copy_(out, self);
  return out;
}

Tensor to_device(const Tensor& self, Device device) {
  if (self.device() == device) return self;
  Tensor out = empty(self.sizes(), self.dtype(), device);
  copy_(out, self);
  return out;
}

Tensor pin_memory(const Tensor& self) {
  TS_CHECK(self.device().is_cpu(), DeviceError, "pin_memory: ", self.str(),
           " is not on the host; only host memory can be pinned");
  if (self.is_pinned()) return self;
  Tensor out = empty_pinned(self.sizes(), self.dtype());
  copy_(out, self);
  return out;
}

Tensor argmax(const Tensor& self, int64_t dim, bool keepdim) {
  return std::get<1>(max_dim(self, dim, keepdim));
}

Tensor sum_to(const Tensor& self, const Shape& shape) {
  if (self.sizes() == shape) return self;
  TS_CHECK(self.sizes().size() >= shape.size(), ShapeError, "sum_to: cannot reduce shape ",
           shape_str(self.sizes()), " to ", shape_str(shape));
  size_t lead = self.sizes().size() - shape.size();
  Shape dims;
  for (size_t i = 0; i < self.sizes().size(); ++i) {
    if (i < lead) {
      dims.push_back(static_cast<int64_t>(i));
    } else if (shape[i - lead] == 1 && self.sizes()[i] != 1) {
      dims.push_back(static_cast<int64_t>(i));
    } else {
      TS_CHECK(shape[i - lead] == self.sizes()[i], ShapeError, "sum_to: cannot reduce shape ",
               shape_str(self.sizes()), " to ", shape_str(shape));
    }
  }
  if (dims.empty()) return view(self, shape);
  return view(sum(self, dims, true), shape);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TS_CHECK(!tensors.empty(), ValueError, "cat: expected at least one tensor");
  const Tensor& first = tensors.front();
  check_defined(first, "cat");
  int64_t d = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.sizes();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_defined(t, "cat");
    check_same_dtype(first, t, "cat");
    check_same_device(first, t, "cat");
    TS_CHECK(t.dim() == first.dim(), ShapeError, "cat: tensor ", i, " has shape ", shape_str(t.sizes()),
             " but tensor 0 has shape ", shape_str(first.sizes()));
    for (int64_t k = 0; k < t.dim(); ++k) {
      TS_CHECK(k == d || t.size(k) == first.size(k), ShapeError, "cat: tensor ", i, " has shape ",
               shape_str(t.sizes()), " but tensor 0 has shape ", shape_str(first.sizes()),
               " (they may differ only in dim ", d, ")");
    }
    shape[d] += t.size(d);
  }
  Tensor out = empty(shape, first.dtype(), first.device());
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    Tensor slot = narrow(out, d, offset, t.size(d));
    copy_(slot, t);
    offset += t.size(d);
  }
  return out;
}

}  // namespace tessera::native
