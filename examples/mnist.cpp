// Tessera's MNIST example: PyTorch's examples/mnist, trained with FSDP.
//
//   build/examples/mnist --data data/mnist --epochs 1
//   mpirun -np 4 build/examples/mnist --data data/mnist --epochs 1
//   mpirun -np 4 build/examples/mnist --checkpoint-dir ckpt --checkpoint-every 200 --resume
//   build/examples/mnist --device cuda --epochs 1          # on a GPU (NCCL at one rank)
//
// Under mpirun every rank holds a 1/N shard of every layer, sees its part of each global
// batch (the global batch is the same at every N), and drops the same activations as one
// rank would (masks are keyed by global row), so N ranks learn what one rank learns.
// Rank 0 prints. --help lists the flags.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "mnist_net.h"
#include "checkpoint_flags.h"
#include "command_line.h"
#include "distributed.h"
#include "finite_loss.h"
#include "initial_weights.h"
#include "main.h"
#include "printer.h"
#include "tessera/dist/dist.h"
#include "tessera/fsdp/fsdp.h"
#include "tessera/optim/optim.h"

namespace ts = tessera;

namespace {

struct Options {
  std::string data = "data/mnist";
  int64_t epochs = 14;
  int64_t batch_size = 64;
  int64_t test_batch_size = 1000;
  double lr = 1.0;
  std::string optimizer = "adadelta";
  double momentum = 0.0;
  double gamma = 0.7;
  uint64_t seed = 1;
  int threads = 0;  // 0: leave OpenMP's default
  std::string save;
  std::string init;
  int64_t log_interval = 10;
  bool dry_run = false;
  bool json = false;
  example::CheckpointFlags checkpoints;  // every = 0: at the end of every epoch
  std::string device = "cpu";
  std::string dist_backend = "auto";
  std::string mixed_precision = "off";
  bool tf32 = false;
};

Options parse_options(int argc, char** argv) {
  Options o;
  example::Flags flags("mnist",
                       "Trains PyTorch's MNIST example network (two convolutions, two linear layers, dropout)\n"
                       "with FSDP. Run alone for one rank, or under mpirun for several.",
                       "A resumed run continues exactly: at the same number of ranks its losses are the ones the\n"
                       "uninterrupted run would have printed, bit for bit. tessera-checkpoint (build/tools) prints\n"
                       "what a checkpoint holds and converts it to one safetensors file with PyTorch's names.");
  flags.value("--data", o.data, "DIR", "folder with the MNIST IDX files (scripts/get-mnist)");
  flags.value("--epochs", o.epochs, "N", "epochs to train");
  flags.value("--batch-size", o.batch_size, "N", "global training batch size");
  flags.value("--test-batch-size", o.test_batch_size, "N", "test batch size");
  flags.choice("--optimizer", o.optimizer, {"adadelta", "sgd", "adam"}, "the optimizer");
  flags.value("--lr", o.lr, "X", "learning rate");
  flags.value("--momentum", o.momentum, "X", "SGD momentum");
  flags.value("--gamma", o.gamma, "X", "StepLR factor applied after every epoch");
  flags.value("--seed", o.seed, "N", "seed for initialisation, shuffling and dropout");
  flags.value("--threads", o.threads, "N", "CPU threads per rank", {.default_text = "OpenMP default"});
  flags.value("--init", o.init, "FILE", "start from these weights (safetensors with PyTorch's names)");
  flags.value("--save", o.save, "FILE", "save the trained weights (safetensors with PyTorch's names)");
  flags.value("--log-interval", o.log_interval, "N", "batches between progress reports");
  flags.toggle("--dry-run", o.dry_run, "run one training batch and one test batch, then stop");
  flags.toggle("--json", o.json, "print one JSON object per line instead of text");
  o.checkpoints.declare(flags, "0: at the end of every epoch");
  flags.choice("--device", o.device, {"cpu", "cuda"}, "cpu or cuda (each rank takes the GPU of its local rank)");
  flags.choice("--dist-backend", o.dist_backend, {"auto", "nccl", "world"},
               "collectives for CUDA parameters: nccl (one GPU per rank), world (the MPI world, staging through "
               "host memory: ranks may share a GPU), or auto (nccl when built with it and every rank on a host "
               "has a GPU of its own, else world)");
  flags.choice("--mixed-precision", o.mixed_precision, {"off", "bf16"},
               "off, or bf16: bfloat16 parameters and compute in the layers, float32 shards, optimizer state "
               "and gradient reduction (cuda)");
  flags.toggle("--tf32", o.tf32, "allow TF32 tensor cores in float32 matrix products (cuda)");
  flags.parse(argc, argv);

  o.checkpoints.check(flags);
  if (o.batch_size < 1 || o.test_batch_size < 1) flags.error("batch sizes must be positive");
  if (o.device == "cpu" && o.mixed_precision != "off") {
    flags.error("--mixed-precision bf16 needs --device cuda (the CPU has no bfloat16 kernels)");
  }
  if (o.log_interval < 1) o.log_interval = 1;
  return o;
}

std::unique_ptr<ts::optim::Optimizer> make_optimizer(const Options& o, const std::vector<ts::Tensor>& params) {
  if (o.optimizer == "sgd") return std::make_unique<ts::optim::SGD>(params, ts::optim::SGDOptions{.lr = o.lr, .momentum = o.momentum});
  if (o.optimizer == "adam") return std::make_unique<ts::optim::Adam>(params, ts::optim::AdamOptions{.lr = o.lr});
  return std::make_unique<ts::optim::Adadelta>(params, ts::optim::AdadeltaOptions{.lr = o.lr});
}

// Prints on rank 0 only: JSON lines, a progress bar on a terminal, or plain lines.
class Reporter : public example::Printer {
 public:
  Reporter(const Options& options, bool is_rank0) : Printer(options.json, is_rank0) {}

  void epoch(int64_t epoch, double train_loss, double test_loss, int64_t correct, int64_t test_total,
             double samples_per_s, double seconds) {
    if (!active()) return;
    double accuracy = static_cast<double>(correct) / static_cast<double>(test_total);
    if (json()) {
      print_json({{"event", "epoch"}, {"epoch", epoch}, {"train_loss", train_loss}, {"test_loss", test_loss},
                  {"test_accuracy", accuracy}, {"samples_per_s", samples_per_s}, {"seconds", seconds}});
      return;
    }
    if (tty()) std::printf("\n");
    std::printf("\nTest set: Average loss: %.4f, Accuracy: %lld/%lld (%.2f%%)  [%.0f samples/s, %.1f s]\n\n", test_loss,
                static_cast<long long>(correct), static_cast<long long>(test_total), 100.0 * accuracy, samples_per_s, seconds);
    std::fflush(stdout);
  }

  void checkpoint(const std::string& event, const std::string& path, const ts::checkpoint::TrainingState& state) {
    if (!active()) return;
    if (json()) {
      print_json({{"event", event}, {"path", path}, {"step", static_cast<int64_t>(state.step)},
                  {"epoch", state.epoch}, {"batch", state.batch}});
    } else {
      std::printf("%s %s (step %llu, epoch %lld, batch %lld)\n", event == "resume" ? "resumed from" : "saved",
                  path.c_str(), static_cast<unsigned long long>(state.step), static_cast<long long>(state.epoch),
                  static_cast<long long>(state.batch));
      std::fflush(stdout);
    }
  }
};

// One training run, in the parts PyTorch's example has: setup (the constructor: data,
// device, the sharded model, optimizer and schedule, checkpoints), resume, train_epoch,
// evaluate, save_checkpoint, and finish; run() below drives them epoch by epoch.
struct Run {
  Options options;
  std::shared_ptr<ts::dist::ProcessGroup> world;
  Reporter report;
  ts::data::MNIST train_set, test_set;
  ts::data::DistributedSampler sampler;
  ts::Device device;
  std::shared_ptr<ts::dist::ProcessGroup> group;  // FSDP's collectives (NCCL on GPUs)
  mnist::Net model;
  std::unique_ptr<ts::optim::Optimizer> optimizer;
  std::optional<ts::optim::StepLR> scheduler;
  std::optional<ts::checkpoint::CheckpointManager> checkpoints;

  // Where training stands: epochs count from 1; `batch` batches of `epoch` are done.
  ts::checkpoint::TrainingState state;
  double loss_sum = 0;  // this epoch's global loss sum before this run's steps (a resumed epoch's)
  int64_t samples = 0;
  // This rank's loss sum of the steps run since, on the device: the host reads it only when it reports.
  ts::Tensor local_loss_sum;
  // The position last saved (or resumed from): the end of training saves unless it is that.
  std::pair<uint64_t, int64_t> saved_at;

  Run(Options options_in, std::shared_ptr<ts::dist::ProcessGroup> world_in)
      : options(std::move(options_in)),
        world(std::move(world_in)),
        report(options, world->rank() == 0),
        train_set(options.data, ts::data::Split::train, ts::data::kMnistNormalize),
        test_set(options.data, ts::data::Split::test, ts::data::kMnistNormalize),
        sampler{.rank = world->rank(), .world_size = world->size()},
        device(example::training_device(options.device, *world)),
        group(example::collective_group(options.dist_backend, world, device)),
        state{.step = 0, .epoch = 1, .batch = 0, .seed = options.seed},
        local_loss_sum(ts::zeros({}, {.dtype = ts::DType::f64, .device = device})) {
    if (options.tf32) ts::cuda::set_allow_tf32(true);
    model.reset_parameters(options.seed);
    // Each rank's loss is its rows' sum over the global batch size, and gradients are summed:
    // exact at any world size, even when the batch does not split evenly. Shards, gathered
    // buffers and gradients live on `device`.
    ts::fsdp::FullyShardOptions sharding{.gradient_reduction = ts::dist::ReduceOp::sum, .device = device};
    if (options.mixed_precision == "bf16") {
      // The layers compute in bfloat16; their outputs return to float32 for pooling, dropout
      // and the loss. Gradients are reduced in float32.
      sharding.mixed_precision = {.param_dtype = ts::DType::bf16, .reduce_dtype = ts::DType::f32, .output_dtype = ts::DType::f32};
    }
    ts::fsdp::fully_shard(model, group, sharding);
    if (!options.init.empty()) {
      model.load_state_dict(example::read_initial_weights(model, ts::io::SafetensorsFile(options.init)));
    }
    optimizer = make_optimizer(options, model.parameters());
    scheduler.emplace(*optimizer, 1, options.gamma);
    checkpoints = options.checkpoints.open(*world);
    saved_at = {state.step, state.epoch};
  }

  ts::checkpoint::Stateful stateful() { return {.optimizer = optimizer.get(), .scheduler = &*scheduler}; }

  // --resume: the latest checkpoint's model, optimizer, schedule and position, if there is
  // one (the newest complete one when latest is missing or damaged, saying so).
  void resume() {
    if (auto restored = checkpoints->restore(model, stateful())) {
      const ts::checkpoint::ResumePoint& from = *checkpoints->resumed_from();
      if (!from.note.empty()) report.line("--resume: " + from.note);
      const ts::io::json::Value& extra = restored->extra;
      const ts::io::json::Value* batch_size = extra.find("batch_size");
      if (batch_size == nullptr || extra.find("loss_sum") == nullptr || extra.find("samples") == nullptr) {
        throw ts::ValueError("--resume: " + from.path + " was not saved by this example");
      }
      if (batch_size->as_int() != options.batch_size) {
        throw ts::ValueError(ts::str("--resume: ", from.path, " was saved with --batch-size ",
                                     batch_size->as_int(), "; resume with the same batch size"));
      }
      state = *restored;
      loss_sum = extra.at("loss_sum").as_double();
      samples = extra.at("samples").as_int();
      saved_at = {state.step, state.epoch};
      report.checkpoint("resume", from.path, state);
      if (state.seed != options.seed) report.line(ts::str("using the checkpoint's seed ", state.seed));
    } else {
      report.line("no checkpoint in " + options.checkpoints.dir + " yet: starting from scratch");
    }
  }

  double epoch_loss_sum() { return loss_sum + example::global_sum(*world, local_loss_sum); }

  // Where training stands, for the message of a loss that is no longer finite.
  std::string where() const { return ts::str("epoch ", state.epoch, ", batch ", state.batch, " (step ", state.step, ")"); }

  void save_checkpoint() {
    ts::checkpoint::TrainingState saved = state;
    const double loss_so_far = epoch_loss_sum();
    example::require_finite_loss(loss_so_far, where());
    saved.extra = ts::io::json::Object{{"batch_size", options.batch_size}, {"loss_sum", loss_so_far}, {"samples", samples}};
    report.checkpoint("checkpoint", checkpoints->save(model, stateful(), saved), saved);
    saved_at = {state.step, state.epoch};
  }

  // PyTorch's train(): the rest of epoch state.epoch (from batch state.batch on). Returns the
  // samples this call trained on.
  int64_t train_epoch(const ts::data::DataLoader& loader) {
    model.train();
    int64_t samples_this_run = 0;
    ts::data::Epoch batches = loader.epoch(state.epoch, state.batch);
    for (const ts::data::Batch& batch : batches) {
      ts::nn::BatchScope scope({.seed = state.seed, .step = state.step, .first_row = batch.first_row});
      optimizer->zero_grad();
      ts::Tensor output = model(batch.data.to(device));
      ts::Tensor loss = ts::nll_loss(output, batch.target.to(device), {.reduction = ts::Reduction::sum}) /
                        static_cast<double>(batch.global_rows);
      loss.backward();
      optimizer->step();
      ++state.step;
      state.batch = batch.index + 1;

      ts::Tensor local_loss = loss.detach().to(ts::DType::f64);
      local_loss_sum.add_(local_loss * static_cast<double>(batch.global_rows));
      samples += batch.global_rows;
      samples_this_run += batch.global_rows;
      if (batch.index % options.log_interval == 0 || options.dry_run) {
        const double reported = example::global_sum(*world, local_loss);
        example::require_finite_loss(reported, where());
        report.train(state.epoch, batch.index, loader.size(), samples, loader.dataset_size(), reported);
      }
      if (checkpoints && options.checkpoints.due(state.step)) {
        save_checkpoint();
      } else if (checkpoints) {
        checkpoints->poll();  // a failed --async-checkpoint write stops the run here
      }
      if (options.dry_run) break;
    }
    return samples_this_run;
  }

  struct Evaluation {
    double loss_sum = 0, correct = 0;
    int64_t tested = 0;
  };

  // PyTorch's test(): each rank evaluates its part of every test batch; the sums are all-reduced.
  Evaluation evaluate(const ts::data::DataLoader& loader) {
    model.eval();
    ts::Tensor test_loss = ts::zeros({}, {.dtype = ts::DType::f64, .device = device});
    ts::Tensor correct = ts::zeros({}, {.dtype = ts::DType::f64, .device = device});
    {
      ts::NoGradGuard no_grad;
      for (const ts::data::Batch& batch : loader.epoch(0)) {
        ts::Tensor output = model(batch.data.to(device));
        ts::Tensor target = batch.target.to(device);
        test_loss.add_(ts::nll_loss(output, target, {.reduction = ts::Reduction::sum}).to(ts::DType::f64));
        correct.add_((output.argmax(1) == target).sum().to(ts::DType::f64));
        if (options.dry_run) break;
      }
    }
    const double test_loss_sum = example::global_sum(*world, test_loss);
    example::require_finite_loss(test_loss_sum, ts::str("the test set after epoch ", state.epoch));
    return {.loss_sum = test_loss_sum, .correct = example::global_sum(*world, correct),
            .tested = options.dry_run ? std::min<int64_t>(options.test_batch_size, test_set.size()) : test_set.size()};
  }

  // After the last epoch: a final checkpoint (a dry run saves only what --checkpoint-every
  // asks for), the weights with --save, and FSDP's memory report.
  void finish() {
    if (checkpoints && !options.dry_run && saved_at != std::pair<uint64_t, int64_t>{state.step, state.epoch}) {
      save_checkpoint();
    }
    if (checkpoints) checkpoints->wait();  // --async-checkpoint: the last one is on disk
    if (!options.save.empty()) {
      ts::StateDict weights = ts::fsdp::full_state_dict(model, {.rank0_only = true});
      if (world->rank() == 0) {
        ts::io::save(weights, options.save);
        report.line("saved " + options.save);
      }
    }
    report.line(ts::fsdp::memory_report(model).str());
    if (checkpoints && checkpoints->staging_bytes() > 0) {
      report.line("checkpoint staging: " + ts::format_bytes(checkpoints->staging_bytes()) + " of host memory");
    }
  }
};

int run(int argc, char** argv) {
  auto world = ts::dist::init(argc, argv);
  Options options = parse_options(argc, argv);
  if (options.threads > 0) ts::set_num_threads(options.threads);
  Run training(options, world);
  if (options.checkpoints.resume) training.resume();
  ts::data::DataLoader train_loader(training.train_set, {.batch_size = options.batch_size, .shuffle = true,
                                                         .seed = training.state.seed, .sampler = training.sampler});
  ts::data::DataLoader test_loader(training.test_set, {.batch_size = options.test_batch_size, .sampler = training.sampler});
  const ts::Device device = training.device;
  training.report.line(ts::str("MNIST: ", training.train_set.size(), " training and ", training.test_set.size(),
                               " test images; ", world->size(), " rank(s), ", ts::get_num_threads(), " thread(s) each; ",
                               options.optimizer, " lr ", training.optimizer->lr(),
                               device.is_cuda() ? ts::str("; ", device.str(), " (", ts::cuda::device_name(device.index),
                                                          "), collectives on ", training.group->backend_name(),
                                                          options.mixed_precision == "bf16" ? ", bfloat16 compute" : "")
                                                : std::string()));

  ts::checkpoint::TrainingState& state = training.state;
  while (state.epoch <= options.epochs) {
    auto started = std::chrono::steady_clock::now();
    const int64_t samples_this_run = training.train_epoch(train_loader);
    const double train_loss_sum = training.epoch_loss_sum();  // waits for the device: the epoch's end
    example::require_finite_loss(train_loss_sum, training.where());
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const Run::Evaluation test = training.evaluate(test_loader);
    training.report.epoch(state.epoch, train_loss_sum / static_cast<double>(std::max<int64_t>(training.samples, 1)),
                          test.loss_sum / test.tested, static_cast<int64_t>(test.correct), test.tested,
                          static_cast<double>(samples_this_run) / seconds, seconds);
    training.scheduler->step();
    if (options.dry_run) break;
    ++state.epoch;
    state.batch = 0;
    training.loss_sum = 0;
    training.local_loss_sum.zero_();
    training.samples = 0;
    if (training.checkpoints && options.checkpoints.every == 0) training.save_checkpoint();
  }
  training.finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return example::main_reporting_errors("mnist", argc, argv, run); }
