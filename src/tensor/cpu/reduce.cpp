// Reductions on the CPU. The input is arranged as [outer, inner] with the reduced dims
// inner (a copy only when they are neither a suffix nor a prefix of the dims); sums of
// float accumulate in double, of bfloat16 in float (rounded to bfloat16 once, as PyTorch).
#include <cmath>
#include <limits>
#include <numeric>

#include "tessera/tensor/cpu/convert.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

// True when the reduced dims are exactly the leading dims and the tensor is contiguous:
// then the input is [inner, outer] row-major and rows can be accumulated directly.
bool reduces_prefix(const Tensor& self, const ReductionPlan& plan) {
  if (!self.is_contiguous()) return false;
  bool in_prefix = true;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (plan.reduced[d] && !in_prefix) return false;
    if (!plan.reduced[d]) in_prefix = false;
  }
  return plan.outer > 1 && plan.inner > 1;
}

template <class T>
using Accumulator = std::conditional_t<std::is_same_v<T, BFloat16>, float,
                                       std::conditional_t<std::is_floating_point_v<T>, double, int64_t>>;

template <class T>
void sum_kernel(const Tensor& self, const ReductionPlan& plan, const Tensor& out) {
  T* po = out.data_ptr<T>();
  const int64_t outer = plan.outer, inner = plan.inner;
  if (reduces_prefix(self, plan)) {
    const T* x = static_cast<const T*>(self.data_ptr());
    constexpr int64_t kBlock = 256;  // columns per task; the accumulators stay in L1
    const int64_t blocks = (outer + kBlock - 1) / kBlock;
#pragma omp parallel for if (outer * inner > cpu::kParallelGrain && blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * kBlock, end = std::min(outer, begin + kBlock);
      Accumulator<T> acc[kBlock] = {};
      for (int64_t r = 0; r < inner; ++r) {
        const T* row = x + r * outer;
        for (int64_t j = begin; j < end; ++j) acc[j - begin] += convert<Accumulator<T>>(row[j]);
      }
      for (int64_t j = begin; j < end; ++j) po[j] = convert<T>(acc[j - begin]);
    }
    return;
  }
  Tensor matrix = as_outer_inner(self, plan);
  const T* x = static_cast<const T*>(matrix.data_ptr());
#pragma omp parallel for if (outer * inner > cpu::kParallelGrain && outer > 1)
  for (int64_t i = 0; i < outer; ++i) {
    Accumulator<T> acc = 0;
    const T* row = x + i * inner;
    for (int64_t k = 0; k < inner; ++k) acc += convert<Accumulator<T>>(row[k]);
    po[i] = convert<T>(acc);
  }
}

template <class T>
bool greater_or_nan(T candidate, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(best)) return false;
    if (std::isnan(candidate)) return true;
  }
  return candidate > best;
}

// Max and first index of the max (NaN counts as the max, as in PyTorch) of each row.
template <class T>
void max_kernel(const Tensor& self, const ReductionPlan& plan, T* values, int64_t* indices) {
  Tensor matrix = as_outer_inner(self, plan);
  const T* x = static_cast<const T*>(matrix.data_ptr());
  const int64_t outer = plan.outer, inner = plan.inner;
#pragma omp parallel for if (outer * inner > cpu::kParallelGrain && outer > 1)
  for (int64_t i = 0; i < outer; ++i) {
    const T* row = x + i * inner;
    T best = row[0];
    int64_t best_index = 0;
    for (int64_t k = 1; k < inner; ++k) {
      if (greater_or_nan(row[k], best)) {
        best = row[k];
        best_index = k;
      }
    }
    if (values) values[i] = best;
    if (indices) indices[i] = best_index;
  }
}

}  // namespace

// The dispatch layer has checked the input and allocated the outputs (kernel_shapes.h).
void sum(const SumCall& call) {
  if (call.self.dtype() == DType::i64) {
    sum_kernel<int64_t>(call.self, call.plan, call.values);
    return;
  }
  if (call.self.dtype() == DType::bf16) {  // a bfloat16 Linear's bias gradient
    sum_kernel<BFloat16>(call.self, call.plan, call.values);
    return;
  }
  dispatch_floating(call.self.dtype(), "sum", [&]<class T>() { sum_kernel<T>(call.self, call.plan, call.values); });
}

void amax(const AmaxCall& call) {
  dispatch_numeric(call.self.dtype(), "amax",
                   [&]<class T>() { max_kernel<T>(call.self, call.plan, call.values.data_ptr<T>(), nullptr); });
}

void max_dim(const MaxDimCall& call) {
  dispatch_numeric(call.self.dtype(), "max", [&]<class T>() {
    max_kernel<T>(call.self, call.plan, call.values.data_ptr<T>(), call.indices.data_ptr<int64_t>());
  });
}

}  // namespace tessera::cpu
