// A Vision Transformer trained on MNIST (examples/vit_net.h): patch embedding, class token,
// learned positions, a pre-norm nn::TransformerEncoder with GELU, AdamW and a cosine
// schedule, as a PyTorch user writes one.
//
//   build/examples/vit_mnist --data data/mnist --threads 1   # 5 epochs: 98.0%, about 2 min (README)
//   build/examples/vit_mnist --patch-size 4 --dim 96 --depth 6        # a larger one
//   build/examples/vit_mnist --train-samples 6000 --test-samples 1000  # a quick look
//
// One process: the example has no distributed flags yet, though fsdp::fully_shard shards its
// encoder layers (README, "The ViT example"). --help lists the flags.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command_line.h"
#include "finite_loss.h"
#include "main.h"
#include "printer.h"
#include "vit_net.h"

namespace ts = tessera;

namespace {

struct Options {
  std::string data = "data/mnist";
  int64_t epochs = 5;
  int64_t batch_size = 128;
  int64_t test_batch_size = 1000;
  double lr = 3e-3;
  double weight_decay = 0.05;
  int64_t warmup_steps = 100;
  uint64_t seed = 1;
  int threads = 0;  // 0: leave OpenMP's default
  int64_t train_samples = 0;  // 0: all
  int64_t test_samples = 0;
  vit::Config model;
  std::string save;
  int64_t log_interval = 50;
  bool dry_run = false;
  bool json = false;
  std::string device = "cpu";
};

Options parse_options(int argc, char** argv) {
  Options o;
  example::Flags flags("vit_mnist",
                       "Trains a Vision Transformer (patch embedding, class token, learned positions, a pre-norm\n"
                       "TransformerEncoder with GELU, LayerNorm and a linear head) on MNIST with AdamW.");
  flags.value("--data", o.data, "DIR", "folder with the MNIST IDX files (scripts/get-mnist)");
  flags.value("--epochs", o.epochs, "N", "epochs to train");
  flags.value("--batch-size", o.batch_size, "N", "training batch size");
  flags.value("--test-batch-size", o.test_batch_size, "N", "test batch size");
  flags.value("--lr", o.lr, "X", "AdamW's peak learning rate (linear warmup, then cosine decay to 0)");
  flags.value("--weight-decay", o.weight_decay, "X", "AdamW's weight decay");
  flags.value("--warmup-steps", o.warmup_steps, "N", "steps of linear warmup");
  flags.value("--seed", o.seed, "N", "seed for initialisation and shuffling");
  flags.value("--threads", o.threads, "N", "CPU threads", {.default_text = "OpenMP default"});
  flags.value("--train-samples", o.train_samples, "N", "train on the first N training images (0: all)");
  flags.value("--test-samples", o.test_samples, "N", "test on the first N test images (0: all)");
  flags.section("model:");
  flags.value("--patch-size", o.model.patch_size, "N", "patch side in pixels (divides 28)");
  flags.value("--dim", o.model.dim, "N", "token width");
  flags.value("--depth", o.model.depth, "N", "encoder layers");
  flags.value("--heads", o.model.heads, "N", "attention heads (divide --dim)");
  flags.value("--mlp-dim", o.model.mlp_dim, "N", "feed-forward width");
  flags.value("--dropout", o.model.dropout, "X", "dropout in the encoder layers");
  flags.section("output:");
  flags.value("--save", o.save, "FILE", "save the trained weights (safetensors)");
  flags.value("--log-interval", o.log_interval, "N", "batches between progress reports");
  flags.toggle("--dry-run", o.dry_run, "run one training batch and one test batch, then stop");
  flags.toggle("--json", o.json, "print one JSON object per line instead of text");
  flags.choice("--device", o.device, {"cpu", "cuda"}, "cpu or cuda (the first GPU)");
  flags.parse(argc, argv);

  if (o.batch_size < 1 || o.test_batch_size < 1) flags.error("batch sizes must be positive");
  if (o.model.patch_size < 1 || o.model.image_size % o.model.patch_size != 0) {
    flags.error("--patch-size must divide 28, got " + std::to_string(o.model.patch_size));
  }
  if (o.model.dim < 1 || o.model.depth < 1 || o.model.heads < 1 || o.model.mlp_dim < 1) {
    flags.error("--dim, --depth, --heads and --mlp-dim must be positive");
  }
  if (o.model.dim % o.model.heads != 0) flags.error("--heads must divide --dim");
  if (o.log_interval < 1) o.log_interval = 1;
  return o;
}

// The first `limit` images of a dataset (all of them for 0), as torch.utils.data.Subset(range(limit)).
class FirstSamples : public ts::data::Dataset {
 public:
  FirstSamples(const ts::data::Dataset& dataset, int64_t limit)
      : dataset_(dataset), size_(limit > 0 ? std::min(limit, dataset.size()) : dataset.size()) {}
  int64_t size() const override { return size_; }
  ts::data::Batch get_batch(const std::vector<int64_t>& indices) const override { return dataset_.get_batch(indices); }

 private:
  const ts::data::Dataset& dataset_;
  int64_t size_;
};

class Reporter : public example::Printer {
 public:
  explicit Reporter(const Options& options) : Printer(options.json, true) {}

  void epoch(int64_t epoch, double train_loss, double test_loss, int64_t correct, int64_t tested,
             double samples_per_s, double seconds) {
    const double accuracy = static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(tested, 1));
    if (json()) {
      print_json({{"event", "epoch"}, {"epoch", epoch}, {"train_loss", train_loss}, {"test_loss", test_loss},
                  {"test_accuracy", accuracy}, {"samples_per_s", samples_per_s}, {"seconds", seconds}});
      return;
    }
    if (tty()) std::printf("\n");
    std::printf("\nTest set: Average loss: %.4f, Accuracy: %lld/%lld (%.2f%%)  [%.0f samples/s, %.1f s]\n\n", test_loss,
                static_cast<long long>(correct), static_cast<long long>(tested), 100.0 * accuracy, samples_per_s,
                seconds);
    std::fflush(stdout);
  }
};

// Setup, train_epoch, evaluate, as PyTorch's examples read.
struct Run {
  Options options;
  Reporter report;
  ts::data::MNIST train_images, test_images;
  FirstSamples train_set, test_set;
  ts::Device device;
  vit::ViT model;
  ts::optim::AdamW optimizer;
  // Linear warmup to --lr, then cosine decay to 0 by the last step; stepped every batch.
  ts::optim::LinearLR warmup;
  ts::optim::CosineAnnealingLR cosine;
  ts::optim::SequentialLR schedule;
  int64_t step = 0;

  static int64_t total_steps(const Options& o, int64_t samples) {
    return std::max<int64_t>(1, o.epochs * ((samples + o.batch_size - 1) / o.batch_size));
  }

  explicit Run(const Options& o)
      : options(o),
        report(o),
        train_images(o.data, ts::data::Split::train, ts::data::kMnistNormalize),
        test_images(o.data, ts::data::Split::test, ts::data::kMnistNormalize),
        train_set(train_images, o.train_samples),
        test_set(test_images, o.test_samples),
        device(o.device == "cuda" ? ts::Device::cuda(0) : ts::Device::cpu()),
        model((ts::manual_seed(o.seed), o.model)),
        optimizer(model.parameters(), {.lr = o.lr, .weight_decay = o.weight_decay}),
        warmup(optimizer, {.start_factor = 1e-3, .end_factor = 1.0, .total_iters = std::max<int64_t>(o.warmup_steps, 1)}),
        cosine(optimizer, std::max<int64_t>(1, total_steps(o, train_set.size()) - std::max<int64_t>(o.warmup_steps, 1))),
        schedule(optimizer, {warmup, cosine}, {std::max<int64_t>(o.warmup_steps, 1)}) {
    model.to(device);
  }

  // One epoch; returns the mean training loss.
  double train_epoch(const ts::data::DataLoader& loader, int64_t epoch) {
    model.train();
    ts::Tensor loss_sum = ts::zeros({}, {.dtype = ts::DType::f64, .device = device});
    int64_t samples = 0;
    for (const ts::data::Batch& batch : loader.epoch(epoch)) {
      optimizer.zero_grad();
      ts::Tensor loss = ts::cross_entropy(model(batch.data.to(device)), batch.target.to(device));
      loss.backward();
      optimizer.step();
      schedule.step();
      ++step;
      loss_sum.add_(loss.detach().to(ts::DType::f64) * static_cast<double>(batch.rows()));
      samples += batch.rows();
      if (batch.index % options.log_interval == 0 || options.dry_run) {
        const double reported = loss.item<float>();
        example::require_finite_loss(reported, ts::str("epoch ", epoch, ", batch ", batch.index, " (step ", step, ")"));
        report.train(epoch, batch.index, loader.size(), samples, loader.dataset_size(), reported);
      }
      if (options.dry_run) break;
    }
    const double mean = loss_sum.cpu().item<double>() / static_cast<double>(std::max<int64_t>(samples, 1));
    example::require_finite_loss(mean, ts::str("the end of epoch ", epoch));
    return mean;
  }

  struct Evaluation {
    double loss = 0;
    int64_t correct = 0, tested = 0;
  };

  Evaluation evaluate(const ts::data::DataLoader& loader) {
    model.eval();
    ts::NoGradGuard no_grad;
    ts::Tensor loss_sum = ts::zeros({}, {.dtype = ts::DType::f64, .device = device});
    ts::Tensor correct = ts::zeros({}, {.dtype = ts::DType::i64, .device = device});
    int64_t tested = 0;
    for (const ts::data::Batch& batch : loader.epoch(0)) {
      ts::Tensor logits = model(batch.data.to(device));
      ts::Tensor target = batch.target.to(device);
      loss_sum.add_(ts::cross_entropy(logits, target, {.reduction = ts::Reduction::sum}).to(ts::DType::f64));
      correct.add_((logits.argmax(1) == target).sum().to(ts::DType::i64));
      tested += batch.rows();
      if (options.dry_run) break;
    }
    return {.loss = loss_sum.cpu().item<double>() / static_cast<double>(std::max<int64_t>(tested, 1)),
            .correct = correct.cpu().item<int64_t>(), .tested = tested};
  }
};

int64_t parameter_count(ts::nn::Module& model) {
  int64_t count = 0;
  for (const ts::Tensor& parameter : model.parameters()) count += parameter.numel();
  return count;
}

int run(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  if (options.threads > 0) ts::set_num_threads(options.threads);
  Run training(options);
  ts::data::DataLoader train_loader(training.train_set,
                                    {.batch_size = options.batch_size, .shuffle = true, .seed = options.seed});
  ts::data::DataLoader test_loader(training.test_set, {.batch_size = options.test_batch_size});
  const vit::Config& m = options.model;
  const int64_t tokens = (m.image_size / m.patch_size) * (m.image_size / m.patch_size) + 1;
  training.report.line(ts::str("ViT on MNIST: ", training.train_set.size(), " training and ", training.test_set.size(),
                               " test images; ", tokens, " tokens of ", m.dim, ", ", m.depth, " layers, ", m.heads,
                               " heads, ", parameter_count(training.model), " parameters; ", ts::get_num_threads(),
                               " thread(s), ", training.device.str()));
  for (int64_t epoch = 1; epoch <= options.epochs; ++epoch) {
    const auto started = std::chrono::steady_clock::now();
    const double train_loss = training.train_epoch(train_loader, epoch);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const Run::Evaluation test = training.evaluate(test_loader);
    const double trained = options.dry_run ? std::min(options.batch_size, training.train_set.size())
                                           : static_cast<double>(training.train_set.size());
    training.report.epoch(epoch, train_loss, test.loss, test.correct, test.tested, trained / seconds, seconds);
    if (options.dry_run) break;
  }
  if (!options.save.empty()) {
    ts::io::save(training.model.state_dict(), options.save);
    training.report.line("saved " + options.save);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return example::main_reporting_errors("vit_mnist", argc, argv, run); }
