// Same-device copies (any strides, broadcasting, dtype conversion), fills and flips on CUDA.
//
// A copy between dense tensors of one dtype is a cudaMemcpyAsync; anything else is an
// element-wise map through convert<To, From> (bfloat16 rounds as on the host). A fill
// converts the value once on the host, with the host's rules, and writes its bits.
#include <cstring>

#include "tessera/tensor/cpu/convert.h"
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/elementwise.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

namespace {

template <class To, class From>
struct ConvertOp {
  __device__ To operator()(From value) const { return convert<To>(value); }
};

// Writes one bit pattern (an element of 1, 2, 4 or 8 bytes) everywhere.
template <class Bits>
struct FillBody {
  Bits* out;
  Bits value;

  __device__ void element(int64_t i) const { out[i] = value; }
  __device__ void vector(int64_t v) const {
    Pack<Bits, kVectorWidth> pack;
#pragma unroll
    for (int j = 0; j < kVectorWidth; ++j) pack.value[j] = value;
    reinterpret_cast<Pack<Bits, kVectorWidth>*>(out)[v] = pack;
  }
  __device__ void strided(const int64_t (&offsets)[1]) const { out[offsets[0]] = value; }
};

template <class Bits>
void fill_bits(Tensor& self, Bits value) {
  auto* out = static_cast<Bits*>(self.data_ptr());
  StridedLayout<1> layout = make_layout<1>(self.sizes(), {&self});
  if (value == 0 && is_dense(layout)) {
    TS_CUDA_CHECK(cudaMemsetAsync(out, 0, self.nbytes(), stream_of(self)));
    return;
  }
  launch_elementwise(self.numel(), layout, aligned_for_vectors(out, sizeof(Bits)), FillBody<Bits>{out, value},
                     stream_of(self));
}

template <size_t Size> struct BitsOfSize;
template <> struct BitsOfSize<1> { using type = uint8_t; };
template <> struct BitsOfSize<2> { using type = uint16_t; };
template <> struct BitsOfSize<4> { using type = uint32_t; };
template <> struct BitsOfSize<8> { using type = uint64_t; };

// flip's geometry (FlipCall's merged dims), passed by value to the kernel.
struct FlipGeometry {
  int ndim;
  int64_t sizes[kMaxDims];
  bool flipped[kMaxDims];
};

// out[o] = in[the mirror of o]: each output position's source, dim by dim from the last.
template <class Bits>
__global__ void flip_kernel(const Bits* in, Bits* out, int64_t n, FlipGeometry g) {
  for (int64_t o = thread_index(); o < n; o += thread_count()) {
    int64_t rest = o, source = 0, stride = 1;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t i = rest % g.sizes[d];
      rest /= g.sizes[d];
      source += (g.flipped[d] ? g.sizes[d] - 1 - i : i) * stride;
      stride *= g.sizes[d];
    }
    out[o] = in[source];
  }
}

}  // namespace

void copy_(Tensor& dst, const Tensor& src) {
  check_defined(dst, "copy_", "destination");
  check_defined(src, "copy_", "source");
  check_cuda(dst, "copy_");
  check_same_device(dst, src, "copy_");
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst.device());
  if (dst.dtype() == src.dtype() && dst.sizes() == src.sizes() && dst.is_contiguous() && src.is_contiguous()) {
    TS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice,
                                  stream_of(dst)));
    return;
  }
  device_dispatch_all(dst.dtype(), [&]<class To>() {
    device_dispatch_all(src.dtype(), [&]<class From>() { map_into<To, From>(dst, src, ConvertOp<To, From>{}); });
  });
}

void fill_(Tensor& self, double value) {
  check_defined(self, "fill_");
  check_cuda(self, "fill_");
  if (self.numel() == 0) return;
  DeviceGuard guard(self.device());
  dispatch_all(self.dtype(), [&]<class T>() {
    const T typed = cpu::convert<T>(value);
    using Bits = typename BitsOfSize<sizeof(T)>::type;
    Bits bits;
    std::memcpy(&bits, &typed, sizeof bits);
    fill_bits<Bits>(self, bits);
  });
}

// Operands checked, the input made contiguous and the output allocated by the dispatch
// layer (FlipCall); the kernel moves bit patterns, so one instance serves each element size.
void flip(const native::FlipCall& call) {
  DeviceGuard guard(call.device());
  FlipGeometry geometry{};
  geometry.ndim = static_cast<int>(call.sizes.size());
  for (int d = 0; d < geometry.ndim; ++d) {
    geometry.sizes[d] = call.sizes[d];
    geometry.flipped[d] = call.flipped[d];
  }
  const int64_t n = call.out.numel();
  dispatch_all(call.out.dtype(), [&]<class T>() {
    using Bits = typename BitsOfSize<sizeof(T)>::type;
    flip_kernel<Bits><<<blocks_for(n), kThreads, 0, stream_of(call.out)>>>(
        static_cast<const Bits*>(call.self.data_ptr()), static_cast<Bits*>(call.out.data_ptr()), n, geometry);
    TS_CUDA_CHECK_LAUNCH("flip_kernel");
  });
}

}  // namespace tessera::cuda
