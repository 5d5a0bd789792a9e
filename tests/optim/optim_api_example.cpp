// docs/api/optim.md's complete example, built and run by the unit suite: nanoGPT's
// parameter groups and warmup-cosine schedule on a sharded model. Exits 1 unless the loss
// falls. Runs alone (one rank) or under mpirun.
#include <cstdio>
#include <tessera/tessera.h>

namespace ts = tessera;

struct Net : ts::nn::Module {
  ts::nn::Linear fc1{16, 32}, fc2{32, 4};
  Net() { register_modules({{"fc1", fc1}, {"fc2", fc2}}); }
  ts::Tensor forward(ts::Tensor x) override { return fc2(ts::relu(fc1(x))); }
};

int main(int argc, char** argv) {
  auto world = ts::dist::init(argc, argv);
  Net model;
  ts::fsdp::fully_shard(model, world);

  // Weight decay on the matrices only (nanoGPT's groups), chosen by the original parameters.
  std::vector<ts::Tensor> decay, no_decay;
  for (auto& [name, p] : ts::fsdp::named_original_parameters(model)) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  ts::optim::AdamW adamw({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
                         {.lr = 1e-2, .betas = {0.9, 0.95}});
  ts::optim::LinearLR warmup(adamw, {.start_factor = 0.1, .total_iters = 10});
  ts::optim::CosineAnnealingLR cosine(adamw, /*T_max=*/90, /*eta_min=*/1e-3);
  ts::optim::SequentialLR schedule(adamw, {warmup, cosine}, /*milestones=*/{10});

  ts::Generator gen(0);
  ts::Tensor x = ts::randn({64, 16}, gen), y = ts::randn({64, 4}, gen);
  const ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(64);
  x = x.narrow(0, rows.begin, rows.size());  // this rank's rows of the batch
  y = y.narrow(0, rows.begin, rows.size());
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    adamw.zero_grad();
    ts::Tensor loss = (model(x) - y).pow(2.0).mean();
    loss.backward();
    ts::fsdp::clip_grad_norm(model, 1.0);  // over every rank's gradients
    adamw.step();
    schedule.step();
    (step == 0 ? first : last) = loss.item<double>();
    if (step % 25 == 0 && world->rank() == 0) {
      std::printf("step %3d  loss %.4f  lr %.2e (decay) %.2e (no decay)\n", step, loss.item<double>(),
                  schedule.get_last_lr()[0], schedule.get_last_lr()[1]);
    }
  }
  return last < first ? 0 : 1;
}
