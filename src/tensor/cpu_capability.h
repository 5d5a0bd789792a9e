// Which CPU kernels Tessera runs: chosen at run time from what the CPU supports, as
// PyTorch chooses its ATen kernels (ATEN_CPU_CAPABILITY, torch.backends.cpu.get_cpu_capability()).
//
// The library is compiled for a baseline (x86-64-v3: AVX2, FMA, BMI2; -Dcpu_arch changes
// it) and runs everywhere that baseline runs. Kernels written for AVX-512 are compiled into
// the same library with target attributes and chosen only when the CPU has AVX-512
// (F, BW, DQ, VL), so one build runs on every CPU of the baseline and at full speed on
// AVX-512 machines. TESSERA_CPU_CAPABILITY=default|avx2|avx512|avx512_bf16 caps the choice:
// `default` runs the portable kernels everywhere (the tests use it to run them on AVX-512
// machines), `avx512` the float32 AVX-512 kernels but the portable bfloat16 GEMM.
//
//   ts::cpu_capability();                 // CpuCapability::avx512_bf16 on an AMD Zen 4/5 EPYC
//   ts::to_string(ts::cpu_capability());  // "avx512_bf16"
//
// The variable is read once, at the first kernel choice. An unknown value, or one above
// what this CPU supports, is a tessera::Error from every call that chooses a kernel.
#pragma once

#include <string_view>

namespace tessera {

// Ordered: each level may also run the kernels of the levels below it. (A new level also
// needs its row, in this order, in cpu_capability.cpp's table of names.)
enum class CpuCapability {
  baseline,  // "default": the portable kernels, compiled for the build's baseline
  avx2,      // "avx2": AVX2 + FMA (the x86-64-v3 baseline's own level: the portable kernels)
  avx512,    // "avx512": AVX-512 F, BW, DQ and VL (Skylake-SP and later Xeons, AMD Zen 4)
  avx512_bf16,  // "avx512_bf16": avx512 plus AVX512-BF16's VDPBF16PS (Cooper Lake, Sapphire Rapids, Zen 4)
};

// The kernels in use: the best this CPU supports, or TESSERA_CPU_CAPABILITY's choice.
// Throws tessera::Error when the variable holds an unknown value or asks for more than the
// CPU has. (Inside an OpenMP parallel region, where nothing may throw, that case answers
// `baseline`; the op that opened the region has thrown already.)
CpuCapability cpu_capability();

// The best this CPU supports, whatever TESSERA_CPU_CAPABILITY says.
CpuCapability cpu_capability_supported();

// "default", "avx2", "avx512" or "avx512_bf16": the values TESSERA_CPU_CAPABILITY takes.
std::string_view to_string(CpuCapability capability);

// The rule cpu_capability() applies, for a value of TESSERA_CPU_CAPABILITY (null or empty:
// not set) on a CPU that supports `supported`. Throws tessera::Error as described above.
CpuCapability choose_cpu_capability(const char* requested, CpuCapability supported);

}  // namespace tessera
