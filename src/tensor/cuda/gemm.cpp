// matmul and linear on CUDA through cuBLAS (cublasGemmStridedBatchedEx).
//
// cuBLAS is column-major; a row-major matrix with leading dimension ld is the same bytes
// as its transpose in column-major. So the row-major product C = op(A) op(B) is computed
// as the column-major C^T = op(B)^T op(A)^T: operands swapped, m and n swapped, and each
// operand's transpose flag kept. Batches are one strided-batched call (a broadcast batch
// operand has batch stride 0).
//
// linear with a bias (float32, bfloat16) is one cublasLtMatmul with the bias epilogue
// (CUBLASLT_EPILOGUE_BIAS: the bias is added as the product is written, no extra pass);
// its descriptors and the heuristics' algorithm are cached per (device, dtype, shape,
// TF32, operand alignments). When cuBLASLt offers no algorithm (float64, odd alignments),
// the output is first filled with the broadcast bias and the GEMM accumulates onto it.
//
// Precision: float32 computes in float32 (CUBLAS_COMPUTE_32F), unless set_allow_tf32(true)
// allows TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32); float64 in float64; bfloat16
// operands accumulate in float32.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <array>
#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/handles.h"
#include "tessera/tensor/cuda/stream.h"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

struct GemmTypes {
  cudaDataType data;
  cublasComputeType_t compute;
  bool double_scalars;  // alpha and beta are double (else float)
};

GemmTypes gemm_types(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32:
      return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, false};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, true};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, false};
    default:
      throw DTypeError(detail::concat(op, ": expected a floating CUDA tensor (float32, float64 or bfloat16), got ",
                                      dtype_name(dtype)));
  }
}

int as_int(int64_t value, const char* what, const char* op) {
  TS_CHECK(value >= 0 && value <= INT_MAX, ShapeError, op, ": ", what, " ", value,
           " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(value);
}

// A batch of matrices as cuBLAS reads them: row-major (stride [.., ld, 1]) or the
// transpose of one (stride [.., 1, ld]), with one stride between matrices.
struct MatrixOperand {
  Tensor owner;  // keeps the bytes alive (a contiguous copy when the view was neither)
  bool transposed = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

MatrixOperand as_gemm_operand(const Tensor& batch_of_matrices) {
  const Tensor& t = batch_of_matrices;  // [batches, rows, cols]
  const int64_t rows = t.size(1), cols = t.size(2);
  const int64_t s0 = t.stride(0), s1 = t.stride(1), s2 = t.stride(2);
  if ((s2 == 1 || cols == 1) && s1 >= std::max<int64_t>(cols, 1)) return {t, false, s1, s0};
  if ((s1 == 1 || rows == 1) && s2 >= std::max<int64_t>(rows, 1)) return {t, true, s2, s0};
  Tensor copy = contiguous(t);
  return {copy, false, std::max<int64_t>(cols, 1), rows * cols};
}

// C[i] = op(A[i]) * op(B[i]) + beta * C[i] for every batch i, all row-major; C is dense
// [batches, m, n] of A's dtype, or float32 for bfloat16 operands (cuBLAS writes the float32
// accumulator unrounded). A is m x k after op, B is k x n after op.
void gemm(const char* op, DType dtype, int device, const MatrixOperand& a, const MatrixOperand& b, Tensor& c,
          int64_t batches, int64_t m, int64_t n, int64_t k, double beta) {
  const GemmTypes types = gemm_types(dtype, op);
  const cudaDataType c_type = gemm_types(c.dtype(), op).data;
  const float alpha_f = 1.0f, beta_f = static_cast<float>(beta);
  const double alpha_d = 1.0, beta_d = beta;
  const void* alpha = types.double_scalars ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta_p = types.double_scalars ? static_cast<const void*>(&beta_d) : &beta_f;
  TS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_handle(device), b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
      as_int(n, "n", op), as_int(m, "m", op), as_int(k, "k", op), alpha, b.owner.data_ptr(), types.data,
      as_int(b.ld, "leading dimension", op), b.batch_stride, a.owner.data_ptr(), types.data,
      as_int(a.ld, "leading dimension", op), a.batch_stride, beta_p, c.data_ptr(), c_type, as_int(n, "n", op),
      m * n, as_int(batches, "batch count", op), types.compute, CUBLAS_GEMM_DEFAULT));
}

// ---- cuBLASLt with the bias epilogue ----

// The largest power of two (up to 256) that divides the address: cuBLASLt's algorithms
// state the alignment they need, and the heuristics must only offer ones that fit.
uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

struct BiasGemmKey {
  int device;
  DType dtype;
  bool tf32;
  bool transpose_x, transpose_y;
  std::array<int64_t, 5> sizes;        // m, n, k, ld of X, ld of Y (column-major, see bias_gemm)
  std::array<uint32_t, 4> alignments;  // X, Y, D, bias
  auto operator<=>(const BiasGemmKey&) const = default;
};

// The descriptors and algorithm of one problem; `supported` is false when cuBLASLt had
// none (the caller then takes the plain path, every time, without asking again).
struct BiasGemmPlan {
  bool supported = false;
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t x = nullptr, y = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
  size_t workspace_bytes = 0;
  std::mutex in_use;  // the bias pointer is set on the shared descriptor for each call
};

cublasLtHandle_t lt_handle(int device) {
  static auto* mutex = new std::mutex();
  static auto* handles = new std::map<int, cublasLtHandle_t>();  // never destroyed, as the cuBLAS handles
  std::lock_guard<std::mutex> lock(*mutex);
  auto it = handles->find(device);
  if (it != handles->end()) return it->second;
  DeviceGuard guard(device);
  cublasLtHandle_t handle = nullptr;
  TS_CUBLAS_CHECK(cublasLtCreate(&handle));
  handles->emplace(device, handle);
  return handle;
}

constexpr size_t kLtWorkspaceLimit = size_t{32} << 20;  // what the heuristics may ask for (NVIDIA's advice for Hopper)

std::unique_ptr<BiasGemmPlan> build_bias_plan(const BiasGemmKey& key, const GemmTypes& types, const void* bias) {
  auto plan = std::make_unique<BiasGemmPlan>();
  const auto [m, n, k, ldx, ldy] = key.sizes;
  const cublasOperation_t op_x = key.transpose_x ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_y = key.transpose_y ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  TS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->operation, types.compute, CUDA_R_32F));
  TS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSA, &op_x, sizeof op_x));
  TS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSB, &op_y, sizeof op_y));
  TS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  TS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  // Stored shapes: X is m x k (k x m transposed), Y is k x n (n x k transposed), D is m x n.
  TS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->x, types.data, key.transpose_x ? k : m, key.transpose_x ? m : k, ldx));
  TS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->y, types.data, key.transpose_y ? n : k, key.transpose_y ? k : n, ldy));
  TS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, types.data, m, n, m));
  cublasLtMatmulPreference_t preference = nullptr;
  TS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace_limit = kLtWorkspaceLimit;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_limit,
                                       sizeof workspace_limit);
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t alignments[] = {key.alignments[0], key.alignments[1], key.alignments[2], key.alignments[2]};
  for (int i = 0; i < 4; ++i) {
    cublasLtMatmulPreferenceSetAttribute(preference, alignment_attributes[i], &alignments[i], sizeof alignments[i]);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_handle(key.device), plan->operation, plan->x,
                                                               plan->y, plan->d, plan->d, preference, 1, &result,
                                                               &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan->supported = true;
    plan->algorithm = result.algo;
    plan->workspace_bytes = result.workspaceSize;
  }
  return plan;
}

// The cached plan (never destroyed, as the cuDNN plans).
BiasGemmPlan& bias_plan_for(const BiasGemmKey& key, const GemmTypes& types, const void* bias) {
  static auto* mutex = new std::mutex();
  static auto* plans = new std::map<BiasGemmKey, std::unique_ptr<BiasGemmPlan>>();
  std::lock_guard<std::mutex> lock(*mutex);
  auto& slot = (*plans)[key];
  if (!slot) slot = build_bias_plan(key, types, bias);
  return *slot;
}

// out[rows, n_out] = x * W^T + bias with cuBLASLt's bias epilogue, in the column-major
// terms of gemm(): D (m x n) = op(X) op(Y) + bias (one per row of D) with X = w, Y = x.
// Returns false, having done nothing, when cuBLASLt has no algorithm for it.
bool linear_with_bias_epilogue(DType dtype, int device, const MatrixOperand& w, const MatrixOperand& x,
                               const Tensor& bias, Tensor& out, int64_t rows, int64_t out_features,
                               int64_t in_features) {
  if (dtype != DType::f32 && dtype != DType::bf16) return false;  // cuBLASLt's bias epilogue: not for float64
  const GemmTypes types = gemm_types(dtype, "linear");
  const void* bias_data = bias.data_ptr();
  if (alignment_of(bias_data) < 16) return false;
  BiasGemmKey key{device, dtype, allow_tf32(), w.transposed, x.transposed,
                  {out_features, rows, in_features, w.ld, x.ld},
                  {alignment_of(w.owner.data_ptr()), alignment_of(x.owner.data_ptr()), alignment_of(out.data_ptr()),
                   alignment_of(bias_data)}};
  BiasGemmPlan& plan = bias_plan_for(key, types, bias_data);
  if (!plan.supported) return false;
  Tensor workspace = plan.workspace_bytes == 0
                         ? Tensor()
                         : empty({static_cast<int64_t>(plan.workspace_bytes)}, DType::u8, Device::cuda(device));
  std::lock_guard<std::mutex> lock(plan.in_use);
  TS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_data,
                                                 sizeof bias_data));
  const float alpha = 1.0f, beta = 0.0f;
  TS_CUBLAS_CHECK(cublasLtMatmul(lt_handle(device), plan.operation, &alpha, w.owner.data_ptr(), plan.x,
                                 x.owner.data_ptr(), plan.y, &beta, out.data_ptr(), plan.d, out.data_ptr(), plan.d,
                                 &plan.algorithm, workspace.defined() ? workspace.data_ptr() : nullptr,
                                 plan.workspace_bytes, compute_stream(device)));
  return true;
}

// `t` ([batch..., rows, cols]) as [batches, rows, cols], copying only when it must.
Tensor as_batches(const Tensor& t, int64_t batches, int64_t rows, int64_t cols) {
  const Shape shape{batches, rows, cols};
  return viewable(t, shape) ? view(t, shape) : view(contiguous(t), shape);
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) { return matmul(a_in, b_in, a_in.dtype()); }

Tensor matmul(const Tensor& a_in, const Tensor& b_in, DType result_dtype) {
  MatmulPlan plan = plan_matmul(a_in, b_in);
  check_cuda(a_in, "matmul");
  gemm_types(a_in.dtype(), "matmul");  // the dtype check, before any work
  TS_CHECK(result_dtype == a_in.dtype() || (a_in.dtype() == DType::bf16 && result_dtype == DType::f32), DTypeError,
           "matmul: a product of ", dtype_name(a_in.dtype()), " operands cannot be written as ", dtype_name(result_dtype),
           " (only bfloat16 operands' may be kept in float32, their accumulation type)");
  DeviceGuard guard(a_in.device());
  if (result_dtype != plan.out.dtype()) plan.out = empty(plan.out.sizes(), result_dtype, a_in.device());
  const int64_t batches = plan.batches, m = plan.m, k = plan.k, n = plan.n;
  if (plan.out.numel() == 0) return plan.result();
  if (k == 0) {
    cuda::fill_(plan.out, 0.0);
    return plan.result();
  }
  MatrixOperand a = as_gemm_operand(as_batches(plan.a3, batches, m, k));
  MatrixOperand b = as_gemm_operand(as_batches(plan.b3, batches, k, n));
  Tensor out3 = view(plan.out, {batches, m, n});
  gemm("matmul", a_in.dtype(), a_in.device().index, a, b, out3, batches, m, n, k, 0.0);
  return plan.result();
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Shape out_shape = linear_shape(x, weight, bias);
  check_cuda(x, "linear");
  gemm_types(x.dtype(), "linear");
  DeviceGuard guard(x.device());
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  const int64_t rows = x.numel() / std::max<int64_t>(in_features, 1);
  Tensor out = empty(out_shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  Tensor out2 = view(out, {rows, out_features});
  // out[rows, out] = x[rows, in] * W^T, with W stored [out, in].
  MatrixOperand xs = as_gemm_operand(view(contiguous(x), {1, rows, in_features}));
  MatrixOperand w = as_gemm_operand(unsqueeze(weight, 0));
  w.transposed = !w.transposed;  // the product needs W^T
  if (bias.defined() && in_features > 0) {
    Tensor bias_data = contiguous(bias);
    if (linear_with_bias_epilogue(x.dtype(), x.device().index, w, xs, bias_data, out, rows, out_features,
                                  in_features)) {
      return out;
    }
  }
  double beta = 0.0;
  if (bias.defined()) {  // start every row at the bias, then accumulate the product
    cuda::copy_(out2, bias);
    beta = 1.0;
  }
  if (in_features == 0) {
    if (!bias.defined()) cuda::fill_(out, 0.0);
    return out;
  }
  Tensor out3 = view(out, {1, rows, out_features});
  gemm("linear", x.dtype(), x.device().index, xs, w, out3, 1, rows, out_features, in_features, beta);
  return out;
}

}  // namespace tessera::cuda
