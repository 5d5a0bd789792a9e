#include "tessera/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/native.h"

namespace tessera::autograd {

namespace {

// Storage offsets (in elements) of every element of `t`, in row-major order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(t.numel()));
  Shape index(t.dim(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t offset = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) offset += index[d] * t.stride(d);
    offsets.push_back(offset);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++index[d] < t.size(d)) break;
      index[d] = 0;
    }
  }
  return offsets;
}

double project(const Tensor& output, const Tensor& direction) {
  return native::sum(native::binary(native::BinaryOp::mul, native::to_dtype(output, DType::f64), direction), {}, false)
      .item<double>();
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs,
                          const GradcheckOptions& options) {
  GradcheckResult result;
  Generator generator(options.seed, 0x6772616463686bull);
  for (int p = 0; p < options.projections && result.ok; ++p) {
    // Analytical: one backward of <v, f(x)>.
    for (const Tensor& input : inputs) {
      if (input.defined() && input.requires_grad()) const_cast<Tensor&>(input).set_grad(Tensor());
    }
    Tensor output = f(inputs);
    Tensor direction = randn(output.sizes(), generator, {.dtype = DType::f64});
    backward({output}, {native::to_dtype(direction, output.dtype())}, false);

    for (size_t k = 0; k < inputs.size() && result.ok; ++k) {
      const Tensor& input = inputs[k];
      if (!input.defined() || !input.requires_grad()) continue;
      TS_CHECK(input.dtype() == DType::f64, DTypeError, "gradcheck: input ", k, " is ", dtype_name(input.dtype()),
               "; use float64 inputs");
      Tensor analytical = input.grad().defined() ? input.grad() : native::zeros(input.sizes(), DType::f64, input.device());
      std::vector<double> analytical_values = analytical.to_vector<double>();
      double* base = static_cast<double*>(input.storage()->data());
      std::vector<int64_t> offsets = element_offsets(input);
      for (size_t i = 0; i < offsets.size(); ++i) {
        double original = base[offsets[i]];
        double plus, minus;
        {
          NoGradGuard no_grad;
          base[offsets[i]] = original + options.eps;
          plus = project(f(inputs), direction);
          base[offsets[i]] = original - options.eps;
          minus = project(f(inputs), direction);
          base[offsets[i]] = original;
        }
        double numerical = (plus - minus) / (2 * options.eps);
        double error = std::abs(analytical_values[i] - numerical);
        result.max_error = std::max(result.max_error, error);
        if (error > options.atol + options.rtol * std::abs(numerical) || std::isnan(analytical_values[i])) {
          std::ostringstream message;
          message << "input " << k << " (shape " << shape_str(input.sizes()) << "), element " << i
                  << ": analytical " << analytical_values[i] << " vs numerical " << numerical;
          result.ok = false;
          result.message = message.str();
          break;
        }
      }
    }
  }
  return result;
}

}  // namespace tessera::autograd
