// ToTensor and Normalize: plain loops, one rounding per step, matching torchvision's order.
#include "tessera/data/transforms.h"

#include "tessera/data/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::data {

Tensor to_tensor(const Tensor& images) {
  TS_CHECK(images.defined(), ValueError, "to_tensor: the input tensor is undefined");
  TS_CHECK(images.dtype() == DType::u8, DTypeError, "to_tensor: expected uint8 images, got ", images.str());
  Tensor bytes = images.cpu().contiguous();
  Tensor result = empty(bytes.sizes(), {.dtype = DType::f32});
  const int64_t count = bytes.numel();
  if (count == 0) return result;
  const uint8_t* in = bytes.data_ptr<uint8_t>();
  float* out = result.data_ptr<float>();
  for (int64_t i = 0; i < count; ++i) out[i] = to_unit_float(in[i]);
  return result;
}

Normalize::Normalize(double mean_value, double std_value)
    : Normalize(std::vector<double>{mean_value}, std::vector<double>{std_value}) {}

Normalize::Normalize(std::vector<double> mean_values, std::vector<double> std_values)
    : mean(std::move(mean_values)), std(std::move(std_values)) {
  TS_CHECK(!mean.empty() && mean.size() == std.size(), ValueError,
           "Normalize: expected as many means as standard deviations (at least one), got ", mean.size(), " and ",
           std.size());
  for (double s : std) {
    // torchvision refuses a zero std for the same reason: every value would become inf or nan.
    TS_CHECK(s != 0.0, ValueError, "Normalize: a standard deviation is zero");
  }
}

Tensor Normalize::operator()(const Tensor& x) const {
  TS_CHECK(x.defined(), ValueError, "Normalize: the input tensor is undefined");
  TS_CHECK(x.dim() >= 3, ShapeError, "Normalize: expected a [..., C, H, W] tensor, got ", x.str());
  const int64_t channels = x.size(x.dim() - 3);
  TS_CHECK(mean.size() == 1 || static_cast<int64_t>(mean.size()) == channels, ShapeError, "Normalize: ",
           mean.size(), " means for ", channels, " channels of ", x.str());
  Tensor input = x.cpu().contiguous();
  Tensor result = empty(input.sizes(), {.dtype = input.dtype()});
  const int64_t plane = input.size(x.dim() - 2) * input.size(x.dim() - 1);
  const int64_t planes = plane == 0 ? 0 : input.numel() / plane;
  dispatch_floating(input.dtype(), "Normalize", [&]<class T>() {
    const T* in = input.numel() > 0 ? input.data_ptr<T>() : nullptr;
    T* out = input.numel() > 0 ? result.data_ptr<T>() : nullptr;
    for (int64_t p = 0; p < planes; ++p) {
      const size_t c = mean.size() == 1 ? 0 : static_cast<size_t>(p % channels);
      const T m = static_cast<T>(mean[c]), s = static_cast<T>(std[c]);
      for (int64_t i = p * plane; i < (p + 1) * plane; ++i) out[i] = (in[i] - m) / s;
    }
  });
  return x.is_cuda() ? result.to(x.device()) : result;
}

}  // namespace tessera::data
