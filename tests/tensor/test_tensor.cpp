// Tensor engine: creation, views, element-wise ops with broadcasting, reductions, matmul,
// random draws, the allocator counters, and the errors users see.
#include <doctest/doctest.h>

#include <cmath>
#include <tessera/tessera.h>
#include <tessera/tensor/native.h>
#include <tessera/tensor/philox.h>
#include "test_support.h"

namespace ts = tessera;
using ts::DType;
using ts::Shape;

using test_support::error_of;

namespace {

template <class T>
void check_values(const ts::Tensor& t, const std::vector<T>& expected) {
  std::vector<T> actual = t.to_vector<T>();
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) CHECK(actual[i] == doctest::Approx(expected[i]));
}

}  // namespace

TEST_CASE("creation") {
  ts::Tensor z = ts::zeros({2, 3});
  CHECK(z.sizes() == Shape{2, 3});
  CHECK(z.strides() == Shape{3, 1});
  CHECK(z.dtype() == DType::f32);
  CHECK(z.numel() == 6);
  check_values<float>(z, {0, 0, 0, 0, 0, 0});
  check_values<float>(ts::full({2}, 2.5), {2.5f, 2.5f});
  check_values<int64_t>(ts::arange(5), {0, 1, 2, 3, 4});
  check_values<double>(ts::arange(1, 2, 0.25, {.dtype = DType::f64}), {1, 1.25, 1.5, 1.75});
  ts::Tensor t = ts::tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.at<float>({1, 2}) == 6.0f);
  CHECK(ts::tensor<int64_t>({7}).item<int64_t>() == 7);
  CHECK(ts::ones({3}, {.dtype = DType::u8}).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 1});
}

TEST_CASE("views share storage and copies do not") {
  ts::Tensor t = ts::arange(12, {.dtype = DType::f32}).view({3, 4});
  ts::Tensor tt = t.t();
  CHECK(tt.sizes() == Shape{4, 3});
  CHECK(tt.strides() == Shape{1, 4});
  CHECK_FALSE(tt.is_contiguous());
  CHECK(tt.at<float>({3, 2}) == 11.0f);
  CHECK(tt.storage() == t.storage());
  ts::Tensor c = tt.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.storage() != t.storage());
  check_values<float>(c, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});

  ts::Tensor row = t.narrow(0, 1, 1);
  CHECK(row.sizes() == Shape{1, 4});
  check_values<float>(row, {4, 5, 6, 7});
  check_values<float>(t.select(1, 2), {2, 6, 10});
  check_values<float>(t[2], {8, 9, 10, 11});
  CHECK(t.unsqueeze(0).sizes() == Shape{1, 3, 4});
  CHECK(t.unsqueeze(-1).sizes() == Shape{3, 4, 1});
  CHECK(t.unsqueeze(0).squeeze(0).sizes() == Shape{3, 4});
  CHECK(t.view({2, 2, 3}).permute({2, 0, 1}).sizes() == Shape{3, 2, 2});
  CHECK(t.flatten().sizes() == Shape{12});
  CHECK(t.view({-1, 6}).sizes() == Shape{2, 6});
  check_values<float>(ts::tensor<float>({1, 2}, {2, 1}).expand({2, 3}), {1, 1, 1, 2, 2, 2});

  // Writing through a view changes the base.
  {
    ts::Tensor view = t.select(0, 0);
    view.fill_(-1);
  }
  CHECK(t.at<float>({0, 3}) == -1.0f);
  CHECK(t.at<float>({1, 0}) == 4.0f);

  // reshape copies only when it must.
  ts::Tensor r = tt.reshape({12});
  CHECK(r.storage() != t.storage());
  CHECK(t.reshape({4, 3}).storage() == t.storage());
}

TEST_CASE("view errors name the shapes") {
  ts::Tensor t = ts::zeros({3, 4});
  CHECK(error_of([&] { t.view({5, 2}); }).find("[5, 2]") != std::string::npos);
  CHECK(error_of([&] { t.t().view({12}); }).find("use reshape()") != std::string::npos);
  CHECK(error_of([&] { t.narrow(1, 3, 2); }).find("[3, 5)") != std::string::npos);
  CHECK(error_of([&] { t.select(0, 3); }).find("out of bounds") != std::string::npos);
}

TEST_CASE("a 0-d tensor views and reshapes as any shape of one element, as in PyTorch") {
  ts::Tensor scalar = ts::full({}, 7.0, {.dtype = ts::DType::i64});  // BatchNorm's num_batches_tracked
  for (const ts::Shape& shape : std::vector<ts::Shape>{{-1}, {1}, {1, 1}, {-1, 1, 1}, {}}) {
    ts::Tensor view = scalar.view(shape);
    CHECK(view.numel() == 1);
    CHECK(view.dim() == static_cast<int64_t>(shape.size()));
    CHECK(view.storage() == scalar.storage());
    CHECK(view.to_vector<int64_t>() == std::vector<int64_t>{7});
    CHECK(scalar.reshape(shape).to_vector<int64_t>() == std::vector<int64_t>{7});
  }
  CHECK(error_of([&] { scalar.view({2}); }).find("is invalid for a tensor of shape []") != std::string::npos);
  // And back: a one-element view of any shape to 0-d.
  CHECK(ts::zeros({1, 1}).view({}).dim() == 0);
}

TEST_CASE("element-wise ops broadcast") {
  ts::Tensor a = ts::tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  ts::Tensor b = ts::tensor<float>({10, 20, 30}, {3});
  ts::Tensor col = ts::tensor<float>({100, 200}, {2, 1});
  check_values<float>(a + b, {11, 22, 33, 14, 25, 36});
  check_values<float>(a * col, {100, 200, 300, 800, 1000, 1200});
  check_values<float>(b - a, {9, 18, 27, 6, 15, 24});
  check_values<float>(a / 2.0, {0.5, 1, 1.5, 2, 2.5, 3});
  check_values<float>(1.0 - a, {0, -1, -2, -3, -4, -5});
  check_values<float>(6.0 / a, {6, 3, 2, 1.5, 1.2f, 1});
  check_values<float>(-a, {-1, -2, -3, -4, -5, -6});
  check_values<float>(ts::maximum(a, ts::full({}, 3.5)), {3.5, 3.5, 3.5, 4, 5, 6});
  check_values<float>(ts::relu(a - 3.0), {0, 0, 0, 1, 2, 3});
  check_values<float>(a.pow(2.0), {1, 4, 9, 16, 25, 36});
  check_values<float>(ts::exp(ts::zeros({2})), {1, 1});
  check_values<float>(ts::sigmoid(ts::zeros({1})), {0.5});
  CHECK((a > ts::full({}, 3.0)).dtype() == DType::boolean);
  CHECK((a > ts::full({}, 3.0)).to_vector<bool>() == std::vector<bool>{false, false, false, true, true, true});
  CHECK((a == a).to_vector<bool>() == std::vector<bool>(6, true));
  // Non-contiguous operands.
  check_values<float>(a.t() + a.t(), {2, 8, 4, 10, 6, 12});
  // Integer arithmetic.
  check_values<int64_t>(ts::arange(4) * ts::arange(4), {0, 1, 4, 9});
}

TEST_CASE("binary op errors name both sides") {
  ts::Tensor a = ts::zeros({2, 3});
  std::string shapes = error_of([&] { a + ts::zeros({4}); });
  CHECK(shapes.find("[2, 3]") != std::string::npos);
  CHECK(shapes.find("[4]") != std::string::npos);
  std::string dtypes = error_of([&] { a + ts::zeros({2, 3}, {.dtype = DType::f64}); });
  CHECK(dtypes.find("float32") != std::string::npos);
  CHECK(dtypes.find("float64") != std::string::npos);
  std::string matmul = error_of([&] { ts::matmul(ts::zeros({2, 3}), ts::zeros({4, 5})); });
  CHECK(matmul.find("[2, 3]") != std::string::npos);
  CHECK(matmul.find("[4, 5]") != std::string::npos);
}

TEST_CASE("reductions") {
  ts::Tensor a = ts::tensor<float>({1, 5, 3, 4, 2, 6}, {2, 3});
  CHECK(a.sum().item<float>() == 21.0f);
  check_values<float>(a.sum({0}), {5, 7, 9});
  check_values<float>(a.sum({1}), {9, 12});
  CHECK(a.sum({1}, true).sizes() == Shape{2, 1});
  check_values<float>(a.mean({1}), {3, 4});
  CHECK(a.mean().item<float>() == doctest::Approx(3.5));
  CHECK(a.max().item<float>() == 6.0f);
  auto [values, indices] = a.max(1);
  check_values<float>(values, {5, 6});
  check_values<int64_t>(indices, {1, 2});
  check_values<int64_t>(a.argmax(0), {1, 0, 1});
  CHECK(a.argmax().item<int64_t>() == 5);
  check_values<float>(a.amax({0}), {4, 5, 6});
  // A non-contiguous input and a middle dim.
  ts::Tensor b = ts::arange(24, {.dtype = DType::f64}).view({2, 3, 4});
  check_values<double>(b.sum({1}), {12, 15, 18, 21, 48, 51, 54, 57});
  check_values<double>(b.transpose(0, 2).sum({2}), {12, 20, 28, 14, 22, 30, 16, 24, 32, 18, 26, 34});
  check_values<double>(b.sum({0, 2}), {60, 92, 124});
  check_values<int64_t>(ts::arange(5).sum(), {10});
}

TEST_CASE("matmul and linear") {
  ts::Tensor a = ts::tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  ts::Tensor b = ts::tensor<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  check_values<float>(ts::matmul(a, b), {4, 5, 10, 11});
  check_values<float>(ts::matmul(a, a.t()), {14, 32, 32, 77});           // transposed operand
  check_values<float>(ts::matmul(a.t(), a), {17, 22, 27, 22, 29, 36, 27, 36, 45});
  check_values<float>(ts::matmul(a, ts::tensor<float>({1, 1, 1})), {6, 15});  // matrix-vector
  CHECK(ts::matmul(ts::tensor<float>({1, 2}), ts::tensor<float>({3, 4})).item<float>() == 11.0f);
  ts::Tensor batch = ts::stack({a, a * 2.0});
  ts::Tensor out = ts::matmul(batch, b);
  CHECK(out.sizes() == Shape{2, 2, 2});
  check_values<float>(out, {4, 5, 10, 11, 8, 10, 20, 22});
  ts::Tensor w = ts::tensor<float>({1, 0, 0, 0, 1, 0}, {2, 3});
  check_values<float>(ts::linear(a, w, ts::tensor<float>({10, 20})), {11, 22, 14, 25});
}

TEST_CASE("cat and stack") {
  ts::Tensor a = ts::tensor<float>({1, 2}, {1, 2});
  ts::Tensor b = ts::tensor<float>({3, 4, 5, 6}, {2, 2});
  check_values<float>(ts::cat({a, b}, 0), {1, 2, 3, 4, 5, 6});
  check_values<float>(ts::cat({b, b}, 1), {3, 4, 3, 4, 5, 6, 5, 6});
  CHECK(ts::stack({a, a}, 1).sizes() == Shape{1, 2, 2});
  CHECK(error_of([&] { ts::cat({a, ts::zeros({2, 3})}, 0); }).find("[2, 3]") != std::string::npos);
}

TEST_CASE("dtype conversion") {
  ts::Tensor a = ts::tensor<float>({1.5f, -2.25f, 3.0f});
  check_values<double>(a.to(DType::f64), {1.5, -2.25, 3.0});
  check_values<int64_t>(a.to(DType::i64), {1, -2, 3});
  check_values<float>(a.to(DType::bf16).to(DType::f32), {1.5f, -2.25f, 3.0f});
  CHECK(static_cast<float>(ts::BFloat16(1.00390625f)) == 1.0f);  // ties round to even
  CHECK(static_cast<float>(ts::BFloat16(1.01171875f)) == 1.015625f);
  CHECK(ts::tensor<uint8_t>({255}).to(DType::f32).item<float>() == 255.0f);
}

TEST_CASE("Philox matches the published known-answer vectors") {
  // Random123 kat_vectors: philox4x32_10.
  ts::philox::Counter zero = ts::philox::philox4x32_10({{0, 0, 0, 0}}, 0);
  CHECK(zero.word[0] == 0x6627e8d5u);
  CHECK(zero.word[1] == 0xe169c58du);
  CHECK(zero.word[2] == 0xbc57ac4cu);
  CHECK(zero.word[3] == 0x9b00dbd8u);
  ts::philox::Counter ones = ts::philox::philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
                                                       0xffffffffffffffffull);
  CHECK(ones.word[0] == 0x408f276du);
  CHECK(ones.word[1] == 0x41c83b0eu);
  CHECK(ones.word[2] == 0xa20bc7c6u);
  CHECK(ones.word[3] == 0x6d5451fdu);
}

TEST_CASE("random draws are pure functions of seed, stream and index") {
  ts::Generator g1(7), g2(7), g3(8);
  ts::Tensor a = ts::rand({1000}, g1);
  ts::Tensor b = ts::rand({1000}, g2);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(a.to_vector<float>() != ts::rand({1000}, g3).to_vector<float>());
  // The sequence continues: two draws of 500 equal one draw of 1000.
  ts::Generator g4(7);
  ts::Tensor first = ts::rand({500}, g4), second = ts::rand({500}, g4);
  CHECK(ts::cat({first, second}).to_vector<float>() == a.to_vector<float>());
  // Moments.
  CHECK(a.mean().item<float>() == doctest::Approx(0.5).epsilon(0.05));
  CHECK(a.max().item<float>() < 1.0f);
  ts::Generator g5(1);
  ts::Tensor n = ts::randn({20000}, g5, {.dtype = DType::f64});
  CHECK(n.mean().item<double>() == doctest::Approx(0).epsilon(0.02).scale(1));
  CHECK((n * n).mean().item<double>() == doctest::Approx(1).epsilon(0.03));
  ts::Generator g6(3);
  ts::Tensor ints = ts::randint(2, 5, {1000}, g6);
  CHECK(ints.amax({}).item<int64_t>() == 4);
  CHECK(ts::native::amax(ts::neg(ints), {}, false).item<int64_t>() == -2);
  // An init rule fills any slice on its own: slices of a fill equal the fill.
  ts::InitRule rule = ts::InitRule::uniform(-0.5, 0.5);
  std::vector<float> whole(100), tail(40);
  rule.fill(whole.data(), DType::f32, 100, 11, "fc1.weight", 0);
  rule.fill(tail.data(), DType::f32, 40, 11, "fc1.weight", 60);
  CHECK(std::vector<float>(whole.begin() + 60, whole.end()) == tail);
}

TEST_CASE("dropout masks depend on the global row, not on the batch split") {
  ts::Generator gen(0);
  ts::Tensor x = ts::ones({8, 50});
  ts::native::DropoutKey key{.seed = 5, .stream = 9, .step = 3, .first_row = 0};
  auto [full, mask] = ts::native::dropout(x, 0.5, key);
  ts::native::DropoutKey tail_key = key;
  tail_key.first_row = 5;
  auto [tail, tail_mask] = ts::native::dropout(x.narrow(0, 5, 3), 0.5, tail_key);
  CHECK(full.narrow(0, 5, 3).contiguous().to_vector<float>() == tail.to_vector<float>());
  double kept = mask.to(DType::f64).mean().item<double>();
  CHECK(kept == doctest::Approx(0.5).epsilon(0.1));
  // Kept elements are scaled by 1 / (1 - p).
  CHECK(full.amax({}).item<float>() == 2.0f);
  key.step = 4;
  auto [other, other_mask] = ts::native::dropout(x, 0.5, key);
  CHECK(other.to_vector<float>() != full.to_vector<float>());
}

TEST_CASE("the allocator counts current and peak bytes") {
  ts::MemoryStats before = ts::memory_stats();
  ts::reset_peak_memory();
  {
    ts::Tensor a = ts::empty({1024}, {.dtype = DType::f64});
    ts::MemoryStats during = ts::memory_stats();
    CHECK(during.current_bytes - before.current_bytes == 8192);
    {
      ts::Tensor b = ts::empty({256});
      CHECK(ts::memory_stats().peak_bytes - before.current_bytes == 8192 + 1024);
    }
  }
  CHECK(ts::memory_stats().current_bytes == before.current_bytes);
  CHECK(ts::memory_stats().peak_bytes - before.current_bytes == 8192 + 1024);
  // A storage can be released and re-allocated while views keep it alive.
  ts::Tensor buffer = ts::zeros({100});
  ts::Tensor view = buffer.narrow(0, 10, 5);
  int64_t held = ts::memory_stats().current_bytes;
  buffer.storage()->resize(0);
  CHECK(ts::memory_stats().current_bytes == held - 400);
  CHECK(error_of([&] { view.to_vector<float>(); }).find("no memory") != std::string::npos);
  buffer.storage()->resize(400);
  view.fill_(3);
  CHECK(buffer.at<float>({12}) == 3.0f);
}

TEST_CASE("pin_memory copies into the pinned allocator, counted apart from the CPU's") {
  ts::Tensor t = ts::arange(6, {.dtype = DType::f64}).view({2, 3});
  CHECK_FALSE(t.is_pinned());
  const int64_t cpu_before = ts::memory_stats().current_bytes;
  const int64_t pinned_before = ts::pinned_memory_stats().current_bytes;
  ts::Tensor pinned = t.pin_memory();
  CHECK(pinned.is_pinned());
  CHECK(pinned.device() == ts::Device::cpu());
  CHECK(pinned.to_vector<double>() == t.to_vector<double>());
  CHECK(ts::pinned_memory_stats().current_bytes - pinned_before == 48);
  CHECK(ts::memory_stats().current_bytes == cpu_before);
  CHECK(pinned.pin_memory().is_same(pinned));  // already pinned: itself
  CHECK_FALSE((pinned * 2.0).is_pinned());     // results of ops are ordinary memory, as in PyTorch
  CHECK_FALSE(pinned.clone().is_pinned());
  pinned = ts::Tensor();
  CHECK(ts::pinned_memory_stats().current_bytes == pinned_before);
}

TEST_CASE("deferred storage materialises on first use with its init rule") {
  ts::PendingInit pending{ts::InitRule::uniform(-1, 1), DType::f32, "layer.weight", 3};
  auto storage = std::make_shared<ts::Storage>(40, ts::Device::cpu(), pending);
  int64_t before = ts::memory_stats().current_bytes;
  CHECK(storage->is_deferred());
  auto impl = std::make_shared<ts::TensorImpl>();
  impl->storage = storage;
  impl->sizes = {10};
  impl->strides = {1};
  ts::Tensor t(impl);
  std::vector<float> values = t.to_vector<float>();
  CHECK_FALSE(storage->is_deferred());
  CHECK(ts::memory_stats().current_bytes == before + 40);
  std::vector<float> expected(10);
  ts::InitRule::uniform(-1, 1).fill(expected.data(), DType::f32, 10, 3, "layer.weight", 0);
  CHECK(values == expected);
}

TEST_CASE("thread count is settable") {
  int previous = ts::get_num_threads();
  ts::set_num_threads(1);
  CHECK(ts::get_num_threads() == 1);
  ts::set_num_threads(previous);
  CHECK_THROWS_AS(ts::set_num_threads(0), ts::ValueError);
}

TEST_CASE("devices") {
  CHECK(ts::Device::parse("cuda:1") == ts::Device::cuda(1));
  CHECK(ts::Device::parse("cpu").is_cpu());
  CHECK_THROWS_AS(ts::Device::parse("tpu"), ts::ValueError);
#if !TESSERA_HAS_CUDA
  CHECK_THROWS_AS(ts::zeros({2}, {.device = ts::Device::cuda()}), ts::NotCompiledError);
#endif
}
