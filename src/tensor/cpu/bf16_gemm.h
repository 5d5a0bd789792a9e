// bfloat16 GEMM on the CPU (gemm<BFloat16>, gemm.h): bfloat16 operands and result, float32
// sums, the result rounded to bfloat16 once, as PyTorch's CPU bfloat16 matmul (oneDNN):
//   C = bf16(alpha * op(A) * op(B) + beta * C)
// Two kernels compute it: the portable one (bf16_gemm.cpp: the operands widened to float32,
// exactly, and multiplied by gemm<float>) and, on CPUs with AVX512-BF16, VDPBF16PS tiles
// (bf16_gemm_avx512.cpp), chosen at run time (cpu::use_avx512_bf16(), isa.h).
// TESSERA_CPU_CAPABILITY=avx512 or lower runs the portable one. Internal to src/tensor
// (the bf16_gemm test calls both kernels on the same operands).
#pragma once

#include <cstdint>

#include "tessera/tensor/dtype.h"

namespace tessera::cpu {

enum class Bf16GemmKernel { portable, avx512_bf16 };

// gemm<BFloat16> on the kernel named; avx512_bf16 only where cpu_capability_supported()
// reaches CpuCapability::avx512_bf16 (tessera::Error otherwise, naming the CPU's level).
void gemm_bf16(Bf16GemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The AVX512-BF16 kernel (bf16_gemm_avx512.cpp), bfloat16 as its bits; false for the cases
// it leaves to the portable one (an empty product, alpha 0). Call only when the CPU has
// AVX512-BF16.
bool gemm_bf16_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                      int64_t lda, const uint16_t* b, int64_t ldb, float beta, uint16_t* c, int64_t ldc);
#endif

}  // namespace tessera::cpu
