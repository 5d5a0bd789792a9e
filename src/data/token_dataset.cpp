#include "tessera/data/token_dataset.h"

#include <algorithm>

#include "tessera/data/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::data {

TokenDataset::TokenDataset(const std::vector<std::filesystem::path>& files, TokenDatasetOptions options)
    : options_(options) {
  TS_CHECK(options.seq_len >= 1, ValueError, "TokenDataset: seq_len must be at least 1, got ", options.seq_len);
  TS_CHECK(options.vocab_size >= 0, ValueError, "TokenDataset: vocab_size must be >= 0 (0: unchecked), got ",
           options.vocab_size);
  TS_CHECK(!files.empty(), ValueError, "TokenDataset: no token files given");
  window_starts_.push_back(0);
  for (const std::filesystem::path& path : files) {
    TokenFile file(path);
    if (options.vocab_size > 0) file.check_below(options.vocab_size);
    const int64_t windows = file.size() > 0 ? (file.size() - 1) / options.seq_len : 0;
    window_starts_.push_back(window_starts_.back() + windows);
    files_.push_back(std::move(file));
  }
  if (size() == 0) {
    std::string names;
    for (const TokenFile& file : files_)
      names += detail::concat(names.empty() ? "" : ", ", "'", file.path().string(), "' (", file.size(), " tokens)");
    throw DataError(detail::concat("TokenDataset: no window of seq_len + 1 = ", options.seq_len + 1,
                                   " tokens fits in any of the token files ", names));
  }
}

TokenDataset::TokenDataset(const std::filesystem::path& file, TokenDatasetOptions options)
    : TokenDataset(std::vector<std::filesystem::path>{file}, options) {}

int64_t TokenDataset::num_tokens() const {
  int64_t total = 0;
  for (const TokenFile& file : files_) total += file.size();
  return total;
}

std::vector<uint16_t> TokenDataset::window(int64_t index) const {
  std::vector<uint16_t> tokens(static_cast<size_t>(options_.seq_len + 1));
  read_window(index, tokens);
  return tokens;
}

void TokenDataset::read_window(int64_t index, std::span<uint16_t> out) const {
  TS_CHECK(index >= 0 && index < size(), IndexError, "TokenDataset: window ", index, " is out of range for ", size(),
           " windows");
  // The last file whose first window is at or before `index` (files without windows share
  // their start with the next one, so take the last of equals).
  const auto file = std::upper_bound(window_starts_.begin(), window_starts_.end(), index) - window_starts_.begin() - 1;
  const int64_t first = (index - window_starts_[file]) * options_.seq_len;
  files_[file].read(first, out);
}

Batch TokenDataset::get_batch(const std::vector<int64_t>& indices) const {
  const auto rows = static_cast<int64_t>(indices.size());
  const int64_t T = options_.seq_len;
  Batch batch;
  batch.data = empty({rows, T}, {.dtype = DType::i64});
  batch.target = empty({rows, T}, {.dtype = DType::i64});
  if (rows == 0) return batch;
  int64_t* data = batch.data.data_ptr<int64_t>();
  int64_t* target = batch.target.data_ptr<int64_t>();
  std::vector<uint16_t> tokens(static_cast<size_t>(T + 1));
  for (int64_t row = 0; row < rows; ++row) {
    read_window(indices[static_cast<size_t>(row)], tokens);
    std::copy(tokens.begin(), tokens.end() - 1, data + row * T);
    std::copy(tokens.begin() + 1, tokens.end(), target + row * T);
  }
  return batch;
}

}  // namespace tessera::data
