// GCC 12's AVX-512 intrinsics start from `__m512 __Y = __Y;` (an undefined vector on purpose),
// which -Wmaybe-uninitialized reports wherever they inline (a GCC 12 false positive; here
// through Eigen's GEMM kernels): silenced for this file only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "tessera/tensor/cpu/gemm.h"

#include "tessera/config.h"
#include "tessera/tensor/cpu/isa.h"
#include "tessera/tensor/cpu/scratch.h"
#include "tessera/tensor/cpu/sgemm.h"

#if TESSERA_HAS_OPENBLAS
#include <cblas.h>
#endif

#include <Eigen/Core>
#include <algorithm>
#include <type_traits>

namespace tessera::cpu {

namespace {

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using Map = Eigen::Map<RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T, class A, class B>
void multiply_into(Map<T>& c, const A& a, const B& b, T alpha, T beta) {
  if (beta == T(0)) {
    if (alpha == T(1)) {
      c.noalias() = a * b;
    } else {
      c.noalias() = alpha * (a * b);
    }
  } else {
    if (beta != T(1)) c *= beta;
    if (alpha == T(1)) {
      c.noalias() += a * b;
    } else {
      c.noalias() += alpha * (a * b);
    }
  }
}

// float32 sums along the depth pairwise: the depth is split in halves (a whole number of
// blocks on the left) down to single blocks, which Eigen sums term by term, and each right
// half is computed into scratch and added to the left one. float32's error grows with the
// longest run of additions; Eigen alone adds its depth blocks (a few hundred terms) one
// after another, which left the im2col convolution's 288-term dot products and fc2's 128
// twice as far from float64 as PyTorch's. Blocks of 64 terms; of 256 for depths over 1024
// (fc1's 9216), where Eigen's cost per call would show. float64 keeps Eigen's order (its
// results are pinned bit for bit).
int64_t depth_block(int64_t k) { return k <= 1024 ? 64 : 256; }

struct Operands {
  const ConstMap<float>& a;  // [m, k], or [k, m] when trans_a
  const ConstMap<float>& b;  // [k, n], or [n, k] when trans_b
  bool trans_a, trans_b;
};

// C = alpha op(A)[:, k0 : k0 + depth] op(B)[k0 : k0 + depth, :] + beta C, summed term by term.
void multiply_depth_block(Map<float>& c, const Operands& o, int64_t k0, int64_t depth, float alpha, float beta) {
  if (!o.trans_a && !o.trans_b) {
    multiply_into<float>(c, o.a.middleCols(k0, depth), o.b.middleRows(k0, depth), alpha, beta);
  } else if (!o.trans_a) {
    multiply_into<float>(c, o.a.middleCols(k0, depth), o.b.middleCols(k0, depth).transpose(), alpha, beta);
  } else if (!o.trans_b) {
    multiply_into<float>(c, o.a.middleRows(k0, depth).transpose(), o.b.middleRows(k0, depth), alpha, beta);
  } else {
    multiply_into<float>(c, o.a.middleRows(k0, depth).transpose(), o.b.middleCols(k0, depth).transpose(), alpha,
                         beta);
  }
}

// The same over depth terms k0 .. k0 + depth, pairwise; `level` picks this depth's scratch.
void multiply_pairwise(Map<float>& c, const Operands& o, int64_t k0, int64_t depth, int64_t block, float alpha,
                       float beta, int level = 0) {
  if (depth <= block) return multiply_depth_block(c, o, k0, depth, alpha, beta);
  const int64_t blocks = (depth + block - 1) / block;
  const int64_t left = (blocks + 1) / 2 * block;
  multiply_pairwise(c, o, k0, left, block, alpha, beta, level + 1);
  constexpr int kLevels = 40;  // depth < 2^39 blocks
  thread_local Scratch scratch[kLevels];
  Map<float> right(scratch[level].get(c.rows() * c.cols()), c.rows(), c.cols(), Eigen::OuterStride<>(c.cols()));
  multiply_pairwise(right, o, k0 + left, depth - left, block, alpha, 0.0f, level + 1);
  c += right;
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#if TESSERA_X86_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx512() && sgemm_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  }
#endif
#if TESSERA_HAS_OPENBLAS
  if (k > 0) {  // OpenBLAS (built with -Dblas=openblas) instead of Eigen
    const CBLAS_TRANSPOSE op_a = trans_a ? CblasTrans : CblasNoTrans, op_b = trans_b ? CblasTrans : CblasNoTrans;
    const auto m32 = static_cast<blasint>(m), n32 = static_cast<blasint>(n), k32 = static_cast<blasint>(k);
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, op_a, op_b, m32, n32, k32, alpha, a, static_cast<blasint>(lda), b,
                  static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
    } else {
      cblas_dgemm(CblasRowMajor, op_a, op_b, m32, n32, k32, alpha, a, static_cast<blasint>(lda), b,
                  static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
    }
    return;
  }
#endif
  Map<T> cm(c, m, n, Eigen::OuterStride<>(ldc));
  if (k == 0) {
    if (beta == T(0)) cm.setZero(); else cm *= beta;
    return;
  }
  ConstMap<T> am(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  ConstMap<T> bm(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  if constexpr (std::is_same_v<T, float>) {
    if (k > depth_block(k)) return multiply_pairwise(cm, {am, bm, trans_a, trans_b}, 0, k, depth_block(k), alpha, beta);
  }
  if (!trans_a && !trans_b) multiply_into<T>(cm, am, bm, alpha, beta);
  if (!trans_a && trans_b) multiply_into<T>(cm, am, bm.transpose(), alpha, beta);
  if (trans_a && !trans_b) multiply_into<T>(cm, am.transpose(), bm, alpha, beta);
  if (trans_a && trans_b) multiply_into<T>(cm, am.transpose(), bm.transpose(), alpha, beta);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                          int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t);

}  // namespace tessera::cpu
