// The op samples, one table for the suites that check ops (as PyTorch's OpInfo
// sample_inputs): each sample names one call of an op (or a few, checked together) on
// inputs built for a dtype, and says which suites take it.
//
//   tests/autograd/test_gradcheck_table.cpp  `gradcheck`: the first output's gradients in
//     float64 against central differences;
//   tests/gpu/test_ops.cpp  `gpu` dtypes: outputs and input gradients on the device against
//     the CPU's (bfloat16 against float32 on the same rounded inputs).
//
// Both suites also require that the samples reach every backward node the library records
// (support/backward_nodes.h). A new op adds its samples here, under its section; the golden
// drivers (tests/golden) hold PyTorch's inputs and call the op themselves.
//
//   for (const op_cases::OpCase& c : op_cases::op_cases())
//     if (c.suites.gradcheck) check(c.f(c.inputs(tessera::DType::f64)).front());
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <tessera/tessera.h>

namespace op_cases {

using TensorList = std::vector<tessera::Tensor>;

// CPU tensors in the given dtype (float32 for a bfloat16 sample: the gpu suite rounds them);
// floating inputs are leaves that require grad, integer and bool ones (labels, indices, masks)
// do not.
using Inputs = std::function<TensorList(tessera::DType)>;
// The op applied to the inputs; a sample the gpu suite takes makes its constants on the
// inputs' device. The first output is the one differentiated.
using Op = std::function<TensorList(const TensorList&)>;

struct Suites {
  bool gradcheck = false;                // float64 gradient check of the first output
  std::vector<tessera::DType> gpu = {};  // dtypes the gpu suite compares the device with the CPU in
  double gpu_tolerance_scale = 1.0;      // multiplies gpu_test::tolerance(dtype); reasons at kWinograd
};

struct OpCase {
  std::string name;  // unique; the suites report and select by it
  Inputs inputs;
  Op f;
  Suites suites;
};

// Convolutions on the device: cuDNN may pick Winograd or FFT algorithms, whose rounding
// error is several times a direct sum's.
inline constexpr double kWinograd = 5.0;

// Every sample, in the table's order (built once).
const std::vector<OpCase>& op_cases();
// The sample of that name; throws std::out_of_range naming it when there is none.
const OpCase& op_case(std::string_view name);

// The inputs' builders, for tests of their own (values reproducible from the seed).
// A CPU tensor of `dtype` with values uniform in [low, high) (integers in [low, high) for
// integer dtypes); floating ones require grad. `transposed` makes it non-contiguous: the
// values are drawn for the shape with its last two dims swapped, then transposed.
tessera::Tensor uniform(const tessera::Shape& shape, uint64_t seed, tessera::DType dtype, double low = -1,
                        double high = 1, bool transposed = false);
// Values with 0.1 <= |x| < 1 (no ties at the kink of relu, abs, sign, clamp).
tessera::Tensor away_from_zero(const tessera::Shape& shape, uint64_t seed, tessera::DType dtype,
                               bool transposed = false);

}  // namespace op_cases
