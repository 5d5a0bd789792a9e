// The run-time choice of CPU kernels (cpu_capability.h): the rule for TESSERA_CPU_CAPABILITY
// as a pure function, and that this process follows it. The `tensor-default` test runs this
// binary again under TESSERA_CPU_CAPABILITY=default, so both branches of the last case run.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <tessera/tessera.h>

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
  for (CpuCapability level : {CpuCapability::baseline, CpuCapability::avx2, CpuCapability::avx512}) {
    const std::string name(ts::to_string(level));
    CHECK(ts::choose_cpu_capability(name.c_str(), CpuCapability::avx512) == level);
  }
}

TEST_CASE("TESSERA_CPU_CAPABILITY above the CPU's level, or unknown, is an error naming it") {
  const std::string above = error_of([] { ts::choose_cpu_capability("avx512", CpuCapability::avx2); });
  CHECK(contains(above, "TESSERA_CPU_CAPABILITY=avx512"));
  CHECK(contains(above, "supports up to 'avx2'"));
  CHECK(contains(error_of([] { ts::choose_cpu_capability("avx2", CpuCapability::baseline); }), "up to 'default'"));
  for (const char* wrong : {"AVX512", "avx-512", "native", "avx512 "}) {
    CAPTURE(wrong);
    const std::string message = error_of([wrong] { ts::choose_cpu_capability(wrong, CpuCapability::avx512); });
    CHECK(contains(message, std::string("TESSERA_CPU_CAPABILITY='") + wrong + "'"));
    CHECK(contains(message, "not one of default, avx2, avx512"));
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
