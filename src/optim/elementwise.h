// The loop every CPU optimizer update runs: one pass over a parameter's elements, each
// element's arithmetic independent of the others, split across OpenMP threads for large
// tensors. Because elements never interact, the result is the same on any thread count.
// The arithmetic itself (and how it rounds) is in update_rules.h, shared with the CUDA
// kernels.
#pragma once

#include <cstdint>

#include "tessera/optim/update_rules.h"
#include "tessera/tensor/cpu/loops.h"

namespace tessera::optim::detail {

// Calls body(i) for i in [0, n); on several threads when n is large.
template <class Body>
void for_each_element(int64_t n, Body body) {
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace tessera::optim::detail
