// Same-device copies (with dtype conversion) and fills on the CPU.
#include <cstring>

#include "tessera/tensor/cpu/convert.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/device_check.h"
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

}  // namespace tessera::cpu
