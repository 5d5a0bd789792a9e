// masked_fill and split_with_sizes: native ops composed of others, the same on every
// device (masked_fill is a where against a 0-d fill value; the pieces of a split are views).
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/native.h"

namespace tessera::native {

Tensor masked_fill(const Tensor& self, const Tensor& mask, double value) {
  check_defined(self, "masked_fill");
  check_defined(mask, "masked_fill", "mask");
  TS_CHECK(mask.dtype() == DType::boolean, DTypeError, "masked_fill: mask must be bool, got ",
           dtype_name(mask.dtype()), " of shape ", shape_str(mask.sizes()),
           " (a comparison gives bool; or convert with .to(DType::boolean))");
  check_same_device(self, mask, "masked_fill");
  broadcast_shapes(self.sizes(), mask.sizes(), "masked_fill");  // names both shapes when they do not fit
  return where(mask, full({}, value, self.dtype(), self.device()), self);
}

std::vector<Tensor> split_with_sizes(const Tensor& self, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined(self, "split");
  TS_CHECK(self.dim() > 0, ShapeError, "split: cannot split a 0-d tensor");
  const int64_t d = wrap_dim(dim, self.dim(), "split");
  int64_t total = 0;
  for (int64_t size : sizes) {
    TS_CHECK(size >= 0, ValueError, "split: sizes must be non-negative, got ", shape_str(sizes));
    total += size;
  }
  TS_CHECK(total == self.size(d), ShapeError, "split: sizes ", shape_str(sizes), " sum to ", total,
           " but dim ", d, " of shape ", shape_str(self.sizes()), " has size ", self.size(d));
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t size : sizes) {
    pieces.push_back(narrow(self, d, start, size));
    start += size;
  }
  return pieces;
}

}  // namespace tessera::native
