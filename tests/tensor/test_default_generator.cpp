// The default generator (random.h): ts::manual_seed and the draws that take no Generator.
// Every case that draws from it seeds it first, so the cases run in any order.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include <tessera/tessera.h>

namespace ts = tessera;
using ts::Tensor;

TEST_CASE("manual_seed: rand, randn, randint and multinomial repeat, and continue the default generator's sequence") {
  ts::manual_seed(42);
  CHECK(ts::initial_seed() == 42);
  Tensor u = ts::rand({5}), n = ts::randn({2, 3}, {.dtype = ts::DType::f64}), k = ts::randint(0, 7, {4});
  Tensor m = ts::multinomial(ts::tensor<float>({1, 2, 3, 4}), 3);
  CHECK(ts::get_rng_state().offset() == 5 + 6 + 4 + 4);  // without replacement: one draw per category

  // The same numbers as an explicit Generator(42) drawing in the same order.
  ts::Generator explicit_generator(42);
  CHECK(ts::rand({5}, explicit_generator).to_vector<float>() == u.to_vector<float>());
  CHECK(ts::randn({2, 3}, explicit_generator, {.dtype = ts::DType::f64}).to_vector<double>() == n.to_vector<double>());
  CHECK(ts::randint(0, 7, {4}, explicit_generator).to_vector<int64_t>() == k.to_vector<int64_t>());
  CHECK(ts::tensor<float>({1, 2, 3, 4}).multinomial(3, false, explicit_generator).to_vector<int64_t>() ==
        m.to_vector<int64_t>());

  // Seeding again repeats the run; an explicit Generator does not move the default one.
  ts::manual_seed(42);
  ts::Generator other(7);
  (void)ts::rand({100}, other);
  CHECK(ts::get_rng_state().offset() == 0);
  CHECK(ts::rand({5}).to_vector<float>() == u.to_vector<float>());
}

TEST_CASE("get_rng_state / set_rng_state save and restore the default generator's position") {
  ts::manual_seed(3);
  (void)ts::rand({10});
  const ts::Generator saved = ts::get_rng_state();
  Tensor next = ts::rand({4});
  ts::set_rng_state(saved);
  CHECK(ts::rand({4}).to_vector<float>() == next.to_vector<float>());
}

TEST_CASE("the *_like draws take shape, dtype and device from their argument") {
  ts::manual_seed(5);
  Tensor like = ts::zeros({2, 2}, {.dtype = ts::DType::f64});
  Tensor u = ts::rand_like(like), n = ts::randn_like(like), k = ts::randint_like(like, 0, 3);
  CHECK(u.sizes() == like.sizes());
  CHECK(u.dtype() == ts::DType::f64);
  CHECK(n.dtype() == ts::DType::f64);
  CHECK(k.dtype() == ts::DType::f64);
  for (double value : k.to_vector<double>()) CHECK((value == 0 || value == 1 || value == 2));
}

TEST_CASE("draws from several threads take disjoint parts of the sequence") {
  ts::manual_seed(9);
  constexpr int kThreads = 4, kDraws = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kDraws; ++i) (void)ts::rand({3});
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(ts::get_rng_state().offset() == uint64_t{kThreads} * kDraws * 3);
}

TEST_CASE("a module built after manual_seed(s) is initialised as reset_parameters(s) initialises it") {
  ts::manual_seed(11);
  ts::nn::Linear seeded(4, 3);
  ts::manual_seed(0);
  ts::nn::Linear reset(4, 3);
  reset.reset_parameters(11);
  CHECK(seeded.weight.to_vector<float>() == reset.weight.to_vector<float>());
  CHECK(seeded.bias.to_vector<float>() == reset.bias.to_vector<float>());
  ts::nn::Linear unseeded(4, 3);  // seed 0 again
  CHECK(unseeded.weight.to_vector<float>() != seeded.weight.to_vector<float>());
}
