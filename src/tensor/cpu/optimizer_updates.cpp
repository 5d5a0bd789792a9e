// The optimizer updates on the CPU: one pass over a parameter's elements, each element's
// arithmetic (update_rules.h) independent of the others, split across OpenMP threads for
// large tensors, so the result is the same on any thread count. Built with
// -ffp-contract=off (tensor/meson.build): nothing is fused that update_rules.h does not
// fuse, as in PyTorch's kernels.
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/optimizer_updates.h"

namespace tessera::cpu {

namespace {

// Calls body(i) for i in [0, n); on several threads when n is large.
template <class Body>
void for_each_element(int64_t n, Body body) {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace

template <class T>
void sgd_update(int, int64_t n, T* p, const T* g, T* b, const update_rules::SgdScalars<T>& s) {
  if (s.use_momentum && !s.first_step && !s.decay && !s.maximize && !s.nesterov) {
    // SGD with momentum, the common case, as a loop the compiler vectorises (the general
    // loop is not): the same operations per element as sgd_element, so the same bits.
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T momentum_term = update_rules::add_scaled(b[i] * s.momentum, g[i], s.one_minus_dampening);
      b[i] = momentum_term;
      p[i] = update_rules::add_scaled(p[i], momentum_term, s.negative_lr);
    }
    return;
  }
  for_each_element(n, [=](int64_t i) { update_rules::sgd_element(p[i], g[i], b != nullptr ? b + i : nullptr, s); });
}

template <class T>
void adam_update(int, int64_t n, T* p, const T* g, T* m, T* v, T* v_max, const update_rules::AdamScalars<T>& s) {
  for_each_element(n, [=](int64_t i) {
    update_rules::adam_element(p[i], g[i], m[i], v[i], v_max != nullptr ? v_max + i : nullptr, s);
  });
}

template <class T>
void adadelta_update(int, int64_t n, T* p, const T* g, T* v, T* u, const update_rules::AdadeltaScalars<T>& s) {
  for_each_element(n, [=](int64_t i) { update_rules::adadelta_element(p[i], g[i], v[i], u[i], s); });
}

#define TS_INSTANTIATE(T)                                                                                       \
  template void sgd_update<T>(int, int64_t, T*, const T*, T*, const update_rules::SgdScalars<T>&);            \
  template void adam_update<T>(int, int64_t, T*, const T*, T*, T*, T*, const update_rules::AdamScalars<T>&);  \
  template void adadelta_update<T>(int, int64_t, T*, const T*, T*, T*, const update_rules::AdadeltaScalars<T>&);
TS_INSTANTIATE(float)
TS_INSTANTIATE(double)
#undef TS_INSTANTIATE

}  // namespace tessera::cpu
