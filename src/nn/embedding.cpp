#include "tessera/nn/embedding.h"

#include <sstream>

namespace tessera::nn {

void Embedding::set_options(const EmbeddingOptions& options) {
  options_ = options;
  TS_CHECK(!options.sparse, ValueError,
           "Embedding: sparse gradients (sparse=true) are not supported; Tessera's gradients are dense");
  if (options.padding_idx) {
    int64_t index = *options.padding_idx;
    TS_CHECK(index < num_embeddings_ && index >= -num_embeddings_, ValueError, "Embedding: padding_idx ", index,
             " must be within num_embeddings (", num_embeddings_, ")");
    if (index < 0) index += num_embeddings_;
    options_.padding_idx = index;
  }
  TS_CHECK(!options.max_norm || *options.max_norm >= 0, ValueError, "Embedding: max_norm must be non-negative, got ",
           options.max_norm.value_or(0));
  TS_CHECK(options.norm_type > 0, ValueError, "Embedding: norm_type must be positive, got ", options.norm_type);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, const EmbeddingOptions& options)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  TS_CHECK(num_embeddings >= 0 && embedding_dim >= 0, ValueError,
           "Embedding: num_embeddings and embedding_dim must be non-negative, got ", num_embeddings, " and ",
           embedding_dim);
  set_options(options);
  // PyTorch: normal_(weight), then the padding row filled with zeros.
  InitRule rule = InitRule::normal(0.0, 1.0);
  if (options_.padding_idx) rule = rule.with_zeros(*options_.padding_idx * embedding_dim, (*options_.padding_idx + 1) * embedding_dim);
  weight = deferred_parameter({num_embeddings, embedding_dim}, rule);
  register_parameter("weight", weight);
}

Embedding::Embedding(const Tensor& embeddings, bool freeze, const EmbeddingOptions& options) {
  TS_CHECK(embeddings.defined() && embeddings.dim() == 2, ShapeError,
           "Embedding.from_pretrained: embeddings must be 2-D [num_embeddings, embedding_dim], got ",
           embeddings.defined() ? shape_str(embeddings.sizes()) : std::string("an undefined tensor"));
  num_embeddings_ = embeddings.size(0);
  embedding_dim_ = embeddings.size(1);
  set_options(options);
  weight = embeddings.detach();
  register_parameter("weight", weight, !freeze);
}

ModuleHolder<Embedding> Embedding::from_pretrained(const Tensor& embeddings, bool freeze,
                                                   const EmbeddingOptions& options) {
  return ModuleHolder<Embedding>(std::shared_ptr<Embedding>(new Embedding(embeddings, freeze, options)));
}

Tensor Embedding::forward(Tensor input) { return embedding(input, weight, options_); }

std::string Embedding::extra_repr() const {
  std::ostringstream out;
  out << num_embeddings_ << ", " << embedding_dim_;
  if (options_.padding_idx) out << ", padding_idx=" << *options_.padding_idx;
  if (options_.max_norm) out << ", max_norm=" << *options_.max_norm;
  if (options_.norm_type != 2.0) out << ", norm_type=" << options_.norm_type;
  if (options_.scale_grad_by_freq) out << ", scale_grad_by_freq=True";
  return out.str();
}

}  // namespace tessera::nn
