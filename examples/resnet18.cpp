// Tessera's ResNet-18 example: torchvision's ResNet-18 trained on an image folder with FSDP,
// one FSDP unit per residual block (the seed article's second example).
//
//   build/examples/make_image_folder data/images             # a small synthetic dataset
//   build/examples/resnet18 --data data/images --epochs 5
//   mpirun -np 2 build/examples/resnet18 --data data/images --epochs 5
//
// --data DIR holds DIR/train/<class>/* and DIR/val/<class>/* (PNG or JPEG), as ImageNet
// is laid out for torchvision's ImageFolder. Training images go through Resize(8/7 of
// --image-size), CenterCrop(--image-size), RandomHorizontalFlip, ToTensor and ImageNet's
// Normalize; validation images through the same without the flip. SGD with momentum and
// weight decay, as PyTorch's ImageNet example (its LR schedule: x0.1 every --lr-step epochs;
// its rate 0.1 for 256 images per batch, scaled to --batch-size).
//
// Under mpirun every rank holds a 1/N shard of each block (and of the stem and head), sees
// its rows of each global batch, and decodes only its own images. Batch norm normalises
// with each rank's own rows (as PyTorch's DDP and FSDP do without SyncBatchNorm); the
// running statistics, replicated buffers, are averaged over the ranks before each
// evaluation and checkpoint, so every rank evaluates and saves the same model.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>
#include <string>

#include <tessera/tessera.h>

#include "command_line.h"
#include "finite_loss.h"
#include "initial_weights.h"
#include "main.h"
#include "printer.h"

namespace ts = tessera;
namespace data = tessera::data;

namespace {

struct Options {
  std::string data = "data/images";
  int64_t epochs = 10;
  int64_t batch_size = 32;
  int64_t test_batch_size = 64;
  double lr = 0;  // 0: 0.1 * batch_size / 256, the ImageNet recipe's rate scaled to the batch
  double momentum = 0.9;
  double weight_decay = 1e-4;
  int64_t lr_step = 30;
  int64_t image_size = 64;
  int64_t width = 64;
  uint64_t seed = 1;
  int threads = 0;  // 0: leave OpenMP's default
  int decode_threads = 2;
  std::string save;
  std::string init;
  int64_t log_interval = 10;
  bool dry_run = false;
  bool json = false;
};

// Losses summed over a rank's rows (divided by the global batch size where needed).
const ts::CrossEntropyOptions kSummed{.weight = {}, .reduction = ts::Reduction::sum, .ignore_index = -100};

Options parse_options(int argc, char** argv) {
  Options o;
  example::Flags flags("resnet18",
                       "Trains torchvision's ResNet-18 on an image folder with FSDP (one unit per residual block).\n"
                       "Run alone for one rank, or under mpirun for several.");
  flags.value("--data", o.data, "DIR",
              "folder with train/<class>/ and val/<class>/ images (build/examples/make_image_folder DIR writes a "
              "synthetic one)");
  flags.value("--epochs", o.epochs, "N", "epochs to train");
  flags.value("--batch-size", o.batch_size, "N", "global training batch size");
  flags.value("--test-batch-size", o.test_batch_size, "N", "validation batch size");
  flags.value("--lr", o.lr, "X", "SGD learning rate",
              {.default_text = "0.1 x batch size / 256, as PyTorch's ImageNet recipe (0.1 at 256) scaled linearly"});
  flags.value("--momentum", o.momentum, "X", "SGD momentum");
  flags.value("--weight-decay", o.weight_decay, "X", "SGD weight decay");
  flags.value("--lr-step", o.lr_step, "N", "multiply the learning rate by 0.1 every N epochs");
  flags.value("--image-size", o.image_size, "N",
              "training and validation crop size; images are first resized to 8/7 of it (torchvision's 256 -> 224)");
  flags.value("--width", o.width, "N",
              "channels of the first stage; 64 is ResNet-18, smaller is a narrower network of the same shape, for "
              "quick trials");
  flags.value("--seed", o.seed, "N", "seed for initialisation, shuffling and flips");
  flags.value("--threads", o.threads, "N", "CPU threads per rank", {.default_text = "OpenMP default"});
  flags.value("--decode-threads", o.decode_threads, "N", "threads per rank decoding images");
  flags.value("--init", o.init, "FILE",
              "start from these weights (safetensors, torchvision's names, e.g. from "
              "tools/torchvision_to_safetensors.py); a head (fc) for another number of classes is left at its "
              "initialisation");
  flags.value("--save", o.save, "FILE", "save the weights after every epoch (safetensors, torchvision's names)");
  flags.value("--log-interval", o.log_interval, "N", "batches between progress reports");
  flags.toggle("--dry-run", o.dry_run, "run one training batch and one validation batch, then stop");
  flags.toggle("--json", o.json, "print one JSON object per line instead of text");
  flags.parse(argc, argv);

  if (o.batch_size < 1 || o.test_batch_size < 1) flags.error("batch sizes must be positive");
  // ResNet halves the image five times; below 32 pixels layer4 would have nothing left.
  if (o.image_size < 32) flags.error("--image-size must be at least 32, got " + std::to_string(o.image_size));
  if (o.width < 1 || o.lr_step < 1 || o.decode_threads < 1) flags.error("--width, --lr-step and --decode-threads must be positive");
  if (o.log_interval < 1) o.log_interval = 1;
  if (o.lr == 0) o.lr = 0.1 * static_cast<double>(o.batch_size) / 256.0;
  return o;
}

// Prints on rank 0 only: JSON lines, a progress bar on a terminal, or plain lines.
class Reporter : public example::Printer {
 public:
  Reporter(const Options& options, bool is_rank0) : Printer(options.json, is_rank0) {}

  void epoch(int64_t epoch, double train_loss, double val_loss, int64_t correct, int64_t val_total, double lr,
             double samples_per_s, double seconds) {
    if (!active()) return;
    double accuracy = static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(val_total, 1));
    if (json()) {
      print_json({{"event", "epoch"}, {"epoch", epoch}, {"train_loss", train_loss}, {"val_loss", val_loss},
                  {"val_accuracy", accuracy}, {"lr", lr}, {"samples_per_s", samples_per_s}, {"seconds", seconds}});
      return;
    }
    if (tty()) std::printf("\n");
    std::printf("Epoch %lld: train loss %.4f, validation loss %.4f, accuracy %lld/%lld (%.2f%%)  [lr %g, %.1f images/s, %.1f s]\n",
                static_cast<long long>(epoch), train_loss, val_loss, static_cast<long long>(correct),
                static_cast<long long>(val_total), 100.0 * accuracy, lr, samples_per_s, seconds);
    std::fflush(stdout);
  }
};

// Batch norm's running statistics are per-rank buffers (each rank saw its own rows);
// averaging them makes every rank's model, and the checkpoint, the same.
void average_running_statistics(ts::nn::Module& model, ts::dist::ProcessGroup& world) {
  if (world.size() == 1) return;
  for (auto& [name, buffer] : model.named_buffers()) {
    if (ts::is_floating(buffer.dtype())) world.all_reduce(buffer, ts::dist::ReduceOp::avg);
  }
}

// --init: torchvision-named weights. A head for another number of classes is dropped.
void load_initial_weights(ts::models::ResNet& model, const Options& options, Reporter& report) {
  const ts::io::SafetensorsFile file(options.init);  // the header only
  const int64_t classes = model.options().num_classes;
  const bool other_head = file.contains("fc.weight") && file.entry("fc.weight").shape.size() == 2 &&
                          file.entry("fc.weight").shape[0] != classes;
  if (other_head) {
    report.line(ts::str("--init: ", options.init, " has a head for ", file.entry("fc.weight").shape[0],
                                   " classes; fc starts from its initialisation for ", classes));
  }
  const std::set<std::string> skipped = other_head ? std::set<std::string>{"fc.weight", "fc.bias"} : std::set<std::string>{};
  model.load_state_dict(example::read_initial_weights(model, file, !other_head, skipped), !other_head);
}

struct TrainedEpoch {
  double loss_sum = 0;  // the global loss summed over the epoch's samples
  int64_t samples = 0;
};

// PyTorch's train(): one epoch of the sharded model.
TrainedEpoch train_epoch(ts::models::ResNet& model, ts::optim::SGD& optimizer, const data::DataLoader& loader,
                         ts::dist::ProcessGroup& world, const Options& options, Reporter& report, int64_t epoch) {
  model.train();
  TrainedEpoch out;
  for (const data::Batch& batch : loader.epoch(epoch)) {
    optimizer.zero_grad();
    ts::Tensor output = model(batch.data);
    ts::Tensor loss = ts::cross_entropy(output, batch.target, kSummed) / static_cast<double>(batch.global_rows);
    loss.backward();
    optimizer.step();

    ts::Tensor global_loss = loss.detach().to(ts::DType::f64);
    world.all_reduce(global_loss);
    example::require_finite_loss(global_loss.item<double>(), ts::str("epoch ", epoch, ", batch ", batch.index));
    out.loss_sum += global_loss.item<double>() * static_cast<double>(batch.global_rows);
    out.samples += batch.global_rows;
    if (batch.index % options.log_interval == 0 || options.dry_run) {
      report.train(epoch, batch.index, loader.size(), out.samples, loader.size() * options.batch_size,
                   global_loss.item<double>());
    }
    if (options.dry_run) break;
  }
  return out;
}

struct Validation {
  double loss_sum = 0;
  int64_t correct = 0, images = 0;
};

// PyTorch's test(): each rank evaluates its rows of every batch (every rank runs every
// batch, some with no rows, so that FSDP's collectives stay in step); the sums are
// all-reduced.
Validation evaluate(ts::models::ResNet& model, const data::DataLoader& loader, ts::dist::ProcessGroup& world,
                    const Options& options, int64_t epoch) {
  model.eval();
  ts::Tensor totals = ts::zeros({3}, {.dtype = ts::DType::f64});  // loss sum, correct, images
  {
    ts::NoGradGuard no_grad;
    for (const data::Batch& batch : loader.epoch(0)) {
      ts::Tensor output = model(batch.data);
      if (batch.rows() > 0) {
        double loss = ts::cross_entropy(output, batch.target, kSummed).to(ts::DType::f64).item<double>();
        double correct = (output.argmax(1) == batch.target).sum().to(ts::DType::f64).item<double>();
        totals.add_(ts::tensor<double>({loss, correct, static_cast<double>(batch.rows())}));
      }
      if (options.dry_run) break;
    }
  }
  world.all_reduce(totals);
  std::vector<double> sums = totals.to_vector<double>();
  example::require_finite_loss(sums[0], ts::str("the validation set after epoch ", epoch));
  return {.loss_sum = sums[0], .correct = static_cast<int64_t>(sums[1]), .images = static_cast<int64_t>(sums[2])};
}

// --save: the full weights with torchvision's names, written by rank 0 after every epoch.
void save_weights(ts::models::ResNet& model, ts::dist::ProcessGroup& world, const Options& options, Reporter& report,
                  int64_t epoch, int64_t classes) {
  ts::StateDict weights = ts::fsdp::full_state_dict(model, {.rank0_only = true});
  if (world.rank() == 0) {
    ts::io::save(weights, options.save, {{"epoch", std::to_string(epoch)}, {"classes", ts::str(classes)}});
    report.line("saved " + options.save + " (epoch " + std::to_string(epoch) + ")");
  }
}

int run(int argc, char** argv) {
  auto world = ts::dist::init(argc, argv);
  Options options = parse_options(argc, argv);
  if (options.threads > 0) ts::set_num_threads(options.threads);
  Reporter report(options, world->rank() == 0);
  if (options.batch_size < 2 * world->size()) {
    // Batch norm in training needs more than one value per channel, and layer4's plane can be 1x1.
    example::usage_error("resnet18", ts::str("--batch-size must give each of the ", world->size(),
                                             " ranks at least 2 images, got ", options.batch_size));
  }

  const int64_t resize = options.image_size * 8 / 7;
  data::ImageFolder train_set(std::filesystem::path(options.data) / "train",
                              {.transforms = {data::Resize(resize), data::CenterCrop(options.image_size),
                                              data::RandomHorizontalFlip()},
                               .normalize = data::kImageNetNormalize, .seed = options.seed,
                               .decode_threads = options.decode_threads});
  data::ImageFolder val_set(std::filesystem::path(options.data) / "val",
                            {.transforms = {data::Resize(resize), data::CenterCrop(options.image_size)},
                             .normalize = data::kImageNetNormalize, .decode_threads = options.decode_threads});
  TS_CHECK(train_set.classes() == val_set.classes(), data::DataError, "resnet18: the classes of '",
           train_set.root().string(), "' and '", val_set.root().string(), "' differ");
  const int64_t classes = static_cast<int64_t>(train_set.classes().size());
  TS_CHECK(train_set.size() >= options.batch_size, data::DataError, "resnet18: ", train_set.size(),
           " training images are fewer than one batch of ", options.batch_size);

  data::DistributedSampler sampler{.rank = world->rank(), .world_size = world->size()};
  // drop_last: every training batch is full, so every rank has rows for batch norm.
  data::DataLoader train_loader(train_set, {.batch_size = options.batch_size, .shuffle = true, .seed = options.seed,
                                            .drop_last = true, .sampler = sampler});
  data::DataLoader val_loader(val_set, {.batch_size = options.test_batch_size, .sampler = sampler});

  auto model = ts::models::resnet18({.num_classes = classes, .width = options.width});
  model->reset_parameters(options.seed);
  // One unit per residual block; the stem (conv1, bn1) and the head (fc) stay in the root unit.
  // Each rank's loss is its rows' sum over the global batch size, and gradients are summed.
  ts::fsdp::fully_shard(*model, world, {.wrap_policy = ts::fsdp::WrapPolicy::module_type({"BasicBlock"}),
                                        .gradient_reduction = ts::dist::ReduceOp::sum});
  if (!options.init.empty()) load_initial_weights(*model, options, report);
  ts::optim::SGD optimizer(model->parameters(),
                           {.lr = options.lr, .momentum = options.momentum, .weight_decay = options.weight_decay});
  ts::optim::StepLR scheduler(optimizer, options.lr_step, 0.1);

  int64_t parameters = 0;
  for (const auto& unit : ts::fsdp::units(*model)) parameters += unit.layout.flat_numel();
  report.line(ts::str("ResNet-18", options.width == 64 ? "" : " (width " + std::to_string(options.width) + ")",
                                 ": ", parameters, " parameters in ", ts::fsdp::units(*model).size(), " FSDP units; ",
                                 classes, " classes, ", train_set.size(), " training and ", val_set.size(),
                                 " validation images at ", options.image_size, "x", options.image_size, "; ",
                                 world->size(), " rank(s), ", ts::get_num_threads(), " thread(s) each"));
  if (train_set.skipped_files() + val_set.skipped_files() > 0) {
    report.line(ts::str("note: ", train_set.skipped_files() + val_set.skipped_files(),
                                   " image files of types Tessera does not decode were skipped"));
  }

  for (int64_t epoch = 1; epoch <= options.epochs; ++epoch) {
    const double lr = optimizer.lr();
    auto started = std::chrono::steady_clock::now();
    const TrainedEpoch trained = train_epoch(*model, optimizer, train_loader, *world, options, report, epoch);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    average_running_statistics(*model, *world);
    const Validation validation = evaluate(*model, val_loader, *world, options, epoch);
    report.epoch(epoch, trained.loss_sum / static_cast<double>(std::max<int64_t>(trained.samples, 1)),
                 validation.loss_sum / static_cast<double>(std::max<int64_t>(validation.images, 1)), validation.correct,
                 validation.images, lr, static_cast<double>(trained.samples) / seconds, seconds);
    scheduler.step();
    if (!options.save.empty()) save_weights(*model, *world, options, report, epoch, classes);
    if (options.dry_run) break;
  }
  report.line(ts::fsdp::memory_report(*model).str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return example::main_reporting_errors("resnet18", argc, argv, run); }
