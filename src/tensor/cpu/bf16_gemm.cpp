// gemm<BFloat16> (bf16_gemm.h): the choice between the AVX512-BF16 kernel and the portable
// one, and the portable one itself. bfloat16 widens to float32 exactly and the product of
// two bfloat16 is exact in float32, so the portable kernel is gemm<float> (sgemm.cpp's
// tiles, or Eigen's pairwise sums) on widened copies of the operands, the float32 result
// then rounded once. It is the reference the AVX512-BF16 kernel is tested against; the two
// differ only in the order of the float32 sums (and VDPBF16PS's flushing of subnormals).
#include "tessera/tensor/cpu/bf16_gemm.h"

#include <omp.h>

#include "tessera/tensor/cpu/gemm.h"
#include "tessera/tensor/cpu/isa.h"
#include "tessera/tensor/cpu/scratch.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kParallelElements = int64_t{1} << 16;

// dst[r * cols + c] = float(src[r * ld + c]): a stored matrix widened, made contiguous.
void widen(const BFloat16* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<float>(src[r * ld + c]);
  }
}

void round_into(const float* src, int64_t rows, int64_t cols, BFloat16* dst, int64_t ld) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * ld + c] = BFloat16(src[r * cols + c]);
  }
}

void gemm_portable(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                   int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  thread_local Scratch a_buffer, b_buffer, c_buffer;
  float* a32 = a_buffer.get(a_rows * a_cols);
  float* b32 = b_buffer.get(b_rows * b_cols);
  float* c32 = c_buffer.get(m * n);
  widen(a, a_rows, a_cols, lda, a32);
  widen(b, b_rows, b_cols, ldb, b32);
  if (beta != 0.0f) widen(c, m, n, ldc, c32);
  gemm<float>(trans_a, trans_b, m, n, k, alpha, a32, a_cols, b32, b_cols, beta, c32, n);
  round_into(c32, m, n, c, ldc);
}

}  // namespace

void gemm_bf16(Bf16GemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (kernel == Bf16GemmKernel::avx512_bf16) {
    TS_CHECK(cpu_capability_supported() >= CpuCapability::avx512_bf16, Error,
             "gemm_bf16: the AVX512-BF16 kernel needs a CPU with AVX512-BF16; this one supports up to '",
             to_string(cpu_capability_supported()), "'");
#if TESSERA_X86_KERNELS
    if (gemm_bf16_avx512(trans_a, trans_b, m, n, k, alpha, reinterpret_cast<const uint16_t*>(a), lda,
                         reinterpret_cast<const uint16_t*>(b), ldb, beta, reinterpret_cast<uint16_t*>(c), ldc)) {
      return;
    }
#endif
  }
  gemm_portable(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <>
void gemm<BFloat16>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, BFloat16 alpha, const BFloat16* a,
                    int64_t lda, const BFloat16* b, int64_t ldb, BFloat16 beta, BFloat16* c, int64_t ldc) {
  const Bf16GemmKernel kernel = use_avx512_bf16() ? Bf16GemmKernel::avx512_bf16 : Bf16GemmKernel::portable;
  gemm_bf16(kernel, trans_a, trans_b, m, n, k, static_cast<float>(alpha), a, lda, b, ldb, static_cast<float>(beta), c,
            ldc);
}

}  // namespace tessera::cpu
