// Copies, fills and conversions on the CPU.
#include <cstring>

#include "tessera/tensor/cpu/convert.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/native.h"

namespace tessera::native {

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
  check_defined(dst, "copy_", "destination");
  check_defined(src, "copy_", "source");
  Shape shape = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  TS_CHECK(shape == dst.sizes(), ShapeError, "copy_: source of shape ", shape_str(src.sizes()),
           " does not broadcast to destination shape ", shape_str(dst.sizes()));
  if (dst.numel() == 0) return;
  if (dst.device() != src.device()) {
    // Cross-device: stage a contiguous copy of the source with the destination's dtype.
    Tensor staged = contiguous(to_dtype(src, dst.dtype()));
    if (staged.sizes() == dst.sizes() && dst.is_contiguous()) {
      copy_bytes(dst.data_ptr(), dst.device(), staged.data_ptr(), staged.device(), dst.nbytes());
      return;
    }
    Tensor moved = empty(staged.sizes(), staged.dtype(), dst.device());
    copy_bytes(moved.data_ptr(), moved.device(), staged.data_ptr(), staged.device(), staged.nbytes());
    copy_(dst, moved);
    return;
  }
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

Tensor contiguous(const Tensor& self) {
  if (self.is_contiguous()) return self;
  return clone(self);
}

Tensor clone(const Tensor& self) {
  Tensor out = empty(self.sizes(), self.dtype(), self.device());
  copy_(out, self);
  return out;
}

Tensor to_dtype(const Tensor& self, DType dtype) {
  if (self.dtype() == dtype) return self;
  Tensor out = empty(self.sizes(), dtype, self.device());
  copy_(out, self);
  return out;
}

Tensor to_device(const Tensor& self, Device device) {
  if (self.device() == device) return self;
  Tensor out = empty(self.sizes(), self.dtype(), device);
  copy_(out, self);
  return out;
}

}  // namespace tessera::native
