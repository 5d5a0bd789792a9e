// ResNet under FSDP with one unit per BasicBlock, run under mpirun with 1 to 4 ranks:
// parameters are sharded, batch norm's buffers are not. Each rank normalises with its own
// rows (as PyTorch's FSDP and DDP do without SyncBatchNorm), so the sharded run is compared
// with a one-process simulation of it: the same model run on each rank's rows in turn,
// with the running statistics kept per simulated rank and the losses summed. Parameters
// must agree to 1e-10 (float64, normwise: only the order of gradient sums differs; measured
// 0 at 1-2 ranks, 8e-15 at 4; batch norm over few values amplifies such differences, so
// the images are 40x40, leaving 2x2 planes at layer4 rather than 1x1), every
// rank's buffers with its simulated buffers, and state dicts must carry the buffers under
// torchvision's names, both ways.
#include <doctest/doctest.h>

#include <cmath>

#include "../dist/dist_test_support.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using ts::DType;
using ts::Tensor;
using test_support::relative_difference;

namespace {

constexpr int64_t kGlobalBatch = 12;  // 1..4 ranks get at least 3 rows; 40x40 images leave 2x2 at layer4
constexpr int kSteps = 4;
constexpr uint64_t kSeed = 3;
const ts::models::ResNetOptions kNarrow{.num_classes = 5, .width = 4};

using Data = test_support::ImageBatches;

Data make_data() { return test_support::random_image_batches(kSeed, kSteps, kGlobalBatch, {3, 40, 40}, 5, DType::f64); }

ts::data::RowRange rows_of(int rank, int world_size) {
  return ts::data::DistributedSampler{rank, world_size}.rows_of(kGlobalBatch);
}

Tensor rank_loss(ts::nn::Module& model, const Data& data, int step, ts::data::RowRange rows) {
  Tensor output = model(data.images[step].narrow(0, rows.begin, rows.size()));
  return ts::cross_entropy(output, data.labels[step].narrow(0, rows.begin, rows.size()),
                           {.weight = {}, .reduction = ts::Reduction::sum, .ignore_index = -100}) /
         static_cast<double>(kGlobalBatch);
}

ts::nn::ModuleHolder<ts::models::ResNet> narrow_resnet() {
  auto model = ts::models::resnet18(kNarrow);
  model->to(DType::f64);
  model->reset_parameters(kSeed);
  return model;
}

// Copies `from` into the model's buffers (or snapshots them into `to`).
void load_buffers(ts::nn::Module& model, const ts::StateDict& from) {
  ts::NoGradGuard no_grad;
  for (auto& [name, buffer] : model.named_buffers()) buffer.copy_(from.at(name));
}
ts::StateDict snapshot_buffers(ts::nn::Module& model) {
  ts::StateDict out;
  for (auto& [name, buffer] : model.named_buffers()) out.insert(name, buffer.clone());
  return out;
}

struct Simulation {
  ts::StateDict parameters;                // after kSteps
  std::vector<ts::StateDict> rank_buffers;  // per simulated rank
  std::vector<double> losses;
};

// The sharded run at `world_size` ranks, simulated in one process.
Simulation simulate(int world_size, const Data& data) {
  auto model = narrow_resnet();
  Simulation sim;
  sim.rank_buffers.assign(static_cast<size_t>(world_size), snapshot_buffers(*model));
  ts::optim::SGD optimizer(model->parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    Tensor total;
    for (int rank = 0; rank < world_size; ++rank) {
      load_buffers(*model, sim.rank_buffers[static_cast<size_t>(rank)]);
      Tensor loss = rank_loss(*model, data, step, rows_of(rank, world_size));
      sim.rank_buffers[static_cast<size_t>(rank)] = snapshot_buffers(*model);
      total = total.defined() ? total + loss : loss;
    }
    total.backward();
    optimizer.step();
    sim.losses.push_back(total.item<double>());
  }
  for (auto& [name, p] : model->named_parameters()) sim.parameters.insert(name, p.detach().clone());
  return sim;
}

}  // namespace

TEST_CASE("ResNet with one FSDP unit per BasicBlock trains like its one-process simulation, buffers per rank") {
  const auto& world = dist_test::world();
  const Data data = make_data();
  const Simulation sim = simulate(world->size(), data);

  auto model = narrow_resnet();
  fsdp::fully_shard(*model, world, {.wrap_policy = fsdp::WrapPolicy::module_type({"BasicBlock"}),
                                    .gradient_reduction = ts::dist::ReduceOp::sum});
  std::vector<std::string> unit_names;
  for (const auto& unit : fsdp::units(*model)) unit_names.push_back(unit.name);
  CHECK(unit_names == std::vector<std::string>{"layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0", "layer3.1",
                                               "layer4.0", "layer4.1", "(root)"});
  // Buffers are not sharded: every rank holds all 60 of them, whole.
  CHECK(model->named_buffers().size() == 60);
  CHECK(model->layer2[0].named_buffers()[0].second.numel() == 8);

  ts::optim::SGD optimizer(model->parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
  double worst_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    Tensor loss = rank_loss(*model, data, step, rows_of(world->rank(), world->size()));
    loss.backward();
    optimizer.step();
    Tensor global = loss.detach().clone();
    world->all_reduce(global);
    worst_loss = std::max(worst_loss, std::abs(global.item<double>() - sim.losses[step]) / std::abs(sim.losses[step]));
  }
  CHECK(worst_loss <= 1e-10);

  ts::StateDict full = model->state_dict();  // collective
  double worst_parameter = 0;
  for (const auto& [name, expected] : sim.parameters) worst_parameter = std::max(worst_parameter, relative_difference(full.at(name), expected));
  CHECK(worst_parameter <= 1e-10);

  // This rank's buffers followed this rank's rows; the full state dict carries them.
  const ts::StateDict& mine = sim.rank_buffers[static_cast<size_t>(world->rank())];
  double worst_buffer = 0;
  for (const auto& [name, buffer] : model->named_buffers()) {
    if (buffer.dtype() == DType::i64) {
      CHECK(buffer.item<int64_t>() == kSteps);
      CHECK(full.at(name).item<int64_t>() == kSteps);
    } else {
      worst_buffer = std::max(worst_buffer, relative_difference(buffer, mine.at(name)));
      CHECK(full.at(name).to_vector<double>() == buffer.to_vector<double>());
    }
  }
  CHECK(worst_buffer <= 1e-10);
  if (world->rank() == 0) {
    MESSAGE("ResNet (width 4) at ", world->size(), " ranks: worst loss error ", worst_loss, ", parameter error ",
            worst_parameter, ", buffer error ", worst_buffer);
  }

  // The full state dict has the unsharded model's names in its order, buffers included ...
  auto plain = narrow_resnet();
  CHECK(full.keys() == plain->state_dict().keys());
  // ... and loading one sets the buffers as well as the shards.
  full.at("layer3.1.bn2.running_var") = ts::full({16}, 2.5, {.dtype = DType::f64});
  full.at("bn1.num_batches_tracked") = ts::full({}, 77, {.dtype = DType::i64});
  model->load_state_dict(full);
  auto& block = static_cast<ts::models::BasicBlock&>(model->layer3[1]);
  CHECK(block.bn2.running_var.to_vector<double>() == std::vector<double>(16, 2.5));
  CHECK(model->bn1.num_batches_tracked.item<int64_t>() == 77);
  ts::StateDict again = model->state_dict();
  CHECK(relative_difference(again.at("fc.weight"), full.at("fc.weight")) == 0.0);

  // Evaluation runs with a rank that has no rows too (the collectives still match).
  model->eval();
  ts::NoGradGuard no_grad;
  const int64_t rows = world->rank() == 0 ? 2 : 0;
  Tensor out = model(data.images[0].narrow(0, 0, rows));
  CHECK(out.sizes() == ts::Shape{rows, 5});
}
