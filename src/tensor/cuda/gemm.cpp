// matmul and linear on CUDA through cuBLAS (cublasGemmStridedBatchedEx).
//
// cuBLAS is column-major; a row-major matrix with leading dimension ld is the same bytes
// as its transpose in column-major. So the row-major product C = op(A) op(B) is computed
// as the column-major C^T = op(B)^T op(A)^T: operands swapped, m and n swapped, and each
// operand's transpose flag kept. Batches are one strided-batched call (a broadcast batch
// operand has batch stride 0).
//
// Precision: float32 computes in float32 (CUBLAS_COMPUTE_32F), unless set_allow_tf32(true)
// allows TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32); float64 in float64; bfloat16
// operands accumulate in float32.
#include <cublas_v2.h>

#include <climits>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/handles.h"
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
// [batches, m, n]. A is m x k after op, B is k x n after op.
void gemm(const char* op, DType dtype, int device, const MatrixOperand& a, const MatrixOperand& b, Tensor& c,
          int64_t batches, int64_t m, int64_t n, int64_t k, double beta) {
  const GemmTypes types = gemm_types(dtype, op);
  const float alpha_f = 1.0f, beta_f = static_cast<float>(beta);
  const double alpha_d = 1.0, beta_d = beta;
  const void* alpha = types.double_scalars ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta_p = types.double_scalars ? static_cast<const void*>(&beta_d) : &beta_f;
  TS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_handle(device), b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
      as_int(n, "n", op), as_int(m, "m", op), as_int(k, "k", op), alpha, b.owner.data_ptr(), types.data,
      as_int(b.ld, "leading dimension", op), b.batch_stride, a.owner.data_ptr(), types.data,
      as_int(a.ld, "leading dimension", op), a.batch_stride, beta_p, c.data_ptr(), types.data, as_int(n, "n", op),
      m * n, as_int(batches, "batch count", op), types.compute, CUBLAS_GEMM_DEFAULT));
}

// `t` ([batch..., rows, cols]) as [batches, rows, cols], copying only when it must.
Tensor as_batches(const Tensor& t, int64_t batches, int64_t rows, int64_t cols) {
  const Shape shape{batches, rows, cols};
  return viewable(t, shape) ? view(t, shape) : view(contiguous(t), shape);
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  MatmulPlan plan = plan_matmul(a_in, b_in);
  check_cuda(a_in, "matmul");
  gemm_types(a_in.dtype(), "matmul");  // the dtype check, before any work
  DeviceGuard guard(a_in.device());
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
  double beta = 0.0;
  if (bias.defined()) {  // start every row at the bias, then accumulate the product
    cuda::copy_(out2, bias);
    beta = 1.0;
  }
  if (in_features == 0) {
    if (!bias.defined()) cuda::fill_(out, 0.0);
    return out;
  }
  // out[rows, out] = x[rows, in] * W^T, with W stored [out, in].
  MatrixOperand xs = as_gemm_operand(view(contiguous(x), {1, rows, in_features}));
  MatrixOperand w = as_gemm_operand(unsqueeze(weight, 0));
  w.transposed = !w.transposed;  // the product needs W^T
  Tensor out3 = view(out, {1, rows, out_features});
  gemm("linear", x.dtype(), x.device().index, xs, w, out3, 1, rows, out_features, in_features, beta);
  return out;
}

}  // namespace tessera::cuda
