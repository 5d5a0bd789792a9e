// Same-device copies (with dtype conversion), fills and flips on the CPU.
#include <cstring>
#include <vector>

#include "tessera/tensor/cpu/convert.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/kernel_shapes.h"
#include "tessera/tensor/cpu/kernels.h"

namespace tessera::cpu {

using namespace native;

namespace {

template <class To, class From>
void copy_typed(Tensor& dst, const Tensor& src) {
  auto it = cpu::make_iteration<2>(dst.sizes(), {&dst, &src});
  To* out = static_cast<To*>(dst.data_ptr());
  const From* in = static_cast<const From*>(src.data_ptr());
  cpu::for_each_row(it, [&](const std::array<int64_t, 2>& offsets, int64_t count, const std::array<int64_t, 2>& st) {
    To* o = out + offsets[0];
    const From* x = in + offsets[1];
    if constexpr (std::is_same_v<To, From>) {
      if (st[0] == 1 && st[1] == 1) {
        std::memcpy(o, x, static_cast<size_t>(count) * sizeof(To));
        return;
      }
    }
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < count; ++i) o[i] = cpu::convert<To>(x[i]);
    } else {
      for (int64_t i = 0; i < count; ++i) o[i * st[0]] = cpu::convert<To>(x[i * st[1]]);
    }
  });
}

}  // namespace

void copy_(Tensor& dst, const Tensor& src) {
  check_cpu(dst, "copy_");
  dispatch_all(dst.dtype(), [&]<class To>() {
    dispatch_all(src.dtype(), [&]<class From>() { copy_typed<To, From>(dst, src); });
  });
}

void fill_(Tensor& self, double value) {
  check_defined(self, "fill_");
  check_cpu(self, "fill_");
  dispatch_all(self.dtype(), [&]<class T>() {
    T typed = cpu::convert<T>(value);
    T* out = static_cast<T*>(self.data_ptr());
    auto it = cpu::make_iteration<1>(self.sizes(), {&self});
    cpu::for_each_row(it, [&](const std::array<int64_t, 1>& offsets, int64_t count, const std::array<int64_t, 1>& st) {
      T* o = out + offsets[0];
      for (int64_t i = 0; i < count; ++i) o[i * st[0]] = typed;
    });
  });
}

// Operands checked, the input made contiguous and the output allocated by the dispatch
// layer (FlipCall). Each row of the last merged dim is copied from its mirrored source row,
// forward or reversed.
void flip(const FlipCall& call) {
  dispatch_all(call.out.dtype(), [&]<class T>() {
    const T* in = static_cast<const T*>(call.self.data_ptr());
    T* out = static_cast<T*>(call.out.data_ptr());
    const int64_t ndim = static_cast<int64_t>(call.sizes.size());
    if (ndim == 0) {  // every dim of size 1: one element
      out[0] = in[0];
      return;
    }
    std::vector<int64_t> strides(ndim, 1);
    for (int64_t d = ndim - 2; d >= 0; --d) strides[d] = strides[d + 1] * call.sizes[d + 1];
    const int64_t inner = call.sizes[ndim - 1];
    const bool reverse_rows = call.flipped[ndim - 1];
    const int64_t rows = call.out.numel() / inner;
    for (int64_t row = 0; row < rows; ++row) {
      int64_t rest = row, source = 0;
      for (int64_t d = ndim - 2; d >= 0; --d) {
        const int64_t i = rest % call.sizes[d];
        rest /= call.sizes[d];
        source += (call.flipped[d] ? call.sizes[d] - 1 - i : i) * strides[d];
      }
      T* o = out + row * inner;
      const T* x = in + source;
      if (reverse_rows) {
        for (int64_t j = 0; j < inner; ++j) o[j] = x[inner - 1 - j];
      } else {
        std::memcpy(o, x, static_cast<size_t>(inner) * sizeof(T));
      }
    }
  });
}

}  // namespace tessera::cpu
