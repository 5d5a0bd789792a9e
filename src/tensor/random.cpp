#include "tessera/tensor/random.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <numbers>

#include "tessera/tensor/error.h"
#include "tessera/tensor/philox.h"

namespace tessera {

namespace {

// The default generator and its lock (see random.h for why it is global).
struct DefaultGenerator {
  std::mutex mutex;
  Generator generator{0};
};

DefaultGenerator& default_generator() {
  static DefaultGenerator instance;
  return instance;
}

}  // namespace

void manual_seed(uint64_t seed) { set_rng_state(Generator(seed)); }

uint64_t initial_seed() { return get_rng_state().seed(); }

Generator get_rng_state() {
  DefaultGenerator& state = default_generator();
  std::lock_guard lock(state.mutex);
  return state.generator;
}

void set_rng_state(const Generator& generator) {
  DefaultGenerator& state = default_generator();
  std::lock_guard lock(state.mutex);
  state.generator = generator;
}

void with_default_generator(const std::function<void(Generator&)>& draw) {
  DefaultGenerator& state = default_generator();
  std::lock_guard lock(state.mutex);
  draw(state.generator);
}

DropoutKey next_dropout_key(uint64_t stream) {
  DropoutKey key{.stream = stream};
  with_default_generator([&](Generator& generator) {
    key.seed = generator.seed() ^ (generator.stream() * 0xD1B54A32D192ED03ull);
    key.step = generator.advance(1);
  });
  return key;
}

namespace {

// f32 takes one 32-bit word per element, four elements per Philox block.
float uniform_f32_at(uint64_t seed, uint64_t stream, uint64_t index) {
  philox::Counter words = philox::block(seed, stream, index / 4);
  return philox::unit_float(words.word[index % 4]);
}

// f64 takes two words per element, two elements per block.
double uniform_f64_at(uint64_t seed, uint64_t stream, uint64_t index) {
  philox::Counter words = philox::block(seed, stream, index / 2);
  uint32_t lane = static_cast<uint32_t>(index % 2) * 2;
  return philox::unit_double(words.word[lane], words.word[lane + 1]);
}

// One standard normal per block (Box-Muller, cosine branch), computed in double so that
// f32 and f64 draws of the same element agree to f32 rounding.
double standard_normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  philox::Counter words = philox::block(seed, stream, index);
  double u1 = 1.0 - philox::unit_double(words.word[0], words.word[1]);  // (0, 1]
  double u2 = philox::unit_double(words.word[2], words.word[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

template <class T, class Draw>
void fill_with(void* out, int64_t count, Draw draw) {
  T* data = static_cast<T*>(out);
#pragma omp parallel for if (count > 65536)
  for (int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(draw(static_cast<uint64_t>(i)));
}

}  // namespace

void fill_uniform(void* out, DType dtype, int64_t count, double low, double high, uint64_t seed,
                  uint64_t stream, uint64_t first) {
  double span = high - low;
  if (dtype == DType::bf16) {  // float draws rounded, as PyTorch draws bfloat16 (a bfloat16 model's init)
    const float low_f = static_cast<float>(low), span_f = static_cast<float>(span);
    fill_with<BFloat16>(out, count, [&](uint64_t i) { return uniform_f32_at(seed, stream, first + i) * span_f + low_f; });
    return;
  }
  dispatch_floating(dtype, "uniform", [&]<class T>() {
    if constexpr (std::is_same_v<T, float>) {
      // PyTorch computes float draws as low + u * (high - low) in float.
      float low_f = static_cast<float>(low), span_f = static_cast<float>(span);
      fill_with<T>(out, count, [&](uint64_t i) {
        return uniform_f32_at(seed, stream, first + i) * span_f + low_f;
      });
    } else {
      fill_with<T>(out, count, [&](uint64_t i) { return uniform_f64_at(seed, stream, first + i) * span + low; });
    }
  });
}

void fill_normal(void* out, DType dtype, int64_t count, double mean, double std, uint64_t seed,
                 uint64_t stream, uint64_t first) {
  if (dtype == DType::bf16) {  // float draws rounded, as for uniform
    fill_with<BFloat16>(out, count, [&](uint64_t i) {
      return static_cast<float>(standard_normal_at(seed, stream, first + i) * std + mean);
    });
    return;
  }
  dispatch_floating(dtype, "normal", [&]<class T>() {
    fill_with<T>(out, count, [&](uint64_t i) { return standard_normal_at(seed, stream, first + i) * std + mean; });
  });
}

void fill_randint(void* out, DType dtype, int64_t count, int64_t low, int64_t high, uint64_t seed,
                  uint64_t stream, uint64_t first) {
  TS_CHECK(high > low, ValueError, "randint: high (", high, ") must be greater than low (", low, ")");
  uint64_t range = static_cast<uint64_t>(high - low);
  dispatch_numeric(dtype, "randint", [&]<class T>() {
    fill_with<T>(out, count, [&](uint64_t i) {
      philox::Counter words = philox::block(seed, stream, (first + i) / 2);
      uint32_t lane = static_cast<uint32_t>((first + i) % 2) * 2;
      uint64_t bits = static_cast<uint64_t>(words.word[lane]) << 32 | words.word[lane + 1];
      return static_cast<T>(low + static_cast<int64_t>(bits % range));
    });
  });
}

namespace {

// The standard normal's CDF and its inverse: erfinv by a rational first guess refined by
// Newton's method on std::erf (three steps reach double rounding).
double standard_normal_cdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

double erfinv(double y) {
  if (y <= -1) return -std::numeric_limits<double>::infinity();
  if (y >= 1) return std::numeric_limits<double>::infinity();
  const double w = -std::log((1.0 - y) * (1.0 + y));
  double x = w < 5 ? y * (1.2533 + w * (0.1325 + w * 0.0051)) : std::copysign(std::sqrt(w) - 0.3, y);
  for (int step = 0; step < 3; ++step) {
    x -= (std::erf(x) - y) / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
  }
  return x;
}

}  // namespace

void fill_truncated_normal(void* out, DType dtype, int64_t count, double mean, double std, double low, double high,
                           uint64_t seed, uint64_t stream, uint64_t first) {
  TS_CHECK(std > 0 && low < high, ValueError, "trunc_normal: needs std > 0 and a < b, got std ", std, ", a ", low,
           ", b ", high);
  const double lower = standard_normal_cdf((low - mean) / std), upper = standard_normal_cdf((high - mean) / std);
  dispatch_floating(dtype, "trunc_normal", [&]<class T>() {
    fill_with<T>(out, count, [&](uint64_t i) {
      const double p = lower + uniform_f64_at(seed, stream, first + i) * (upper - lower);
      const double x = mean + std * std::numbers::sqrt2 * erfinv(2.0 * p - 1.0);
      return std::clamp(x, low, high);  // rounding at the ends stays inside, as PyTorch's clamp_
    });
  });
}

void InitRule::fill(void* out, DType dtype, int64_t count, uint64_t seed, const std::string& key,
                    int64_t first) const {
  fill_from(out, dtype, count, seed, philox::stream_of(key), static_cast<uint64_t>(first));
}

void InitRule::fill_from(void* out, DType dtype, int64_t count, uint64_t seed, uint64_t stream,
                         uint64_t first_element) const {
  const int64_t first = static_cast<int64_t>(first_element);
  switch (kind) {
    case Kind::constant:
      dispatch_floating(dtype, "init", [&]<class T>() { fill_with<T>(out, count, [&](uint64_t) { return a; }); });
      break;
    case Kind::uniform:
      fill_uniform(out, dtype, count, a, b, seed, stream, first_element);
      break;
    case Kind::normal:
      fill_normal(out, dtype, count, a, b, seed, stream, first_element);
      break;
    case Kind::truncated_normal:
      fill_truncated_normal(out, dtype, count, a, b, low, high, seed, stream, first_element);
      break;
  }
  // The zeroed elements that fall inside [first, first + count).
  const int64_t begin = std::max(zeros_begin, first), end = std::min(zeros_end, first + count);
  if (begin < end) {
    const size_t size = element_size(dtype);
    std::memset(static_cast<unsigned char*>(out) + static_cast<size_t>(begin - first) * size, 0,
                static_cast<size_t>(end - begin) * size);
  }
}

}  // namespace tessera
