#include "tessera/tensor/shape.h"

#include <sstream>

#include "tessera/tensor/error.h"

namespace tessera {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  int64_t extent = std::max<int64_t>(ndim, 1);
  TS_CHECK(dim >= -extent && dim < extent, IndexError, op, ": dim ", dim,
           " is out of range for a tensor of ", ndim, " dimensions");
  return dim < 0 ? dim + extent : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    int64_t da = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    int64_t db = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    TS_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": shapes ", shape_str(a), " and ",
             shape_str(b), " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tessera
