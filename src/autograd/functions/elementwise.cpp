// Differentiable element-wise ops. Gradients of broadcast operands are summed back to
// the operand's shape (native::sum_to).
#include <limits>

#include "tessera/autograd/functions/recording.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/finite_scan.h"

namespace tessera {

namespace {

Tensor nmul(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::mul, a, b); }
Tensor ndiv(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::div, a, b); }
Tensor nmul(const Tensor& a, double b) { return native::binary(BinaryOp::mul, a, b); }

// What a unary op's backward reads, so that its node keeps only that (an activation per
// layer saved for nothing otherwise): relu, exp, sigmoid, tanh and sqrt are written in
// their output, abs, log, sin and cos in their input, neg in neither.
enum class Reads { input, output, nothing };

// Records a one-input op whose gradient is local(g, saved) for the saved tensor `reads`
// names (undefined for Reads::nothing).
template <class Local>
Tensor unary_op(const char* name, UnaryOp op, Reads reads, const Tensor& x, Local local) {
  Tensor y = native::unary(op, x);
  if (needs_grad({x})) {
    Tensor kept = reads == Reads::input ? saved(x) : reads == Reads::output ? saved(y) : Tensor();
    record_unary(name, x, y, [kept = std::move(kept), local](const Tensor& grad) { return local(grad, kept); });
  }
  return y;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = native::binary(BinaryOp::add, a, b);
  if (needs_grad({a, b})) {
    record("AddBackward", {a, b}, {out}, [sa = a.sizes(), sb = b.sizes()](const TensorList& g) {
      return TensorList{native::sum_to(g[0], sa), native::sum_to(g[0], sb)};
    });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = native::binary(BinaryOp::sub, a, b);
  if (needs_grad({a, b})) {
    record("SubBackward", {a, b}, {out}, [sa = a.sizes(), sb = b.sizes()](const TensorList& g) {
      return TensorList{native::sum_to(g[0], sa), native::sum_to(native::unary(UnaryOp::neg, g[0]), sb)};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = native::binary(BinaryOp::mul, a, b);
  if (needs_grad({a, b})) {
    // d(ab)/da = b and d(ab)/db = a: each operand is kept only for the other's gradient.
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record("MulBackward", {a, b}, {out},
           [kept_a = need_b ? saved(a) : Tensor(), kept_b = need_a ? saved(b) : Tensor(), shape_a = a.sizes(),
            shape_b = b.sizes()](const TensorList& g) {
             return TensorList{kept_b.defined() ? native::sum_to(nmul(g[0], kept_b), shape_a) : Tensor(),
                               kept_a.defined() ? native::sum_to(nmul(g[0], kept_a), shape_b) : Tensor()};
           });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = native::binary(BinaryOp::div, a, b);
  if (needs_grad({a, b})) {
    // a is read only for b's gradient.
    record("DivBackward", {a, b}, {out},
           [a = b.requires_grad() ? saved(a) : Tensor(), b = saved(b), shape_a = a.sizes()](const TensorList& g) {
             Tensor grad_a = native::sum_to(ndiv(g[0], b), shape_a);
             if (!a.defined()) return TensorList{grad_a, Tensor()};
             // d(a/b)/db = -a / b^2
             Tensor grad_b = native::unary(UnaryOp::neg, ndiv(nmul(g[0], a), nmul(b, b)));
             return TensorList{grad_a, native::sum_to(grad_b, b.sizes())};
           });
  }
  return out;
}

Tensor pow(const Tensor& base, const Tensor& exponent) {
  Tensor out = native::binary(BinaryOp::pow, base, exponent);
  if (needs_grad({base, exponent})) {
    // d/dx = e * x^(e-1) reads x and e; d/de = x^e * log(x) reads x and the output.
    const bool need_x = base.requires_grad(), need_e = exponent.requires_grad();
    record("PowBackward", {base, exponent}, {out},
           [x = saved(base), e = need_x ? saved(exponent) : Tensor(), y = need_e ? saved(out) : Tensor(),
            shape_x = base.sizes(), shape_e = exponent.sizes()](const TensorList& g) {
             Tensor grad_x, grad_e;
             if (e.defined()) {
               grad_x = native::sum_to(
                   nmul(nmul(g[0], e), native::binary(BinaryOp::pow, x, native::binary(BinaryOp::sub, e, 1.0))), shape_x);
             }
             if (y.defined()) grad_e = native::sum_to(nmul(nmul(g[0], y), native::unary(UnaryOp::log, x)), shape_e);
             return TensorList{grad_x, grad_e};
           });
  }
  return out;
}

Tensor pow(const Tensor& base, double exponent) {
  Tensor out = native::binary(BinaryOp::pow, base, exponent);
  if (needs_grad({base})) {
    record_unary("PowBackward", base, out, [x = saved(base), exponent](const Tensor& grad) {
      Tensor local = nmul(native::binary(BinaryOp::pow, x, exponent - 1.0), exponent);
      return nmul(grad, local);
    });
  }
  return out;
}

namespace {

// maximum/minimum: the gradient goes to the chosen side; ties split it evenly (PyTorch).
Tensor extremum(BinaryOp op, BinaryOp wins, const char* name, const Tensor& a, const Tensor& b) {
  Tensor out = native::binary(op, a, b);
  if (needs_grad({a, b})) {
    record(name, {a, b}, {out}, [a = saved(a), b = saved(b), wins](const TensorList& g) {
      Tensor half = native::full({}, 0.5, a.dtype(), a.device());
      Tensor one = native::full({}, 1.0, a.dtype(), a.device());
      Tensor zero = native::full({}, 0.0, a.dtype(), a.device());
      Tensor tie = native::binary(BinaryOp::eq, a, b);
      Tensor weight_a = native::where(native::binary(wins, a, b), one, native::where(tie, half, zero));
      Tensor grad_a = nmul(g[0], weight_a);
      Tensor grad_b = native::binary(BinaryOp::sub, g[0], grad_a);
      return TensorList{native::sum_to(grad_a, a.sizes()), native::sum_to(grad_b, b.sizes())};
    });
  }
  return out;
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::maximum, BinaryOp::gt, "MaximumBackward", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::minimum, BinaryOp::lt, "MinimumBackward", a, b); }

Tensor add(const Tensor& a, double b) {
  Tensor out = native::binary(BinaryOp::add, a, b);
  if (needs_grad({a})) record_unary("AddBackward", a, out, [](const Tensor& grad) { return grad; });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  Tensor out = native::binary(BinaryOp::mul, a, b);
  if (needs_grad({a})) record_unary("MulBackward", a, out, [b](const Tensor& grad) { return nmul(grad, b); });
  return out;
}

Tensor neg(const Tensor& x) {
  return unary_op("NegBackward", UnaryOp::neg, Reads::nothing, x, [](const Tensor& g, const Tensor&) {
    return native::unary(UnaryOp::neg, g);
  });
}

Tensor abs(const Tensor& x) {
  return unary_op("AbsBackward", UnaryOp::abs, Reads::input, x, [](const Tensor& g, const Tensor& x) {
    return nmul(g, native::unary(UnaryOp::sign, x));
  });
}

Tensor exp(const Tensor& x) {
  return unary_op("ExpBackward", UnaryOp::exp, Reads::output, x, [](const Tensor& g, const Tensor& y) { return nmul(g, y); });
}

Tensor log(const Tensor& x) {
  return unary_op("LogBackward", UnaryOp::log, Reads::input, x, [](const Tensor& g, const Tensor& x) { return ndiv(g, x); });
}

Tensor sqrt(const Tensor& x) {
  return unary_op("SqrtBackward", UnaryOp::sqrt, Reads::output, x, [](const Tensor& g, const Tensor& y) {
    return ndiv(g, nmul(y, 2.0));
  });
}

Tensor relu(const Tensor& x) {
  return unary_op("ReluBackward", UnaryOp::relu, Reads::output, x, [](const Tensor& g, const Tensor& y) {
    // The engine hands each node gradients it owns and drops them after the node runs, so a
    // gradient nothing else holds can take the result in place: no second activation-sized
    // buffer (9 MB per MNIST batch of 64) and one memory stream less.
    if (g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous() &&
        g.dtype() == y.dtype()) {
      Tensor grad = g;
      native::relu_backward_(grad, y);
      return grad;
    }
    return native::relu_backward(g, y);
  });
}

Tensor sigmoid(const Tensor& x) {
  return unary_op("SigmoidBackward", UnaryOp::sigmoid, Reads::output, x, [](const Tensor& g, const Tensor& y) {
    return nmul(g, nmul(y, native::binary(BinaryOp::sub, 1.0, y)));  // g * y * (1 - y)
  });
}

Tensor tanh(const Tensor& x) {
  return unary_op("TanhBackward", UnaryOp::tanh, Reads::output, x, [](const Tensor& g, const Tensor& y) {
    return nmul(g, native::binary(BinaryOp::sub, 1.0, nmul(y, y)));  // g * (1 - y^2)
  });
}

Tensor sin(const Tensor& x) {
  return unary_op("SinBackward", UnaryOp::sin, Reads::input, x, [](const Tensor& g, const Tensor& x) {
    return nmul(g, native::unary(UnaryOp::cos, x));
  });
}

Tensor cos(const Tensor& x) {
  return unary_op("CosBackward", UnaryOp::cos, Reads::input, x, [](const Tensor& g, const Tensor& x) {
    return nmul(g, native::unary(UnaryOp::neg, native::unary(UnaryOp::sin, x)));  // -g sin(x)
  });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = native::where(cond, a, b);
  if (needs_grad({a, b})) {
    record("WhereBackward", {a, b}, {out}, [cond = saved(cond), sa = a.sizes(), sb = b.sizes()](const TensorList& g) {
      Tensor zero = native::full({}, 0.0, g[0].dtype(), g[0].device());
      return TensorList{native::sum_to(native::where(cond, g[0], zero), sa),
                        native::sum_to(native::where(cond, zero, g[0]), sb)};
    });
  }
  return out;
}

Tensor eq(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::ge, a, b); }

Tensor logical_not(const Tensor& x) { return native::binary(BinaryOp::eq, x, 0.0); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::logical_and, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::logical_or, a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::logical_xor, a, b); }

bool equal(const Tensor& a, const Tensor& b) {
  check_defined(a, "equal");
  check_defined(b, "equal");
  if (a.sizes() != b.sizes()) return false;
  return ne(a, b).sum().item<int64_t>() == 0;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  check_defined(a, "allclose");
  check_defined(b, "allclose");
  TS_CHECK(rtol >= 0 && atol >= 0, ValueError, "allclose: rtol and atol must be >= 0, got rtol=", rtol,
           ", atol=", atol);
  NoGradGuard no_grad;
  const Tensor error = abs(a - b);
  Tensor within = le(error, abs(b) * rtol + atol);
  // As torch.isclose: only a finite error can be within the tolerance (inf against -inf,
  // whose tolerance is infinite too, is not close).
  if (is_floating(error.dtype())) within = logical_and(within, error < std::numeric_limits<double>::infinity());
  return logical_not(logical_or(eq(a, b), within)).sum().item<int64_t>() == 0;
}

std::optional<int64_t> first_non_finite(const Tensor& x) {
  check_defined(x, "first_non_finite");
  if (!is_floating(x.dtype())) return std::nullopt;
  NoGradGuard no_grad;
  if (x.device().is_cpu()) {
    const Tensor dense = native::contiguous(x);
    const int64_t bad = native::first_non_finite(dense.data_ptr(), dense.numel(), dense.dtype());
    return bad < 0 ? std::nullopt : std::optional<int64_t>(bad);
  }
  // On a GPU, a mask reduced there (one scalar crosses): x - x is 0 for a finite x and NaN
  // for NaN and both infinities. Reduced precisions are widened first: not every backend
  // computes in them.
  const Tensor wide = x.dtype() == DType::f32 || x.dtype() == DType::f64 ? x : x.to(DType::f32);
  const Tensor bad = ne(wide - wide, zeros({}, {.dtype = wide.dtype(), .device = wide.device()})).flatten();
  if (bad.sum().item<int64_t>() == 0) return std::nullopt;
  return argmax(bad.cpu().to(DType::i64), 0).item<int64_t>();  // only when one is found
}

namespace {

// ~, &, |, ^ are the logical ops on bool; on other dtypes PyTorch means the bitwise ones,
// which Tessera does not have: an error rather than a silently logical answer.
void check_mask_operand(const Tensor& t, const char* op) {
  check_defined(t, op);
  TS_CHECK(t.dtype() == DType::boolean, DTypeError, "operator", op, ": defined on bool tensors only, got ",
           t.str(), " (the bitwise form is not implemented; logical_not/and/or/xor read any dtype)");
}

}  // namespace

// Operators and methods.
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) {
  Tensor out = native::binary(BinaryOp::div, a, b);  // a true division, as PyTorch does
  if (needs_grad({a})) {
    record_unary("DivBackward", a, out, [b](const Tensor& grad) { return native::binary(BinaryOp::div, grad, b); });
  }
  return out;
}
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) {
  Tensor out = native::binary(BinaryOp::div, a, b);
  if (needs_grad({b})) {
    record_unary("DivBackward", b, out, [b = saved(b), y = saved(out)](const Tensor& grad) {
      return native::unary(UnaryOp::neg, ndiv(nmul(grad, y), b));  // -a / b^2 = -y / b
    });
  }
  return out;
}
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return native::binary(BinaryOp::eq, a, b); }
Tensor operator!=(const Tensor& a, double b) { return native::binary(BinaryOp::ne, a, b); }
Tensor operator<(const Tensor& a, double b) { return native::binary(BinaryOp::lt, a, b); }
Tensor operator<=(const Tensor& a, double b) { return native::binary(BinaryOp::le, a, b); }
Tensor operator>(const Tensor& a, double b) { return native::binary(BinaryOp::gt, a, b); }
Tensor operator>=(const Tensor& a, double b) { return native::binary(BinaryOp::ge, a, b); }
Tensor operator~(const Tensor& a) {
  check_mask_operand(a, "~");
  return logical_not(a);
}
Tensor operator&(const Tensor& a, const Tensor& b) {
  check_mask_operand(a, "&");
  check_mask_operand(b, "&");
  return logical_and(a, b);
}
Tensor operator|(const Tensor& a, const Tensor& b) {
  check_mask_operand(a, "|");
  check_mask_operand(b, "|");
  return logical_or(a, b);
}
Tensor operator^(const Tensor& a, const Tensor& b) {
  check_mask_operand(a, "^");
  check_mask_operand(b, "^");
  return logical_xor(a, b);
}

Tensor Tensor::neg() const { return tessera::neg(*this); }
Tensor Tensor::abs() const { return tessera::abs(*this); }
Tensor Tensor::exp() const { return tessera::exp(*this); }
Tensor Tensor::log() const { return tessera::log(*this); }
Tensor Tensor::sqrt() const { return tessera::sqrt(*this); }
Tensor Tensor::relu() const { return tessera::relu(*this); }
Tensor Tensor::sigmoid() const { return tessera::sigmoid(*this); }
Tensor Tensor::tanh() const { return tessera::tanh(*this); }
Tensor Tensor::sin() const { return tessera::sin(*this); }
Tensor Tensor::cos() const { return tessera::cos(*this); }
Tensor Tensor::pow(double exponent) const { return tessera::pow(*this, exponent); }
Tensor Tensor::pow(const Tensor& exponent) const { return tessera::pow(*this, exponent); }
Tensor Tensor::logical_not() const { return tessera::logical_not(*this); }
Tensor Tensor::logical_and(const Tensor& other) const { return tessera::logical_and(*this, other); }
Tensor Tensor::logical_or(const Tensor& other) const { return tessera::logical_or(*this, other); }
Tensor Tensor::logical_xor(const Tensor& other) const { return tessera::logical_xor(*this, other); }

}  // namespace tessera
