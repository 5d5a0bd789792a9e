// Embedding lookup, its deterministic scatter-add backward, and max_norm renormalisation
// on the CPU.
//
// Forward: row r of the output is row indices[r] of the weight (a copy of `dim` elements),
// rows split across threads. Every index is checked first (an IndexError names it).
// Backward: the positions are sorted by (index, position); each run of equal indices is a
// segment whose gradient rows are summed in position order into that index's row. A row
// is written by one thread only and its sum never depends on how segments were shared, so
// the result has the same bits at any thread count and on every run. The order is the one
// PyTorch's embedding_dense_backward_cpu adds in (ascending position, starting from zero,
// acc = fma(grad, scale, acc) with scale 1 or 1 / count), so the bits are PyTorch's too.
// Compiled with -ffp-contract=off (src/tensor/meson.build), like layer_norm.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/layer_kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

// Throws for the first index outside [0, num_embeddings), naming it and its position.
void check_index_range(const int64_t* index, int64_t count, int64_t num_embeddings, const Shape& shape,
                       const char* op) {
  for (int64_t p = 0; p < count; ++p) {
    TS_CHECK(index[p] >= 0 && index[p] < num_embeddings, IndexError, op, ": index ", index[p], " at position ", p,
             " of indices ", shape_str(shape), " is out of range for ", num_embeddings, " embeddings (valid: 0 to ",
             num_embeddings - 1, ")");
  }
}

// (index, position) pairs sorted by index, then position; and where each index's run starts.
struct Segments {
  std::vector<std::pair<int64_t, int64_t>> sorted;
  std::vector<int64_t> starts;  // segment k is sorted[starts[k], starts[k + 1])
};

Segments segments_of(const int64_t* index, int64_t count) {
  Segments s;
  s.sorted.resize(static_cast<size_t>(count));
  for (int64_t p = 0; p < count; ++p) s.sorted[p] = {index[p], p};
  std::sort(s.sorted.begin(), s.sorted.end());
  for (int64_t p = 0; p < count; ++p) {
    if (p == 0 || s.sorted[p].first != s.sorted[p - 1].first) s.starts.push_back(p);
  }
  s.starts.push_back(count);
  return s;
}

}  // namespace

Tensor embedding(const Tensor& weight_in, const Tensor& indices_in) {
  const char* op = "embedding";
  Shape out_shape = embedding_shape(weight_in, indices_in);
  check_cpu(weight_in, op);
  Tensor weight = contiguous(weight_in), indices = contiguous(indices_in);
  Tensor output = empty(out_shape, weight.dtype(), weight.device());
  const int64_t count = indices.numel(), dim = weight.size(1), num_embeddings = weight.size(0);
  if (count == 0) return output;
  const int64_t* index = indices.data_ptr<int64_t>();
  check_index_range(index, count, num_embeddings, indices.sizes(), op);
  if (dim == 0) return output;
  const size_t row_bytes = static_cast<size_t>(dim) * weight.element_size();
  const auto* source = static_cast<const unsigned char*>(weight.data_ptr());
  auto* target = static_cast<unsigned char*>(output.data_ptr());
#pragma omp parallel for if (count * dim > cpu::kParallelGrain)
  for (int64_t r = 0; r < count; ++r) {
    std::memcpy(target + static_cast<size_t>(r) * row_bytes, source + static_cast<size_t>(index[r]) * row_bytes,
                row_bytes);
  }
  return output;
}

Tensor embedding_backward(const Tensor& grad_output_in, const Tensor& indices_in, int64_t num_weights,
                          int64_t padding_idx, bool scale_grad_by_freq) {
  const char* op = "embedding_backward";
  const EmbeddingGradLayout layout =
      check_embedding_backward_operands(grad_output_in, indices_in, num_weights, padding_idx);
  check_cpu(grad_output_in, op);
  Tensor grad_output = contiguous(grad_output_in), indices = contiguous(indices_in);
  Tensor grad_weight = zeros({num_weights, layout.dim}, grad_output.dtype(), grad_output.device());
  if (layout.rows == 0 || layout.dim == 0) return grad_weight;
  const int64_t* index = indices.data_ptr<int64_t>();
  check_index_range(index, layout.rows, num_weights, indices.sizes(), op);
  const Segments segments = segments_of(index, layout.rows);
  const int64_t segment_count = static_cast<int64_t>(segments.starts.size()) - 1;

  dispatch_floating(grad_output.dtype(), op, [&]<class T>() {
    const T* grad = grad_output.data_ptr<T>();
    T* out = grad_weight.data_ptr<T>();
    const int64_t dim = layout.dim;
#pragma omp parallel for schedule(dynamic, 16) if (layout.rows * dim > cpu::kParallelGrain)
    for (int64_t k = 0; k < segment_count; ++k) {
      const int64_t begin = segments.starts[k], end = segments.starts[k + 1];
      const int64_t row = segments.sorted[begin].first;
      if (row == padding_idx) continue;
      T* acc = out + row * dim;
      if (scale_grad_by_freq) {
        const T scale = static_cast<T>(1.0 / static_cast<double>(end - begin));
        for (int64_t s = begin; s < end; ++s) {
          const T* g = grad + segments.sorted[s].second * dim;
          for (int64_t j = 0; j < dim; ++j) acc[j] = std::fma(g[j], scale, acc[j]);
        }
      } else {
        for (int64_t s = begin; s < end; ++s) {
          const T* g = grad + segments.sorted[s].second * dim;
          for (int64_t j = 0; j < dim; ++j) acc[j] = acc[j] + g[j];
        }
      }
    }
  });
  return grad_weight;
}

void embedding_renorm_(Tensor& weight, const Tensor& indices_in, double max_norm, double norm_type) {
  const char* op = "embedding_renorm_";
  check_embedding_renorm_operands(weight, indices_in, max_norm, norm_type);
  check_cpu(weight, op);
  Tensor indices = contiguous(indices_in);
  const int64_t count = indices.numel(), dim = weight.size(1);
  if (count == 0 || dim == 0) return;
  const int64_t* index = indices.data_ptr<int64_t>();
  check_index_range(index, count, weight.size(0), indices.sizes(), op);
  std::vector<int64_t> rows(index, index + count);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());

  dispatch_floating(weight.dtype(), op, [&]<class T>() {
    T* data = weight.data_ptr<T>();
    const int64_t unique = static_cast<int64_t>(rows.size());
#pragma omp parallel for if (unique * dim > cpu::kParallelGrain)
    for (int64_t k = 0; k < unique; ++k) {
      T* row = data + rows[k] * dim;
      double norm = 0;
      if (std::isinf(norm_type)) {
        for (int64_t j = 0; j < dim; ++j) norm = std::max(norm, std::abs(static_cast<double>(row[j])));
      } else if (norm_type == 2.0) {
        for (int64_t j = 0; j < dim; ++j) norm += static_cast<double>(row[j]) * static_cast<double>(row[j]);
        norm = std::sqrt(norm);
      } else {
        for (int64_t j = 0; j < dim; ++j) norm += std::pow(std::abs(static_cast<double>(row[j])), norm_type);
        norm = std::pow(norm, 1.0 / norm_type);
      }
      if (norm > max_norm) {
        const T scale = static_cast<T>(max_norm / (norm + 1e-7));
        for (int64_t j = 0; j < dim; ++j) row[j] *= scale;
      }
    }
  });
}

}  // namespace tessera::cpu
