// Embedding lookup, its deterministic backward, and max_norm renormalisation on CUDA.
//
// Forward: a gather, one thread per output element. An index out of range cannot throw on
// the device: the check kernel reports the first such position (device_errors.cuh), and
// the next host wait on the device throws the CPU's IndexError, as for nll_loss; neither
// the forward nor the backward waits for the device.
// Backward: CUB's radix sort (stable) orders (index, position) pairs by index, so each
// index's positions form a run in ascending position order. A block per sorted position
// that starts a run sums the run's gradient rows column by column in that order, in
// Compute<T>, and writes its row once: no atomics, the same bits on every run, and the
// CPU's order of addition (cpu/embedding.cpp). Built with -fmad=false.
// Renorm: the distinct rows are found on the host (a rarely used option), then a block
// per row computes its norm (block_sum in double) and scales it.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_errors.cuh"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/layer_kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

// Reports the first position whose index is out of range. The kernels after it run before
// the host hears of it, so they never touch a row out of range (the forward writes zeros
// there, the backward skips it): the step's results are void, but no memory is.
__global__ void check_indices_kernel(const int64_t* index, int64_t count, int64_t num_embeddings,
                                     FirstBadScratch* scratch, DeviceErrorRecord* errors, uint64_t context) {
  for (int64_t p = thread_index(); p < count; p += thread_count()) {
    if (index[p] < 0 || index[p] >= num_embeddings) note_bad_position(scratch, p);
  }
  finish_bad_positions(scratch, [&](int64_t first) {
    report_device_error(errors, DeviceErrorCode::embedding_index, index[first], first, num_embeddings, context);
  });
}

// The CPU's IndexError for an index out of range, thrown by the next host wait.
void check_index_range(const Tensor& indices, int64_t num_embeddings, const char* op) {
  const int64_t count = indices.numel();
  if (count == 0) return;
  const int device = indices.device().index;
  const uint64_t context = register_error_context(device, {.op = op, .index_shape = indices.sizes()});
  check_indices_kernel<<<blocks_for(count), kThreads, 0, compute_stream(device)>>>(
      static_cast<const int64_t*>(indices.data_ptr()), count, num_embeddings, first_bad_scratch(device),
      device_error_slot(device), context);
  TS_CUDA_CHECK_LAUNCH("check_indices_kernel");
}

template <class T>
__global__ void embedding_kernel(const T* weight, const int64_t* index, int64_t count, int64_t dim,
                                 int64_t num_embeddings, T* out) {
  for (int64_t e = thread_index(); e < count * dim; e += thread_count()) {
    const int64_t r = e / dim, j = e % dim, row = index[r];
    out[e] = row >= 0 && row < num_embeddings ? weight[row * dim + j] : T{};
  }
}

__device__ __forceinline__ float fused(float a, float b, float c) { return ::fmaf(a, b, c); }
__device__ __forceinline__ double fused(double a, double b, double c) { return ::fma(a, b, c); }

// Block x: a sorted position; only the first position of each run works. Block y and the
// threads: columns.
template <class T>
__global__ void embedding_backward_kernel(const T* grad, const int64_t* sorted_index, const int64_t* sorted_position,
                                          int64_t count, int64_t dim, int64_t num_weights, int64_t padding_idx,
                                          bool scale_grad_by_freq, T* grad_weight) {
  using Acc = Compute<T>;
  for (int64_t start = blockIdx.x; start < count; start += gridDim.x) {
    const int64_t row = sorted_index[start];
    if ((start > 0 && sorted_index[start - 1] == row) || row == padding_idx) continue;
    if (row < 0 || row >= num_weights) continue;  // reported by the check; never written
    int64_t end = start + 1;
    while (end < count && sorted_index[end] == row) ++end;
    const Acc scale = static_cast<Acc>(1.0 / static_cast<double>(end - start));
    for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < dim;
         j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
      Acc acc = 0;
      for (int64_t s = start; s < end; ++s) {
        const Acc g = load(grad[sorted_position[s] * dim + j]);
        acc = scale_grad_by_freq ? fused(g, scale, acc) : acc + g;
      }
      grad_weight[row * dim + j] = store<T>(acc);
    }
  }
}

__global__ void iota_kernel(int64_t* out, int64_t count) {
  for (int64_t p = thread_index(); p < count; p += thread_count()) out[p] = p;
}

template <class T>
__global__ void renorm_kernel(T* weight, const int64_t* rows, int64_t dim, double max_norm, double norm_type) {
  T* row = weight + rows[blockIdx.x] * dim;
  double local = 0;
  const bool infinite = isinf(norm_type);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const double v = fabs(static_cast<double>(load(row[j])));
    if (infinite) {
      local = fmax(local, v);
    } else {
      local += norm_type == 2.0 ? v * v : pow(v, norm_type);
    }
  }
  double norm;
  if (infinite) {
    norm = block_reduce(local, [](double a, double b) { return fmax(a, b); });
  } else {
    const double total = block_sum(local);
    norm = norm_type == 2.0 ? sqrt(total) : pow(total, 1.0 / norm_type);
  }
  if (norm <= max_norm) return;
  const Compute<T> scale = static_cast<Compute<T>>(max_norm / (norm + 1e-7));
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) row[j] = store<T>(load(row[j]) * scale);
}

}  // namespace

Tensor embedding(const Tensor& weight_in, const Tensor& indices_in) {
  const Shape out_shape = embedding_shape(weight_in, indices_in);
  DeviceGuard guard = enter_cuda_device(weight_in, "embedding");
  Tensor weight = contiguous(weight_in), indices = contiguous(indices_in);
  Tensor output = empty(out_shape, weight.dtype(), weight.device());
  const int64_t count = indices.numel(), dim = weight.size(1);
  check_index_range(indices, weight.size(0), "embedding");
  if (count == 0 || dim == 0) return output;
  device_dispatch_all(weight.dtype(), [&]<class T>() {
    embedding_kernel<T><<<blocks_for(count * dim), kThreads, 0, compute_stream(weight.device().index)>>>(
        static_cast<const T*>(weight.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()), count, dim,
        weight.size(0), static_cast<T*>(output.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("embedding_kernel");
  });
  return output;
}

Tensor embedding_backward(const Tensor& grad_output_in, const Tensor& indices_in, int64_t num_weights,
                          int64_t padding_idx, bool scale_grad_by_freq) {
  const EmbeddingGradLayout layout =
      check_embedding_backward_operands(grad_output_in, indices_in, num_weights, padding_idx);
  DeviceGuard guard = enter_cuda_device(grad_output_in, "embedding_backward");
  const Device device = grad_output_in.device();
  const cudaStream_t stream = compute_stream(device.index);
  Tensor grad_output = contiguous(grad_output_in), indices = contiguous(indices_in);
  Tensor grad_weight = zeros({num_weights, layout.dim}, grad_output.dtype(), device);
  if (layout.rows == 0 || layout.dim == 0) return grad_weight;
  check_index_range(indices, num_weights, "embedding_backward");
  TS_CHECK(layout.rows <= INT32_MAX, ValueError, "embedding_backward: at most ", INT32_MAX,
           " indices on CUDA, got ", layout.rows);

  // Sort (index, position) by index; the sort is stable, so positions stay ascending.
  const int count = static_cast<int>(layout.rows);
  Tensor positions = empty({layout.rows}, DType::i64, device);
  iota_kernel<<<blocks_for(layout.rows), kThreads, 0, stream>>>(static_cast<int64_t*>(positions.data_ptr()),
                                                                 layout.rows);
  TS_CUDA_CHECK_LAUNCH("iota_kernel");
  Tensor sorted_index = empty({layout.rows}, DType::i64, device);
  Tensor sorted_position = empty({layout.rows}, DType::i64, device);
  const int end_bit = std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(num_weights))));
  size_t temp_bytes = 0;
  TS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int64_t*>(indices.data_ptr()),
                                                static_cast<int64_t*>(sorted_index.data_ptr()),
                                                static_cast<const int64_t*>(positions.data_ptr()),
                                                static_cast<int64_t*>(sorted_position.data_ptr()), count, 0, end_bit,
                                                stream));
  Tensor temp = empty({static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))}, DType::u8, device);
  TS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes,
                                                static_cast<const int64_t*>(indices.data_ptr()),
                                                static_cast<int64_t*>(sorted_index.data_ptr()),
                                                static_cast<const int64_t*>(positions.data_ptr()),
                                                static_cast<int64_t*>(sorted_position.data_ptr()), count, 0, end_bit,
                                                stream));

  device_dispatch_floating_bf16(grad_output.dtype(), "embedding_backward", [&]<class T>() {
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(layout.rows, INT32_MAX)),
                    static_cast<unsigned>(std::min<int64_t>((layout.dim + kThreads - 1) / kThreads, kMaxBlocks)));
    embedding_backward_kernel<T><<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(grad_output.data_ptr()), static_cast<const int64_t*>(sorted_index.data_ptr()),
        static_cast<const int64_t*>(sorted_position.data_ptr()), layout.rows, layout.dim, num_weights, padding_idx,
        scale_grad_by_freq, static_cast<T*>(grad_weight.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
  });
  return grad_weight;
}

void embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  check_embedding_renorm_operands(weight, indices, max_norm, norm_type);
  DeviceGuard guard = enter_cuda_device(weight, "embedding_renorm_");
  if (indices.numel() == 0 || weight.size(1) == 0) return;
  check_index_range(contiguous(indices), weight.size(0), "embedding_renorm_");
  // Waits for the device, so a bad index reported just above is thrown here, before any row is touched.
  std::vector<int64_t> rows = view(contiguous(indices), {-1}).to_vector<int64_t>();
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  Tensor unique = empty({static_cast<int64_t>(rows.size())}, DType::i64, Device::cpu());
  std::copy(rows.begin(), rows.end(), unique.data_ptr<int64_t>());
  unique = to_device(unique, weight.device());
  device_dispatch_floating_bf16(weight.dtype(), "embedding_renorm_", [&]<class T>() {
    renorm_kernel<T><<<static_cast<unsigned>(rows.size()), kThreads, 0, compute_stream(weight.device().index)>>>(
        static_cast<T*>(weight.data_ptr()), static_cast<const int64_t*>(unique.data_ptr()), weight.size(1), max_norm,
        norm_type);
    TS_CUDA_CHECK_LAUNCH("renorm_kernel");
  });
}

}  // namespace tessera::cuda
