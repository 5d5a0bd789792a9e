// SGD on bfloat16 parameters against PyTorch 1.13's (tests/optim/data/bf16_sgd_reference.safetensors,
// written by make_bf16_sgd_reference.py): the same initial parameter and gradients, four steps
// of each option set. PyTorch's _single_tensor_sgd rounds to bfloat16 after every tensor op
// (weight decay, the momentum's mul_ and add_, the Nesterov add, the step), and so does
// Tessera's bfloat16 path (src/optim/sgd.cpp), so every step must agree bit for bit.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace optim = tessera::optim;
using ts::DType;
using ts::Tensor;

namespace {

const ts::StateDict& torch_reference() {
  static const ts::StateDict file = [] {
    const char* dir = std::getenv("TESSERA_SOURCE_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
    return ts::io::load(std::string(dir) + "/tests/optim/data/bf16_sgd_reference.safetensors");
  }();
  return file;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

}  // namespace

TEST_CASE("SGD on bfloat16 parameters: PyTorch 1.13's steps bit for bit") {
  const ts::StateDict& file = torch_reference();
  const std::vector<std::pair<std::string, optim::SGDOptions>> cases = {
      {"plain", {.lr = 0.1}},
      {"momentum", {.lr = 0.05, .momentum = 0.9}},
      {"momentum_dampening_decay", {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}},
      {"nesterov_decay", {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}},
      {"maximize_momentum", {.lr = 0.1, .momentum = 0.5, .maximize = true}},
  };
  for (const auto& [name, options] : cases) {
    CAPTURE(name);
    Tensor param = file.at("param").clone().requires_grad_();
    REQUIRE(param.dtype() == DType::bf16);
    optim::SGD sgd({param}, options);
    for (int step = 0; step < 4; ++step) {
      CAPTURE(step);
      param.set_grad(file.at("grad/" + std::to_string(step)).clone());
      sgd.step();
      CHECK(param.dtype() == DType::bf16);
      CHECK(bitwise_equal(param, file.at(name + "/param/" + std::to_string(step))));
    }
  }
}

TEST_CASE("SGD on bfloat16: the momentum buffer is bfloat16, as PyTorch's") {
  Tensor param = ts::ones({3}, {.dtype = DType::bf16}).requires_grad_();
  optim::SGD sgd({param}, {.lr = 0.5, .momentum = 0.9});
  param.set_grad(ts::full({3}, 0.25, {.dtype = DType::bf16}));
  sgd.step();
  const Tensor& buffer = sgd.state(0).at("momentum_buffer");
  CHECK(buffer.dtype() == DType::bf16);
  CHECK(static_cast<float>(buffer.data_ptr<ts::BFloat16>()[0]) == 0.25f);  // the first step copies the gradient
  CHECK(static_cast<float>(param.data_ptr<ts::BFloat16>()[0]) == 0.875f);  // 1 - 0.5 * 0.25
}

TEST_CASE("an optimizer without a bfloat16 update refuses a bfloat16 parameter by name") {
  Tensor param = ts::ones({3}, {.dtype = DType::bf16}).requires_grad_();
  optim::Adam adam({param}, {});
  param.set_grad(ts::ones({3}, {.dtype = DType::bf16}));
  CHECK_THROWS_WITH_AS(adam.step(),
                       "Adam.step: parameter 0 (Tensor[3] bfloat16 cpu): expected float32 or float64 (SGD updates "
                       "bfloat16 parameters; this optimizer does not yet)",
                       ts::DTypeError);
}
