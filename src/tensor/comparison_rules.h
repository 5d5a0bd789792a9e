// The scalar rule of each comparison and logical BinaryOp, written once for the CPU's loops
// (cpu/elementwise.cpp) and the CUDA kernels (cuda/elementwise.cu): compiled as host code
// for one and host-and-device code for the other, so the backends cannot disagree.
#pragma once

#include "tessera/tensor/native.h"

#if defined(__CUDACC__)
#define TS_COMPARISON_RULE __host__ __device__ inline
#else
#define TS_COMPARISON_RULE inline
#endif

namespace tessera::native {

// a op b for the ops that give bool (gives_bool in kernel_shapes.h); false for the others.
template <class T>
TS_COMPARISON_RULE bool apply_comparison(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::eq: return a == b;
    case BinaryOp::ne: return a != b;
    case BinaryOp::lt: return a < b;
    case BinaryOp::le: return a <= b;
    case BinaryOp::gt: return a > b;
    case BinaryOp::ge: return a >= b;
    // The logical ops read "nonzero" (NaN counts as true, as in PyTorch).
    case BinaryOp::logical_and: return a != T(0) && b != T(0);
    case BinaryOp::logical_or: return a != T(0) || b != T(0);
    case BinaryOp::logical_xor: return (a != T(0)) != (b != T(0));
    default: return false;
  }
}

}  // namespace tessera::native

#undef TS_COMPARISON_RULE
