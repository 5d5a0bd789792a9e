// The process test_crash.cpp kills: it resumes from the latest checkpoint under ROOT (if
// any) and then trains and saves a checkpoint after every step, forever. Each checkpoint
// records, in its training state, sums of the parameters and of Adam's first moments as
// they were saved, so that whoever loads it can tell a consistent checkpoint from a mix of
// two saves. Prints "ready" once it starts saving. With --async, the saves are asynchronous
// (CheckpointManagerOptions::async_save): the next step trains while one is written.
//   crash_worker ROOT [--async]
#include <cstdio>
#include <string>

#include <tessera/tessera.h>

namespace ts = tessera;
namespace ckpt = tessera::checkpoint;

namespace {

struct Net : ts::nn::Module {
  ts::nn::Linear fc1{256, 512}, fc2{512, 256};  // 263k parameters: several 1 MiB CRC chunks per save
  Net() { register_modules({{"fc1", fc1}, {"fc2", fc2}}); }
  ts::Tensor forward(ts::Tensor x) override { return fc2(ts::relu(fc1(x))); }
};

double sum_of(const std::vector<ts::Tensor>& tensors) {
  double total = 0;
  for (const ts::Tensor& t : tensors) total += t.detach().to(ts::DType::f64).sum().item<double>();
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto world = ts::dist::init(argc, argv);
    const bool async = argc == 3 && std::string(argv[2]) == "--async";
    if (argc != 2 && !async) {
      std::fprintf(stderr, "usage: crash_worker ROOT [--async]\n");
      return 2;
    }
    Net model;
    model.reset_parameters(1);
    ts::fsdp::fully_shard(model, world);
    ts::optim::Adam adam(model.parameters(), {.lr = 1e-3});
    ckpt::CheckpointManager manager(argv[1], {.keep_last = 2, .async_save = async});
    uint64_t step = 0;
    if (auto state = manager.restore(model, {.optimizer = &adam})) step = state->step;
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) {
      ts::Generator gen(step);
      adam.zero_grad();
      model(ts::randn({8, 256}, gen)).pow(2.0).mean().backward();
      adam.step();
      ++step;
      std::vector<ts::Tensor> moments;
      for (size_t i = 0; i < adam.params().size(); ++i) moments.push_back(adam.state(i).at("exp_avg"));
      ckpt::TrainingState state{.step = step};
      state.extra.set("parameter_sum", sum_of(model.parameters()));
      state.extra.set("exp_avg_sum", sum_of(moments));
      manager.save(model, {.optimizer = &adam}, state);
    }
  } catch (const ts::Error& error) {
    std::fprintf(stderr, "crash_worker: %s\n", error.what());
    return 1;
  }
}
