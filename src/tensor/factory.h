// Creating tensors. Random draws come from a Generator (counter-based Philox): the same
// seed gives the same values on every machine and at every world size. Without one they
// come from the default generator (ts::manual_seed, random.h).
//
//   ts::Generator gen(42);
//   ts::Tensor w = ts::randn({128, 64}, gen);
//   ts::manual_seed(42);
//   ts::Tensor u = ts::rand({3});                  // the default generator's
//   ts::Tensor x = ts::tensor<float>({1, 2, 3, 4}, {2, 2});
#pragma once

#include <vector>

#include "tessera/tensor/random.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, double value);
// [0, end) and [start, end) by step, as torch.arange (default dtype int64 unless given).
Tensor arange(double end, const TensorOptions& options = {.dtype = DType::i64});
Tensor arange(double start, double end, double step = 1, const TensorOptions& options = {.dtype = DType::i64});

// `steps` values from start to end inclusive, evenly spaced, as torch.linspace (f32 unless
// given; the same formula as ATen's CPU kernel, so the same bits).
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options = {});
// A random permutation of 0..n-1, as torch.randperm (int64 unless given). Drawn from the
// generator like every random op here, so it differs from PyTorch's for the same seed.
Tensor randperm(int64_t n, Generator& generator, const TensorOptions& options = {.dtype = DType::i64});
Tensor randperm(int64_t n, const TensorOptions& options = {.dtype = DType::i64});

// Uniform in [0, 1), standard normal, and integers in [low, high), from `generator` or
// else the default generator. The *_like forms take `like`'s shape, dtype and device.
Tensor rand(const Shape& shape, Generator& generator, const TensorOptions& options = {});
Tensor randn(const Shape& shape, Generator& generator, const TensorOptions& options = {});
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& generator,
               const TensorOptions& options = {.dtype = DType::i64});
Tensor rand(const Shape& shape, const TensorOptions& options = {});
Tensor randn(const Shape& shape, const TensorOptions& options = {});
Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options = {.dtype = DType::i64});
Tensor rand_like(const Tensor& like);
Tensor randn_like(const Tensor& like);
Tensor randint_like(const Tensor& like, int64_t low, int64_t high);

// A tensor holding a copy of `values` with `shape` (default: 1-D).
template <class T>
Tensor tensor(const std::vector<T>& values, Shape shape = {-1}, TensorOptions options = {.dtype = dtype_of<T>});
// bool: ts::tensor<bool>({true, false}) (std::vector<bool> packs bits, so it has its own
// definition).
template <>
Tensor tensor<bool>(const std::vector<bool>& values, Shape shape, TensorOptions options);
// A copy of the elements at `data` (as many as `shape` holds), viewed as `shape`. For
// bool, nonzero bytes are stored as true.
Tensor from_data(const void* data, const Shape& shape, DType dtype, Device device = Device::cpu());

extern template Tensor tensor<float>(const std::vector<float>&, Shape, TensorOptions);
extern template Tensor tensor<double>(const std::vector<double>&, Shape, TensorOptions);
extern template Tensor tensor<int64_t>(const std::vector<int64_t>&, Shape, TensorOptions);
extern template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, Shape, TensorOptions);

}  // namespace tessera
