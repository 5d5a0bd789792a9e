// Differentiable matmul and linear.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

namespace {

Tensor matrix_transpose(const Tensor& t) { return native::transpose(t, -2, -1); }

Tensor flatten_rows(const Tensor& t) {
  Tensor c = native::contiguous(t);
  return native::view(c, {-1, t.size(-1)});
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  Tensor out = native::matmul(a, b);
  if (needs_grad({a, b})) {
    record("MatmulBackward", {a, b}, {out},
           [a = saved(a), b = saved(b), need_a = a.requires_grad(), need_b = b.requires_grad()](const TensorList& g) {
             // Work with vectors promoted to matrices, as the forward did.
             Tensor a2 = a.dim() == 1 ? native::unsqueeze(a, 0) : a;
             Tensor b2 = b.dim() == 1 ? native::unsqueeze(b, 1) : b;
             Tensor g2 = g[0];
             if (a.dim() == 1) g2 = native::unsqueeze(g2, g2.dim() - (b.dim() == 1 ? 0 : 1));
             if (b.dim() == 1) g2 = native::unsqueeze(g2, g2.dim());
             TensorList grads(2);
             if (need_a) {
               Tensor grad = native::sum_to(native::matmul(g2, matrix_transpose(b2)), a2.sizes());
               grads[0] = native::view(native::contiguous(grad), a.sizes());
             }
             if (need_b) {
               Tensor grad = native::sum_to(native::matmul(matrix_transpose(a2), g2), b2.sizes());
               grads[1] = native::view(native::contiguous(grad), b.sizes());
             }
             return grads;
           });
  }
  return out;
}

Tensor Tensor::matmul(const Tensor& other) const { return tessera::matmul(*this, other); }

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor out = native::linear(x, weight, bias);
  if (needs_grad({x, weight, bias})) {
    record("LinearBackward", {x, weight, bias}, {out},
           // The input is read only for the weight's gradient, the weight only for the input's
           // (a frozen layer keeps no activation).
           [x = weight.requires_grad() ? saved(x) : Tensor(), w = x.requires_grad() ? saved(weight) : Tensor(),
            x_shape = x.sizes(), need_b = bias.defined() && bias.requires_grad()](const TensorList& g) {
             TensorList grads(3);
             Tensor g2 = flatten_rows(g[0]);  // [rows, out]
             if (w.defined()) grads[0] = native::view(native::matmul(g2, w), x_shape);
             if (x.defined()) grads[1] = native::matmul(native::transpose(g2, 0, 1), flatten_rows(x));
             if (need_b) grads[2] = native::sum(g2, {0}, false);
             return grads;
           });
  }
  return out;
}

}  // namespace tessera
