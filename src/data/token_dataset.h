// A Dataset of token windows for language-model training, over llm.c token files
// (token_file.h; read with pread, so a file truncated during training is a DataError naming
// it, not a SIGBUS). Sample i is a window of T+1 consecutive tokens of one
// file: data = its first T, target = its last T (the next token at each position), both
// int64 [rows, T] in a Batch. A file of n tokens holds floor((n - 1) / T) windows, at
// tokens [k*T, k*T + T] for k = 0, 1, ...; the files' windows follow one another in order.
//
// With the DataLoader this gives both orders a GPT trainer wants, split across ranks by
// rows of the global batch (rank r of W gets rows [r*B/W, (r+1)*B/W), as DistributedSampler
// does, so the global batch is the same at any W):
// - sequential, llm.c's order: shuffle = false, drop_last = true. Global batch k is tokens
//   [k*B*T, k*B*T + B*T] of the (first) file; its inputs the first B*T, targets shifted by
//   one. (llm.c also drops each shard's last partial batch; here a batch may span the
//   boundary of two files instead, and with one file the two are the same.)
// - random: shuffle = true and a seed: the windows in a fresh seeded order each epoch
//   (sampler.h's epoch_permutation), the same at any number of ranks.
//
//   ts::data::TokenDataset train("data/brown/train.bin", {.seq_len = 256, .vocab_size = 50257});
//   ts::data::DataLoader loader(train, {.batch_size = 8, .shuffle = true, .seed = 1, .drop_last = true,
//                                       .sampler = {.rank = rank, .world_size = world}});
//   for (const ts::data::Batch& batch : loader.epoch(0)) { ... batch.data, batch.target: [rows, 256] ... }
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/data/token_file.h"

namespace tessera::data {

struct TokenDatasetOptions {
  int64_t seq_len = 1024;  // T: tokens per row of a batch (a window is T + 1)
  int64_t vocab_size = 0;  // when > 0, every token is checked to be below it on loading
};

class TokenDataset : public Dataset {
 public:
  // Opens the files (DataError naming the file and byte offset for a bad one) and counts
  // their windows; a DataError when they hold none (every file shorter than T + 1 tokens).
  TokenDataset(const std::vector<std::filesystem::path>& files, TokenDatasetOptions options = {});
  explicit TokenDataset(const std::filesystem::path& file, TokenDatasetOptions options = {});

  int64_t size() const override { return window_starts_.empty() ? 0 : window_starts_.back(); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  // The T + 1 tokens of window `index`.
  std::vector<uint16_t> window(int64_t index) const;
  int64_t seq_len() const { return options_.seq_len; }
  int64_t num_tokens() const;  // in all files
  const std::vector<TokenFile>& files() const { return files_; }

 private:
  void read_window(int64_t index, std::span<uint16_t> out) const;

  TokenDatasetOptions options_;
  std::vector<TokenFile> files_;
  // window_starts_[f]: the index of file f's first window; one more entry at the end.
  std::vector<int64_t> window_starts_;
};

}  // namespace tessera::data
