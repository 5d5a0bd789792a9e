// 2-D convolution on CUDA through cuDNN: forward, backward-data and backward-filter.
//
// The shapes come from kernel_shapes.h (conv_geometry), as on the CPU; cuDNN only does
// the arithmetic. For each (device, dtype, input shape, weight shape, options, TF32) key
// the descriptors are built once and cached, and each direction's algorithm is chosen
// once, on first use: cuDNN's heuristics rank the candidates (cudnnGet*Algorithm_v7, as
// PyTorch does when cudnn.benchmark is off), those the TF32 policy forbids are dropped,
// and the rest are run in rank order until one succeeds (first_that_runs.h): one that
// returns NOT_SUPPORTED, or whose workspace does not fit, gives way to the next. The one
// that ran is cached. Workspaces come from the caching allocator, so a steady training
// step allocates nothing new.
//
// Bias: a broadcast add after the convolution. cuDNN's fused
// cudnnConvolutionBiasActivationForward takes an identity activation with the
// implicit-precomputed-GEMM algorithm only (rarely the one chosen under the FMA-only
// policy), reads its z operand even when its scale is 0 as far as its documentation says
// (the output would have to be cleared first, costing what the fusion saves), and a ReLU
// cannot be fused in eager mode (the convolution does not know one follows).
//
// Precision: float32 descriptors use CUDNN_FMA_MATH (no TF32) unless set_allow_tf32(true);
// float64 runs in float64; bfloat16 data accumulates in float32.
#include "tessera/config.h"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

#if TESSERA_HAS_CUDNN

#include <array>
#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <cuda_runtime_api.h>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/first_that_runs.h"
#include "tessera/tensor/cuda/handles.h"

namespace tessera::cuda {

using namespace native;

namespace {

struct ConvTypes {
  cudnnDataType_t data;
  cudnnDataType_t compute;
  bool double_scalars;  // alpha/beta are double for double data, float otherwise
};

ConvTypes conv_types(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32: return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, false};
    case DType::f64: return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, true};
    case DType::bf16: return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, false};
    default:
      throw DTypeError(detail::concat(op, ": expected a floating CUDA tensor (float32, float64 or bfloat16), got ",
                                      dtype_name(dtype)));
  }
}

struct ConvKey {
  int device;
  DType dtype;
  bool tf32;
  std::array<int64_t, 4> input, weight;
  std::array<int64_t, 6> options;  // stride, padding, dilation (h, w)
  auto operator<=>(const ConvKey&) const = default;
};

template <class Algo>
struct AlgorithmChoice {
  Algo algorithm;
  cudnnMathType_t math;
  size_t workspace_bytes;
};

// Descriptors of one convolution problem and the algorithms chosen for it. Used only under
// the device's cuDNN lease, which serialises access.
struct ConvPlan {
  cudnnTensorDescriptor_t input = nullptr, output = nullptr;
  cudnnFilterDescriptor_t weight = nullptr;
  cudnnConvolutionDescriptor_t convolution = nullptr;
  std::optional<AlgorithmChoice<cudnnConvolutionFwdAlgo_t>> forward;
  std::optional<AlgorithmChoice<cudnnConvolutionBwdDataAlgo_t>> backward_data;
  std::optional<AlgorithmChoice<cudnnConvolutionBwdFilterAlgo_t>> backward_filter;

  ~ConvPlan() {  // cache entries live until exit; this runs only if building one failed
    if (input) cudnnDestroyTensorDescriptor(input);
    if (output) cudnnDestroyTensorDescriptor(output);
    if (weight) cudnnDestroyFilterDescriptor(weight);
    if (convolution) cudnnDestroyConvolutionDescriptor(convolution);
  }
};

int as_int(int64_t value, const char* op) {
  TS_CHECK(value >= 0 && value <= INT_MAX, ShapeError, op, ": size ", value, " exceeds cuDNN's 32-bit limit");
  return static_cast<int>(value);
}

// cuDNN's legacy API indexes tensors with 32-bit integers.
void check_element_count(const Shape& shape, const char* op) {
  TS_CHECK(shape_numel(shape) <= INT_MAX, ShapeError, op, ": a tensor of shape ", shape_str(shape),
           " has more elements than cuDNN's legacy convolution API supports (2^31 - 1)");
}

std::unique_ptr<ConvPlan> build_plan(const ConvGeometry& g, DType dtype, bool tf32, const char* op) {
  const ConvTypes types = conv_types(dtype, op);
  auto plan = std::make_unique<ConvPlan>();
  TS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->input));
  TS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->output));
  TS_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->weight));
  TS_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan->convolution));
  TS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->input, CUDNN_TENSOR_NCHW, types.data, as_int(g.batch, op),
                                            as_int(g.channels, op), as_int(g.height, op), as_int(g.width, op)));
  TS_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->weight, types.data, CUDNN_TENSOR_NCHW, as_int(g.out_channels, op),
                                            as_int(g.channels, op), as_int(g.kernel_h, op),
                                            as_int(g.kernel_w, op)));
  TS_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->convolution, as_int(g.pad_h, op), as_int(g.pad_w, op),
                                                 as_int(g.stride_h, op), as_int(g.stride_w, op),
                                                 as_int(g.dil_h, op), as_int(g.dil_w, op), CUDNN_CROSS_CORRELATION,
                                                 types.compute));
  const bool fma_only = dtype == DType::f32 && !tf32;
  TS_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->convolution, fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
  // cuDNN must agree with the shape logic about the output; a mismatch is a bug here.
  int n = 0, c = 0, h = 0, w = 0;
  TS_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan->convolution, plan->input, plan->weight, &n, &c, &h, &w));
  TS_CHECK(n == g.batch && c == g.out_channels && h == g.out_h && w == g.out_w, ShapeError, op,
           ": cuDNN computes an output of [", n, ", ", c, ", ", h, ", ", w, "], Tessera [", g.batch, ", ",
           g.out_channels, ", ", g.out_h, ", ", g.out_w, "]");
  TS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->output, CUDNN_TENSOR_NCHW, types.data, n, c, h, w));
  return plan;
}

// The cached plan for this problem, created on first use. The map and its entries are
// never destroyed (descriptors outliving cuDNN's teardown at exit would be destroyed late).
ConvPlan& plan_for(int device, const ConvGeometry& g, DType dtype, bool tf32, const char* op) {
  static auto* mutex = new std::mutex();
  static auto* plans = new std::map<ConvKey, std::unique_ptr<ConvPlan>>();
  ConvKey key{device, dtype, tf32, {g.batch, g.channels, g.height, g.width},
              {g.out_channels, g.channels, g.kernel_h, g.kernel_w},
              {g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dil_h, g.dil_w}};
  std::lock_guard<std::mutex> lock(*mutex);
  auto& slot = (*plans)[key];
  if (!slot) slot = build_plan(g, dtype, tf32, op);
  return *slot;
}

bool uses_tensor_cores(cudnnMathType_t math) {
  return math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

Tensor workspace(size_t bytes, Device device) {
  return bytes == 0 ? Tensor() : empty({static_cast<int64_t>(bytes)}, DType::u8, device);
}

void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

std::string problem_str(const ConvGeometry& g) {
  return detail::concat("input [", g.batch, ", ", g.channels, ", ", g.height, ", ", g.width, "] and weight [",
                        g.out_channels, ", ", g.channels, ", ", g.kernel_h, ", ", g.kernel_w, "]");
}

// What every direction's cuDNN calls share: the device's cuDNN handle (leased, which
// serialises use of the plan), the problem's plan, the TF32 policy and alpha/beta.
struct ConvCall {
  Device device;
  CudnnLease cudnn;
  ConvPlan& plan;
  bool fma_only;  // float32 without TF32: only algorithms that compute in plain FMA math
  CudnnScalars scalars;
};

ConvCall conv_call(Device device, const ConvGeometry& g, DType dtype, const ConvTypes& types, const char* op) {
  const bool tf32 = allow_tf32();
  CudnnLease cudnn = cudnn_handle(device.index);
  ConvPlan& plan = plan_for(device.index, g, dtype, tf32, op);
  return ConvCall{device, std::move(cudnn), plan, dtype == DType::f32 && !tf32, {.use_double = types.double_scalars}};
}

// Each direction's cuDNN entry points, overloaded on its Perf or algorithm type (as
// PyTorch's algorithm_search<perf_t> specialisations): how many candidates the heuristics
// may rank, the ranking, an algorithm's workspace size, and the call itself, which reads
// `a` and `b` and writes `out`:
//   forward          a = input,   b = weight,       out = output
//   backward data    a = weight,  b = grad_output,  out = grad_input
//   backward filter  a = input,   b = grad_output,  out = grad_weight
cudnnStatus_t max_algorithm_count(cudnnHandle_t handle, int* count, cudnnConvolutionFwdAlgoPerf_t*) {
  return cudnnGetConvolutionForwardAlgorithmMaxCount(handle, count);
}
cudnnStatus_t max_algorithm_count(cudnnHandle_t handle, int* count, cudnnConvolutionBwdDataAlgoPerf_t*) {
  return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, count);
}
cudnnStatus_t max_algorithm_count(cudnnHandle_t handle, int* count, cudnnConvolutionBwdFilterAlgoPerf_t*) {
  return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, count);
}

cudnnStatus_t ranked_algorithms(const ConvCall& c, int requested, int* returned,
                                cudnnConvolutionFwdAlgoPerf_t* results) {
  const ConvPlan& p = c.plan;
  return cudnnGetConvolutionForwardAlgorithm_v7(c.cudnn.handle, p.input, p.weight, p.convolution, p.output, requested,
                                                returned, results);
}
cudnnStatus_t ranked_algorithms(const ConvCall& c, int requested, int* returned,
                                cudnnConvolutionBwdDataAlgoPerf_t* results) {
  const ConvPlan& p = c.plan;
  return cudnnGetConvolutionBackwardDataAlgorithm_v7(c.cudnn.handle, p.weight, p.output, p.convolution, p.input,
                                                     requested, returned, results);
}
cudnnStatus_t ranked_algorithms(const ConvCall& c, int requested, int* returned,
                                cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  const ConvPlan& p = c.plan;
  return cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.cudnn.handle, p.input, p.output, p.convolution, p.weight,
                                                       requested, returned, results);
}

cudnnStatus_t workspace_size(const ConvCall& c, cudnnConvolutionFwdAlgo_t algorithm, size_t* bytes) {
  const ConvPlan& p = c.plan;
  return cudnnGetConvolutionForwardWorkspaceSize(c.cudnn.handle, p.input, p.weight, p.convolution, p.output, algorithm,
                                                 bytes);
}
cudnnStatus_t workspace_size(const ConvCall& c, cudnnConvolutionBwdDataAlgo_t algorithm, size_t* bytes) {
  const ConvPlan& p = c.plan;
  return cudnnGetConvolutionBackwardDataWorkspaceSize(c.cudnn.handle, p.weight, p.output, p.convolution, p.input,
                                                      algorithm, bytes);
}
cudnnStatus_t workspace_size(const ConvCall& c, cudnnConvolutionBwdFilterAlgo_t algorithm, size_t* bytes) {
  const ConvPlan& p = c.plan;
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(c.cudnn.handle, p.input, p.output, p.convolution, p.weight,
                                                        algorithm, bytes);
}

cudnnStatus_t execute(const ConvCall& c, cudnnConvolutionFwdAlgo_t algorithm, const void* a, const void* b, void* out,
                      void* scratch, size_t bytes) {
  const ConvPlan& p = c.plan;
  return cudnnConvolutionForward(c.cudnn.handle, c.scalars.alpha(), p.input, a, p.weight, b, p.convolution, algorithm,
                                 scratch, bytes, c.scalars.beta(), p.output, out);
}
cudnnStatus_t execute(const ConvCall& c, cudnnConvolutionBwdDataAlgo_t algorithm, const void* a, const void* b,
                      void* out, void* scratch, size_t bytes) {
  const ConvPlan& p = c.plan;
  return cudnnConvolutionBackwardData(c.cudnn.handle, c.scalars.alpha(), p.weight, a, p.output, b, p.convolution,
                                      algorithm, scratch, bytes, c.scalars.beta(), p.input, out);
}
cudnnStatus_t execute(const ConvCall& c, cudnnConvolutionBwdFilterAlgo_t algorithm, const void* a, const void* b,
                      void* out, void* scratch, size_t bytes) {
  const ConvPlan& p = c.plan;
  return cudnnConvolutionBackwardFilter(c.cudnn.handle, c.scalars.alpha(), p.input, a, p.output, b, p.convolution,
                                        algorithm, scratch, bytes, c.scalars.beta(), p.weight, out);
}

// Runs one direction (Perf: its cuDNN perf-result type) of the call's plan, reading `a`
// and `b` and writing `out`, with its cached algorithm `choice` or, on first use, with the
// first of cuDNN's ranked candidates that runs (and caches that one).
template <class Perf>
void run_direction(ConvCall& call, std::optional<AlgorithmChoice<decltype(Perf::algo)>>& choice, const void* a,
                   const void* b, void* out, const char* op, const ConvGeometry& g) {
  using Algo = decltype(Perf::algo);
  ConvPlan& plan = call.plan;
  const bool fma_only = call.fma_only;
  const Device device = call.device;
  if (choice) {
    TS_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.convolution, choice->math));
    Tensor scratch = workspace(choice->workspace_bytes, device);
    TS_CUDNN_CHECK(execute(call, choice->algorithm, a, b, out, data_or_null(scratch), choice->workspace_bytes));
    return;
  }
  // Ask with the policy's math type, not whatever the previous direction left set.
  TS_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.convolution, fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
  int max_candidates = 0;
  TS_CUDNN_CHECK(max_algorithm_count(call.cudnn.handle, &max_candidates, static_cast<Perf*>(nullptr)));
  std::vector<Perf> results(static_cast<size_t>(std::max(max_candidates, 1)));
  int returned = 0;
  TS_CUDNN_CHECK(ranked_algorithms(call, static_cast<int>(results.size()), &returned, results.data()));
  std::vector<AlgorithmChoice<Algo>> candidates;
  for (int i = 0; i < returned; ++i) {
    const Perf& perf = results[static_cast<size_t>(i)];
    if (perf.status != CUDNN_STATUS_SUCCESS) continue;
    if (fma_only && uses_tensor_cores(perf.mathType)) continue;
    candidates.push_back({perf.algo, fma_only ? CUDNN_FMA_MATH : perf.mathType, 0});
  }
  std::string report;
  const int ran = first_that_runs(candidates, [&](AlgorithmChoice<Algo>& candidate) -> std::string {
    const std::string name = detail::concat("algorithm ", static_cast<int>(candidate.algorithm));
    TS_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.convolution, candidate.math));
    cudnnStatus_t status = workspace_size(call, candidate.algorithm, &candidate.workspace_bytes);
    if (status != CUDNN_STATUS_SUCCESS) return detail::concat(name, ": no workspace size (", cudnnGetErrorString(status), ")");
    Tensor scratch;
    try {
      scratch = workspace(candidate.workspace_bytes, device);
    } catch (const CudaError&) {
      return detail::concat(name, ": its ", candidate.workspace_bytes, "-byte workspace does not fit on ", device.str());
    }
    status = execute(call, candidate.algorithm, a, b, out, data_or_null(scratch), candidate.workspace_bytes);
    if (status != CUDNN_STATUS_SUCCESS) {
      cudaGetLastError();  // a refused launch leaves nothing sticky; clear what it may have set
      return detail::concat(name, ": ", cudnnGetErrorString(status));
    }
    return "";
  }, report);
  TS_CHECK(ran >= 0, CudaError, op, ": no cuDNN algorithm runs for ", problem_str(g), " (", returned,
           " ranked by the heuristics, ", candidates.size(), " allowed by the TF32 policy",
           report.empty() ? std::string() : ": " + report, ")");
  choice = candidates[static_cast<size_t>(ran)];
}

void check_sizes(const ConvGeometry& g, const char* op) {
  check_element_count({g.batch, g.channels, g.height, g.width}, op);
  check_element_count({g.batch, g.out_channels, g.out_h, g.out_w}, op);
  check_element_count({g.out_channels, g.channels, g.kernel_h, g.kernel_w}, op);
}

}  // namespace

// Operands checked, made contiguous and the output allocated by the dispatch layer.
void conv2d(const Conv2dCall& call) {
  const ConvGeometry& g = call.geometry;
  const DType dtype = call.input.dtype();
  const ConvTypes types = conv_types(dtype, "conv2d");
  DeviceGuard guard(call.device());
  Tensor out = call.out;
  if (g.patch() == 0) {
    cuda::fill_(out, 0.0);
  } else {
    check_sizes(g, "conv2d");
    ConvCall cudnn = conv_call(call.device(), g, dtype, types, "conv2d");
    run_direction<cudnnConvolutionFwdAlgoPerf_t>(cudnn, cudnn.plan.forward, call.input.data_ptr(),
                                                 call.weight.data_ptr(), out.data_ptr(), "conv2d", g);
  }
  if (call.bias.defined()) cuda::binary_(BinaryOp::add, out, view(call.bias, {1, g.out_channels, 1, 1}));
}

Tensor conv2d_backward_input(const Tensor& grad_output_in, const Tensor& weight_in, const Shape& input_shape,
                             const Conv2dFuncOptions& options) {
  check_conv_operands(grad_output_in, weight_in, "conv2d_backward_input");
  check_cuda(grad_output_in, "conv2d_backward_input");
  ConvGeometry g = conv_geometry(input_shape, weight_in.sizes(), options);
  const DType dtype = grad_output_in.dtype();
  const ConvTypes types = conv_types(dtype, "conv2d_backward_input");
  DeviceGuard guard(grad_output_in.device());
  const Device device = grad_output_in.device();
  Tensor grad_input = empty(input_shape, dtype, device);
  if (grad_input.numel() == 0) return grad_input;
  if (g.positions() == 0 || g.out_channels == 0) {
    cuda::fill_(grad_input, 0.0);
    return grad_input;
  }
  check_sizes(g, "conv2d_backward_input");
  Tensor grad_output = contiguous(grad_output_in), weight = contiguous(weight_in);
  ConvCall call = conv_call(device, g, dtype, types, "conv2d_backward_input");
  run_direction<cudnnConvolutionBwdDataAlgoPerf_t>(call, call.plan.backward_data, weight.data_ptr(),
                                                   grad_output.data_ptr(), grad_input.data_ptr(),
                                                   "conv2d_backward_input", g);
  return grad_input;
}

Tensor conv2d_backward_weight(const Tensor& grad_output_in, const Tensor& input_in, const Shape& weight_shape,
                              const Conv2dFuncOptions& options) {
  check_conv_operands(grad_output_in, input_in, "conv2d_backward_weight");
  check_cuda(grad_output_in, "conv2d_backward_weight");
  ConvGeometry g = conv_geometry(input_in.sizes(), weight_shape, options);
  const DType dtype = input_in.dtype();
  const ConvTypes types = conv_types(dtype, "conv2d_backward_weight");
  DeviceGuard guard(input_in.device());
  const Device device = input_in.device();
  Tensor grad_weight = empty(weight_shape, dtype, device);
  if (grad_weight.numel() == 0) return grad_weight;
  if (g.batch == 0 || g.positions() == 0) {
    cuda::fill_(grad_weight, 0.0);
    return grad_weight;
  }
  check_sizes(g, "conv2d_backward_weight");
  Tensor grad_output = contiguous(grad_output_in), input = contiguous(input_in);
  ConvCall call = conv_call(device, g, dtype, types, "conv2d_backward_weight");
  run_direction<cudnnConvolutionBwdFilterAlgoPerf_t>(call, call.plan.backward_filter, input.data_ptr(),
                                                     grad_output.data_ptr(), grad_weight.data_ptr(),
                                                     "conv2d_backward_weight", g);
  return grad_weight;
}

}  // namespace tessera::cuda

#else  // no cuDNN: the convolutions say so

namespace tessera::cuda {

namespace {
[[noreturn]] void needs_cudnn(const char* op) {
  throw NotCompiledError(detail::concat(op, " on CUDA needs cuDNN, which this build of Tessera was configured without"));
}
}  // namespace

void conv2d(const Conv2dCall&) { needs_cudnn("conv2d"); }
Tensor conv2d_backward_input(const Tensor&, const Tensor&, const Shape&, const Conv2dFuncOptions&) {
  needs_cudnn("conv2d_backward_input");
}
Tensor conv2d_backward_weight(const Tensor&, const Tensor&, const Shape&, const Conv2dFuncOptions&) {
  needs_cudnn("conv2d_backward_weight");
}

}  // namespace tessera::cuda

#endif

namespace tessera::cuda {

using namespace native;

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                                   const Conv2dFuncOptions& options, std::array<bool, 3> output_mask) {
  check_conv_operands(grad_output, input, "conv2d_backward");
  check_conv_operands(input, weight, "conv2d_backward");
  check_cuda(grad_output, "conv2d_backward");
  // cuDNN has one call per gradient; the bias gradient is a sum over N, H and W.
  Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) grad_input = cuda::conv2d_backward_input(grad_output, weight, input.sizes(), options);
  if (output_mask[1]) grad_weight = cuda::conv2d_backward_weight(grad_output, input, weight.sizes(), options);
  if (output_mask[2]) grad_bias = native::sum(grad_output, {0, 2, 3}, false);
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace tessera::cuda
