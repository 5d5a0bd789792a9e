// Gradient checking: compares the gradients autograd computes with central differences.
//
// The function's output is projected on fixed random directions v, so one backward gives
// the analytical gradient of <v, f(x)> and 2 * numel(x) forward calls give the numerical
// one. Inputs should be float64 (differences in float32 are too coarse to be useful);
// non-contiguous inputs are perturbed through their strides.
#pragma once

#include <functional>
#include <string>

#include "tessera/autograd/node.h"

namespace tessera::autograd {

struct GradcheckOptions {
  double eps = 1e-6;    // central-difference step
  double atol = 1e-6;   // |analytical - numerical| <= atol + rtol * |numerical|
  double rtol = 1e-4;
  int projections = 2;  // random directions v
  uint64_t seed = 0;
};

struct GradcheckResult {
  bool ok = true;
  double max_error = 0;  // the largest |analytical - numerical|
  std::string message;   // which input and element failed first, with both values
};

// Checks the gradients of f with respect to every input that requires grad.
GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs,
                          const GradcheckOptions& options = {});

}  // namespace tessera::autograd
