// Element-wise unary and binary kernels on the CPU, with broadcasting; bfloat16 computes in
// float32 (see Compute).
#include <cmath>

#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/comparison_rules.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

// bfloat16 is stored, not computed in: each op widens its operands to float32 and rounds the
// result once, as PyTorch's CPU kernels do (Vectorized<BFloat16> converts to float and back).
template <class T>
using Compute = std::conditional_t<std::is_same_v<T, BFloat16>, float, T>;

template <class T>
Compute<T> widen(T x) {
  return static_cast<Compute<T>>(x);
}

// dispatch_numeric plus bfloat16: the element-wise ops take every floating dtype.
template <class Body>
decltype(auto) dispatch_arithmetic(DType dtype, std::string_view op, Body&& body) {
  if (dtype == DType::bf16) return body.template operator()<BFloat16>();
  return dispatch_numeric(dtype, op, std::forward<Body>(body));
}

template <class Body>
decltype(auto) dispatch_arithmetic_or_bool(DType dtype, std::string_view op, Body&& body) {
  if (dtype == DType::boolean) return body.template operator()<bool>();
  return dispatch_arithmetic(dtype, op, std::forward<Body>(body));
}

template <class Body>
decltype(auto) dispatch_floating_or_bf16(DType dtype, std::string_view op, Body&& body) {
  if (dtype == DType::bf16) return body.template operator()<BFloat16>();
  return dispatch_floating(dtype, op, std::forward<Body>(body));
}

template <class T>
T apply_unary(UnaryOp op, T x) {
  switch (op) {
    case UnaryOp::neg: return static_cast<T>(-x);
    case UnaryOp::abs:
      if constexpr (std::is_unsigned_v<T>) return x; else return x < 0 ? static_cast<T>(-x) : x;
    case UnaryOp::sign: return static_cast<T>((x > T(0)) - (x < T(0)));
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case UnaryOp::exp: return std::exp(x);
      case UnaryOp::log: return std::log(x);
      case UnaryOp::sqrt: return std::sqrt(x);
      case UnaryOp::relu: return x < T(0) ? T(0) : x;  // NaN stays NaN, as in PyTorch
      case UnaryOp::sigmoid: return T(1) / (T(1) + std::exp(-x));
      case UnaryOp::tanh: return std::tanh(x);
      case UnaryOp::reciprocal: return T(1) / x;
      case UnaryOp::sin: return std::sin(x);
      case UnaryOp::cos: return std::cos(x);
      default: break;
    }
  }
  return x;
}

template <class T>
T apply_arithmetic(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add: return static_cast<T>(a + b);
    case BinaryOp::sub: return static_cast<T>(a - b);
    case BinaryOp::mul: return static_cast<T>(a * b);
    case BinaryOp::div: return static_cast<T>(a / b);
    case BinaryOp::pow:
      if constexpr (std::is_floating_point_v<T>) return std::pow(a, b); else return static_cast<T>(std::pow(a, b));
    case BinaryOp::maximum:
      if constexpr (std::is_floating_point_v<T>) if (std::isnan(a) || std::isnan(b)) return a + b;
      return a > b ? a : b;
    case BinaryOp::minimum:
      if constexpr (std::is_floating_point_v<T>) if (std::isnan(a) || std::isnan(b)) return a + b;
      return a < b ? a : b;
    default: return a;
  }
}

BFloat16 apply_unary(UnaryOp op, BFloat16 x) {
  return BFloat16(apply_unary(op, static_cast<float>(x)));
}

BFloat16 apply_arithmetic(BinaryOp op, BFloat16 a, BFloat16 b) {
  return BFloat16(apply_arithmetic(op, static_cast<float>(a), static_cast<float>(b)));
}

// out = f(a, b) over `out`'s shape; the common cases (contiguous, one side a scalar) get
// their own loops so the compiler vectorises them.
template <class Out, class In, class F>
void binary_loop(Tensor& out, const Tensor& a, const Tensor& b, F f) {
  auto it = cpu::make_iteration<3>(out.sizes(), {&out, &a, &b});
  Out* po = static_cast<Out*>(out.data_ptr());
  const In* pa = static_cast<const In*>(a.data_ptr());
  const In* pb = static_cast<const In*>(b.data_ptr());
  cpu::for_each_row(it, [&](const std::array<int64_t, 3>& offsets, int64_t n, const std::array<int64_t, 3>& st) {
    Out* o = po + offsets[0];
    const In* x = pa + offsets[1];
    const In* y = pb + offsets[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
      const In v = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], v);
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
      const In v = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(v, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(x[i * st[1]], y[i * st[2]]);
    }
  });
}

template <class T>
void binary_into(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b) {
  if (gives_bool(op)) {
    return binary_loop<bool, T>(out, a, b, [op](T x, T y) { return apply_comparison(op, widen(x), widen(y)); });
  }
  if constexpr (std::is_same_v<T, bool>) {
    return;  // arithmetic on bool: refused by check_binary_operands, never reached
  } else {
    // One switch outside the loop, so each inner loop is a fixed operation.
    switch (op) {
      case BinaryOp::add: return binary_loop<T, T>(out, a, b, [](T x, T y) { return static_cast<T>(widen(x) + widen(y)); });
      case BinaryOp::sub: return binary_loop<T, T>(out, a, b, [](T x, T y) { return static_cast<T>(widen(x) - widen(y)); });
      case BinaryOp::mul: return binary_loop<T, T>(out, a, b, [](T x, T y) { return static_cast<T>(widen(x) * widen(y)); });
      case BinaryOp::div: return binary_loop<T, T>(out, a, b, [](T x, T y) { return static_cast<T>(widen(x) / widen(y)); });
      default: return binary_loop<T, T>(out, a, b, [op](T x, T y) { return apply_arithmetic(op, x, y); });
    }
  }
}

void check_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_binary_operands(op, a, b);
  check_cpu(a, op_name(op));
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& self) {
  check_defined(self, op_name(op));
  check_cpu(self, op_name(op));
  check_unary_dtype(op, self);
  Tensor out = empty(self.sizes(), self.dtype(), self.device());
  dispatch_arithmetic(self.dtype(), op_name(op), [&]<class T>() {
    auto it = cpu::make_iteration<2>(out.sizes(), {&out, &self});
    T* po = out.data_ptr<T>();
    const T* pi = static_cast<const T*>(self.data_ptr());
    cpu::for_each_row(it, [&](const std::array<int64_t, 2>& offsets, int64_t n, const std::array<int64_t, 2>& st) {
      T* o = po + offsets[0];
      const T* x = pi + offsets[1];
      if (st[0] == 1 && st[1] == 1) {
        switch (op) {  // the hot ones get a fixed loop
          case UnaryOp::relu:
            for (int64_t i = 0; i < n; ++i) o[i] = widen(x[i]) < 0 ? T(0) : x[i];
            return;
          case UnaryOp::neg:
            for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(-widen(x[i]));
            return;
          default:
            for (int64_t i = 0; i < n; ++i) o[i] = apply_unary(op, x[i]);
            return;
        }
      }
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = apply_unary(op, x[i * st[1]]);
    });
  });
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_binary(op, a, b);
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op_name(op));
  Tensor out = empty(shape, gives_bool(op) ? DType::boolean : a.dtype(), a.device());
  dispatch_arithmetic_or_bool(a.dtype(), op_name(op), [&]<class T>() { binary_into<T>(op, out, a, b); });
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, double b) {
  check_defined(a, op_name(op));
  return cpu::binary(op, a, full({}, b, a.dtype(), a.device()));
}

Tensor binary(BinaryOp op, double a, const Tensor& b) {
  check_defined(b, op_name(op));
  return cpu::binary(op, full({}, a, b.dtype(), b.device()), b);
}

void binary_(BinaryOp op, Tensor& a, const Tensor& b) {
  check_binary(op, a, b);
  TS_CHECK(!gives_bool(op), ValueError, op_name(op), "_: comparisons and logical ops have no in-place form");
  check_in_place_shape(a, b, op_name(op));
  dispatch_arithmetic(a.dtype(), op_name(op), [&]<class T>() { binary_into<T>(op, a, a, b); });
}

void binary_(BinaryOp op, Tensor& a, double b) {
  check_defined(a, op_name(op));
  cpu::binary_(op, a, full({}, b, a.dtype(), a.device()));
}

void add_scaled_(Tensor& self, const Tensor& other, double alpha) {
  check_binary(BinaryOp::add, self, other);
  check_in_place_shape(self, other, "add");
  dispatch_arithmetic(self.dtype(), "add_", [&]<class T>() {
    // alpha in the tensor's dtype (a bfloat16 alpha rounded, as PyTorch 1.13's), the sum in Compute<T>.
    const Compute<T> scale = widen(static_cast<T>(alpha));
    binary_loop<T, T>(self, self, other, [scale](T x, T y) { return static_cast<T>(widen(x) + scale * widen(y)); });
  });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Shape shape = where_shape(cond, a, b);
  check_cpu(a, "where");
  Tensor out = empty(shape, a.dtype(), a.device());
  dispatch_all(a.dtype(), [&]<class T>() {
    auto it = cpu::make_iteration<4>(shape, {&out, &cond, &a, &b});
    T* po = out.data_ptr<T>();
    const bool* pc = static_cast<const bool*>(cond.data_ptr());
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    cpu::for_each_row(it, [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& st) {
      for (int64_t i = 0; i < n; ++i) {
        po[off[0] + i * st[0]] = pc[off[1] + i * st[1]] ? pa[off[2] + i * st[2]] : pb[off[3] + i * st[3]];
      }
    });
  });
  return out;
}

Tensor relu_backward(const Tensor& grad, const Tensor& input) {
  check_relu_backward_operands(grad, input);
  check_cpu(grad, "relu_backward");
  Tensor out = empty(grad.sizes(), grad.dtype(), grad.device());
  dispatch_floating_or_bf16(grad.dtype(), "relu_backward", [&]<class T>() {
    // PyTorch's threshold_backward: zero where the output is <= 0; a NaN passes the gradient.
    binary_loop<T, T>(out, grad, input, [](T g, T x) { return widen(x) <= 0 ? T(0) : g; });
  });
  return out;
}

void relu_backward_(Tensor& grad, const Tensor& input) {
  check_relu_backward_operands(grad, input);
  check_cpu(grad, "relu_backward_");
  dispatch_floating_or_bf16(grad.dtype(), "relu_backward_", [&]<class T>() {
    binary_loop<T, T>(grad, grad, input, [](T g, T x) { return widen(x) <= 0 ? T(0) : g; });
  });
}

}  // namespace tessera::cpu
