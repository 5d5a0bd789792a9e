// Routes each device-specific native op, and the optimizers' fused updates, to its
// backend by the device of its first tensor operand. This file and backend_memory.cpp
// (allocators, byte copies) are the only places that know the backends.
#include "tessera/config.h"
#include "tessera/tensor/attention_geometry.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/native.h"
#include "tessera/tensor/optimizer_updates.h"

#if TESSERA_HAS_CUDA
#include "tessera/tensor/cuda/kernels.h"

// A CUDA tensor goes to cuda::, anything else to cpu::. Each kernel then checks that its
// other operands are on the same device (a DeviceError naming both devices otherwise).
#define TS_DISPATCH(tensor, kernel, ...)                                          \
  do {                                                                            \
    if ((tensor).defined() && (tensor).is_cuda()) return ::tessera::cuda::kernel(__VA_ARGS__); \
    return ::tessera::cpu::kernel(__VA_ARGS__);                                   \
  } while (false)
#define TS_DISPATCH_DEVICE(device, kernel, ...)                                         \
  do {                                                                                  \
    if ((device).is_cuda()) return ::tessera::cuda::kernel((device).index, __VA_ARGS__); \
    return ::tessera::cpu::kernel((device).index, __VA_ARGS__);                          \
  } while (false)
#else
// Without CUDA a CUDA tensor cannot exist (its allocation throws NotCompiledError).
#define TS_DISPATCH(tensor, kernel, ...) return ::tessera::cpu::kernel(__VA_ARGS__)
#define TS_DISPATCH_DEVICE(device, kernel, ...) return ::tessera::cpu::kernel((device).index, __VA_ARGS__)
#endif

namespace tessera::native {

void copy_on_device_(Tensor& dst, const Tensor& src) { TS_DISPATCH(dst, copy_, dst, src); }
void fill_(Tensor& self, double value) { TS_DISPATCH(self, fill_, self, value); }

Tensor unary(UnaryOp op, const Tensor& self) { TS_DISPATCH(self, unary, op, self); }
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) { TS_DISPATCH(a, binary, op, a, b); }
Tensor binary(BinaryOp op, const Tensor& a, double b) { TS_DISPATCH(a, binary, op, a, b); }
Tensor binary(BinaryOp op, double a, const Tensor& b) { TS_DISPATCH(b, binary, op, a, b); }
void binary_(BinaryOp op, Tensor& a, const Tensor& b) { TS_DISPATCH(a, binary_, op, a, b); }
void binary_(BinaryOp op, Tensor& a, double b) { TS_DISPATCH(a, binary_, op, a, b); }
void add_scaled_(Tensor& self, const Tensor& other, double alpha) { TS_DISPATCH(self, add_scaled_, self, other, alpha); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { TS_DISPATCH(a, where, cond, a, b); }
Tensor relu_backward(const Tensor& grad, const Tensor& input) { TS_DISPATCH(grad, relu_backward, grad, input); }
void relu_backward_(Tensor& grad, const Tensor& input) { TS_DISPATCH(grad, relu_backward_, grad, input); }

Tensor sum(const Tensor& self, const Shape& dims, bool keepdim) { TS_DISPATCH(self, sum, self, dims, keepdim); }
Tensor amax(const Tensor& self, const Shape& dims, bool keepdim) { TS_DISPATCH(self, amax, self, dims, keepdim); }
std::tuple<Tensor, Tensor> max_dim(const Tensor& self, int64_t dim, bool keepdim) {
  TS_DISPATCH(self, max_dim, self, dim, keepdim);
}

Tensor matmul(const Tensor& a, const Tensor& b) { TS_DISPATCH(a, matmul, a, b); }
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { TS_DISPATCH(x, linear, x, weight, bias); }

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dFuncOptions& options) {
  TS_DISPATCH(input, conv2d, input, weight, bias, options);
}
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape,
                             const Conv2dFuncOptions& options) {
  TS_DISPATCH(grad_output, conv2d_backward_input, grad_output, weight, input_shape, options);
}
Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& input, const Shape& weight_shape,
                              const Conv2dFuncOptions& options) {
  TS_DISPATCH(grad_output, conv2d_backward_weight, grad_output, input, weight_shape, options);
}
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                                   const Conv2dFuncOptions& options, std::array<bool, 3> output_mask) {
  TS_DISPATCH(grad_output, conv2d_backward, grad_output, input, weight, options, output_mask);
}
std::tuple<Tensor, Tensor> max_pool2d(const Tensor& input, const MaxPool2dWindow& options) {
  TS_DISPATCH(input, max_pool2d, input, options);
}
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices, const Shape& input_shape) {
  TS_DISPATCH(grad_output, max_pool2d_backward, grad_output, indices, input_shape);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size) {
  TS_DISPATCH(input, adaptive_avg_pool2d, input, output_size);
}
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape) {
  TS_DISPATCH(grad_output, adaptive_avg_pool2d_backward, grad_output, input_shape);
}
std::tuple<Tensor, Tensor, Tensor> batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                              const Tensor& running_mean, const Tensor& running_var,
                                              bool training, double momentum, double eps) {
  TS_DISPATCH(input, batch_norm, input, weight, bias, running_mean, running_var, training, momentum, eps);
}
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                                       const Tensor& weight, const Tensor& save_mean,
                                                       const Tensor& save_invstd, bool training,
                                                       std::array<bool, 3> output_mask) {
  TS_DISPATCH(grad_output, batch_norm_backward, grad_output, input, weight, save_mean, save_invstd, training,
              output_mask);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) { TS_DISPATCH(weight, embedding, weight, indices); }
Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx, bool scale_grad_by_freq) {
  TS_DISPATCH(grad_output, embedding_backward, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq);
}
void embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  TS_DISPATCH(weight, embedding_renorm_, weight, indices, max_norm, norm_type);
}
std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& input, const Shape& normalized_shape,
                                              const Tensor& weight, const Tensor& bias, double eps) {
  TS_DISPATCH(input, layer_norm, input, normalized_shape, weight, bias, eps);
}
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output, const Tensor& input,
                                                       const Shape& normalized_shape, const Tensor& mean,
                                                       const Tensor& rstd, const Tensor& weight,
                                                       std::array<bool, 3> output_mask) {
  TS_DISPATCH(grad_output, layer_norm_backward, grad_output, input, normalized_shape, mean, rstd, weight, output_mask);
}
Tensor gelu(const Tensor& input, GeluApproximate approximate) { TS_DISPATCH(input, gelu, input, approximate); }
Tensor gelu_backward(const Tensor& grad_output, const Tensor& input, GeluApproximate approximate) {
  TS_DISPATCH(grad_output, gelu_backward, grad_output, input, approximate);
}
Tensor erf(const Tensor& input) { TS_DISPATCH(input, erf, input); }

Tensor log_softmax(const Tensor& self, int64_t dim) { TS_DISPATCH(self, log_softmax, self, dim); }
Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  TS_DISPATCH(grad_output, log_softmax_backward, grad_output, output, dim);
}
Tensor softmax(const Tensor& self, int64_t dim) { TS_DISPATCH(self, softmax, self, dim); }
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  TS_DISPATCH(grad_output, softmax_backward, grad_output, output, dim);
}
std::tuple<Tensor, Tensor> nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                                    Reduction reduction, int64_t ignore_index) {
  TS_DISPATCH(log_probs, nll_loss, log_probs, target, weight, reduction, ignore_index);
}
Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& log_probs, const Tensor& target,
                         const Tensor& weight, Reduction reduction, int64_t ignore_index,
                         const Tensor& total_weight) {
  TS_DISPATCH(log_probs, nll_loss_backward, grad_output, log_probs, target, weight, reduction, ignore_index,
              total_weight);
}
std::tuple<Tensor, Tensor> dropout(const Tensor& input, double p, const DropoutKey& key) {
  TS_DISPATCH(input, dropout, input, p, key);
}
Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p) {
  TS_DISPATCH(grad_output, dropout_backward, grad_output, mask, p);
}

Tensor tril(const Tensor& self, int64_t diagonal) { TS_DISPATCH(self, triangle, self, diagonal, Triangle::lower); }
Tensor triu(const Tensor& self, int64_t diagonal) { TS_DISPATCH(self, triangle, self, diagonal, Triangle::upper); }
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  TS_DISPATCH(self, index_select, self, dim, index);
}
void index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  TS_DISPATCH(self, index_add_, self, dim, index, source);
}
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index) { TS_DISPATCH(self, gather, self, dim, index); }
void scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  TS_DISPATCH(self, scatter_add_, self, dim, index, src);
}
std::tuple<Tensor, Tensor> topk(const Tensor& self, int64_t k, int64_t dim, bool largest) {
  TS_DISPATCH(self, topk, self, k, dim, largest);
}
Tensor cumsum(const Tensor& self, int64_t dim, bool reverse) { TS_DISPATCH(self, cumsum, self, dim, reverse); }
Tensor searchsorted(const Tensor& sorted, const Tensor& values, bool right) {
  TS_DISPATCH(sorted, searchsorted, sorted, values, right);
}

// Attention's operands are checked here, once for every backend, which take the geometry
// the check derives (as PyTorch's structured kernels run one meta function before the
// backend's impl).
std::tuple<Tensor, Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                        const AttentionOptions& options) {
  const AttentionOperands operands{q, k, v, options,
                                   check_attention_operands(q, k, v, options, "scaled_dot_product_attention")};
  TS_DISPATCH(q, scaled_dot_product_attention, operands);
}
std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(const Tensor& grad_output, const Tensor& q,
                                                                         const Tensor& k, const Tensor& v,
                                                                         const Tensor& output,
                                                                         const Tensor& logsumexp,
                                                                         const AttentionOptions& options) {
  const AttentionGeometry geometry = check_attention_backward_operands(grad_output, q, k, v, output, logsumexp,
                                                                       options, "scaled_dot_product_attention_backward");
  const AttentionBackwardOperands operands{{q, k, v, options, geometry}, grad_output, output, logsumexp};
  TS_DISPATCH(q, scaled_dot_product_attention_backward, operands);
}

void cross_entropy_backward_(Tensor& log_probs, const Tensor& grad_output, const Tensor& target,
                             const Tensor& weight, Reduction reduction, int64_t ignore_index,
                             const Tensor& total_weight) {
  TS_DISPATCH(log_probs, cross_entropy_backward_, log_probs, grad_output, target, weight, reduction, ignore_index,
              total_weight);
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
