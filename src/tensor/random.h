// Random tensors and parameter initialisation rules, all drawn from Philox so that element
// i of a draw is a pure function of (seed, stream, i).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tessera/tensor/dtype.h"
#include "tessera/tensor/op_options.h"

namespace tessera {

class Tensor;

// Where a sequence of draws comes from. Successive calls with one Generator continue the
// sequence (offset advances by the number of elements drawn), as PyTorch's generators do;
// two Generators with the same seed and stream give the same values.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t offset() const { return offset_; }
  // Returns the current offset and moves it past `count` elements.
  uint64_t advance(uint64_t count) {
    uint64_t start = offset_;
    offset_ += count;
    return start;
  }

 private:
  uint64_t seed_, stream_, offset_ = 0;
};

// The default generator, as PyTorch's torch.default_generator: what ts::rand, randn,
// randint, multinomial, and dropout (ts::dropout, attention's, nn::Dropout outside a
// BatchScope) draw from when given no Generator or key, and whose seed a module built afterwards initialises its parameters with.
// It is the library's one piece of global random state, process-wide as in PyTorch, so
// that `ts::manual_seed(s)` at the top of a program (on every rank) makes its run
// repeatable. Draws lock it, so several threads may draw at once (in some order). It starts
// as Generator(0). Tests that draw from it reset it first.
//
//   ts::manual_seed(42);
//   ts::Tensor noise = ts::randn({2, 3});          // the default generator's next 6 elements
void manual_seed(uint64_t seed);
// The seed the default generator was last given (0 before any manual_seed).
uint64_t initial_seed();
// The default generator's position (a copy), and setting it back, to save and restore it
// (checkpoint::GeneratorState records a Generator).
Generator get_rng_state();
void set_rng_state(const Generator& state);
// Runs `draw` on the default generator with its lock held: how the functions above take
// their elements from it.
void with_default_generator(const std::function<void(Generator&)>& draw);
// A dropout key from the default generator, as torch's dropout draws its mask from
// torch.default_generator: its seed (mixed with its stream) and one step of its sequence,
// so that each call gets another mask and ts::manual_seed(s) repeats them. `stream` tells
// apart dropouts drawn at once (nn::Dropout passes its module path's).
DropoutKey next_dropout_key(uint64_t stream = 0);

// A distribution for parameter initialisation: element i of a parameter named `key` is
// value(seed, key, i). Because the rule fills any slice [first, first + n) of the flat
// parameter on its own, an FSDP rank initialises its shard without the full tensor.
struct InitRule {
  enum class Kind : uint8_t { constant, uniform, normal, truncated_normal };
  Kind kind = Kind::constant;
  double a = 0;  // constant: the value; uniform: low; normal, truncated_normal: mean
  double b = 0;  // uniform: high; normal, truncated_normal: standard deviation
  double low = 0, high = 0;  // truncated_normal: the bounds the values stay in

  // Flat elements [zeros_begin, zeros_end) are 0 whatever the distribution (the padding
  // row of nn::Embedding, which PyTorch zeroes after drawing the table).
  int64_t zeros_begin = 0, zeros_end = 0;

  static InitRule constant(double value) { return {Kind::constant, value, 0}; }
  static InitRule uniform(double low, double high) { return {Kind::uniform, low, high}; }
  static InitRule normal(double mean, double std) { return {Kind::normal, mean, std}; }
  // N(mean, std) restricted to [low, high] (by the inverse CDF of a uniform draw).
  static InitRule truncated_normal(double mean, double std, double low, double high) {
    return {Kind::truncated_normal, mean, std, low, high};
  }
  // This rule with elements [begin, end) set to 0.
  InitRule with_zeros(int64_t begin, int64_t end) const {
    InitRule rule = *this;
    rule.zeros_begin = begin;
    rule.zeros_end = end;
    return rule;
  }

  // Fills `count` elements of `dtype` at `out` with elements [first, first + count) of the
  // stream named `key` under `seed`. `out` is host memory.
  void fill(void* out, DType dtype, int64_t count, uint64_t seed, const std::string& key,
            int64_t first) const;
  // The same from the generator stream `stream` (how nn::init refills a tensor that
  // already holds values from the default generator).
  void fill_from(void* out, DType dtype, int64_t count, uint64_t seed, uint64_t stream, uint64_t first) const;
};

// Element-wise draws used by rand/randn/randint and by InitRule. Host memory, contiguous.
void fill_uniform(void* out, DType dtype, int64_t count, double low, double high, uint64_t seed,
                  uint64_t stream, uint64_t first);
void fill_normal(void* out, DType dtype, int64_t count, double mean, double std, uint64_t seed,
                 uint64_t stream, uint64_t first);
void fill_randint(void* out, DType dtype, int64_t count, int64_t low, int64_t high, uint64_t seed,
                  uint64_t stream, uint64_t first);
void fill_truncated_normal(void* out, DType dtype, int64_t count, double mean, double std, double low, double high,
                           uint64_t seed, uint64_t stream, uint64_t first);

}  // namespace tessera
