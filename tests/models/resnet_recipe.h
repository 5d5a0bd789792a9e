// The weight recipe tests/models/make_resnet_reference.py documents: deterministic values
// that Python and C++ compute bit for bit (integer hashing, then exactly rounded float64
// operations), so ResNet-18's 11.7M parameters need not be committed.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <tessera/tessera.h>

namespace resnet_recipe {

namespace ts = tessera;

// The script's input number: the first whose activations keep clear of ReLU kinks and
// max-pool ties (see make_resnet_reference.py).
inline constexpr int64_t kInputTensorNumber = 100003;
inline constexpr int64_t kProbeOffset = 1000;

// s(p, i) = 2 * fmix32((i * 0x9E3779B1 + (p + 1) * 0x632BE5AB) mod 2^32) / 2^32 - 1.
inline std::vector<double> signed_unit(int64_t p, int64_t count) {
  std::vector<double> out(static_cast<size_t>(count));
  const uint32_t offset = static_cast<uint32_t>(p + 1) * 0x632BE5ABu;
  for (int64_t i = 0; i < count; ++i) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u + offset;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    out[static_cast<size_t>(i)] = 2.0 * (static_cast<double>(h) / 4294967296.0) - 1.0;
  }
  return out;
}

inline bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The recipe's value for tensor number p called `name` with `shape`, in float64.
inline std::vector<double> value(const std::string& name, int64_t p, const ts::Shape& shape) {
  const int64_t count = ts::shape_numel(shape);
  std::vector<double> v = signed_unit(p, count);
  for (double& s : v) {
    if (ends_with(name, "num_batches_tracked")) {
      s = 0.0;
    } else if (ends_with(name, "running_var")) {
      s = 0.75 + (s + 1.0) / 4.0;
    } else if (ends_with(name, "running_mean")) {
      s = s / 8.0;
    } else if (name == "fc.bias") {
      s = s / std::sqrt(512.0);
    } else if (ends_with(name, ".bias")) {
      s = s / 8.0;
    } else if (shape.size() == 1) {
      s = 1.0 + s / 4.0;
    } else {
      const int64_t fan_in = count / shape[0];
      s = s * std::sqrt(6.0 / static_cast<double>(fan_in));
    }
  }
  return v;
}

// A state dict with every entry of `model`'s state dict filled by the recipe, floating
// tensors in `dtype` (rounded from float64), num_batches_tracked as int64.
inline ts::StateDict state_dict_for(ts::nn::Module& model, ts::DType dtype) {
  ts::StateDict out;
  int64_t p = 0;
  for (const auto& [name, tensor] : model.state_dict()) {
    std::vector<double> v = value(name, p++, tensor.sizes());
    ts::Tensor t = ts::tensor<double>(v, tensor.sizes());
    out.insert(name, tensor.dtype() == ts::DType::i64 ? t.to(ts::DType::i64) : t.to(dtype));
  }
  return out;
}

// The recipe for torchvision's ResNet-18 in float64, computed once per process.
inline const ts::StateDict& resnet18_f64() {
  static const ts::StateDict values = [] {
    auto model = ts::models::resnet18();
    return state_dict_for(*model, ts::DType::f64);
  }();
  return values;
}

// The reference input [4, 3, 48, 48].
inline ts::Tensor input(ts::DType dtype) {
  const ts::Shape shape{4, 3, 48, 48};
  return ts::tensor<double>(signed_unit(kInputTensorNumber, ts::shape_numel(shape)), shape).to(dtype);
}

// XOR of the float32 bit patterns (order-free), as the script's checksum.
inline int64_t xor_checksum(const ts::Tensor& t) {
  std::vector<float> values = t.to(ts::DType::f32).to_vector<float>();
  uint32_t x = 0;
  for (float f : values) x ^= std::bit_cast<uint32_t>(f);
  return static_cast<int64_t>(x);
}

}  // namespace resnet_recipe
