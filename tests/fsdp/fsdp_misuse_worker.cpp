// FSDP training that goes wrong on purpose, run by test_fsdp_misuse under `mpirun -np 2`.
// Each scenario marks its moment of failure with "event <nanoseconds since the epoch>".
//   mismatch  rank 1 builds a different fc2, so the ranks' collectives disagree
//   exit      rank 1 calls _exit(3) in the middle of a training step
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "../../examples/mnist_net.h"

namespace ts = tessera;

namespace {

void mark_event(int rank, const char* what) {
  auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch());
  std::fprintf(stderr, "rank %d: %s; event %lld\n", rank, what, static_cast<long long>(now.count()));
  std::fflush(stderr);
}

struct Odd : ts::nn::Module {  // a different model: its fc2 has 11 outputs
  ts::nn::Linear fc1{784, 32}, fc2{32, 11};
  Odd() { register_modules({{"fc1", fc1}, {"fc2", fc2}}); }
  ts::Tensor forward(ts::Tensor x) override { return ts::log_softmax(fc2(ts::relu(fc1(x.flatten(1)))), 1); }
};

struct Small : ts::nn::Module {
  ts::nn::Linear fc1{784, 32}, fc2{32, 10};
  Small() { register_modules({{"fc1", fc1}, {"fc2", fc2}}); }
  ts::Tensor forward(ts::Tensor x) override { return ts::log_softmax(fc2(ts::relu(fc1(x.flatten(1)))), 1); }
};

void train(ts::nn::Module& model, const std::shared_ptr<ts::dist::ProcessGroup>& world, int steps,
           const std::function<void(int)>& before_backward) {
  ts::fsdp::fully_shard(model, world);
  ts::optim::SGD optimizer(model.parameters(), {.lr = 0.01});
  ts::Generator gen(1);
  ts::Tensor x = ts::randn({4, 1, 28, 28}, gen);
  ts::Tensor y = ts::randint(0, 10, {4}, gen);
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    ts::Tensor loss = ts::nll_loss(model(x), y);
    before_backward(step);
    loss.backward();
    optimizer.step();
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto world = ts::dist::init(argc, argv);
  std::string scenario = argc > 1 ? argv[1] : "";
  const int rank = world->rank();
  if (scenario == "mismatch") {
    try {
      if (rank == 1) {
        Odd model;
        mark_event(rank, "training a model with another fc2");
        train(model, world, 1, [](int) {});
      } else {
        Small model;
        mark_event(rank, "training the usual model");
        train(model, world, 1, [](int) {});
      }
    } catch (const ts::dist::CollectiveMismatch& error) {
      std::fprintf(stderr, "rank %d caught: %s\n", rank, error.what());
      return 1;
    }
  } else if (scenario == "exit") {
    Small model;
    train(model, world, 3, [&](int step) {
      if (step == 1 && rank == 1) {
        mark_event(rank, "calling _exit(3) mid-step");
        _exit(3);
      }
    });
  } else {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  std::fprintf(stderr, "rank %d finished normally\n", rank);
  return 0;
}
