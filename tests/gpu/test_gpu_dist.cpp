// Several ranks on one GPU: the MPI group carries CUDA tensors by staging them through
// host memory (NCCL needs one GPU per rank). Run under mpirun with 2 ranks that share
// cuda:0 (meson test gpu_dist_np2, scripts/gpu-check); every rank exits 77 without a
// device. Checks the staged collectives' values and their ordering with the compute
// stream, then FSDP on CUDA over the MPI world against the plain one-rank CPU run.
#include <doctest/doctest.h>

#include <cmath>

#include "../../examples/mnist_net.h"
#include "../dist/dist_test_support.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using ts::DType;
using ts::Tensor;
using test_support::relative_difference;
using ts::dist::ReduceOp;

namespace {

const ts::Device kDevice = ts::Device::cuda(0);

std::vector<float> arange_values(int64_t count, float offset) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[i] = offset + static_cast<float>(i);
  return values;
}

}  // namespace

TEST_CASE("the MPI group stages CUDA tensors through host memory: values and stream order") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size(), rank = world.rank();
  MESSAGE("rank ", rank, " of ", size, " (", world.backend_name(), ") on ", ts::cuda::device_name(0));

  const int64_t n = 1 << 20;  // 4 MiB per rank: the staging copies span whole pinned buffers
  // The input is written by a kernel just before the call; the output read by one just after wait().
  Tensor input = ts::zeros({n}, {.device = kDevice}).add_(rank + 1.0);
  Tensor gathered = ts::empty({size, n}, {.device = kDevice});
  world.all_gather_into(gathered, input);
  std::vector<float> row_sums = gathered.sum({1}).cpu().to_vector<float>();
  for (int r = 0; r < size; ++r) CHECK(row_sums[r] == static_cast<float>((r + 1.0) * n));
  CHECK(gathered.device() == kDevice);

  Tensor contributions = ts::tensor<float>(arange_values(size * 4, 1.0f)).to(kDevice).mul_(rank + 1.0);
  Tensor summed = ts::zeros({4}, {.device = kDevice});
  world.reduce_scatter_into(summed, contributions, ReduceOp::sum);
  Tensor averaged = ts::zeros({4}, {.device = kDevice});
  world.reduce_scatter_into(averaged, contributions, ReduceOp::avg);
  std::vector<float> sums = summed.cpu().to_vector<float>(), means = averaged.cpu().to_vector<float>();
  for (int64_t i = 0; i < 4; ++i) {
    const float j = static_cast<float>(rank * 4 + i + 1);
    CHECK(sums[i] == j * size * (size + 1) / 2.0f);
    CHECK(means[i] == j * (size + 1) / 2.0f);
  }

  Tensor largest = ts::full({3}, rank, {.dtype = DType::i64, .device = kDevice});
  world.all_reduce(largest, ReduceOp::max);
  CHECK(largest.cpu().to_vector<int64_t>() == std::vector<int64_t>(3, size - 1));
  Tensor halves = ts::full({5}, rank + 1, {.device = kDevice}).to(DType::bf16);
  world.all_reduce(halves, ReduceOp::avg);
  CHECK(halves.cpu().to_vector<float>() == std::vector<float>(5, (size + 1) / 2.0f));
  Tensor sent = ts::full({7}, rank * 10.0, {.device = kDevice});
  world.broadcast(sent, size - 1);
  CHECK(sent.cpu().to_vector<float>() == std::vector<float>(7, (size - 1) * 10.0f));

  // FSDP's layout: the shard is its slice of the flat buffer.
  Tensor flat = ts::full({size * 3}, -1, {.device = kDevice});
  Tensor shard = flat.narrow(0, rank * 3, 3);
  shard.copy_(ts::full({3}, rank + 0.5));
  world.all_gather_into(flat, shard);
  std::vector<float> values = flat.cpu().to_vector<float>();
  for (int64_t j = 0; j < size * 3; ++j) CHECK(values[j] == static_cast<float>(j / 3) + 0.5f);

  // Several asynchronous calls in flight, waited in reverse; kernels after each wait see its result.
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<ts::dist::Work>> pending;
  for (int k = 0; k < 4; ++k) {
    tensors.push_back(ts::zeros({n}, {.device = kDevice}).add_(rank + k));
    pending.push_back(world.all_reduce_async(tensors.back()));
  }
  for (int k = 3; k >= 0; --k) {
    pending[k]->wait();
    const double expected = (size * (size - 1) / 2.0 + size * k) * n;
    CHECK(tensors[k].sum().item<float>() == doctest::Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("FSDP on CUDA over the MPI world (ranks sharing one GPU) follows the one-rank CPU run") {
  const auto& world = dist_test::world();
  constexpr int64_t kGlobalBatch = 12;
  constexpr int kSteps = 4;
  constexpr uint64_t kSeed = 9;
  const auto [images, labels] = test_support::random_image_batches(kSeed, kSteps, kGlobalBatch, {1, 28, 28}, 10);
  auto train = [&](mnist::Net& model, ts::Device device, ts::data::RowRange rows, bool sharded) {
    ts::optim::SGD optimizer(model.parameters(), {.lr = 0.05, .momentum = 0.9});
    std::vector<double> losses;
    for (int step = 0; step < kSteps; ++step) {
      ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
      optimizer.zero_grad();
      Tensor output = model(images[step].narrow(0, rows.begin, rows.size()).to(device));
      Tensor loss = ts::nll_loss(output, labels[step].narrow(0, rows.begin, rows.size()).to(device),
                                 {.reduction = ts::Reduction::sum}) /
                    static_cast<double>(kGlobalBatch);
      loss.backward();
      optimizer.step();
      Tensor global = loss.detach().to(DType::f64).cpu();
      if (sharded) world->all_reduce(global);
      losses.push_back(global.item<double>());
    }
    return losses;
  };

  // The truth: rank 0 trains the plain model on the CPU with the whole batch, and broadcasts.
  mnist::Net reference;
  reference.reset_parameters(kSeed);
  std::vector<double> expected_losses(kSteps, 0.0);
  if (world->rank() == 0) expected_losses = train(reference, ts::Device::cpu(), {0, kGlobalBatch}, false);
  Tensor losses = ts::tensor<double>(expected_losses);
  world->broadcast(losses, 0);
  expected_losses = losses.to_vector<double>();

  mnist::Net model;
  model.reset_parameters(kSeed);
  fsdp::fully_shard(model, world, {.gradient_reduction = ReduceOp::sum, .device = kDevice});
  ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(kGlobalBatch);
  std::vector<double> actual_losses = train(model, kDevice, rows, true);

  double worst_loss = 0, worst_parameter = 0;
  for (int step = 0; step < kSteps; ++step) {
    worst_loss = std::max(worst_loss, std::abs(actual_losses[step] - expected_losses[step]) / expected_losses[step]);
  }
  ts::StateDict full = model.state_dict();
  for (auto& [name, tensor] : reference.state_dict()) {
    Tensor expected = tensor.contiguous().clone();
    world->broadcast(expected, 0);
    CHECK(full.at(name).device() == kDevice);
    worst_parameter = std::max(worst_parameter, relative_difference(full.at(name).cpu(), expected));
  }
  if (world->rank() == 0) {
    MESSAGE("FSDP on cuda over ", world->backend_name(), " at ", world->size(), " rank(s): worst loss error ",
            worst_loss, ", worst parameter error ", worst_parameter);
  }
  // float32 on two devices and two batch splits: the gpu suite's FSDP tolerance.
  CHECK(worst_loss <= 1e-4);
  CHECK(worst_parameter <= 1e-4);
}
