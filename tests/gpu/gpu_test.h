// Shared by the gpu suite: which device the ops run on, and how results are compared.
//
// The suite compares every op on CUDA with the CPU. With TESSERA_GPU_SUITE_ON_CPU=1 it
// runs the same cases with the CPU standing in for the device (the comparisons then
// must come out exact): a machine without a GPU checks the harness itself that way, so a
// few minutes on a real GPU are not spent finding bugs in the tests.
#pragma once

#include <string>
#include <tessera/tessera.h>

namespace gpu_test {

// cuda:0, or the CPU in the harness self-check.
tessera::Device target();
// True when target() is a CUDA device (tests of CUDA-only machinery return early otherwise).
bool cuda_target();

// ||actual - expected|| / ||expected|| over all elements (absolute when expected is all
// zero), in double. NaN and infinities must sit at the same positions with the same value;
// otherwise, or when the shapes differ, the result is infinite and `problem` says why.
double normalised_error(const tessera::Tensor& actual, const tessera::Tensor& expected, std::string& problem);

// The largest normalised error accepted for results computed in `dtype` (reasons in gpu_test.cpp).
double tolerance(tessera::DType dtype);

}  // namespace gpu_test
