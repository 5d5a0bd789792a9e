// The run-time choice of CPU kernels (cpu_capability.h): the rule for TESSERA_CPU_CAPABILITY
// as a pure function, that this process follows it, and the load-time check for CPUs below
// the build's baseline. The `tensor-default` test runs this binary again under
// TESSERA_CPU_CAPABILITY=default, so both branches of the third case run.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <tessera/tessera.h>

#include "tessera/tensor/baseline_check.h"

#include "test_support.h"

namespace ts = tessera;
using test_support::contains;
using test_support::error_of;
using ts::CpuCapability;

TEST_CASE("TESSERA_CPU_CAPABILITY caps the kernels at a level the CPU supports") {
  CHECK(ts::choose_cpu_capability(nullptr, CpuCapability::avx512) == CpuCapability::avx512);
  CHECK(ts::choose_cpu_capability("", CpuCapability::avx2) == CpuCapability::avx2);
  CHECK(ts::choose_cpu_capability("default", CpuCapability::avx512) == CpuCapability::baseline);
  CHECK(ts::choose_cpu_capability("avx2", CpuCapability::avx512) == CpuCapability::avx2);
  CHECK(ts::choose_cpu_capability("avx512", CpuCapability::avx512) == CpuCapability::avx512);
  CHECK(ts::choose_cpu_capability("default", CpuCapability::baseline) == CpuCapability::baseline);
  CHECK(ts::choose_cpu_capability("avx512", CpuCapability::avx512_bf16) == CpuCapability::avx512);
  CHECK(ts::choose_cpu_capability("avx512_bf16", CpuCapability::avx512_bf16) == CpuCapability::avx512_bf16);
  for (CpuCapability level :
       {CpuCapability::baseline, CpuCapability::avx2, CpuCapability::avx512, CpuCapability::avx512_bf16}) {
    const std::string name(ts::to_string(level));
    CHECK(ts::choose_cpu_capability(name.c_str(), CpuCapability::avx512_bf16) == level);
  }
}

TEST_CASE("TESSERA_CPU_CAPABILITY above the CPU's level, or unknown, is an error naming it") {
  const std::string above = error_of([] { ts::choose_cpu_capability("avx512", CpuCapability::avx2); });
  CHECK(contains(above, "TESSERA_CPU_CAPABILITY=avx512"));
  CHECK(contains(above, "supports up to 'avx2'"));
  CHECK(contains(error_of([] { ts::choose_cpu_capability("avx2", CpuCapability::baseline); }), "up to 'default'"));
  CHECK(contains(error_of([] { ts::choose_cpu_capability("avx512_bf16", CpuCapability::avx512); }),
                 "supports up to 'avx512'"));
  for (const char* wrong : {"AVX512", "avx-512", "native", "avx512 "}) {
    CAPTURE(wrong);
    const std::string message = error_of([wrong] { ts::choose_cpu_capability(wrong, CpuCapability::avx512); });
    CHECK(contains(message, std::string("TESSERA_CPU_CAPABILITY='") + wrong + "'"));
    CHECK(contains(message, "not one of default, avx2, avx512, avx512_bf16"));
  }
}

TEST_CASE("this process runs the kernels TESSERA_CPU_CAPABILITY chose") {
  const char* requested = std::getenv("TESSERA_CPU_CAPABILITY");
  const CpuCapability supported = ts::cpu_capability_supported();
  MESSAGE("CPU supports '", ts::to_string(supported), "'; kernels in use: '", ts::to_string(ts::cpu_capability()), "'");
  if (requested == nullptr || *requested == '\0') {
    CHECK(ts::cpu_capability() == supported);
  } else {
    CHECK(ts::to_string(ts::cpu_capability()) == requested);
  }
}

// The load-time check (baseline_check.h) cannot fire on a machine that runs the tests (it
// has every extension the build assumes), so it runs here for made-up CPUs; the `isa` test
// holds that its code is plain x86-64.
TEST_CASE("the load-time check names the first extension the build assumes and the CPU lacks") {
  using ts::detail::CpuExtension;
  const CpuExtension v3_build_on_a_v2_cpu[] = {
      {true, false, "AVX", "x86-64-v2"},
      {true, false, "FMA", "x86-64-v2"},
      {true, false, "AVX2", "x86-64-v2"},
      {false, false, "AVX-512", "x86-64-v3"},
  };
  CHECK(ts::detail::first_missing_extension(v3_build_on_a_v2_cpu, 4) == &v3_build_on_a_v2_cpu[0]);
  const CpuExtension native_build_on_an_avx2_cpu[] = {
      {true, true, "AVX", "x86-64-v2"},
      {true, true, "AVX2", "x86-64-v2"},
      {true, false, "AVX-512", "x86-64-v3"},
  };
  CHECK(ts::detail::first_missing_extension(native_build_on_an_avx2_cpu, 3) == &native_build_on_an_avx2_cpu[2]);
  const CpuExtension v3_build_on_an_avx512_cpu[] = {
      {true, true, "AVX2", "x86-64-v2"},
      {false, true, "AVX-512", "x86-64-v3"},
  };
  CHECK(ts::detail::first_missing_extension(v3_build_on_an_avx512_cpu, 2) == nullptr);
  CHECK(ts::detail::first_missing_extension(nullptr, 0) == nullptr);
}

TEST_CASE("the load-time warning names the missing extension and the cpu_arch that builds for this CPU") {
  int ends[2];
  REQUIRE(pipe(ends) == 0);
  const bool written = ts::detail::write_below_baseline_warning(ends[1], {true, false, "AVX-512", "x86-64-v3"});
  close(ends[1]);
  std::string message;
  char buffer[256];
  for (ssize_t n; (n = read(ends[0], buffer, sizeof buffer)) > 0;) message.append(buffer, static_cast<size_t>(n));
  close(ends[0]);
  CHECK(written);
  CHECK(message ==
        "tessera: this libtessera was compiled for a CPU with AVX-512 (meson option cpu_arch), which this CPU lacks: "
        "it will stop with an illegal instruction. Rebuild it with -Dcpu_arch=x86-64-v3 for this machine.\n");
  CHECK_FALSE(ts::detail::write_below_baseline_warning(-1, {true, false, "AVX", "x86-64-v2"}));
}
