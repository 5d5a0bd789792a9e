// Routes each op of the op table (native_ops.inc), and the optimizers' fused updates, to
// its backend by the device of its operand. This file and backend_memory.cpp (allocators,
// byte copies) are the only places that know the backends.
#include "tessera/config.h"
#include "tessera/tensor/attention_geometry.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/kernel_shapes.h"
#include "tessera/tensor/native.h"
#include "tessera/tensor/optimizer_updates.h"

#if TESSERA_HAS_CUDA
#include "tessera/tensor/cuda/kernels.h"

// A CUDA tensor goes to cuda::, anything else to cpu::. Each kernel then checks that its
// other operands are on the same device (a DeviceError naming both devices otherwise).
// `arguments` comes in its parentheses, as the op table writes it.
#define TS_ROUTE(tensor, kernel, arguments)                                                 \
  do {                                                                                      \
    if ((tensor).defined() && (tensor).is_cuda()) return ::tessera::cuda::kernel arguments; \
    return ::tessera::cpu::kernel arguments;                                                \
  } while (false)
// Runs a prepared op's kernel (void) on `device`.
#define TS_RUN_ON(device, kernel, arguments) \
  ((device).is_cuda() ? ::tessera::cuda::kernel arguments : ::tessera::cpu::kernel arguments)
#define TS_DISPATCH_DEVICE(device, kernel, ...)                                         \
  do {                                                                                  \
    if ((device).is_cuda()) return ::tessera::cuda::kernel((device).index, __VA_ARGS__); \
    return ::tessera::cpu::kernel((device).index, __VA_ARGS__);                          \
  } while (false)
#else
// Without CUDA a CUDA tensor cannot exist (its allocation throws NotCompiledError).
#define TS_ROUTE(tensor, kernel, arguments) return ::tessera::cpu::kernel arguments
#define TS_RUN_ON(device, kernel, arguments) ::tessera::cpu::kernel arguments
#define TS_DISPATCH_DEVICE(device, kernel, ...) return ::tessera::cpu::kernel((device).index, __VA_ARGS__)
#endif

namespace tessera::native {

// Every TS_NATIVE_OP row of the op table, routed by its operand's device, and every
// TS_PREPARED_OP row: checked and allocated here, its kernel run where there is work.
#define TS_NATIVE_OP(result, name, parameters, arguments, operand) \
  result name parameters { TS_ROUTE(operand, name, arguments); }
#define TS_PREPARED_OP(Result, name, parameters, arguments, Call)              \
  Result name parameters {                                                     \
    const Call call = Call::prepare arguments;                                 \
    if (call.has_work()) TS_RUN_ON(call.device(), name, (call));               \
    return call.result();                                                      \
  }
#define TS_BACKEND_OP(result, name, parameters)
#include "tessera/tensor/native_ops.inc"

// The public ops over the table's TS_BACKEND_OP rows.
void copy_on_device_(Tensor& dst, const Tensor& src) { TS_ROUTE(dst, copy_, (dst, src)); }
Tensor tril(const Tensor& self, int64_t diagonal) { TS_ROUTE(self, triangle, (self, diagonal, Triangle::lower)); }
Tensor triu(const Tensor& self, int64_t diagonal) { TS_ROUTE(self, triangle, (self, diagonal, Triangle::upper)); }

// Attention's operands are checked here, once for every backend, which take the geometry
// the check derives (as PyTorch's structured kernels run one meta function before the
// backend's impl).
std::tuple<Tensor, Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                        const AttentionOptions& options) {
  const AttentionOperands operands{q, k, v, options,
                                   check_attention_operands(q, k, v, options, "scaled_dot_product_attention")};
  TS_ROUTE(q, scaled_dot_product_attention, (operands));
}
std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(const Tensor& grad_output, const Tensor& q,
                                                                         const Tensor& k, const Tensor& v,
                                                                         const Tensor& output,
                                                                         const Tensor& logsumexp,
                                                                         const AttentionOptions& options) {
  const AttentionGeometry geometry = check_attention_backward_operands(grad_output, q, k, v, output, logsumexp,
                                                                       options, "scaled_dot_product_attention_backward");
  const AttentionBackwardOperands operands{{q, k, v, options, geometry}, grad_output, output, logsumexp};
  TS_ROUTE(q, scaled_dot_product_attention_backward, (operands));
}

template <class T>
void sgd_update(Device device, int64_t n, T* param, const T* grad, T* buffer, const update_rules::SgdScalars<T>& s) {
  TS_DISPATCH_DEVICE(device, sgd_update<T>, n, param, grad, buffer, s);
}
template <class T>
void adam_update(Device device, int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                 const update_rules::AdamScalars<T>& s) {
  TS_DISPATCH_DEVICE(device, adam_update<T>, n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, s);
}
template <class T>
void adadelta_update(Device device, int64_t n, T* param, const T* grad, T* square_avg, T* acc_delta,
                     const update_rules::AdadeltaScalars<T>& s) {
  TS_DISPATCH_DEVICE(device, adadelta_update<T>, n, param, grad, square_avg, acc_delta, s);
}
template void sgd_update<float>(Device, int64_t, float*, const float*, float*, const update_rules::SgdScalars<float>&);
template void sgd_update<double>(Device, int64_t, double*, const double*, double*,
                                 const update_rules::SgdScalars<double>&);
template void adam_update<float>(Device, int64_t, float*, const float*, float*, float*, float*,
                                 const update_rules::AdamScalars<float>&);
template void adam_update<double>(Device, int64_t, double*, const double*, double*, double*, double*,
                                  const update_rules::AdamScalars<double>&);
template void adadelta_update<float>(Device, int64_t, float*, const float*, float*, float*,
                                     const update_rules::AdadeltaScalars<float>&);
template void adadelta_update<double>(Device, int64_t, double*, const double*, double*, double*,
                                      const update_rules::AdadeltaScalars<double>&);

}  // namespace tessera::native
