// Direct float32 convolution for the common case (stride 1, no padding, no dilation),
// written for AVX-512. conv.cpp uses it when it applies and cpu::use_avx512() says the CPU
// may run it (isa.h), and im2col + GEMM otherwise (other strides, float64, a CPU without
// AVX-512, TESSERA_CPU_CAPABILITY=default).
//
// The idea ("shifted rows"): compute the output on a *wide* grid of OH x W positions (the
// input's full width; the last kw-1 columns of each row are discarded). On that grid the
// input patch row for kernel tap (c, ki, kj) is the input plane c shifted by ki*W + kj: a
// contiguous run of memory. So the convolution is a GEMM whose B-operand rows are read
// straight from the image, with no im2col buffer and no packing:
//   Y_wide[o, p] = sum_{c,ki,kj} W[o, c, ki, kj] * X[c, ki*W + kj + p].
// The backward works on a wide copy of dY (zero in the discarded columns): the input
// gradient is W^T times it (the patch gradient on the wide grid) followed by col2im, which
// on the wide grid is adding each patch row into its input plane shifted by ki*W + kj;
// the weight gradient is a dot product over p of a dY row and a shifted X row.
// One call handles a whole batch; samples are split across the OpenMP threads.
#pragma once

#include <cstdint>

namespace tessera::cpu::shifted {

struct Geometry {
  int64_t batch, channels, height, width;  // input
  int64_t out_channels, kernel_h, kernel_w;
  int64_t out_h() const { return height - kernel_h + 1; }
  int64_t out_w() const { return width - kernel_w + 1; }
};

// Only when cpu::use_avx512(); only on x86-64 builds (TESSERA_X86_KERNELS).
// y[N, O, OH, OW] = conv(x, w) + bias (bias may be null).
void forward(const Geometry& g, const float* x, const float* w, const float* bias, float* y);

// Any of dx, dw, db may be null (not wanted). dw and db are overwritten, not accumulated.
void backward(const Geometry& g, const float* dy, const float* x, const float* w, float* dx, float* dw, float* db);

}  // namespace tessera::cpu::shifted
