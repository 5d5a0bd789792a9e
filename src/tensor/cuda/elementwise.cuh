// Generic element-wise launches shared by the CUDA kernels: map (one input) and zip (two
// inputs) with NumPy broadcasting of the inputs to the output's shape. The operation is a
// small functor with a __device__ operator(); see launch.cuh for the loop shapes.
#pragma once

#include <cstring>

#include "tessera/tensor/cpu/convert.h"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"

namespace tessera::cuda {

template <class Out, class In, class Op>
struct MapBody {
  Out* out;
  const In* in;
  Op op;

  __device__ void element(int64_t i) const { out[i] = op(in[i]); }
  __device__ void vector(int64_t v) const {
    const Pack<In, kVectorWidth> x = reinterpret_cast<const Pack<In, kVectorWidth>*>(in)[v];
    Pack<Out, kVectorWidth> y;
#pragma unroll
    for (int j = 0; j < kVectorWidth; ++j) y.value[j] = op(x.value[j]);
    reinterpret_cast<Pack<Out, kVectorWidth>*>(out)[v] = y;
  }
  __device__ void strided(const int64_t (&offsets)[2]) const { out[offsets[0]] = op(in[offsets[1]]); }
};

template <class Out, class A, class B, class Op>
struct ZipBody {
  Out* out;
  const A* a;
  const B* b;
  Op op;

  __device__ void element(int64_t i) const { out[i] = op(a[i], b[i]); }
  __device__ void vector(int64_t v) const {
    const Pack<A, kVectorWidth> x = reinterpret_cast<const Pack<A, kVectorWidth>*>(a)[v];
    const Pack<B, kVectorWidth> y = reinterpret_cast<const Pack<B, kVectorWidth>*>(b)[v];
    Pack<Out, kVectorWidth> z;
#pragma unroll
    for (int j = 0; j < kVectorWidth; ++j) z.value[j] = op(x.value[j], y.value[j]);
    reinterpret_cast<Pack<Out, kVectorWidth>*>(out)[v] = z;
  }
  __device__ void strided(const int64_t (&offsets)[3]) const {
    out[offsets[0]] = op(a[offsets[1]], b[offsets[2]]);
  }
};

// `value` as the device type T, rounded on the host with the host's rules (what a 0-d
// tensor filled with it would hold), for a scalar carried in a functor.
template <class T>
T device_value(double value) {
  if constexpr (std::is_same_v<T, DeviceBFloat16>) {
    const BFloat16 rounded = cpu::convert<BFloat16>(value);
    T bits;
    static_assert(sizeof bits == sizeof rounded);
    std::memcpy(&bits, &rounded, sizeof bits);
    return bits;
  } else {
    return cpu::convert<T>(value);
  }
}

inline cudaStream_t stream_of(const Tensor& tensor) { return compute_stream(tensor.device().index); }

// out = op(in), `in` broadcast to out's shape. Element types are the device types.
template <class Out, class In, class Op>
void map_into(Tensor& out, const Tensor& in, Op op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto* po = static_cast<Out*>(out.data_ptr());
  const auto* pi = static_cast<const In*>(in.data_ptr());
  StridedLayout<2> layout = make_layout<2>(out.sizes(), {&out, &in});
  const bool vectorisable = aligned_for_vectors(po, sizeof(Out)) && aligned_for_vectors(pi, sizeof(In));
  launch_elementwise(n, layout, vectorisable, MapBody<Out, In, Op>{po, pi, op}, stream_of(out));
}

// out = op(a, b), both broadcast to out's shape (out may be a itself: element i is read
// before it is written, by the same thread).
template <class Out, class A, class B, class Op>
void zip_into(Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto* po = static_cast<Out*>(out.data_ptr());
  const auto* pa = static_cast<const A*>(a.data_ptr());
  const auto* pb = static_cast<const B*>(b.data_ptr());
  StridedLayout<3> layout = make_layout<3>(out.sizes(), {&out, &a, &b});
  const bool vectorisable = aligned_for_vectors(po, sizeof(Out)) && aligned_for_vectors(pa, sizeof(A)) &&
                            aligned_for_vectors(pb, sizeof(B));
  launch_elementwise(n, layout, vectorisable, ZipBody<Out, A, B, Op>{po, pa, pb, op}, stream_of(out));
}

}  // namespace tessera::cuda
