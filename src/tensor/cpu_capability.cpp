// Run-time choice of the CPU kernels (see cpu_capability.h): cpuid through the compiler's
// __builtin_cpu_supports (which also checks that the OS saves the AVX-512 registers) and, for
// AVX512-BF16, cpuid itself, capped by TESSERA_CPU_CAPABILITY, decided once per process.
#include "tessera/tensor/cpu_capability.h"

#include <omp.h>

#include <array>
#include <cstdlib>
#include <string>

#include "tessera/tensor/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace tessera {

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_CPUID 1
#else
#define TESSERA_CPUID 0
#endif

#if TESSERA_CPUID
bool cpuid_avx512_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  return (eax >> 5) & 1u;
}
#endif

CpuCapability detect() {
#if TESSERA_CPUID
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  // AVX512-BF16 is read from cpuid itself (leaf 7, subleaf 1, EAX bit 5); it adds no register
  // state, so the OS check above covers it.
  if (avx2 && avx512 && cpuid_avx512_bf16()) return CpuCapability::avx512_bf16;
  if (avx2 && avx512) return CpuCapability::avx512;
  if (avx2) return CpuCapability::avx2;
#endif
  return CpuCapability::baseline;
}

// Every level with TESSERA_CPU_CAPABILITY's name for it, lowest first: the names both ways
// and the list an unknown value is told come from here.
struct Level {
  CpuCapability capability;
  std::string_view name;
};
constexpr std::array<Level, 4> kLevels{{
    {CpuCapability::baseline, "default"},
    {CpuCapability::avx2, "avx2"},
    {CpuCapability::avx512, "avx512"},
    {CpuCapability::avx512_bf16, "avx512_bf16"},
}};
static_assert(
    [] {
      for (size_t i = 0; i < kLevels.size(); ++i) {
        if (kLevels[i].capability != static_cast<CpuCapability>(i)) return false;
      }
      return true;
    }(),
    "kLevels is in the enum's order, lowest first");

struct Choice {
  CpuCapability capability = CpuCapability::baseline;
  std::string error;  // non-empty: TESSERA_CPU_CAPABILITY cannot be honoured
};

Choice resolve() {
  Choice choice;
  try {
    choice.capability = choose_cpu_capability(std::getenv("TESSERA_CPU_CAPABILITY"), cpu_capability_supported());
  } catch (const Error& error) {
    choice.error = error.what();
  }
  return choice;
}

}  // namespace

std::string_view to_string(CpuCapability capability) {
  for (const Level& level : kLevels) {
    if (level.capability == capability) return level.name;
  }
  return "unknown";
}

CpuCapability choose_cpu_capability(const char* requested, CpuCapability supported) {
  if (requested == nullptr || *requested == '\0') return supported;
  for (const Level& level : kLevels) {
    if (level.name != requested) continue;
    TS_CHECK(level.capability <= supported, Error, "TESSERA_CPU_CAPABILITY=", requested,
             " asks for kernels this CPU cannot run: it supports up to '", to_string(supported),
             "' (avx2 needs AVX2, FMA and BMI2; avx512 also AVX-512 F, BW, DQ and VL; avx512_bf16 also AVX512-BF16); unset the variable or ",
             "choose a lower level");
    return level.capability;
  }
  std::string names;
  for (const Level& level : kLevels) names += (names.empty() ? "" : ", ") + std::string(level.name);
  throw Error(detail::concat("TESSERA_CPU_CAPABILITY='", requested, "' is not one of ", names));
}

CpuCapability cpu_capability_supported() {
  static const CpuCapability supported = detect();
  return supported;
}

CpuCapability cpu_capability() {
  static const Choice choice = resolve();
  if (!choice.error.empty()) {
    if (omp_in_parallel()) return CpuCapability::baseline;  // nothing may throw here
    throw Error(choice.error);
  }
  return choice.capability;
}

}  // namespace tessera
