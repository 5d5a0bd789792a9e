// Differentiable split and chunk: the pieces are views of the input, recorded as one
// node with one output per piece, whose backward concatenates the pieces' gradients (the
// engine gives zeros for pieces that received none). So q, k, v = qkv.split(C, 2) costs one
// gradient buffer in backward, not one zero-filled input-sized buffer per piece.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
  std::vector<Tensor> pieces = native::split_with_sizes(x, split_sizes, dim);
  if (needs_grad({x}) && !pieces.empty()) {
    const int64_t d = wrap_dim(dim, x.dim(), "split");
    record("SplitBackward", {x}, pieces, [d](const TensorList& g) { return TensorList{native::cat(g, d)}; });
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  TS_CHECK(x.defined() && x.dim() > 0, ShapeError, "split: expected a tensor of at least 1 dim, got ",
           x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  const int64_t size = x.size(wrap_dim(dim, x.dim(), "split"));
  TS_CHECK(split_size > 0 || (split_size == 0 && size == 0), ValueError, "split: split_size must be positive, got ",
           split_size, " for dim ", dim, " of size ", size);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < size; start += split_size) sizes.push_back(std::min(split_size, size - start));
  if (sizes.empty()) sizes.push_back(0);  // as PyTorch: an empty dim gives one empty piece
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  TS_CHECK(chunks > 0, ValueError, "chunk: chunks must be positive, got ", chunks);
  TS_CHECK(x.defined() && x.dim() > 0, ShapeError, "chunk: expected a tensor of at least 1 dim, got ",
           x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  const int64_t size = x.size(wrap_dim(dim, x.dim(), "chunk"));
  const int64_t piece = (size + chunks - 1) / chunks;
  if (piece == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), dim);
  return split(x, piece, dim);
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const { return tessera::split(*this, split_size, dim); }
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& split_sizes, int64_t dim) const {
  return tessera::split(*this, split_sizes, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const { return tessera::chunk(*this, chunks, dim); }

}  // namespace tessera
