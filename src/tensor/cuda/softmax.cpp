// softmax and log_softmax on CUDA through cuDNN (cudnnSoftmaxForward/Backward).
//
// The softmax dim is addressed as [outer, size, inner] (kernel_shapes.h), which is
// exactly cuDNN's NCHW channel softmax with N = outer, C = size, H = inner, W = 1. The
// tensor descriptor for each (dtype, outer, size, inner) is built once and cached.
// CUDNN_SOFTMAX_ACCURATE subtracts the row maximum first, as the CPU does; the backward
// formulas are the CPU's: log_softmax dx = dy - exp(y) * sum(dy), softmax
// dx = y * (dy - sum(dy * y)).
// bfloat16 runs as float32 (the operands widened, the result rounded once), as PyTorch's
// softmax accumulates bfloat16 in float: the sums over a row would otherwise round at every
// step, and cuDNN's legacy softmax promises only float32 and float64.
#include "tessera/config.h"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

#if TESSERA_HAS_CUDNN

#include <array>
#include <climits>
#include <map>
#include <mutex>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/handles.h"

namespace tessera::cuda {

using namespace native;

namespace {

cudnnDataType_t softmax_data_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    default:
      throw DTypeError(detail::concat(op, ": expected a float32 or float64 CUDA tensor, got ", dtype_name(dtype)));
  }
}

void check_softmax_dtype(DType dtype, const char* op) {
  TS_CHECK(dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16, DTypeError, op,
           ": expected a float32, float64 or bfloat16 CUDA tensor, got ", dtype_name(dtype));
}

// bfloat16 operands widened to float32 (computed there), anything else as it is.
Tensor computed_in(const Tensor& t) { return t.dtype() == DType::bf16 ? to_dtype(t, DType::f32) : t; }

// The cached descriptor of a [outer, size, inner, 1] tensor. Descriptors are host
// objects, valid on every device; the cache lives until exit.
cudnnTensorDescriptor_t softmax_descriptor(DType dtype, const SoftmaxLayout& layout, const char* op) {
  static auto* mutex = new std::mutex();
  static auto* descriptors = new std::map<std::array<int64_t, 4>, cudnnTensorDescriptor_t>();
  TS_CHECK(layout.outer <= INT_MAX && layout.size <= INT_MAX && layout.inner <= INT_MAX &&
               layout.outer * layout.size * layout.inner <= INT_MAX,
           ShapeError, op, ": [", layout.outer, ", ", layout.size, ", ", layout.inner,
           "] exceeds cuDNN's 32-bit tensor sizes");
  const std::array<int64_t, 4> key{static_cast<int64_t>(dtype), layout.outer, layout.size, layout.inner};
  std::lock_guard<std::mutex> lock(*mutex);
  auto it = descriptors->find(key);
  if (it != descriptors->end()) return it->second;
  const cudnnDataType_t data_type = softmax_data_type(dtype, op);
  cudnnTensorDescriptor_t descriptor = nullptr;
  TS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&descriptor));
  const cudnnStatus_t status =
      cudnnSetTensor4dDescriptor(descriptor, CUDNN_TENSOR_NCHW, data_type, static_cast<int>(layout.outer),
                                 static_cast<int>(layout.size), static_cast<int>(layout.inner), 1);
  if (status != CUDNN_STATUS_SUCCESS) cudnnDestroyTensorDescriptor(descriptor);
  TS_CUDNN_CHECK(status);
  descriptors->emplace(key, descriptor);
  return descriptor;
}

cudnnSoftmaxAlgorithm_t algorithm(bool log) { return log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE; }

Tensor run_softmax_forward(const Tensor& self_in, int64_t dim, bool log, const char* op) {
  check_defined(self_in, op);
  check_cuda(self_in, op);
  check_softmax_dtype(self_in.dtype(), op);
  DeviceGuard guard(self_in.device());
  if (self_in.dtype() == DType::bf16) return to_dtype(run_softmax_forward(computed_in(self_in), dim, log, op), DType::bf16);
  Tensor self = contiguous(self_in);
  SoftmaxLayout layout = softmax_layout(self, dim, op);
  Tensor out = empty(self.sizes(), self.dtype(), self.device());
  if (out.numel() == 0) return out;
  cudnnTensorDescriptor_t descriptor = softmax_descriptor(self.dtype(), layout, op);
  const CudnnScalars scalars{.use_double = self.dtype() == DType::f64};
  CudnnLease cudnn = cudnn_handle(self.device().index);
  TS_CUDNN_CHECK(cudnnSoftmaxForward(cudnn.handle, algorithm(log), CUDNN_SOFTMAX_MODE_CHANNEL, scalars.alpha(),
                                     descriptor, self.data_ptr(), scalars.beta(), descriptor, out.data_ptr()));
  return out;
}

Tensor run_softmax_backward(const Tensor& grad_in, const Tensor& output_in, int64_t dim, bool log, const char* op) {
  check_softmax_backward_operands(grad_in, output_in, op);
  check_cuda(grad_in, op);
  check_softmax_dtype(grad_in.dtype(), op);
  DeviceGuard guard(grad_in.device());
  if (grad_in.dtype() == DType::bf16) {
    return to_dtype(run_softmax_backward(computed_in(grad_in), computed_in(output_in), dim, log, op), DType::bf16);
  }
  Tensor grad = contiguous(grad_in), output = contiguous(output_in);
  SoftmaxLayout layout = softmax_layout(output, dim, op);
  Tensor grad_input = empty(output.sizes(), output.dtype(), output.device());
  if (grad_input.numel() == 0) return grad_input;
  cudnnTensorDescriptor_t descriptor = softmax_descriptor(output.dtype(), layout, op);
  const CudnnScalars scalars{.use_double = output.dtype() == DType::f64};
  CudnnLease cudnn = cudnn_handle(output.device().index);
  TS_CUDNN_CHECK(cudnnSoftmaxBackward(cudnn.handle, algorithm(log), CUDNN_SOFTMAX_MODE_CHANNEL, scalars.alpha(),
                                      descriptor, output.data_ptr(), descriptor, grad.data_ptr(), scalars.beta(),
                                      descriptor, grad_input.data_ptr()));
  return grad_input;
}

}  // namespace

Tensor log_softmax(const Tensor& self, int64_t dim) { return run_softmax_forward(self, dim, true, "log_softmax"); }
Tensor softmax(const Tensor& self, int64_t dim) { return run_softmax_forward(self, dim, false, "softmax"); }

Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  return run_softmax_backward(grad_output, output, dim, true, "log_softmax_backward");
}

Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  return run_softmax_backward(grad_output, output, dim, false, "softmax_backward");
}

}  // namespace tessera::cuda

#else  // no cuDNN: the softmax family says so

namespace tessera::cuda {

namespace {
[[noreturn]] void needs_cudnn(const char* op) {
  throw NotCompiledError(detail::concat(op, " on CUDA needs cuDNN, which this build of Tessera was configured without"));
}
}  // namespace

Tensor log_softmax(const Tensor&, int64_t) { needs_cudnn("log_softmax"); }
Tensor softmax(const Tensor&, int64_t) { needs_cudnn("softmax"); }
Tensor log_softmax_backward(const Tensor&, const Tensor&, int64_t) { needs_cudnn("log_softmax_backward"); }
Tensor softmax_backward(const Tensor&, const Tensor&, int64_t) { needs_cudnn("softmax_backward"); }

}  // namespace tessera::cuda

#endif
