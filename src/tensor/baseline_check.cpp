// The load-time check of baseline_check.h: the table of the extensions this build assumes,
// read from the compiler's ISA macros, against cpuid.
#include "tessera/tensor/baseline_check.h"

#include <unistd.h>

#include <cstring>

#include "tessera/tensor/cpu/isa.h"  // TESSERA_X86_KERNELS: x86-64 with GCC or clang

#if TESSERA_X86_KERNELS
// Plain x86-64 code in a library compiled for x86-64-v3 or more: no VEX instruction.
#define TESSERA_PLAIN_X86_64 __attribute__((target("arch=x86-64")))
#else
#define TESSERA_PLAIN_X86_64
#endif

namespace tessera::detail {

TESSERA_PLAIN_X86_64 const CpuExtension* first_missing_extension(const CpuExtension* extensions, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (extensions[i].assumed && !extensions[i].present) return &extensions[i];
  }
  return nullptr;
}

TESSERA_PLAIN_X86_64 bool write_below_baseline_warning(int fd, const CpuExtension& missing) {
  const char* parts[] = {"tessera: this libtessera was compiled for a CPU with ", missing.name,
                         " (meson option cpu_arch), which this CPU lacks: it will stop with an illegal "
                         "instruction. Rebuild it with -Dcpu_arch=",
                         missing.rebuild_arch, " for this machine.\n"};
  for (const char* part : parts) {
    if (write(fd, part, std::strlen(part)) < 0) return false;
  }
  return true;
}

}  // namespace tessera::detail

#if TESSERA_X86_KERNELS
namespace tessera::detail {
namespace {

// 1 where `macro` is defined as 1, as GCC and clang define their ISA macros (__AVX2__ and
// so on), else 0: a predefined macro read as a value in an expression, where defined()
// cannot stand (the idiom of Linux's IS_ENABLED).
#define TESSERA_DEFINED_AS_ONE(macro) TESSERA_DEFINED_PASTE(macro)
#define TESSERA_DEFINED_PASTE(value) TESSERA_DEFINED_PICK(TESSERA_DEFINED_COMMA_##value)
#define TESSERA_DEFINED_COMMA_1 ,
#define TESSERA_DEFINED_PICK(comma_or_name) TESSERA_DEFINED_SECOND(comma_or_name 1, 0, )
#define TESSERA_DEFINED_SECOND(first, second, ...) second
static_assert(TESSERA_DEFINED_AS_ONE(__x86_64__) == 1 && TESSERA_DEFINED_AS_ONE(TESSERA_NOT_A_MACRO) == 0);

// Before anything else in the library runs (priority 101 precedes C++ static initialisers).
__attribute__((constructor(101))) TESSERA_PLAIN_X86_64 void warn_if_below_baseline() {
  __builtin_cpu_init();
  // __builtin_cpu_supports takes only a string literal, hence one row per extension.
  const CpuExtension extensions[] = {
      {TESSERA_DEFINED_AS_ONE(__AVX__), __builtin_cpu_supports("avx") != 0, "AVX", "x86-64-v2"},
      {TESSERA_DEFINED_AS_ONE(__FMA__), __builtin_cpu_supports("fma") != 0, "FMA", "x86-64-v2"},
      {TESSERA_DEFINED_AS_ONE(__AVX2__), __builtin_cpu_supports("avx2") != 0, "AVX2", "x86-64-v2"},
      {TESSERA_DEFINED_AS_ONE(__AVX512F__), __builtin_cpu_supports("avx512f") != 0, "AVX-512", "x86-64-v3"},
  };
  const CpuExtension* missing = first_missing_extension(extensions, sizeof extensions / sizeof extensions[0]);
  if (missing != nullptr) write_below_baseline_warning(STDERR_FILENO, *missing);
}

}  // namespace
}  // namespace tessera::detail
#endif
