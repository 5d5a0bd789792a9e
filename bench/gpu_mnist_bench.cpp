// Training throughput of the MNIST example's network on one GPU: Tessera's side of the
// comparison with PyTorch eager (bench/gpu_mnist_bench.py runs the same network, the same
// step and the same measurement).
//
//   build/bench/gpu_mnist_bench --batch-sizes 64,512 --steps 200
//   python3 bench/gpu_mnist_bench.py --batch-sizes 64,512 --steps 200
//   build/bench/gpu_mnist_bench --device cpu --steps 5        # both also run on the CPU
//
// Each batch size: a fresh network (train mode, so dropout runs), SGD (lr 0.01), one fixed
// batch of random images and labels already on the device, `--warmup` steps (the caching
// allocator fills, cuDNN picks its algorithms), then `--steps` timed steps of zero_grad,
// forward, nll_loss, backward and step, with the device synchronised before and after
// the timed loop and never inside it. Prints one JSON object per batch size. --fsdp nccl
// shards the model with FSDP over a one-rank NCCL group (the example's configuration).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "../examples/command_line.h"
#include "../examples/main.h"
#include "../examples/mnist_net.h"

namespace ts = tessera;

namespace {

struct Options {
  std::vector<int64_t> batch_sizes = {64, 512};
  int steps = 200;
  int warmup = 20;
  std::string device = "cuda";
  std::string fsdp = "none";  // none, single, nccl
  bool tf32 = false;
};

constexpr const char* kUsage =
    "usage: gpu_mnist_bench [--batch-sizes 64,512] [--steps N] [--warmup N] [--device cuda|cpu]\n"
    "                       [--fsdp none|single|nccl] [--tf32]\n";

Options parse(int argc, char** argv) {
  Options o;
  example::CommandLine args("gpu_mnist_bench", argc, argv, kUsage);
  while (args.next()) {
    if (args.flag() == "--batch-sizes") {
      o.batch_sizes.clear();
      std::stringstream list(args.value());
      for (std::string item; std::getline(list, item, ',');) o.batch_sizes.push_back(std::stoll(item));
    } else if (args.flag() == "--steps") {
      o.steps = args.number<int>();
    } else if (args.flag() == "--warmup") {
      o.warmup = args.number<int>();
    } else if (args.flag() == "--device") {
      o.device = args.value();
    } else if (args.flag() == "--fsdp") {
      o.fsdp = args.value();
    } else if (args.flag() == "--tf32") {
      o.tf32 = true;
    } else {
      args.unknown();
    }
  }
  if (o.device != "cuda" && o.device != "cpu") args.error("--device must be cuda or cpu");
  if (o.fsdp != "none" && o.fsdp != "single" && o.fsdp != "nccl") args.error("--fsdp must be none, single or nccl");
  if (o.steps < 1 || o.batch_sizes.empty()) args.error("need --steps >= 1 and batch sizes");
  return o;
}

void synchronize(ts::Device device) {
  if (device.is_cuda()) ts::cuda::synchronize(device.index);
}

double samples_per_second(const Options& o, int64_t batch_size, ts::Device device,
                          const std::shared_ptr<ts::dist::ProcessGroup>& group) {
  mnist::Net model;
  model.reset_parameters(1);
  model.to(device);
  if (group) ts::fsdp::fully_shard(model, group);
  ts::optim::SGD optimizer(model.parameters(), {.lr = 0.01});
  ts::Generator gen(2);
  ts::Tensor images = ts::randn({batch_size, 1, 28, 28}, gen).to(device);
  ts::Tensor labels = ts::randint(0, 10, {batch_size}, gen).to(device);
  uint64_t step = 0;
  auto train_step = [&] {
    ts::nn::BatchScope scope({.seed = 3, .step = step++, .first_row = 0});
    optimizer.zero_grad();
    ts::Tensor loss = ts::nll_loss(model(images), labels);
    loss.backward();
    optimizer.step();
  };
  for (int i = 0; i < o.warmup; ++i) train_step();
  synchronize(device);
  auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) train_step();
  synchronize(device);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return static_cast<double>(batch_size) * o.steps / seconds;
}

int run(int argc, char** argv) {
  auto world = ts::dist::init(argc, argv);
  Options o = parse(argc, argv);
  ts::Device device = o.device == "cuda" ? ts::Device::cuda(0) : ts::Device::cpu();
  if (device.is_cuda() && !ts::cuda::is_available()) {
    std::fprintf(stderr, "gpu_mnist_bench: no CUDA device: %s\n", ts::cuda::unavailable_reason().c_str());
    return 77;
  }
  ts::cuda::set_allow_tf32(o.tf32);
  std::shared_ptr<ts::dist::ProcessGroup> group;
  if (o.fsdp == "single") group = world;
  if (o.fsdp == "nccl") group = ts::dist::new_group(world, ts::dist::Backend::nccl, {.device = device.index});
  std::string name = device.is_cuda() ? ts::cuda::device_name(device.index) : std::string("cpu");
  for (int64_t batch_size : o.batch_sizes) {
    double rate = samples_per_second(o, batch_size, device, group);
    std::printf(
        "{\"framework\": \"tessera\", \"device\": \"%s\", \"batch_size\": %lld, \"fsdp\": \"%s\", \"tf32\": %s, "
        "\"steps\": %d, \"samples_per_s\": %.1f, \"ms_per_step\": %.4f}\n",
        name.c_str(), static_cast<long long>(batch_size), o.fsdp.c_str(), o.tf32 ? "true" : "false", o.steps, rate,
        1000.0 * static_cast<double>(batch_size) / rate);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return example::main_reporting_errors("gpu_mnist_bench", argc, argv, run); }
