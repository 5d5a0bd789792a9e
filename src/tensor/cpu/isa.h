// How a CPU kernel gets an AVX-512 version that the portable build still runs without
// (cpu_capability.h says how the choice is made). Internal to src/tensor/cpu.
//
// The pattern, for a kernel foo (as PyTorch keeps each capability's kernels in files of
// their own): its AVX-512 rows in foo_avx512.cpp, declared in avx512_kernels.h, called
// from the portable foo.cpp.
//
//   // foo_avx512.cpp: the AVX-512 code and nothing else
//   #include ...every header the file needs...          // all #includes first
//   #include "tessera/tensor/cpu/avx512_intrinsics.h"   // <immintrin.h>, GCC 12's warning off
//   #include "tessera/tensor/cpu/avx512_kernels.h"      // the declarations; includes isa.h
//   #if TESSERA_X86_KERNELS
//   TESSERA_AVX512_BEGIN
//   namespace tessera::cpu::avx512 { void foo_rows(...) { ...intrinsics... } }
//   TESSERA_AVX512_END
//   #endif
//
//   // avx512_kernels.h, in namespace tessera::cpu::avx512:
//   void foo_rows(...);
//
//   // foo.cpp, in the op, outside any OpenMP region (the choice may throw):
//   #if TESSERA_X86_KERNELS
//   if (cpu::use_avx512() && applies) { ...#pragma omp loop calling avx512::foo_rows... return; }
//   #endif
//   ...the portable loop, which computes the same thing on every CPU...
//
// sgemm.cpp and conv_shifted.cpp are whole files of one AVX-512 path (their callers fall
// back to Eigen and im2col elsewhere): each holds its region (the tiles) and, after END,
// the portable OpenMP driver that calls them, so their tiles need no header; avx512_tiles.h
// holds what both regions share.
//
// Rules, and why:
// - Functions between BEGIN and END are compiled for AVX-512 whatever the build's -march;
//   they run only after use_avx512() said yes. Everything else is the portable baseline.
// - #includes go before BEGIN: an inline function or template from a header defined inside
//   the region would be compiled for AVX-512, and the linker keeps one copy of it for the
//   whole library, which then dies on a CPU without AVX-512.
// - No `#pragma omp` inside the region: clang does not give OpenMP's outlined functions the
//   region's target, so they would not compile there. Keep the threading in portable code
//   and call an AVX-512 function per row, tile or sample.
// - AVX-512 code lives in namespace tessera::cpu::avx512 (nested namespaces are fine): the
//   `isa` test disassembles the library and fails on an AVX-512 instruction anywhere else.
// - The target names ISA extensions only, no tune=: GCC inlines a function into one with
//   another tuning only if it is always_inline, so std::min and friends would become calls.
//   Where the baseline's generic tuning schedules a kernel badly, fix the kernel
//   (avx512_tiles.h's in_register is one such fix).
// - avx512_kernels.h declares the functions without a target attribute, and needs none: a
//   plain declaration and the region's definition are one function in GCC and in clang
//   (multiversioning starts only where two declarations both carry target strings and they
//   differ, or one says target("default")), and a call into it from baseline code is an
//   ordinary call (only inlining it there is refused, so a split loses no inlining). Only
//   pointers and scalars may cross such a call: a __m512 argument or result is passed
//   differently with and without AVX-512 (GCC warns, -Wpsabi; clang 14 refuses), so vector
//   values stay inside the region.
// - TESSERA_X86_KERNELS is about the architecture (x86-64 with GCC or clang), not about
//   the compiler's -march: it is 1 in every x86-64 build. Other architectures compile the
//   portable paths only.
#pragma once

#include "tessera/tensor/cpu_capability.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_X86_KERNELS 1
#else
#define TESSERA_X86_KERNELS 0
#endif

// AVX-512 F/BW/DQ/VL (the avx512 capability's set) plus FMA and BMI2, which every such CPU has.
#if defined(__clang__)
#define TESSERA_AVX512_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2\"))), apply_to = function)")
#define TESSERA_AVX512_END _Pragma("clang attribute pop")
#else
#define TESSERA_AVX512_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2\")")
#define TESSERA_AVX512_END _Pragma("GCC pop_options")
#endif

// The same plus AVX512-BF16 (VDPBF16PS, VCVTNE2PS2BF16), for the bfloat16 GEMM's region
// (bf16_gemm_avx512.cpp); its functions live in tessera::cpu::avx512 too.
#if defined(__clang__)
#define TESSERA_AVX512_BF16_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma,bmi,bmi2\"))), apply_to = function)")
#define TESSERA_AVX512_BF16_END _Pragma("clang attribute pop")
#else
#define TESSERA_AVX512_BF16_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma,bmi,bmi2\")")
#define TESSERA_AVX512_BF16_END _Pragma("GCC pop_options")
#endif

namespace tessera::cpu {

// The AVX-512 kernels may run: the CPU has them and TESSERA_CPU_CAPABILITY allows them.
inline bool use_avx512() { return cpu_capability() >= CpuCapability::avx512; }

// The AVX512-BF16 kernels may run (TESSERA_CPU_CAPABILITY=avx512 keeps the portable bfloat16 GEMM).
inline bool use_avx512_bf16() { return cpu_capability() >= CpuCapability::avx512_bf16; }

}  // namespace tessera::cpu
