// View ops: new TensorImpls over the same storage. Device-independent.
#include <algorithm>
#include <numeric>

#include "tessera/tensor/device_check.h"
#include "tessera/tensor/native.h"

namespace tessera::native {

Tensor as_strided(const Tensor& self, const Shape& sizes, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = self.storage();
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = self.dtype();
  return Tensor(std::move(impl));
}

Shape infer_shape(const Shape& shape, int64_t numel, const Shape& from) {
  Shape out = shape;
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TS_CHECK(infer_at < 0, ShapeError, "view: only one dimension can be -1, got ", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      TS_CHECK(out[i] >= 0, ShapeError, "view: invalid size in shape ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    TS_CHECK(known != 0 && numel % known == 0, ShapeError, "view: shape ", shape_str(shape),
             " is invalid for a tensor of shape ", shape_str(from));
    out[infer_at] = numel / known;
  }
  TS_CHECK(shape_numel(out) == numel, ShapeError, "view: shape ", shape_str(shape),
           " is invalid for a tensor of shape ", shape_str(from), " (", numel, " elements)");
  return out;
}

namespace {

// Strides for viewing `self` as `shape` without a copy, or an empty optional-like flag.
// Works group by group: each run of old dims that multiply to a run of new dims must be
// contiguous within itself (PyTorch's computeStride).
bool view_strides(const Tensor& self, const Shape& shape, Shape& strides) {
  const Shape& old_sizes = self.sizes();
  const Shape& old_strides = self.strides();
  strides.assign(shape.size(), 0);
  // No elements, or one element of a 0-d tensor (whose dims are all 1 in any view): every
  // layout is a view (a 0-d tensor has no strides to follow below).
  if (self.numel() == 0 || old_sizes.empty()) {
    strides = contiguous_strides(shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[tensor_d];
    if (tensor_d == 0 ||
        (old_sizes[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

bool viewable(const Tensor& self, const Shape& shape) {
  Shape strides;
  return view_strides(self, infer_shape(shape, self.numel(), self.sizes()), strides);
}

Tensor view(const Tensor& self, const Shape& shape) {
  Shape sizes = infer_shape(shape, self.numel(), self.sizes());
  Shape strides;
  TS_CHECK(view_strides(self, sizes, strides), ShapeError, "view: cannot view a tensor of shape ",
           shape_str(self.sizes()), " and strides ", shape_str(self.strides()), " as ", shape_str(sizes),
           " without a copy; use reshape()");
  return as_strided(self, sizes, strides, self.storage_offset());
}

Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1) {
  int64_t d0 = wrap_dim(dim0, self.dim(), "transpose");
  int64_t d1 = wrap_dim(dim1, self.dim(), "transpose");
  Shape sizes = self.sizes(), strides = self.strides();
  if (self.dim() == 0) return as_strided(self, sizes, strides, self.storage_offset());
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return as_strided(self, sizes, strides, self.storage_offset());
}

Tensor permute(const Tensor& self, const Shape& dims) {
  TS_CHECK(static_cast<int64_t>(dims.size()) == self.dim(), ShapeError, "permute: ", dims.size(),
           " dims given for a tensor of shape ", shape_str(self.sizes()));
  Shape sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], self.dim(), "permute");
    TS_CHECK(!seen[d], ShapeError, "permute: dim ", d, " repeated in ", shape_str(dims));
    seen[d] = true;
    sizes[i] = self.sizes()[d];
    strides[i] = self.strides()[d];
  }
  return as_strided(self, sizes, strides, self.storage_offset());
}

Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length) {
  int64_t d = wrap_dim(dim, self.dim(), "narrow");
  int64_t extent = self.sizes()[d];
  if (start < 0) start += extent;
  TS_CHECK(start >= 0 && length >= 0 && start + length <= extent, IndexError, "narrow: range [", start, ", ",
           start + length, ") is out of bounds for dim ", d, " of size ", extent, " (shape ",
           shape_str(self.sizes()), ")");
  Shape sizes = self.sizes();
  sizes[d] = length;
  return as_strided(self, sizes, self.strides(), self.storage_offset() + start * self.strides()[d]);
}

Tensor select(const Tensor& self, int64_t dim, int64_t index) {
  TS_CHECK(self.dim() > 0, IndexError, "select: cannot index a 0-d tensor");
  int64_t d = wrap_dim(dim, self.dim(), "select");
  int64_t extent = self.sizes()[d];
  TS_CHECK(index >= -extent && index < extent, IndexError, "select: index ", index,
           " is out of bounds for dim ", d, " of size ", extent, " (shape ", shape_str(self.sizes()), ")");
  if (index < 0) index += extent;
  Shape sizes = self.sizes(), strides = self.strides();
  int64_t offset = self.storage_offset() + index * strides[d];
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return as_strided(self, sizes, strides, offset);
}

Tensor squeeze(const Tensor& self, int64_t dim) {
  if (self.dim() == 0) return as_strided(self, {}, {}, self.storage_offset());
  int64_t d = wrap_dim(dim, self.dim(), "squeeze");
  if (self.sizes()[d] != 1) return as_strided(self, self.sizes(), self.strides(), self.storage_offset());
  Shape sizes = self.sizes(), strides = self.strides();
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return as_strided(self, sizes, strides, self.storage_offset());
}

Tensor unsqueeze(const Tensor& self, int64_t dim) {
  int64_t d = wrap_dim(dim, self.dim() + 1, "unsqueeze");
  Shape sizes = self.sizes(), strides = self.strides();
  int64_t stride = d < self.dim() ? sizes[d] * strides[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return as_strided(self, sizes, strides, self.storage_offset());
}

Tensor expand(const Tensor& self, const Shape& shape) {
  TS_CHECK(shape.size() >= self.sizes().size(), ShapeError, "expand: cannot expand shape ",
           shape_str(self.sizes()), " to ", shape_str(shape));
  size_t lead = shape.size() - self.sizes().size();
  Shape sizes(shape.size()), strides(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      TS_CHECK(shape[i] >= 0, ShapeError, "expand: -1 is not allowed for new leading dims in ", shape_str(shape));
      sizes[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    int64_t old = self.sizes()[i - lead];
    int64_t target = shape[i] == -1 ? old : shape[i];
    TS_CHECK(old == target || old == 1, ShapeError, "expand: cannot expand shape ", shape_str(self.sizes()),
             " to ", shape_str(shape));
    sizes[i] = target;
    strides[i] = old == target ? self.strides()[i - lead] : 0;
  }
  return as_strided(self, sizes, strides, self.storage_offset());
}

}  // namespace tessera::native
