// topk, sort, cumsum and multinomial. topk's values route their gradient back to the chosen
// positions (a scatter into zeros); cumsum's gradient is the running sum of the gradient
// from the end; multinomial draws integers and has no gradient.
#include "tessera/autograd/functions/recording.h"
#include "tessera/autograd/grad_mode.h"

namespace tessera {

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  auto [values, indices] = native::topk(x, k, dim, largest);
  if (needs_grad({x})) {
    const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "topk");
    record_unary("TopkBackward", x, values, [indices = saved(indices), d, shape = x.sizes()](const Tensor& grad) {
      Tensor grad_x = native::zeros(shape, grad.dtype(), grad.device());
      native::scatter_add_(grad_x, d, indices, grad);  // the indices are distinct: a plain scatter
      return grad_x;
    });
  }
  return {values, indices};
}

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool /*stable*/) {
  // A full topk: stable (equal values keep index order) and NaN counted as the largest, so
  // it comes last ascending and first descending, as in PyTorch.
  const int64_t length = x.dim() == 0 ? 1 : x.size(wrap_dim(dim, x.dim(), "sort"));
  return topk(x, length, dim, /*largest=*/descending);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  NoGradGuard no_grad;
  return std::get<1>(sort(x, dim, descending, stable));
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  Tensor out = native::cumsum(x, dim, /*reverse=*/false);
  if (needs_grad({x})) {
    record_unary("CumsumBackward", x, out,
                 [dim](const Tensor& grad) { return native::cumsum(grad, dim, /*reverse=*/true); });
  }
  return out;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator& generator) {
  TS_CHECK(probs.defined() && (probs.dim() == 1 || probs.dim() == 2), ShapeError,
           "multinomial: expected probabilities [C] or [N, C], got ",
           probs.defined() ? shape_str(probs.sizes()) : std::string("an undefined tensor"));
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  const int64_t draws = rows * (replacement ? num_samples : probs.size(-1));
  Tensor out = native::multinomial(probs.detach(), num_samples, replacement, generator.seed(), generator.stream(),
                                   generator.offset());
  generator.advance(static_cast<uint64_t>(draws));  // only once the draw succeeded
  return out;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  Tensor out;
  with_default_generator([&](Generator& generator) { out = multinomial(probs, num_samples, replacement, generator); });
  return out;
}

std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return tessera::topk(*this, k, dim, largest, sorted);
}
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending, bool stable) const {
  return tessera::sort(*this, dim, descending, stable);
}
Tensor Tensor::argsort(int64_t dim, bool descending, bool stable) const {
  return tessera::argsort(*this, dim, descending, stable);
}
Tensor Tensor::cumsum(int64_t dim) const { return tessera::cumsum(*this, dim); }
Tensor Tensor::multinomial(int64_t num_samples, bool replacement, Generator& generator) const {
  return tessera::multinomial(*this, num_samples, replacement, generator);
}
Tensor Tensor::multinomial(int64_t num_samples, bool replacement) const {
  return tessera::multinomial(*this, num_samples, replacement);
}

}  // namespace tessera
