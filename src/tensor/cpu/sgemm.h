// float32 GEMM on AVX-512 (sgemm.cpp), in gemm.h's row-major convention. gemm<float> tries
// it first when cpu::use_avx512() (isa.h) and falls back to Eigen where it returns false:
// both operands transposed, or shapes too thin for its tiles. Only on x86-64 builds
// (TESSERA_X86_KERNELS); call it only when cpu::use_avx512().
#pragma once

#include <cstdint>

namespace tessera::cpu {

bool sgemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace tessera::cpu
