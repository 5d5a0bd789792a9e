// General matrix multiply on the CPU, the workhorse behind matmul, linear and im2col
// convolution: float32 on AVX-512 machines runs sgemm.cpp's kernels (chosen at run time,
// isa.h), bfloat16 bf16_gemm.h's (float32 sums, the result rounded once), everything else Eigen
// (or OpenBLAS, in a build configured with -Dblas=openblas). Row-major operands with explicit leading dimensions:
//   C[m, n] = alpha * op(A) * op(B) + beta * C,   op(X) = X or X^T
// A is [m, k] (or [k, m] when trans_a), B is [k, n] (or [n, k] when trans_b).
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/tensor/dtype.h"

namespace tessera::cpu {

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// bfloat16 (bf16_gemm.cpp): C = bf16(alpha op(A) op(B) + beta C) with float32 sums.
template <>
void gemm<BFloat16>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, BFloat16 alpha, const BFloat16* a,
                    int64_t lda, const BFloat16* b, int64_t ldb, BFloat16 beta, BFloat16* c, int64_t ldc);

// dispatch_floating (dtype.h) plus bfloat16: the dtypes gemm computes in, for the ops built
// on it (matmul, linear, convolution's forward). `op` names the caller in the error.
template <class Body>
void dispatch_gemm(DType dtype, std::string_view op, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    case DType::bf16: return body.template operator()<BFloat16>();
    default:
      throw DTypeError(detail::concat(op, ": expected a floating tensor (float32, float64 or bfloat16), got ",
                                      dtype_name(dtype)));
  }
}

}  // namespace tessera::cpu
