// The check that runs when libtessera loads: a CPU without an instruction-set extension
// this build's -march (meson option cpu_arch) lets the compiler use gets a message naming
// it and the option that fixes it, instead of only an illegal-instruction signal somewhere
// later. Internal (not installed); split into a table and a writer so that a test can run
// both for a made-up CPU, which no machine of ours is.
//
// Everything declared here is compiled for plain x86-64 (baseline_check.cpp), so it runs
// on the CPUs the rest of the library does not run on; tests/tensor/check_isa.sh reads the
// library's disassembly to hold that.
#pragma once

#include <cstddef>

namespace tessera::detail {

// One extension, most basic first in a table (the first one missing is the one named).
struct CpuExtension {
  bool assumed;              // this build's -march lets the compiler use it
  bool present;              // this CPU has it
  const char* name;          // "AVX2"
  const char* rebuild_arch;  // a cpu_arch value that does not assume it: "x86-64-v2"
};

// The first of `count` extensions that the build assumes and the CPU lacks; null if none.
const CpuExtension* first_missing_extension(const CpuExtension* extensions, size_t count);

// Writes the warning for `missing` to the file descriptor `fd` with write(2) alone (it runs
// before the C++ runtime is set up). False when a write fails.
bool write_below_baseline_warning(int fd, const CpuExtension& missing);

}  // namespace tessera::detail
