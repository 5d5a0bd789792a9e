// multinomial: category draws from rows of non-negative weights, composed of native ops that
// every device has (so CPU and CUDA draw the same indices from the same counters).
//
// With replacement, sample s of row r is the first category whose normalised CDF exceeds
// the uniform u[r, s] in [0, 1) (searchsorted, right): category c is hit with probability
// p[c] / sum(p), a zero-weight category never, and since the CDF reaches exactly 1 at the
// last positive weight, rounding cannot push a draw past it. Without replacement, every
// category gets the key p[c] / E[c] with E[c] = -log(1 - u[r, c]) exponential, and the
// num_samples largest keys are the draws: the first is c with probability p[c] / sum(p),
// the next one among the rest likewise, which is sequential sampling without replacement
// (the exponential race; PyTorch's CPU kernel computes the same). The uniforms are Philox
// elements first + r * num_samples + s (with) or first + r * C + c (without); the draws
// differ from PyTorch's generator, their distribution does not.
#include <limits>

#include "tessera/tensor/device_check.h"
#include "tessera/tensor/native.h"

namespace tessera::native {

namespace {

int64_t count_true(const Tensor& mask) { return sum(mask, {}, false).item<int64_t>(); }

void check_probabilities(const Tensor& p, int64_t num_samples, bool replacement, const Shape& shape) {
  const double infinity = std::numeric_limits<double>::infinity();
  Tensor invalid = binary(BinaryOp::logical_or, binary(BinaryOp::lt, p, 0.0),
                          binary(BinaryOp::logical_or, binary(BinaryOp::ne, p, p), binary(BinaryOp::eq, p, infinity)));
  TS_CHECK(count_true(invalid) == 0, ValueError, "multinomial: probabilities of shape ", shape_str(shape),
           " contain inf, NaN or a negative value");
  Tensor positive = sum(binary(BinaryOp::gt, p, 0.0), {1}, false);  // per row
  TS_CHECK(count_true(binary(BinaryOp::eq, positive, 0.0)) == 0, ValueError, "multinomial: a row of the ",
           shape_str(shape), " probabilities sums to 0");
  TS_CHECK(replacement || count_true(binary(BinaryOp::lt, positive, static_cast<double>(num_samples))) == 0,
           ValueError, "multinomial: without replacement, ", num_samples,
           " samples need as many categories of positive probability in every row of the ", shape_str(shape),
           " probabilities");
}

}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed, uint64_t stream,
                   uint64_t first) {
  check_defined(probs, "multinomial", "probabilities");
  TS_CHECK(probs.dtype() == DType::f32 || probs.dtype() == DType::f64, DTypeError,
           "multinomial: expected float32 or float64 probabilities, got ", dtype_name(probs.dtype()));
  TS_CHECK(probs.dim() == 1 || probs.dim() == 2, ShapeError, "multinomial: expected probabilities [C] or [N, C], got ",
           shape_str(probs.sizes()));
  const int64_t classes = probs.size(-1), rows = probs.dim() == 2 ? probs.size(0) : 1;
  TS_CHECK(classes > 0, ShapeError, "multinomial: no categories in probabilities of shape ", shape_str(probs.sizes()));
  TS_CHECK(num_samples > 0, ValueError, "multinomial: num_samples must be positive, got ", num_samples);
  TS_CHECK(replacement || num_samples <= classes, ValueError, "multinomial: cannot draw ", num_samples,
           " samples without replacement from ", classes, " categories");
  const Device device = probs.device();
  const Shape out_shape = probs.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples};
  // Double precision for the CDF and the keys, whatever the input's dtype.
  Tensor p = to_dtype(view(contiguous(probs), {rows, classes}), DType::f64);
  check_probabilities(p, num_samples, replacement, probs.sizes());
  if (rows == 0) return empty(out_shape, DType::i64, device);
  if (replacement) {
    Tensor cdf = cumsum(p, 1, /*reverse=*/false);
    Tensor normalised = binary(BinaryOp::div, cdf, narrow(cdf, 1, classes - 1, 1));
    Tensor uniforms = empty({rows, num_samples}, DType::f64, device);
    uniform_(uniforms, 0.0, 1.0, seed, stream, first);
    return view(searchsorted(normalised, uniforms, /*right=*/true), out_shape);
  }
  Tensor uniforms = empty({rows, classes}, DType::f64, device);
  uniform_(uniforms, 0.0, 1.0, seed, stream, first);
  Tensor exponential = unary(UnaryOp::neg, unary(UnaryOp::log, binary(BinaryOp::sub, 1.0, uniforms)));
  // Zero weights get -1, below every positive key: never drawn.
  Tensor keys = where(binary(BinaryOp::gt, p, 0.0), binary(BinaryOp::div, p, exponential), full({}, -1.0, DType::f64, device));
  return view(std::get<1>(topk(keys, num_samples, 1, /*largest=*/true)), out_shape);
}

}  // namespace tessera::native
