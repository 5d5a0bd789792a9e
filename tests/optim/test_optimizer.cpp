// Optimizers without PyTorch: hand-computed steps, option checks, skipped parameters,
// zero_grad, padded flat shards, thread-count independence, state dict round trips,
// StepLR's chained learning rate, parameter groups (defaults, checks, per-group steps and
// state dicts) and the schedulers' argument checks. (test_optim_golden.cpp and
// test_param_groups_golden.cpp compare with PyTorch itself.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace optim = tessera::optim;
using ts::DType;

namespace {

ts::Tensor leaf(const std::vector<double>& values) {
  return ts::tensor<double>(values).requires_grad_();
}

void set_grad(ts::Tensor& param, const std::vector<double>& values) {
  param.set_grad(ts::tensor<double>(values).reshape(param.sizes()).to(param.dtype()));
}

bool bitwise_equal(const ts::Tensor& a, const ts::Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  ts::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Every optimizer configuration the generic tests run, built over `params`.
using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<ts::Tensor>)>;
std::vector<std::pair<std::string, Factory>> all_optimizers() {
  return {
      {"SGD", [](auto p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1}); }},
      {"SGD momentum+wd",
       [](auto p) {
         return std::make_unique<optim::SGD>(
             p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
       }},
      {"SGD nesterov+wd",
       [](auto p) {
         return std::make_unique<optim::SGD>(
             p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
       }},
      {"Adam", [](auto p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01}); }},
      {"Adam amsgrad+wd",
       [](auto p) {
         return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
       }},
      {"AdamW", [](auto p) { return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.weight_decay = 0.1}); }},
      {"Adadelta", [](auto p) { return std::make_unique<optim::Adadelta>(p); }},
      {"Adadelta wd", [](auto p) { return std::make_unique<optim::Adadelta>(p, optim::AdadeltaOptions{.weight_decay = 0.1}); }},
  };
}

}  // namespace

TEST_CASE("SGD with momentum and Nesterov momentum, computed by hand in float64") {
  // p = 1, g = 0.5 then 0.25; momentum 0.9, lr 0.1.
  ts::Tensor p = leaf({1.0});
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, {0.5});
  sgd.step();  // b = 0.5, p = 1 - 0.05
  CHECK(p.item<double>() == std::fma(0.5, -0.1, 1.0));
  CHECK(sgd.state(0).at("momentum_buffer").item<double>() == 0.5);
  set_grad(p, {0.25});
  sgd.step();  // b = 0.9 * 0.5 + 0.25 = 0.7
  const double b = std::fma(0.25, 1.0, 0.5 * 0.9);
  CHECK(sgd.state(0).at("momentum_buffer").item<double>() == b);
  CHECK(p.item<double>() == std::fma(b, -0.1, std::fma(0.5, -0.1, 1.0)));

  ts::Tensor q = leaf({1.0});
  optim::SGD nesterov({q}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  set_grad(q, {0.5});
  nesterov.step();  // b = 0.5, d = 0.5 + 0.9 * 0.5
  CHECK(q.item<double>() == std::fma(std::fma(0.5, 0.9, 0.5), -0.1, 1.0));
}

TEST_CASE("Adam's first step moves each element by about lr") {
  // With bias correction, m_hat = g and v_hat = g^2 after one step, so p -= lr * sign(g).
  ts::Tensor p = leaf({1.0, -2.0, 3.0});
  optim::Adam adam({p}, {.lr = 0.01});
  set_grad(p, {4.0, -0.5, 1e-3});
  adam.step();
  const auto values = p.to_vector<double>();
  CHECK(values[0] == doctest::Approx(0.99).epsilon(1e-7));
  CHECK(values[1] == doctest::Approx(-1.99).epsilon(1e-7));
  CHECK(values[2] == doctest::Approx(2.99).epsilon(1e-4));  // eps matters for tiny gradients
  CHECK(adam.state(0).at("step").item<double>() == 1.0);
  CHECK(adam.state(0).at("step").dtype() == DType::f64);
}

TEST_CASE("options are checked with messages naming the value") {
  ts::Tensor p = leaf({1.0});
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {}), doctest::Contains("lr is required"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::SGD({p}), "SGD: lr is required (as in PyTorch): SGD(params, {.lr = 0.01}), or in every "
                       "group's options", ts::ValueError);
  CHECK(optim::SGD({p}, {.lr = 0.1}).type_name() == "SGD");
  CHECK(optim::Adam({p}).type_name() == "Adam");
  CHECK(optim::AdamW({p}).type_name() == "AdamW");
  CHECK(optim::Adadelta({p}).type_name() == "Adadelta");
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = -0.1}), doctest::Contains("invalid learning rate -0.1"),
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = 0.1, .momentum = -1}), doctest::Contains("momentum"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), doctest::Contains("Nesterov"),
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .nesterov = true}),
                       doctest::Contains("zero dampening"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::Adam({p}, {.betas = {1.0, 0.999}}), doctest::Contains("beta1"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::Adam({p}, {.betas = {0.9, -0.1}}), doctest::Contains("beta2"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::Adam({p}, {.eps = -1}), doctest::Contains("eps"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::AdamW({p}, {.weight_decay = -1}), doctest::Contains("AdamW: invalid weight_decay"),
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::Adadelta({p}, {.rho = 1.5}), doctest::Contains("rho"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::Adadelta(std::vector<ts::Tensor>{}), doctest::Contains("empty parameter list"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::Adadelta({p, p}, {}), doctest::Contains("same tensor"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::Adadelta({p * 2.0}, {}), doctest::Contains("not a leaf"), ts::ValueError);
  CHECK_THROWS_AS(optim::Adadelta({ts::tensor<int64_t>({1, 2})}, {}), ts::DTypeError);

  optim::SGD sgd({p}, {.lr = 0.1});
  CHECK_THROWS_AS(sgd.set_lr(-1.0), ts::ValueError);
  CHECK(sgd.lr() == 0.1);  // a refused value leaves the old one
  sgd.set_lr(0.5);
  CHECK(sgd.options().lr == 0.5);
}

TEST_CASE("step skips parameters without a gradient; zero_grad drops or zeroes gradients") {
  for (const auto& [name, make] : all_optimizers()) {
    CAPTURE(name);
    ts::Tensor a = leaf({1.0, 2.0}), b = leaf({3.0});
    auto opt = make({a, b});
    set_grad(a, {0.5, -0.5});
    opt->step();
    CHECK(b.item<double>() == 3.0);
    CHECK(opt->state(1).empty());
    CHECK(a.to_vector<double>() != std::vector<double>{1.0, 2.0});

    opt->zero_grad(/*set_to_none=*/false);
    REQUIRE(a.grad().defined());
    CHECK(a.grad().to_vector<double>() == std::vector<double>{0.0, 0.0});
    CHECK_FALSE(b.grad().defined());
    opt->zero_grad();
    CHECK_FALSE(a.grad().defined());
  }
}

TEST_CASE("the update checks the gradient and the parameter's layout") {
  ts::Tensor p = ts::zeros({2, 3}).requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.1});
  ts::Tensor strided = ts::zeros({3, 2}).t().requires_grad_();  // a leaf view that is not contiguous
  optim::SGD strided_sgd({strided}, {.lr = 0.1});
  strided.set_grad(ts::ones({2, 3}));
  CHECK_THROWS_WITH_AS(strided_sgd.step(), doctest::Contains("must be contiguous"), ts::ValueError);
  // A non-contiguous gradient is fine (it is read through a contiguous copy).
  p.set_grad(ts::ones({3, 2}).t());
  sgd.step();
  CHECK(p.to_vector<float>() == std::vector<float>(6, -0.1f));
}

TEST_CASE("zero padding of a flat shard stays exactly zero under every optimizer") {
  // FSDP pads the last rank's flat shard with zeros whose gradients are zero: weight decay,
  // momentum and adaptive denominators must keep them at zero, step after step.
  const int64_t used = 37, padded = 48;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const auto& [name, make] : all_optimizers()) {
      CAPTURE(name);
      CAPTURE(dtype);
      ts::Generator gen(7);
      ts::Tensor values = ts::randn({used}, gen, {.dtype = dtype});
      ts::Tensor p = ts::cat({values, ts::zeros({padded - used}, {.dtype = dtype})}).detach().requires_grad_();
      auto opt = make({p});
      for (int step = 0; step < 100; ++step) {
        ts::Tensor grad = ts::cat({ts::randn({used}, gen, {.dtype = dtype}), ts::zeros({padded - used}, {.dtype = dtype})});
        p.set_grad(grad);
        opt->step();
      }
      const auto out = p.to_vector<double>();
      bool tail_zero = true, head_moved = false;
      for (int64_t i = used; i < padded; ++i) tail_zero = tail_zero && out[i] == 0.0 && !std::signbit(out[i]);
      for (int64_t i = 0; i < used; ++i) head_moved = head_moved || out[i] != values.to_vector<double>()[i];
      CHECK(tail_zero);
      CHECK(head_moved);
    }
  }
}

TEST_CASE("a large parameter (threaded loop) updates exactly as the same values in small pieces") {
  // Elements never interact, so the OpenMP split cannot change a bit: one 100000-element
  // parameter must match ten 10000-element parameters (below the threading threshold).
  const int64_t n = 100000, pieces = 10;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const auto& [name, make] : all_optimizers()) {
      CAPTURE(name);
      ts::Generator gen(11);
      ts::Tensor init = ts::randn({n}, gen, {.dtype = dtype});
      ts::Tensor big = init.clone().requires_grad_();
      std::vector<ts::Tensor> small;
      for (int64_t k = 0; k < pieces; ++k) small.push_back(init.narrow(0, k * (n / pieces), n / pieces).clone().requires_grad_());
      auto big_opt = make({big});
      auto small_opt = make(small);
      for (int step = 0; step < 3; ++step) {
        ts::Tensor grad = ts::randn({n}, gen, {.dtype = dtype});
        big.set_grad(grad);
        for (int64_t k = 0; k < pieces; ++k) small[k].set_grad(grad.narrow(0, k * (n / pieces), n / pieces).contiguous());
        big_opt->step();
        small_opt->step();
      }
      CHECK(bitwise_equal(big.detach(), ts::cat(small).detach()));
    }
  }
}

TEST_CASE("state_dict has the documented keys and a reload continues bit for bit") {
  for (const auto& [name, make] : all_optimizers()) {
    CAPTURE(name);
    ts::Generator gen(3);
    ts::Tensor a = ts::randn({4, 3}, gen).requires_grad_(), b = ts::randn({5}, gen).requires_grad_();
    auto opt = make({a, b});
    for (int step = 0; step < 3; ++step) {
      a.set_grad(ts::randn({4, 3}, gen));
      if (step != 1) b.set_grad(ts::randn({5}, gen));
      opt->step();
    }
    ts::StateDict saved = opt->state_dict();
    CHECK(saved.at("param_groups.0.lr").dtype() == DType::f64);
    CHECK(saved.at("param_groups.0.lr").dim() == 0);
    CHECK(saved.at("param_groups.0.lr").item<double>() == opt->lr());
    CHECK(saved.at("param_groups.0.params").to_vector<int64_t>() == std::vector<int64_t>{0, 1});

    // A second optimizer over copies of the parameters, restored from the state dict,
    // continues exactly as the first.
    ts::Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
    auto restored = make({a2, b2});
    restored->set_lr(123.0);  // overwritten by the load, as PyTorch's param_groups are
    restored->load_state_dict(saved);
    CHECK(restored->lr() == opt->lr());
    for (int step = 0; step < 2; ++step) {
      ts::Tensor ga = ts::randn({4, 3}, gen), gb = ts::randn({5}, gen);
      a.set_grad(ga);
      b.set_grad(gb);
      a2.set_grad(ga.clone());
      b2.set_grad(gb.clone());
      opt->step();
      restored->step();
    }
    CHECK(bitwise_equal(a.detach(), a2.detach()));
    CHECK(bitwise_equal(b.detach(), b2.detach()));
    for (const auto& [key, value] : opt->state_dict()) {
      CAPTURE(key);
      CHECK(bitwise_equal(value, restored->state_dict().at(key)));
    }
  }
}

TEST_CASE("Adam's state dict names its state as PyTorch does") {
  ts::Tensor a = ts::zeros({2}).requires_grad_();
  optim::Adam adam({a}, {.amsgrad = true});
  a.set_grad(ts::ones({2}));
  adam.step();
  CHECK(adam.state_dict().keys() ==
        std::vector<std::string>{"param_groups.0.lr", "param_groups.0.betas", "param_groups.0.eps",
                                 "param_groups.0.weight_decay", "param_groups.0.amsgrad", "param_groups.0.maximize",
                                 "param_groups.0.params", "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq",
                                 "state.0.max_exp_avg_sq"});
  CHECK(adam.state_dict().at("param_groups.0.betas").to_vector<double>() == std::vector<double>{0.9, 0.999});
  CHECK(adam.state_dict().at("param_groups.0.amsgrad").item<double>() == 1.0);
}

TEST_CASE("load_state_dict refuses bad state and leaves the optimizer unchanged") {
  ts::Tensor a = ts::zeros({3}).requires_grad_();
  optim::Adam adam({a}, {.lr = 0.5});
  a.set_grad(ts::ones({3}));
  adam.step();
  const ts::StateDict good = adam.state_dict();
  auto modified = [&](const std::function<void(ts::StateDict&)>& change) {
    ts::StateDict copy = good;
    change(copy);
    return copy;
  };

  CHECK_THROWS_WITH_AS(adam.load_state_dict(modified([](auto& s) { s.erase("param_groups.0.eps"); })),
                       doctest::Contains("missing keys param_groups.0.eps"), ts::ValueError);
  CHECK_THROWS_WITH_AS(
      adam.load_state_dict(modified([](auto& s) { s.insert("param_groups.0.momentum", ts::zeros({})); })),
      doctest::Contains("unexpected keys param_groups.0.momentum"), ts::ValueError);
  CHECK_THROWS_WITH_AS(adam.load_state_dict(modified([](auto& s) { s.insert("state.0.exp_avg", ts::zeros({4})); })),
                       doctest::Contains("'state.0.exp_avg' is Tensor[4]"), ts::ValueError);
  CHECK_THROWS_WITH_AS(adam.load_state_dict(modified([](auto& s) { s.insert("state.1.exp_avg", ts::zeros({3})); })),
                       doctest::Contains("unexpected key 'state.1.exp_avg'"), ts::ValueError);
  CHECK_THROWS_WITH_AS(adam.load_state_dict(modified([](auto& s) { s.erase("state.0.exp_avg_sq"); })),
                       doctest::Contains("missing key 'state.0.exp_avg_sq'"), ts::ValueError);
  CHECK_THROWS_WITH_AS(
      adam.load_state_dict(modified([](auto& s) { s.insert("param_groups.0.params", ts::arange(2)); })),
      doctest::Contains("parameter group 0 of the state dict has 2 parameters but this optimizer's has 1"), ts::ValueError);
  // Valid keys but an invalid hyper-parameter: refused, and nothing changes.
  CHECK_THROWS_WITH_AS(
      adam.load_state_dict(modified([](auto& s) { s.insert("param_groups.0.lr", ts::full({}, -1.0)); })),
      doctest::Contains("invalid learning rate -1"), ts::ValueError);
  // Turning amsgrad on without its state is refused too.
  CHECK_THROWS_WITH_AS(
      adam.load_state_dict(modified([](auto& s) { s.insert("param_groups.0.amsgrad", ts::full({}, 1.0)); })),
      doctest::Contains("missing key 'state.0.max_exp_avg_sq'"), ts::ValueError);
  CHECK(adam.lr() == 0.5);
  CHECK_FALSE(adam.options().amsgrad);
  CHECK(adam.state(0).at("step").item<double>() == 1.0);

  // Loaded state is converted to the parameter's dtype and owned by the optimizer.
  ts::StateDict f64_state = modified([](auto& s) { s.insert("state.0.exp_avg", ts::full({3}, 0.25, {.dtype = DType::f64})); });
  adam.load_state_dict(f64_state);
  CHECK(adam.state(0).at("exp_avg").dtype() == DType::f32);
  f64_state.at("state.0.exp_avg").fill_(9.0);
  CHECK(adam.state(0).at("exp_avg").to_vector<float>() == std::vector<float>(3, 0.25f));
}

TEST_CASE("StepLR multiplies the learning rate by gamma every step_size epochs, chained as PyTorch") {
  ts::Tensor p = leaf({1.0});
  optim::SGD sgd({p}, {.lr = 0.1});
  optim::StepLR scheduler(sgd, /*step_size=*/2, /*gamma=*/0.7);
  CHECK(scheduler.get_last_lr() == std::vector<double>{0.1});
  CHECK(scheduler.last_epoch() == 0);
  std::vector<double> lrs;
  for (int epoch = 1; epoch <= 7; ++epoch) {
    scheduler.step();
    lrs.push_back(scheduler.get_last_lr()[0]);
    CHECK(sgd.lr() == scheduler.get_last_lr()[0]);
  }
  const double once = 0.1 * 0.7, twice = once * 0.7, thrice = twice * 0.7;
  CHECK(lrs == std::vector<double>{0.1, once, once, twice, twice, thrice, thrice});
  // The chained product differs in its last bit from the closed form 0.1 * 0.7^3 here;
  // PyTorch's step() uses the chained one (0.0343 as Python prints it).
  CHECK(thrice == 0.0343);
  CHECK(thrice != 0.1 * std::pow(0.7, 3));

  // Its state restores the schedule in a fresh scheduler.
  optim::SGD other({leaf({1.0})}, {.lr = 0.1});
  optim::StepLR resumed(other, 5);
  resumed.load_state_dict(scheduler.state_dict());
  other.set_lr(scheduler.get_last_lr()[0]);
  scheduler.step();
  resumed.step();
  CHECK(resumed.get_last_lr() == scheduler.get_last_lr());
  CHECK(resumed.last_epoch() == 8);
  CHECK(resumed.step_size() == 2);
  CHECK_THROWS_AS(optim::StepLR(sgd, 0), ts::ValueError);
}

TEST_CASE("parameter groups take the defaults for what they leave unset, as PyTorch's param_groups") {
  ts::Tensor w = leaf({1.0, 2.0}), b = leaf({3.0}), head = leaf({4.0});
  optim::AdamW adamw({{{w}, {.weight_decay = 0.1}}, {{b}, {.lr = 0.5, .betas = {0.8, 0.9}}}}, {.lr = 0.01, .eps = 1e-6});
  REQUIRE(adamw.param_group_count() == 2);
  CHECK(adamw.options(0).lr == 0.01);
  CHECK(adamw.options(0).weight_decay == 0.1);
  CHECK(adamw.options(0).eps == 1e-6);
  CHECK(adamw.options(1).lr == 0.5);
  CHECK(adamw.options(1).weight_decay == 0.01);  // AdamW's default
  CHECK(adamw.options(1).betas == std::array<double, 2>{0.8, 0.9});
  adamw.add_param_group({{head}, {.amsgrad = true}});
  CHECK(adamw.options(2).amsgrad);
  CHECK(adamw.options(2).lr == 0.01);
  CHECK(adamw.params().size() == 3);
  CHECK(adamw.params(2).front().is_same(head));

  // Rates per group: set_lr(g, x) one, set_lr(x) all, as a loop over param_groups does.
  adamw.set_lr(1, 0.25);
  CHECK(adamw.lr(0) == 0.01);
  CHECK(adamw.lr(1) == 0.25);
  adamw.set_lr(0.125);
  for (size_t g = 0; g < 3; ++g) CHECK(adamw.lr(g) == 0.125);
  CHECK_THROWS_AS(adamw.set_lr(3, 0.1), ts::IndexError);

  // The state dict numbers the parameters across groups, as PyTorch.
  ts::StateDict state = adamw.state_dict();
  CHECK(state.at("param_groups.0.params").to_vector<int64_t>() == std::vector<int64_t>{0});
  CHECK(state.at("param_groups.1.params").to_vector<int64_t>() == std::vector<int64_t>{1});
  CHECK(state.at("param_groups.2.params").to_vector<int64_t>() == std::vector<int64_t>{2});
  CHECK(state.at("param_groups.1.betas").to_vector<double>() == std::vector<double>{0.8, 0.9});
  CHECK(state.at("param_groups.2.amsgrad").item<double>() == 1.0);
  CHECK_FALSE(state.contains("param_groups.0.initial_lr"));
  optim::StepLR scheduler(adamw, 1);  // records initial_lr, as PyTorch's schedulers do
  CHECK(adamw.state_dict().at("param_groups.2.initial_lr").item<double>() == 0.125);
}

TEST_CASE("groups are checked: each parameter once, every group's values valid, lr required for SGD") {
  ts::Tensor a = leaf({1.0}), b = leaf({2.0});
  CHECK_THROWS_WITH_AS(optim::SGD({{{a}, {}}, {{b}, {}}}, {}), doctest::Contains("lr is required"), ts::ValueError);
  optim::SGD every_group_has_one({{{a}, {.lr = 0.1}}, {{b}, {.lr = 0.2}}}, {});  // as PyTorch: fine
  CHECK(every_group_has_one.lr(1) == 0.2);
  CHECK_THROWS_WITH_AS(optim::SGD({{{a}, {}}, {{a}, {}}}, {.lr = 0.1}), doctest::Contains("parameters 0 and 1 are the same tensor"),
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::Adam({{{a}, {}}, {{b}, {.betas = {1.5, 0.9}}}}), doctest::Contains("invalid beta1 1.5"),
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::SGD({{{a}, {}}, {{b}, {.nesterov = true}}}, {.lr = 0.1}), doctest::Contains("Nesterov"),
                       ts::ValueError);
  optim::Adadelta adadelta({a});
  CHECK_THROWS_WITH_AS(adadelta.add_param_group({{a}}), doctest::Contains("same tensor"), ts::ValueError);
  CHECK_THROWS_AS(adadelta.add_param_group({{b}, {.rho = 2.0}}), ts::ValueError);
  CHECK(adadelta.param_group_count() == 1);  // refused groups leave nothing behind
  CHECK(adadelta.params().size() == 1);
  CHECK_THROWS_WITH_AS(adadelta.options(1), doctest::Contains("no parameter group 1"), ts::IndexError);
}

TEST_CASE("each group steps with its own hyper-parameters, and only its state slots") {
  // SGD: momentum in group 0 only; the same gradients give each group's own formula.
  ts::Tensor a = leaf({1.0}), b = leaf({1.0});
  optim::SGD sgd({{{a}, {.momentum = 0.9}}, {{b}, {.lr = 0.5}}}, {.lr = 0.1});
  for (int step = 0; step < 2; ++step) {
    set_grad(a, {0.5});
    set_grad(b, {0.5});
    sgd.step();
  }
  const double b0 = 0.5, b1 = std::fma(0.5, 1.0, b0 * 0.9);
  CHECK(a.item<double>() == std::fma(b1, -0.1, std::fma(b0, -0.1, 1.0)));
  CHECK(b.item<double>() == std::fma(0.5, -0.5, std::fma(0.5, -0.5, 1.0)));
  CHECK(sgd.state(0).contains("momentum_buffer"));
  CHECK(sgd.state(1).empty());

  // Adam: amsgrad in group 1 only; a state dict from it loads, one that turns it on in
  // group 0 too without its state is refused.
  ts::Tensor c = leaf({1.0}), d = leaf({1.0});
  optim::Adam adam({{{c}, {}}, {{d}, {.amsgrad = true}}});
  set_grad(c, {1.0});
  set_grad(d, {1.0});
  adam.step();
  CHECK_FALSE(adam.state(0).contains("max_exp_avg_sq"));
  CHECK(adam.state(1).contains("max_exp_avg_sq"));
  ts::StateDict saved = adam.state_dict();
  adam.load_state_dict(saved);
  saved.insert("param_groups.0.amsgrad", ts::full({}, 1.0, {.dtype = DType::f64}));
  CHECK_THROWS_WITH_AS(adam.load_state_dict(saved), doctest::Contains("missing key 'state.0.max_exp_avg_sq'"),
                       ts::ValueError);
  CHECK_FALSE(adam.options(0).amsgrad);  // unchanged by the refused load
}

TEST_CASE("load_state_dict checks the groups: their number and sizes, as PyTorch does") {
  ts::Tensor a = leaf({1.0}), b = leaf({2.0}), c = leaf({3.0});
  optim::SGD two({{{a}, {}}, {{b, c}, {.lr = 0.2}}}, {.lr = 0.1});
  optim::SGD one({a, b, c}, {.lr = 0.1});
  optim::SGD swapped({{{a, b}, {}}, {{c}, {}}}, {.lr = 0.1});
  CHECK_THROWS_WITH_AS(one.load_state_dict(two.state_dict()),
                       doctest::Contains("the state dict has 2 parameter group(s) but this optimizer has 1"), ts::ValueError);
  CHECK_THROWS_WITH_AS(swapped.load_state_dict(two.state_dict()),
                       doctest::Contains("parameter group 0 of the state dict has 1 parameters but this optimizer's has 2"),
                       ts::ValueError);
  optim::SGD same({{{a}, {}}, {{b, c}, {}}}, {.lr = 0.7});
  same.load_state_dict(two.state_dict());
  CHECK(same.lr(0) == 0.1);
  CHECK(same.lr(1) == 0.2);
}

TEST_CASE("schedulers check their arguments as PyTorch does, and rates follow every group") {
  ts::Tensor a = leaf({1.0}), b = leaf({1.0});
  optim::SGD sgd({{{a}, {}}, {{b}, {.lr = 0.05}}}, {.lr = 0.1});
  CHECK_THROWS_WITH_AS(optim::LinearLR(sgd, {.start_factor = 0.0}), doctest::Contains("start_factor 0 must be in (0, 1]"),
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::LinearLR(sgd, {.end_factor = 1.5}), doctest::Contains("end_factor"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::CosineAnnealingLR(sgd, 0), doctest::Contains("T_max must be positive"), ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::CosineAnnealingLR(sgd, 4, std::nan("")),
                       "CosineAnnealingLR: eta_min must be finite and >= 0, got nan", ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::StepLR(sgd, 2, -0.5), "StepLR: gamma must be finite and >= 0, got -0.5", ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::LinearLR(sgd, {.total_iters = 0}), "LinearLR: total_iters must be positive, got 0",
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::LambdaLR(sgd, std::vector<optim::LambdaLR::Lambda>{[](int64_t) { return 1.0; }}),
                       doctest::Contains("expected 2 lr_lambdas (one per parameter group), but got 1"), ts::ValueError);
  ts::Tensor c = leaf({1.0});
  optim::SGD fresh({c}, {.lr = 0.1});
  CHECK_THROWS_WITH_AS(optim::StepLR(fresh, 2, 0.5, /*last_epoch=*/4), doctest::Contains("param 'initial_lr' is not specified"),
                       ts::ValueError);

  optim::LinearLR warmup(sgd, {.start_factor = 0.5, .total_iters = 2});
  optim::CosineAnnealingLR cosine(sgd, 4);
  optim::SGD other({c}, {.lr = 0.1});
  optim::StepLR elsewhere(other, 1);
  CHECK_THROWS_WITH_AS(optim::SequentialLR(sgd, {warmup, elsewhere}, {2}), doctest::Contains("belongs to another"),
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(optim::SequentialLR(sgd, {warmup, cosine}, {2, 3}),
                       doctest::Contains("one more scheduler than milestones"), ts::ValueError);
  optim::SequentialLR schedule(sgd, {warmup, cosine}, {2});
  CHECK(schedule.get_last_lr() == std::vector<double>{0.05, 0.025});  // epoch 0: start_factor times each group's
  schedule.step();
  schedule.step();  // the milestone: cosine starts at its base
  CHECK(schedule.get_last_lr() == std::vector<double>{0.1, 0.05});

  // A scheduler's state from a schedule of another shape is refused, naming the key.
  optim::StepLR step_lr(other, 2);
  ts::StateDict state = step_lr.state_dict();
  state.erase("gamma");
  CHECK_THROWS_WITH_AS(step_lr.load_state_dict(state), doctest::Contains("missing key 'gamma'"), ts::ValueError);
  CHECK_THROWS_WITH_AS(step_lr.load_state_dict(cosine.state_dict()), doctest::Contains("unexpected key 'T_max'"),
                       ts::ValueError);
  CHECK(step_lr.step_size() == 2);
  // Settings out of range are refused with the constructor's message, and none is kept.
  ts::StateDict bad = step_lr.state_dict();
  bad.insert("gamma", ts::full({}, 0.5, {.dtype = DType::f64}));
  bad.insert("step_size", ts::full({}, 0.0, {.dtype = DType::i64}));
  CHECK_THROWS_WITH_AS(step_lr.load_state_dict(bad), doctest::Contains("StepLR.load_state_dict: step_size must be positive"),
                       ts::ValueError);
  CHECK(step_lr.step_size() == 2);
  CHECK(step_lr.gamma() == 0.1);
  CHECK(step_lr.state_dict().at("step_size").item<int64_t>() == 2);
}

TEST_CASE("a schedule refuses to step an optimizer that gained a parameter group after it was built") {
  ts::Tensor a = leaf({1.0}), b = leaf({1.0});
  optim::SGD sgd({a}, {.lr = 0.1});
  optim::CosineAnnealingLR cosine(sgd, 4);
  sgd.add_param_group({{b}, {.lr = 0.2}});
  CHECK_THROWS_WITH_AS(cosine.step(), "CosineAnnealingLR: the optimizer has 2 parameter groups, but the schedule was "
                       "built for 1", ts::ValueError);
  CHECK(sgd.lr(0) == 0.1);  // nothing was set
  CHECK(sgd.lr(1) == 0.2);
}
