// FSDP over the MPI group's host staging (the path CUDA tensors take when several ranks
// share one GPU), run with CPU tensors through GroupOptions::force_host_staging: the
// staged run must equal the direct one bit for bit, since both run the same MPI
// collectives on the same values; only the buffers differ. Prefetched (asynchronous)
// all-gathers and the reduce-scatters are all staged.
#include <doctest/doctest.h>

#include "../../examples/mnist_net.h"
#include "../dist/dist_test_support.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using ts::Tensor;

namespace {

std::vector<double> train(const std::shared_ptr<ts::dist::ProcessGroup>& group, ts::StateDict& final_state) {
  const auto& world = dist_test::world();
  mnist::Net model;
  model.reset_parameters(5);
  fsdp::fully_shard(model, group, {.gradient_reduction = ts::dist::ReduceOp::sum});
  ts::optim::SGD optimizer(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  ts::Generator gen(6);
  const int64_t global_batch = 12;
  ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(global_batch);
  std::vector<double> losses;
  for (int step = 0; step < 4; ++step) {
    Tensor images = ts::randn({global_batch, 1, 28, 28}, gen);
    Tensor labels = ts::randint(0, 10, {global_batch}, gen);
    ts::nn::BatchScope scope({.seed = 5, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
    optimizer.zero_grad();
    Tensor loss = ts::nll_loss(model(images.narrow(0, rows.begin, rows.size())),
                               labels.narrow(0, rows.begin, rows.size()), {.reduction = ts::Reduction::sum}) /
                  static_cast<double>(global_batch);
    loss.backward();
    optimizer.step();
    Tensor global = loss.detach().to(ts::DType::f64);
    world->all_reduce(global);
    losses.push_back(global.item<double>());
  }
  final_state = model.state_dict();
  return losses;
}

}  // namespace

TEST_CASE("FSDP over host-staged collectives equals FSDP over direct ones, bit for bit") {
  const auto& world = dist_test::world();
  if (world->backend() != ts::dist::Backend::mpi) return;
  ts::StateDict direct_state, staged_state;
  std::vector<double> direct = train(world, direct_state);
  std::vector<double> staged = train(world->duplicate({.force_host_staging = true}), staged_state);
  CHECK(staged == direct);
  CHECK(staged_state.keys() == direct_state.keys());
  for (auto& [name, tensor] : direct_state) {
    CHECK_MESSAGE(staged_state.at(name).to_vector<float>() == tensor.to_vector<float>(), name);
  }
}
