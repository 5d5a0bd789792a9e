// Differentiable embedding lookup (F.embedding). The backward needs only the indices and
// the table's size, never the weight itself: under FSDP the table may be released between
// forward and backward. max_norm renormalises the looked-up rows in place first, without
// recording, as PyTorch does.
#include "tessera/autograd/functions/recording.h"
#include "tessera/autograd/grad_mode.h"

namespace tessera {

Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingOptions& options) {
  TS_CHECK(!options.sparse, ValueError,
           "embedding: sparse gradients (sparse=true) are not supported; Tessera's gradients are dense");
  TS_CHECK(weight.defined() && weight.dim() == 2, ShapeError,
           "embedding: weight must be 2-D [num_embeddings, embedding_dim], got ",
           weight.defined() ? shape_str(weight.sizes()) : std::string("an undefined tensor"));
  const int64_t num_weights = weight.size(0);
  int64_t padding_idx = -1;
  if (options.padding_idx) {
    padding_idx = *options.padding_idx;
    TS_CHECK(padding_idx < num_weights && padding_idx >= -num_weights, ValueError, "embedding: padding_idx ",
             padding_idx, " must be within num_embeddings (", num_weights, ")");
    if (padding_idx < 0) padding_idx += num_weights;
  }
  if (options.max_norm) {
    NoGradGuard no_grad;
    Tensor table = weight;
    native::embedding_renorm_(table, input, *options.max_norm, options.norm_type);
  }
  Tensor out = native::embedding(weight, input);
  if (needs_grad({weight})) {
    record("EmbeddingBackward", {weight}, {out},
           [indices = saved(input), num_weights, padding_idx,
            scale_grad_by_freq = options.scale_grad_by_freq](const TensorList& g) {
             return TensorList{native::embedding_backward(g[0], indices, num_weights, padding_idx, scale_grad_by_freq)};
           });
  }
  return out;
}

}  // namespace tessera
