#include "tessera/data/in_memory_token_dataset.h"

#include <algorithm>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::data {

namespace {

std::vector<int64_t> host_ids(const Tensor& tokens) {
  TS_CHECK(tokens.defined() && tokens.dim() == 1, ShapeError, "InMemoryTokenDataset: expected a 1-D tensor of ids, got ",
           tokens.defined() ? shape_str(tokens.sizes()) : std::string("an undefined tensor"));
  TS_CHECK(!is_floating(tokens.dtype()) && tokens.dtype() != DType::boolean, DTypeError,
           "InMemoryTokenDataset: expected integer ids, got ", dtype_name(tokens.dtype()));
  return tokens.to(Device::cpu()).to(DType::i64).contiguous().to_vector<int64_t>();
}

}  // namespace

InMemoryTokenDataset::InMemoryTokenDataset(std::vector<int64_t> tokens, TokenDatasetOptions options)
    : tokens_(std::move(tokens)), options_(options) {
  TS_CHECK(options.seq_len >= 1, ValueError, "InMemoryTokenDataset: seq_len must be at least 1, got ",
           options.seq_len);
  TS_CHECK(options.vocab_size >= 0, ValueError, "InMemoryTokenDataset: vocab_size must be >= 0 (0: unchecked), got ",
           options.vocab_size);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const bool in_range = tokens_[i] >= 0 && (options.vocab_size == 0 || tokens_[i] < options.vocab_size);
    TS_CHECK(in_range, ValueError, "InMemoryTokenDataset: token ", i, " is ", tokens_[i], ", outside [0, ",
             options.vocab_size > 0 ? std::to_string(options.vocab_size) : std::string("inf"), ")");
  }
  TS_CHECK(size() > 0, ValueError, "InMemoryTokenDataset: no window of seq_len + 1 = ", options.seq_len + 1,
           " tokens fits in ", tokens_.size(), " tokens");
}

InMemoryTokenDataset::InMemoryTokenDataset(const Tensor& tokens, TokenDatasetOptions options)
    : InMemoryTokenDataset(host_ids(tokens), options) {}

Batch InMemoryTokenDataset::get_batch(const std::vector<int64_t>& indices) const {
  const auto rows = static_cast<int64_t>(indices.size());
  const int64_t T = options_.seq_len;
  Batch batch;
  batch.data = empty({rows, T}, {.dtype = DType::i64});
  batch.target = empty({rows, T}, {.dtype = DType::i64});
  int64_t* data = batch.data.data_ptr<int64_t>();
  int64_t* target = batch.target.data_ptr<int64_t>();
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t index = indices[static_cast<size_t>(row)];
    TS_CHECK(index >= 0 && index < size(), IndexError, "InMemoryTokenDataset: window ", index,
             " is out of range for ", size(), " windows");
    const auto first = tokens_.begin() + index * T;
    std::copy(first, first + T, data + row * T);
    std::copy(first + 1, first + T + 1, target + row * T);
  }
  return batch;
}

}  // namespace tessera::data
