// The CUDA kernels behind the device-specific native ops, with the same signatures and
// results as the CPU's (cpu/kernels.h; native.h says what each computes).
// native_dispatch.cpp routes CUDA tensors here.
//
// Conventions: every function checks its operands (shapes through kernel_shapes.h, the
// same checks as the CPU), makes the operands' device current, and queues its work on
// that device's compute stream without waiting for it. Element-wise kernels, copies and
// reductions read strided and broadcast operands directly; GEMM, cuDNN, pooling, softmax,
// loss and dropout kernels make their inputs contiguous first. float32 and float64
// everywhere; bfloat16 for copies, element-wise ops, sums, matmul/linear and convolution.
#pragma once

#include "tessera/tensor/native.h"

namespace tessera::cuda {

using native::BinaryOp;
using native::Conv2dOptions;
using native::DropoutKey;
using native::MaxPool2dOptions;
using native::Reduction;
using native::UnaryOp;

void copy_(Tensor& dst, const Tensor& src);  // same device, any strides, converts dtype
void fill_(Tensor& self, double value);

Tensor unary(UnaryOp op, const Tensor& self);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor binary(BinaryOp op, const Tensor& a, double b);
Tensor binary(BinaryOp op, double a, const Tensor& b);
void binary_(BinaryOp op, Tensor& a, const Tensor& b);
void binary_(BinaryOp op, Tensor& a, double b);
void add_scaled_(Tensor& self, const Tensor& other, double alpha);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor relu_backward(const Tensor& grad, const Tensor& input);
void relu_backward_(Tensor& grad, const Tensor& input);

Tensor sum(const Tensor& self, const Shape& dims, bool keepdim);
Tensor amax(const Tensor& self, const Shape& dims, bool keepdim);
std::tuple<Tensor, Tensor> max_dim(const Tensor& self, int64_t dim, bool keepdim);

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options);
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options);
// All three convolution gradients (those `output_mask` asks for) from one call.
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                                   const Conv2dOptions& options, std::array<bool, 3> output_mask);
Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& input, const Shape& weight_shape,
                              const Conv2dOptions& options);
std::tuple<Tensor, Tensor> max_pool2d(const Tensor& input, const MaxPool2dOptions& options);
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices, const Shape& input_shape);

Tensor log_softmax(const Tensor& self, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);
Tensor softmax(const Tensor& self, int64_t dim);
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);
std::tuple<Tensor, Tensor> nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                                    Reduction reduction, int64_t ignore_index);
Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& log_probs, const Tensor& target,
                         const Tensor& weight, Reduction reduction, int64_t ignore_index,
                         const Tensor& total_weight);
std::tuple<Tensor, Tensor> dropout(const Tensor& input, double p, const DropoutKey& key);
Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p);


Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape);
std::tuple<Tensor, Tensor, Tensor> batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                              const Tensor& running_mean, const Tensor& running_var,
                                              bool training, double momentum, double eps);
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                                       const Tensor& weight, const Tensor& save_mean,
                                                       const Tensor& save_invstd, bool training,
                                                       std::array<bool, 3> output_mask);

}  // namespace tessera::cuda
