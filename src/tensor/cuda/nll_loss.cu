// The negative log-likelihood loss on CUDA, on inputs [C], [N, C] and [N, C, d1, ...]
// (kernel_shapes.h's NllLayout: target position p = n * inner + i).
//
// Forward: one block walks the positions (a batch has thousands at most), each thread
// accumulating its rows' terms and weights in double (bfloat16 inputs too), then the block sums them in a
// fixed order, so the result is reproducible and as precise as the CPU's. A target
// outside [0, classes) (other than ignore_index) cannot throw on the device: the block
// finds the first such position and reports it (device_errors.cuh), and the next host
// wait on the device (reading the loss, say) throws the CPU's IndexError with the CPU's
// message. The forward itself never waits for the device.
// Backward: one thread per row writes its one non-zero gradient; rows the forward would
// have rejected are skipped, never written out of bounds.
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_errors.cuh"
#include "tessera/tensor/cuda/device_errors.h"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

// Launched with one block of kThreads threads.
template <class T>
__global__ void nll_loss_kernel(const T* log_probs, const int64_t* target, const T* weight, int64_t rows,
                                int64_t classes, int64_t inner, int64_t ignore_index, Reduction reduction, T* loss,
                                T* total_weight, DeviceErrorRecord* errors) {
  __shared__ unsigned long long first_bad_row;
  if (threadIdx.x == 0) first_bad_row = static_cast<unsigned long long>(rows);
  __syncthreads();
  double total = 0, weight_sum = 0;
  for (int64_t n = threadIdx.x; n < rows; n += blockDim.x) {
    const int64_t cls = target[n];
    double term = 0, row_weight = 0;
    if (cls != ignore_index) {
      if (cls < 0 || cls >= classes) {
        atomicMin(&first_bad_row, static_cast<unsigned long long>(n));
      } else {
        row_weight = weight != nullptr ? static_cast<double>(load(weight[cls])) : 1.0;
        term = -static_cast<double>(load(log_probs[((n / inner) * classes + cls) * inner + n % inner])) * row_weight;
      }
    }
    if (reduction == Reduction::none) loss[n] = store<T>(static_cast<Compute<T>>(term));
    total += term;
    weight_sum += row_weight;
  }
  total = block_sum(total);  // (its __syncthreads also publishes first_bad_row)
  weight_sum = block_sum(weight_sum);
  if (threadIdx.x == 0 && first_bad_row < static_cast<unsigned long long>(rows)) {
    const auto row = static_cast<int64_t>(first_bad_row);
    report_device_error(errors, DeviceErrorCode::nll_loss_target, target[row], row, classes);
  }
  if (threadIdx.x == 0) {
    total_weight[0] = store<T>(static_cast<Compute<T>>(weight_sum));
    if (reduction == Reduction::sum) loss[0] = store<T>(static_cast<Compute<T>>(total));
    if (reduction == Reduction::mean) loss[0] = store<T>(static_cast<Compute<T>>(total / weight_sum));
  }
}

template <class T>
__global__ void nll_loss_backward_kernel(const T* grad_output, const int64_t* target, const T* weight,
                                         const T* total_weight, int64_t rows, int64_t classes, int64_t inner,
                                         int64_t ignore_index, Reduction reduction, T* grad_input) {
  for (int64_t n = thread_index(); n < rows; n += thread_count()) {
    const int64_t cls = target[n];
    if (cls == ignore_index || cls < 0 || cls >= classes) continue;
    using C = Compute<T>;
    const C scale = reduction == Reduction::mean ? load(grad_output[0]) / load(total_weight[0]) : load(grad_output[0]);
    const C row_scale = reduction == Reduction::none ? load(grad_output[n]) : scale;
    const C class_weight = weight != nullptr ? load(weight[cls]) : C(1);
    grad_input[((n / inner) * classes + cls) * inner + n % inner] = store<T>(-class_weight * row_scale);
  }
}

}  // namespace

std::tuple<Tensor, Tensor> nll_loss(const Tensor& log_probs_in, const Tensor& target_in, const Tensor& weight_in,
                                    Reduction reduction, int64_t ignore_index) {
  const NllLayout layout = check_nll_operands(log_probs_in, target_in, weight_in);
  DeviceGuard guard = enter_cuda_device(log_probs_in, "nll_loss");
  const Device device = log_probs_in.device();
  Tensor log_probs = contiguous(log_probs_in), target = contiguous(target_in);
  Tensor weight = contiguous_if_defined(weight_in);
  const int64_t rows = layout.positions(), classes = layout.classes, inner = layout.inner;
  Tensor loss = empty(nll_loss_shape(target, reduction), log_probs.dtype(), device);
  Tensor total_weight = empty({}, log_probs.dtype(), device);
  DeviceErrorRecord* errors = device_error_slot(device.index);
  device_dispatch_floating_bf16(log_probs.dtype(), "nll_loss", [&]<class T>() {
    nll_loss_kernel<T><<<1, kThreads, 0, compute_stream(device.index)>>>(
        static_cast<const T*>(log_probs.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
        weight.defined() ? static_cast<const T*>(weight.data_ptr()) : nullptr, rows, classes, inner, ignore_index,
        reduction, static_cast<T*>(loss.data_ptr()), static_cast<T*>(total_weight.data_ptr()),
        errors);
    TS_CUDA_CHECK_LAUNCH("nll_loss_kernel");
  });
  return {loss, total_weight};
}

// Operands checked, made contiguous and the gradient allocated (zeroed) by the dispatch layer.
void nll_loss_backward(const NllLossBackwardCall& call) {
  DeviceGuard guard(call.device());
  const int64_t rows = call.layout.positions();
  device_dispatch_floating_bf16(call.grad_input.dtype(), "nll_loss_backward", [&]<class T>() {
    nll_loss_backward_kernel<T><<<blocks_for(rows), kThreads, 0, compute_stream(call.device().index)>>>(
        static_cast<const T*>(call.grad_output.data_ptr()), static_cast<const int64_t*>(call.target.data_ptr()),
        call.weight.defined() ? static_cast<const T*>(call.weight.data_ptr()) : nullptr,
        static_cast<const T*>(call.total_weight.data_ptr()), rows, call.layout.classes, call.layout.inner,
        call.ignore_index, call.reduction, static_cast<T*>(call.grad_input.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("nll_loss_backward_kernel");
  });
}

// The two kernels composed, their result copied over log_probs: the CPU's values, but not
// yet its memory saving (that needs one fused kernel, as cpu/softmax_loss.cpp's pass).
void cross_entropy_backward_(Tensor& log_probs, const Tensor& grad_output, const Tensor& target,
                             const Tensor& weight, Reduction reduction, int64_t ignore_index,
                             const Tensor& total_weight) {
  check_cuda(log_probs, "cross_entropy_backward_");
  const Tensor nll_grad =
      native::nll_loss_backward(grad_output, log_probs, target, weight, reduction, ignore_index, total_weight);
  copy_(log_probs, log_softmax_backward(nll_grad, log_probs, log_probs.dim() == 1 ? 0 : 1));
}

}  // namespace tessera::cuda
