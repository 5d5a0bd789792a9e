// Shapes, strides and the small amount of arithmetic on them that every op shares.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
// "[2, 3, 4]"
std::string shape_str(const Shape& shape);
// Maps a possibly negative dim into [0, ndim); throws IndexError naming `op` otherwise.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);
// NumPy broadcasting of two shapes; throws ShapeError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

}  // namespace tessera
