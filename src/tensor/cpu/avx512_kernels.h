// The AVX-512 kernels that portable code calls, one per row, plane or sample: each is
// defined in its kernel's foo_avx512.cpp (isa.h's pattern) and may be called only when
// cpu::use_avx512(). Pointers and scalars only cross these calls, never a vector type, so
// the declarations need no target attribute (isa.h says why). Internal to src/tensor/cpu.
#pragma once

#include <cstdint>

#include "tessera/tensor/cpu/isa.h"
#include "tessera/tensor/op_options.h"

#if TESSERA_X86_KERNELS

namespace tessera::cpu::avx512 {

// dropout_avx512.cpp: the keep-mask of one row, as native::dropout_mask_row computes it.
void dropout_keep_mask_row(const DropoutKey& key, int64_t row, int64_t cols, float p, uint8_t* mask);

// pool_avx512.cpp: one plane of float32 2 x 2 / stride 2 max pooling (y and indices are
// out_h x out_w), and its backward, which writes every element of dx. The backward returns
// false if an index lies outside its 2 x 2 window (the indices came from other options).
void pool2x2_plane(const float* x, int64_t width, int64_t out_h, int64_t out_w, float* y, int64_t* indices);
bool pool2x2_backward_plane(const float* dy, const int64_t* indices, int64_t height, int64_t width, int64_t out_h,
                            int64_t out_w, float* dx);

// gelu_avx512.cpp: float32 contiguous rows with the bits of gelu.cpp's element loop.
void gelu_tanh_row(const float* x, float* out, int64_t n);
void gelu_exact_row(const float* x, float* out, int64_t n);
void erf_row(const float* x, float* out, int64_t n);
void gelu_tanh_backward_row(const float* dy, const float* x, float* out, int64_t n);
void gelu_exact_backward_row(const float* dy, const float* x, float* out, int64_t n);

}  // namespace tessera::cpu::avx512

#endif  // TESSERA_X86_KERNELS
