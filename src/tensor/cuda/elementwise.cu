// Element-wise unary and binary kernels on CUDA, with broadcasting.
//
// The arithmetic mirrors cpu/elementwise.cpp expression for expression (the same NaN
// rules for maximum/minimum, the same integer behaviour), so results differ from the
// CPU's only by the last-bit differences of the device's exp/log/tanh/pow. The operation
// is a kernel argument, not a template parameter: every thread of a launch takes the same
// branch, and one kernel per dtype keeps the build small. bfloat16 computes in float.
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/elementwise.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/comparison_rules.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

template <class C> __device__ __forceinline__ bool is_nan(C x) { return x != x; }

__device__ __forceinline__ float math_exp(float x) { return expf(x); }
__device__ __forceinline__ double math_exp(double x) { return exp(x); }
__device__ __forceinline__ float math_log(float x) { return logf(x); }
__device__ __forceinline__ double math_log(double x) { return log(x); }
__device__ __forceinline__ float math_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double math_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float math_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double math_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float math_sin(float x) { return sinf(x); }
__device__ __forceinline__ double math_sin(double x) { return sin(x); }
__device__ __forceinline__ float math_cos(float x) { return cosf(x); }
__device__ __forceinline__ double math_cos(double x) { return cos(x); }
__device__ __forceinline__ float math_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double math_pow(double x, double y) { return pow(x, y); }

template <class C>
__device__ C apply_unary(UnaryOp op, C x) {
  switch (op) {
    case UnaryOp::neg: return static_cast<C>(-x);
    case UnaryOp::abs:
      if constexpr (std::is_unsigned_v<C>) return x; else return x < C(0) ? static_cast<C>(-x) : x;
    case UnaryOp::sign:
      if constexpr (std::is_unsigned_v<C>) return x > C(0) ? C(1) : C(0); else return static_cast<C>((x > C(0)) - (x < C(0)));
    default: break;
  }
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case UnaryOp::exp: return math_exp(x);
      case UnaryOp::log: return math_log(x);
      case UnaryOp::sqrt: return math_sqrt(x);
      case UnaryOp::relu: return x < C(0) ? C(0) : x;  // NaN stays NaN, as in PyTorch
      case UnaryOp::sigmoid: return C(1) / (C(1) + math_exp(-x));
      case UnaryOp::tanh: return math_tanh(x);
      case UnaryOp::reciprocal: return C(1) / x;
      case UnaryOp::sin: return math_sin(x);
      case UnaryOp::cos: return math_cos(x);
      default: break;
    }
  }
  return x;
}

template <class C>
__device__ C apply_arithmetic(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::add: return static_cast<C>(a + b);
    case BinaryOp::sub: return static_cast<C>(a - b);
    case BinaryOp::mul: return static_cast<C>(a * b);
    case BinaryOp::div: return static_cast<C>(a / b);
    case BinaryOp::pow:
      if constexpr (std::is_floating_point_v<C>) return math_pow(a, b); else return a;  // integers rejected on the host
    case BinaryOp::maximum:
      if constexpr (std::is_floating_point_v<C>) if (is_nan(a) || is_nan(b)) return a + b;
      return a > b ? a : b;
    case BinaryOp::minimum:
      if constexpr (std::is_floating_point_v<C>) if (is_nan(a) || is_nan(b)) return a + b;
      return a < b ? a : b;
    default: return a;
  }
}

template <class T>
struct UnaryFunctor {
  UnaryOp op;
  __device__ T operator()(T x) const { return store<T>(apply_unary(op, load(x))); }
};

template <class T>
struct ArithmeticFunctor {
  BinaryOp op;
  __device__ T operator()(T a, T b) const { return store<T>(apply_arithmetic(op, load(a), load(b))); }
};

template <class T>
struct ComparisonFunctor {
  BinaryOp op;
  __device__ bool operator()(T a, T b) const { return apply_comparison(op, load(a), load(b)); }
};

// A Python-number operand rides in the functor (rounded to T on the host, as the CPU's
// 0-d tensor is): no device tensor is allocated and filled for it.
template <class T>
struct ScalarRightFunctor {  // op(x, scalar)
  BinaryOp op;
  T scalar;
  __device__ T operator()(T x) const { return store<T>(apply_arithmetic(op, load(x), load(scalar))); }
};

template <class T>
struct ScalarLeftFunctor {  // op(scalar, x)
  BinaryOp op;
  T scalar;
  __device__ T operator()(T x) const { return store<T>(apply_arithmetic(op, load(scalar), load(x))); }
};

template <class T>
struct ScalarComparisonFunctor {
  BinaryOp op;
  T scalar;
  bool scalar_first;
  __device__ bool operator()(T x) const {
    return scalar_first ? apply_comparison(op, load(scalar), load(x)) : apply_comparison(op, load(x), load(scalar));
  }
};

template <class T>
struct AddScaledFunctor {
  Compute<T> scale;
  __device__ T operator()(T a, T b) const { return store<T>(static_cast<Compute<T>>(load(a) + scale * load(b))); }
};

template <class T>
struct ReluBackwardFunctor {
  // PyTorch's threshold_backward: zero where the output is <= 0; a NaN passes the gradient.
  __device__ T operator()(T grad, T input) const { return load(input) <= Compute<T>(0) ? store<T>(0) : grad; }
};

// out = cond ? a : b over four broadcast operands (strided or dense, never vectorised).
template <class T>
struct WhereBody {
  T* out;
  const bool* cond;
  const T* a;
  const T* b;

  __device__ void element(int64_t i) const { out[i] = cond[i] ? a[i] : b[i]; }
  __device__ void vector(int64_t v) const {
    for (int j = 0; j < kVectorWidth; ++j) element(v * kVectorWidth + j);
  }
  __device__ void strided(const int64_t (&o)[4]) const { out[o[0]] = cond[o[1]] ? a[o[2]] : b[o[3]]; }
};

void check_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_binary_operands(op, a, b);
  check_cuda(a, op_name(op));
}

// A tensor and a Python number: the number takes the tensor's dtype, so the rules are
// those of two tensors of that dtype.
void check_binary_with_scalar(BinaryOp op, const Tensor& tensor) {
  check_defined(tensor, op_name(op));
  check_binary(op, tensor, tensor);
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& self) {
  check_defined(self, op_name(op));
  check_cuda(self, op_name(op));
  check_unary_dtype(op, self);
  DeviceGuard guard(self.device());
  Tensor out = empty(self.sizes(), self.dtype(), self.device());
  device_dispatch_all(self.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) map_into<T, T>(out, self, UnaryFunctor<T>{op});  // bool refused above
  });
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_binary(op, a, b);
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op_name(op));
  DeviceGuard guard(a.device());
  Tensor out = empty(shape, gives_bool(op) ? DType::boolean : a.dtype(), a.device());
  device_dispatch_all(a.dtype(), [&]<class T>() {
    if (gives_bool(op)) {
      zip_into<bool, T, T>(out, a, b, ComparisonFunctor<T>{op});
    } else if constexpr (!std::is_same_v<T, bool>) {  // arithmetic on bool: refused by the operand checks
      zip_into<T, T, T>(out, a, b, ArithmeticFunctor<T>{op});
    }
  });
  return out;
}

namespace {

// op(tensor, scalar) or, with scalar_first, op(scalar, tensor), into a new tensor.
Tensor binary_with_scalar(BinaryOp op, const Tensor& tensor, double scalar, bool scalar_first) {
  check_binary_with_scalar(op, tensor);
  DeviceGuard guard(tensor.device());
  Tensor out = empty(tensor.sizes(), gives_bool(op) ? DType::boolean : tensor.dtype(), tensor.device());
  device_dispatch_all(tensor.dtype(), [&]<class T>() {
    const T value = device_value<T>(scalar);
    if (gives_bool(op)) {
      map_into<bool, T>(out, tensor, ScalarComparisonFunctor<T>{op, value, scalar_first});
    } else if constexpr (!std::is_same_v<T, bool>) {  // arithmetic on bool: refused by the operand checks
      if (scalar_first) {
        map_into<T, T>(out, tensor, ScalarLeftFunctor<T>{op, value});
      } else {
        map_into<T, T>(out, tensor, ScalarRightFunctor<T>{op, value});
      }
    }
  });
  return out;
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, double b) { return binary_with_scalar(op, a, b, false); }

Tensor binary(BinaryOp op, double a, const Tensor& b) { return binary_with_scalar(op, b, a, true); }

void binary_(BinaryOp op, Tensor& a, const Tensor& b) {
  check_binary(op, a, b);
  TS_CHECK(!gives_bool(op), ValueError, op_name(op), "_: comparisons and logical ops have no in-place form");
  check_in_place_shape(a, b, op_name(op));
  DeviceGuard guard(a.device());
  device_dispatch_all(a.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) zip_into<T, T, T>(a, a, b, ArithmeticFunctor<T>{op});
  });
}

void binary_(BinaryOp op, Tensor& a, double b) {
  check_binary_with_scalar(op, a);
  TS_CHECK(!gives_bool(op), ValueError, op_name(op), "_: comparisons and logical ops have no in-place form");
  DeviceGuard guard(a.device());
  device_dispatch_all(a.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {  // each element reads, then writes, its own
      map_into<T, T>(a, a, ScalarRightFunctor<T>{op, device_value<T>(b)});
    }
  });
}

void add_scaled_(Tensor& self, const Tensor& other, double alpha) {
  check_binary(BinaryOp::add, self, other);
  check_in_place_shape(self, other, "add");
  DeviceGuard guard(self.device());
  device_dispatch_all(self.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      // As on the CPU, alpha is first rounded to the element type (an integer tensor adds int(alpha) * y).
      const Compute<T> scale = static_cast<Compute<T>>(alpha);
      zip_into<T, T, T>(self, self, other, AddScaledFunctor<T>{scale});
    }
  });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Shape shape = where_shape(cond, a, b);
  DeviceGuard guard = enter_cuda_device(a, "where");
  Tensor out = empty(shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  device_dispatch_all(a.dtype(), [&]<class T>() {
    WhereBody<T> body{static_cast<T*>(out.data_ptr()), static_cast<const bool*>(cond.data_ptr()),
                      static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr())};
    StridedLayout<4> layout = make_layout<4>(shape, {&out, &cond, &a, &b});
    launch_elementwise(out.numel(), layout, false, body, stream_of(out));
  });
  return out;
}

Tensor relu_backward(const Tensor& grad, const Tensor& input) {
  check_relu_backward_operands(grad, input);
  DeviceGuard guard = enter_cuda_device(grad, "relu_backward");
  Tensor out = empty(grad.sizes(), grad.dtype(), grad.device());
  device_dispatch_floating_bf16(grad.dtype(), "relu_backward", [&]<class T>() {
    zip_into<T, T, T>(out, grad, input, ReluBackwardFunctor<T>{});
  });
  return out;
}

void relu_backward_(Tensor& grad, const Tensor& input) {
  check_relu_backward_operands(grad, input);
  DeviceGuard guard = enter_cuda_device(grad, "relu_backward_");
  device_dispatch_floating_bf16(grad.dtype(), "relu_backward_", [&]<class T>() {
    zip_into<T, T, T>(grad, grad, input, ReluBackwardFunctor<T>{});  // each element reads then writes its own
  });
}

}  // namespace tessera::cuda
