#include "gpu_test.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace ts = tessera;

namespace gpu_test {

namespace {
bool self_check() {
  const char* flag = std::getenv("TESSERA_GPU_SUITE_ON_CPU");
  return flag != nullptr && std::string(flag) == "1";
}
}  // namespace

ts::Device target() { return self_check() ? ts::Device::cpu() : ts::Device::cuda(0); }

bool cuda_target() { return target().is_cuda(); }

double normalised_error(const ts::Tensor& actual, const ts::Tensor& expected, std::string& problem) {
  constexpr double kInfinite = std::numeric_limits<double>::infinity();
  if (actual.sizes() != expected.sizes()) {
    problem = "shape " + ts::shape_str(actual.sizes()) + " instead of " + ts::shape_str(expected.sizes());
    return kInfinite;
  }
  const std::vector<double> a = actual.to_vector<double>(), b = expected.to_vector<double>();
  double difference = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i]) || std::isinf(a[i]) || std::isinf(b[i])) {
      const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
      if (!same) {
        problem = "element " + std::to_string(i) + " is " + std::to_string(a[i]) + ", expected " + std::to_string(b[i]);
        return kInfinite;
      }
      continue;
    }
    difference += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return norm == 0 ? std::sqrt(difference) : std::sqrt(difference / norm);
}

double tolerance(ts::DType dtype) {
  switch (dtype) {
    // Only summation order (cuBLAS, cuDNN and the reduction trees add in another order than
    // the CPU) and last-bit differences of exp/log/pow separate the two; 1e-10 is far above
    // those (~1e-15) and far below anything a float32 step would leave (~1e-7).
    case ts::DType::f64: return 1e-10;
    // The same differences at float32's 6e-8 unit roundoff, over sums of up to ~1e3 terms
    // (the largest matmul/conv reductions in the table).
    case ts::DType::f32: return 2e-5;
    // bfloat16 keeps 8 significant bits (2^-8 = 3.9e-3 relative step). Results are rounded
    // once per op and compared with float32 on the same rounded inputs; chains of a few
    // ops stay well under 2e-2.
    case ts::DType::bf16: return 2e-2;
    // Integers, masks, indices and comparisons must match exactly.
    default: return 0.0;
  }
}

}  // namespace gpu_test
