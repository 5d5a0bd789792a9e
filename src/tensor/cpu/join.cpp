// Concatenation along a dim.
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/native.h"

namespace tessera::native {

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
