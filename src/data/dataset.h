// What a DataLoader reads from: a Dataset hands out whole batches by sample index, and a
// Batch says where its rows sit in the global batch, so that per-sample randomness
// (dropout keyed by global row) is the same whichever rank a sample lands on.
//
//   struct Squares : ts::data::Dataset {
//     int64_t size() const override { return 100; }
//     ts::data::Batch get_batch(const std::vector<int64_t>& indices) const override { ... }
//   };
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera::data {

struct Batch {
  Tensor data;    // [rows, ...], e.g. float32 [rows, 1, 28, 28] for MNIST
  Tensor target;  // int64 [rows] (a class per row), or [rows, T] (TokenDataset: a token per position)
  int64_t index = 0;        // batch number within the epoch, the same on every rank
  int64_t first_row = 0;    // position of this batch's first row in the global batch
  int64_t global_rows = 0;  // rows of the global batch that this batch is a part of

  // Rows in this batch; may be 0 on a rank whose share of a short last batch is empty.
  int64_t rows() const { return target.defined() ? target.size(0) : 0; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The samples at `indices`, in that order: data [indices.size(), ...] and target
  // [indices.size()]. Must accept an empty list (tensors with 0 rows) and must be safe to
  // call from the DataLoader's prefetch thread while the caller's thread runs on.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
  // The same for a batch of epoch `epoch`, which the DataLoader calls: datasets with random
  // augmentation key it by (seed, epoch, sample index) so that it is reproducible and the
  // same on every rank and worker. By default the epoch is ignored.
  virtual Batch get_batch_in_epoch(const std::vector<int64_t>& indices, int64_t /*epoch*/) const {
    return get_batch(indices);
  }
};

}  // namespace tessera::data
