// The gpu suite's entry point: exit code 77 (Meson's "skipped") where no CUDA device can
// be used, with the reason on stdout; otherwise doctest runs the cases.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "gpu_test.h"

int main(int argc, char** argv) {
  if (gpu_test::cuda_target() && !tessera::cuda::is_available()) {
    std::printf("gpu suite skipped: %s\n", tessera::cuda::unavailable_reason().c_str());
    return 77;
  }
  if (gpu_test::cuda_target()) {
    std::printf("gpu suite on %s\n", tessera::cuda::device_name(0).c_str());
  } else {
    std::printf("gpu suite: harness self-check, with the CPU standing in for the device\n");
  }
  doctest::Context context(argc, argv);
  return context.run();
}
