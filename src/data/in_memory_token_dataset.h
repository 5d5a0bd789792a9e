// TokenDataset's windows over tokens already in memory: a tokenised string, a tensor built
// by a script, a test's sequence. Sample i is tokens [i*T, i*T + T]: data = its first T,
// target = its last T, both int64 [rows, T] in a Batch, exactly as TokenDataset gives them
// for a token file holding the same tokens (so a DataLoader over either yields the same
// batches). n tokens hold floor((n - 1) / T) windows.
//
//   std::vector<int64_t> ids = tokenizer.encode(text);
//   ts::data::InMemoryTokenDataset train(ids, {.seq_len = 64, .vocab_size = 50257});
//   ts::data::DataLoader loader(train, {.batch_size = 8, .shuffle = true, .seed = 1, .drop_last = true});
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/data/token_dataset.h"

namespace tessera::data {

class InMemoryTokenDataset : public Dataset {
 public:
  // Tokens as int64 ids; options as TokenDataset's (vocab_size > 0 checks every id is in
  // [0, vocab_size)). A ValueError naming the position of a bad id, or when no window fits.
  explicit InMemoryTokenDataset(std::vector<int64_t> tokens, TokenDatasetOptions options = {});
  // A 1-D integer tensor of ids (any device; copied to the host once).
  explicit InMemoryTokenDataset(const Tensor& tokens, TokenDatasetOptions options = {});

  int64_t size() const override { return (static_cast<int64_t>(tokens_.size()) - 1) / options_.seq_len; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  int64_t seq_len() const { return options_.seq_len; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  std::vector<int64_t> tokens_;
  TokenDatasetOptions options_;
};

}  // namespace tessera::data
