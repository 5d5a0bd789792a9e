// Memory limits: sizes as users write them, the CPU allocator refusing past its limit
// (after giving its cache back), the refusal's message, and the guard that restores the
// previous limit. Every test case sets its limit through a MemoryLimitGuard, so no limit
// outlives it (a limit is process state, as PyTorch's per-process fraction).
#include <doctest/doctest.h>

#include <cstdlib>

#include <tessera/tessera.h>
#include "test_support.h"

namespace ts = tessera;
using test_support::contains;
using test_support::error_of;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// A float32 tensor of `bytes` bytes, touched so that it really exists.
ts::Tensor block_of(int64_t bytes) { return ts::zeros({bytes / 4}); }

}  // namespace

TEST_CASE("memory sizes: bytes, binary and decimal units, fractions; anything else is refused by name") {
  CHECK(ts::parse_memory_size("2.5GiB") == 2684354560);
  CHECK(ts::parse_memory_size("2.5 GiB") == 2684354560);
  CHECK(ts::parse_memory_size("512MiB") == 512 * kMiB);
  CHECK(ts::parse_memory_size("1kib") == 1024);
  CHECK(ts::parse_memory_size("3TiB") == 3 * (int64_t{1} << 40));
  CHECK(ts::parse_memory_size("1GB") == 1000000000);
  CHECK(ts::parse_memory_size("1.5kB") == 1500);
  CHECK(ts::parse_memory_size("4096") == 4096);
  CHECK(ts::parse_memory_size("100B") == 100);
  CHECK(ts::parse_memory_size(".5KiB") == 512);
  CHECK(ts::parse_memory_size("2.GiB") == 2 * (int64_t{1} << 30));
  for (const char* bad : {"", "GiB", "-1GiB", "0", "2.5 gigabytes", "1e30", "nan", "2.5GiB extra", "1.5 B B",
                          "0x10", "0x10GiB", "1e9", " 1GiB", "+1GiB", "inf", "1..5GiB", ".", "1.2.3"}) {
    CAPTURE(bad);
    std::string error = error_of([&] { ts::parse_memory_size(bad, "--memory-limit"); });
    CHECK(contains(error, "--memory-limit: '" + std::string(bad) + "' is not a memory size"));
    CHECK(contains(error, "e.g. 2.5GiB"));
  }
  CHECK(ts::format_bytes(100) == "100 bytes");
  CHECK(ts::format_bytes(1536) == "1.50 KiB");
  CHECK(ts::format_bytes(2684354560) == "2.50 GiB");
}

TEST_CASE("TESSERA_MEMORY_LIMIT is parsed with the same rule, and a bad value names the variable") {
  ::setenv("TESSERA_MEMORY_LIMIT", "1.5GiB", 1);
  CHECK(ts::detail::memory_limit_from_environment() == int64_t{1610612736});
  ::setenv("TESSERA_MEMORY_LIMIT", "", 1);
  CHECK_FALSE(ts::detail::memory_limit_from_environment().has_value());
  ::setenv("TESSERA_MEMORY_LIMIT", "lots", 1);
  CHECK(contains(error_of([] { ts::detail::memory_limit_from_environment(); }), "TESSERA_MEMORY_LIMIT: 'lots'"));
  ::unsetenv("TESSERA_MEMORY_LIMIT");
  CHECK_FALSE(ts::detail::memory_limit_from_environment().has_value());
}

TEST_CASE("the guard sets a limit for its lifetime and restores the previous one, nested too") {
  const ts::Device cpu = ts::Device::cpu();
  const std::optional<int64_t> before = ts::memory_limit(cpu);
  {
    ts::MemoryLimitGuard outer(cpu, int64_t{64} << 30);
    CHECK(ts::memory_limit(cpu) == int64_t{64} << 30);
    {
      ts::MemoryLimitGuard inner(cpu, std::nullopt);
      CHECK_FALSE(ts::memory_limit(cpu).has_value());
    }
    CHECK(ts::memory_limit(cpu) == int64_t{64} << 30);
  }
  CHECK(ts::memory_limit(cpu) == before);
  CHECK(contains(error_of([&] { ts::set_memory_limit(cpu, 0); }), "must be positive"));
}

TEST_CASE("the CPU allocator gives its cache back before refusing, and refuses past the limit with a clear error") {
  const ts::Device cpu = ts::Device::cpu();
  ts::release_cached_memory(cpu);
  ts::reset_peak_memory(cpu);  // the peak of earlier tests in this process is not this one's
  const ts::MemoryStats start = ts::memory_stats(cpu);
  const int64_t limit = start.reserved_bytes + 24 * kMiB;
  ts::MemoryLimitGuard guard(cpu, limit);
  // 16 MiB used and freed: it stays cached, and held from the system.
  { ts::Tensor first = block_of(16 * kMiB); }
  CHECK(ts::memory_stats(cpu).cached_bytes >= 16 * kMiB);
  // 12 MiB more would hold 28 MiB: the cache goes back to the system, and the request fits.
  ts::Tensor second = block_of(12 * kMiB);
  CHECK(ts::memory_stats(cpu).cached_bytes < 16 * kMiB);
  CHECK(ts::memory_stats(cpu).reserved_bytes <= limit);
  // 16 MiB more cannot fit with 12 in use.
  const ts::MemoryStats before = ts::memory_stats(cpu);
  ts::Tensor third;
  std::string error = error_of([&] { third = block_of(16 * kMiB); });
  CHECK(contains(error, "out of memory on cpu: a request of 16.00 MiB (16777216 bytes) would exceed the memory limit of " +
                            ts::format_bytes(limit) + " (" + std::to_string(limit) + " bytes)"));
  CHECK(contains(error, "are in use by tensors"));
  CHECK(contains(error, "TESSERA_MEMORY_LIMIT"));
  CHECK_THROWS_AS(block_of(16 * kMiB), ts::OutOfMemoryError);
  // The refusal left nothing behind, and what fits still works.
  CHECK(ts::memory_stats(cpu).current_bytes == before.current_bytes);
  CHECK(ts::memory_stats(cpu).peak_bytes <= limit);
  ts::Tensor small = block_of(4 * kMiB);
  CHECK(small.numel() == kMiB);
}

TEST_CASE("the refusal lists the largest holders that registered, largest first") {
  const ts::Device cpu = ts::Device::cpu();
  ts::MemoryLimitGuard guard(cpu, ts::memory_stats(cpu).reserved_bytes + 8 * kMiB);
  ts::MemoryHolderRegistration holders([](ts::Device device, std::vector<ts::MemoryHolder>& out) {
    if (!device.is_cpu()) return;
    out.push_back({"a small thing", 1024});
    out.push_back({"the optimizer's moments", 5 * kMiB});
  });
  std::string error = error_of([] { block_of(64 * kMiB); });
  CHECK(contains(error, "Largest holders known: the optimizer's moments 5.00 MiB; a small thing 1.00 KiB"));
}
