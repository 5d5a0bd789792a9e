// Run-time choice of the CPU kernels (see cpu_capability.h): cpuid through the compiler's
// __builtin_cpu_supports (which also checks that the OS saves the AVX-512 registers), capped
// by TESSERA_CPU_CAPABILITY, decided once per process.
#include "tessera/tensor/cpu_capability.h"

#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "tessera/tensor/error.h"

namespace tessera {

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_CPUID 1
#else
#define TESSERA_CPUID 0
#endif

CpuCapability detect() {
#if TESSERA_CPUID
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (avx2 && avx512) return CpuCapability::avx512;
  if (avx2) return CpuCapability::avx2;
#endif
  return CpuCapability::baseline;
}

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

#if TESSERA_CPUID
// 1 where `macro` is defined as 1, as GCC and clang define their ISA macros (__AVX2__ and
// so on), else 0: a predefined macro read as a value in an expression, where defined()
// cannot stand (the idiom of Linux's IS_ENABLED).
#define TESSERA_DEFINED_AS_ONE(macro) TESSERA_DEFINED_PASTE(macro)
#define TESSERA_DEFINED_PASTE(value) TESSERA_DEFINED_PICK(TESSERA_DEFINED_COMMA_##value)
#define TESSERA_DEFINED_COMMA_1 ,
#define TESSERA_DEFINED_PICK(comma_or_name) TESSERA_DEFINED_SECOND(comma_or_name 1, 0, )
#define TESSERA_DEFINED_SECOND(first, second, ...) second
static_assert(TESSERA_DEFINED_AS_ONE(__x86_64__) == 1 && TESSERA_DEFINED_AS_ONE(TESSERA_NOT_A_MACRO) == 0);

// Before anything else in the library runs (priority 101 precedes C++ static
// initialisers), and compiled for plain x86-64 so that it runs where the rest would not:
// a CPU without the instructions this build's baseline uses gets a message saying so
// instead of only an illegal-instruction signal somewhere later.
__attribute__((constructor(101), target("arch=x86-64"))) void warn_if_below_baseline() {
  __builtin_cpu_init();
  // The extensions this build's -march lets the compiler use, most basic first: the first
  // one this CPU lacks is named. (__builtin_cpu_supports takes only a string literal.)
  const struct {
    bool assumed, present;
    const char* name;
  } extensions[] = {
      {TESSERA_DEFINED_AS_ONE(__AVX__), __builtin_cpu_supports("avx") != 0, "AVX"},
      {TESSERA_DEFINED_AS_ONE(__FMA__), __builtin_cpu_supports("fma") != 0, "FMA"},
      {TESSERA_DEFINED_AS_ONE(__AVX2__), __builtin_cpu_supports("avx2") != 0, "AVX2"},
      {TESSERA_DEFINED_AS_ONE(__AVX512F__), __builtin_cpu_supports("avx512f") != 0, "AVX-512"},
  };
  const char* missing = nullptr;
  for (const auto& extension : extensions) {
    if (extension.assumed && !extension.present) {
      missing = extension.name;
      break;
    }
  }
  if (missing == nullptr) return;
  const char* parts[] = {"tessera: this libtessera was compiled for a CPU with ", missing,
                         " (meson option cpu_arch), which this CPU lacks: it will stop with an illegal "
                         "instruction. Rebuild it with -Dcpu_arch=x86-64-v2 for this machine.\n"};
  for (const char* part : parts) {
    if (write(STDERR_FILENO, part, std::strlen(part)) < 0) return;
  }
}
#endif

}  // namespace

std::string_view to_string(CpuCapability capability) {
  switch (capability) {
    case CpuCapability::baseline: return "default";
    case CpuCapability::avx2: return "avx2";
    case CpuCapability::avx512: return "avx512";
  }
  return "unknown";
}

CpuCapability choose_cpu_capability(const char* requested, CpuCapability supported) {
  if (requested == nullptr || *requested == '\0') return supported;
  for (CpuCapability level : {CpuCapability::baseline, CpuCapability::avx2, CpuCapability::avx512}) {
    if (to_string(level) != requested) continue;
    TS_CHECK(level <= supported, Error, "TESSERA_CPU_CAPABILITY=", requested, " asks for kernels this CPU cannot run: ",
             "it supports up to '", to_string(supported), "' (avx2 needs AVX2, FMA and BMI2; avx512 also AVX-512 F, ",
             "BW, DQ and VL); unset the variable or choose a lower level");
    return level;
  }
  throw Error(detail::concat("TESSERA_CPU_CAPABILITY='", requested, "' is not one of default, avx2, avx512"));
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
