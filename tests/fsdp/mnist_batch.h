// A random batch of MNIST-shaped images and labels for the FSDP tests, the same global
// batch on every rank (each rank then takes dist_test::my_rows of it).
#pragma once

#include <tessera/tessera.h>

namespace fsdp_test {

struct Batch {
  tessera::Tensor images, labels;
};

inline Batch make_batch(uint64_t seed, int64_t rows, tessera::DType dtype = tessera::DType::f32) {
  tessera::Generator gen(seed);
  return {tessera::randn({rows, 1, 28, 28}, gen, {.dtype = dtype}), tessera::randint(0, 10, {rows}, gen)};
}

}  // namespace fsdp_test
