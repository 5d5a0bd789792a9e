// torch.nn.Embedding: a lookup table of num_embeddings rows of embedding_dim values.
//
//   ts::nn::Embedding wte(50257, 768);                        // weight ~ N(0, 1)
//   ts::nn::Embedding tokens(100, 16, {.padding_idx = 0});    // row 0 zero, never updated
//   ts::Tensor x = wte(ids);                                  // ids int64 [B, T] -> [B, T, 768]
//
// Options are PyTorch's (EmbeddingOptions, shared with ts::embedding): padding_idx,
// max_norm with norm_type, scale_grad_by_freq. Sparse gradients are not supported
// (sparse = true throws). The weight is a deferred parameter like every other, its values
// keyed by (seed, name, index), the padding row zero.
#pragma once

#include <memory>

#include "tessera/autograd/functions.h"
#include "tessera/nn/module.h"
#include "tessera/nn/module_holder.h"

namespace tessera::nn {

using tessera::EmbeddingOptions;

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, const EmbeddingOptions& options = {});
  // torch.nn.Embedding.from_pretrained: a table whose weight is `embeddings` (the same
  // storage, detached), frozen (requires_grad false) unless freeze is false.
  static ModuleHolder<Embedding> from_pretrained(const Tensor& embeddings, bool freeze = true,
                                                 const EmbeddingOptions& options = {});

  Tensor forward(Tensor input) override;
  std::string extra_repr() const override;

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  // The options, padding_idx made non-negative.
  const EmbeddingOptions& options() const { return options_; }

  Tensor weight;  // [num_embeddings, embedding_dim]

 private:
  Embedding(const Tensor& embeddings, bool freeze, const EmbeddingOptions& options);
  void set_options(const EmbeddingOptions& options);

  int64_t num_embeddings_ = 0, embedding_dim_ = 0;
  EmbeddingOptions options_;
};

}  // namespace tessera::nn
