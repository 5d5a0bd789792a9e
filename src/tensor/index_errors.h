// The IndexError of an index out of range in index_select / index_add_ (a 1-D index) and
// gather / scatter_add_ (an index walked as lines along dim, kernel_shapes.h's GatherLines),
// built from plain values: the CPU throws it at once, the CUDA backend when the next host
// wait raises its kernels' report (cuda/device_error_record.cpp), with the same message.
// Internal.
#pragma once

#include <cstdint>

#include "tessera/tensor/error.h"
#include "tessera/tensor/shape.h"

namespace tessera::native {

[[noreturn]] inline void throw_index_out_of_range(const char* op, int64_t value, int64_t position, int64_t dim,
                                                  int64_t size, const Shape& self_shape) {
  throw IndexError(detail::concat(op, ": index ", value, " at position ", position, " is out of range for dim ", dim,
                                  " of size ", size, " (shape ", shape_str(self_shape), ")"));
}

// The coordinates in the index of element `position` of a gather walk (line * length + j:
// lines row-major over the index's dims other than `dim`, then j along `dim`).
inline Shape gather_coordinates(const Shape& index_shape, int64_t dim, int64_t position) {
  Shape coordinates(index_shape.size(), 0);
  if (index_shape.empty()) return coordinates;
  const int64_t length = index_shape[static_cast<size_t>(dim)];
  int64_t line = position / length;
  for (size_t d = index_shape.size(); d-- > 0;) {
    if (static_cast<int64_t>(d) == dim) continue;
    coordinates[d] = line % index_shape[d];
    line /= index_shape[d];
  }
  coordinates[static_cast<size_t>(dim)] = position % length;
  return coordinates;
}

[[noreturn]] inline void throw_gather_index_out_of_range(const char* op, int64_t value, int64_t position,
                                                         const Shape& index_shape, int64_t dim, int64_t size,
                                                         const Shape& self_shape) {
  throw IndexError(detail::concat(op, ": index ", value, " at ", shape_str(gather_coordinates(index_shape, dim, position)),
                                  " of the index of shape ", shape_str(index_shape), " is out of range for dim ", dim,
                                  " of size ", size, " (self of shape ", shape_str(self_shape), ")"));
}

}  // namespace tessera::native
