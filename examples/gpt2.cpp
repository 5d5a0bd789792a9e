// Tessera's GPT-2 example: trains, evaluates and samples a GPT-2 (Hugging Face's layout,
// models::GPT2) on GPT-2 tokens, with FSDP: nanoGPT's train.py and sample.py in one program.
//
//   scripts/get-gpt2-tokenizer && scripts/get-text-corpus          # data/gpt2, data/brown
//   build/examples/gpt2 --data data/brown/train.bin --val-data data/brown/val.bin --steps 300
//   mpirun -np 4 build/examples/gpt2 --data data/brown/train.bin --steps 300      # 4 ranks
//   build/examples/gpt2 --preset gpt2 --init model.safetensors --steps 0 --sample 100 --prompt "Hello"
//
// Under mpirun every rank holds a 1/N shard of every block (one FSDP unit per GPT2Block; the
// embeddings, the final norm and the tied head with the root), trains on its rows of each
// global batch of --batch-size rows, and drops what one rank would drop (masks are keyed by
// global row), so N ranks learn what one rank learns. Rank 0 prints. --help lists the flags.
//
// The program reads as PyTorch's examples do: setup (data, model, sharding, optimizer,
// schedule, checkpoints), then train_step / evaluate in a loop, then sample and save.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <tessera/tessera.h>

#include "checkpoint_flags.h"
#include "command_line.h"
#include "distributed.h"
#include "finite_loss.h"
#include "main.h"
#include "printer.h"

namespace ts = tessera;
namespace json = tessera::io::json;
namespace models = tessera::models;
namespace fs = std::filesystem;

namespace {

struct Options {
  // Data
  std::string data = "data/brown/train.bin";
  std::string val_data;
  std::string vocab = "data/gpt2";
  std::string data_order = "random";
  // Model: a preset, then any of the sizes given explicitly
  std::string preset;
  std::optional<int64_t> n_layer, n_head, n_embd, block_size, vocab_size;
  double dropout = 0.0;
  std::string dtype = "float32";
  // Training
  int64_t batch_size = 16;
  std::optional<int64_t> seq_len;  // default: the block size
  int64_t steps = 300;
  double lr = 1e-3;
  std::optional<double> min_lr;  // default: lr / 10
  int64_t warmup_steps = 30;
  std::string lr_schedule = "cosine";
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  uint64_t seed = 1;
  int threads = 0;
  // Evaluation, sampling, output
  int64_t eval_interval = 100;
  int64_t eval_batches = 0;  // 0: the whole validation file
  int64_t sample = 0;
  std::string prompt;
  double temperature = 0.8;
  int64_t top_k = 200;
  int64_t log_interval = 10;
  bool json = false;
  // Weights and checkpoints
  std::string init;
  std::string save;
  example::CheckpointFlags checkpoints;  // every = 0: at the end only
  bool allow_data_change = false;
  // Devices
  std::string device = "cpu";
  std::string dist_backend = "auto";
  std::string mixed_precision = "off";
  bool tf32 = false;
  // Memory (issue #13)
  bool activation_checkpointing = false;
  std::optional<int64_t> memory_limit;  // bytes, on the training device
};

constexpr const char* kDescription =
    "Trains a GPT-2 (Hugging Face's GPT2LMHeadModel layout) on GPT-2 tokens with FSDP, evaluates\n"
    "it and samples from it. Run alone for one rank, or under mpirun for several.";

constexpr const char* kEpilogue =
    "A resumed run continues exactly: at the same number of ranks its losses are the ones the\n"
    "uninterrupted run would have printed, bit for bit. It keeps the checkpoint's --seed and\n"
    "learning-rate schedule (--lr, --min-lr, --warmup-steps, --lr-schedule), saying so when this\n"
    "run's differ, and trains to this run's --steps. A loss or gradient norm that is not finite\n"
    "(or weights that are not, before a save) stops the run at that step, before it is reported\n"
    "or saved; the checkpoints already written are kept. A model whose weights, gradients and\n"
    "AdamW state cannot fit the memory limit or the machine is refused before anything is allocated.";

void declare_model_and_data_flags(example::Flags& flags, Options& o) {
  flags.section("data:");
  flags.value("--data", o.data, "FILE",
              "training tokens: llm.c's .bin (tessera-tokenize, scripts/get-text-corpus) or a .txt file, "
              "tokenized with --vocab");
  flags.value("--val-data", o.val_data, "FILE", "validation tokens (.bin or .txt)",
              {.default_text = "none: no evaluation"});
  flags.value("--vocab", o.vocab, "DIR",
              "GPT-2's encoder.json and vocab.bpe (scripts/get-gpt2-tokenizer), for .txt data, --prompt and "
              "printing samples");
  flags.choice("--data-order", o.data_order, {"random", "sequential"},
               "random (seeded windows, reshuffled each epoch) or sequential (llm.c's order)");
  flags.section("model:");
  flags.choice("--preset", o.preset, {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"},
               "gpt2 (124M), gpt2-medium (355M), gpt2-large (774M), gpt2-xl (1558M); the sizes below override it",
               {.default_text = "none: 4 layers, 4 heads, 256, block 256"});
  flags.value("--n-layer", o.n_layer, "N", "transformer blocks");
  flags.value("--n-head", o.n_head, "N", "attention heads");
  flags.value("--n-embd", o.n_embd, "N", "embedding width");
  flags.value("--block-size", o.block_size, "N", "the longest sequence (rows of the position embedding)");
  flags.value("--vocab-size", o.vocab_size, "N", "rows of the token embedding (nanoGPT pads GPT-2's to 50304)",
              {.default_text = "50257"});
  flags.value("--dropout", o.dropout, "P", "dropout of embeddings, attention weights and residuals");
  flags.choice("--dtype", o.dtype, {"float32", "float64"}, "the parameters' and computation's type");
}

void declare_training_flags(example::Flags& flags, Options& o) {
  flags.section("training:");
  flags.value("--batch-size", o.batch_size, "B", "rows of the global batch, split over the ranks");
  flags.value("--seq-len", o.seq_len, "T", "tokens per row, at most the block size",
              {.default_text = "the block size"});
  flags.value("--steps", o.steps, "N", "optimizer steps");
  flags.value("--lr", o.lr, "X", "peak learning rate");
  flags.value("--min-lr", o.min_lr, "X", "the cosine schedule's final rate", {.default_text = "lr / 10"});
  flags.value("--warmup-steps", o.warmup_steps, "N", "linear warmup steps (nanoGPT's: lr (step + 1) / (N + 1))");
  flags.choice("--lr-schedule", o.lr_schedule, {"cosine", "constant"},
               "cosine (warmup, then cosine decay to --min-lr at --steps: nanoGPT's get_lr) or constant (warmup, "
               "then --lr)");
  flags.value("--beta1", o.beta1, "X", "AdamW's beta1");
  flags.value("--beta2", o.beta2, "X", "AdamW's beta2");
  flags.value("--eps", o.eps, "X", "AdamW's eps");
  flags.value("--weight-decay", o.weight_decay, "X", "AdamW's, on the 2-D weights only (nanoGPT's groups)");
  flags.value("--grad-clip", o.grad_clip, "X", "clip the gradient norm to X; 0 = off (negative: refused)");
  flags.value("--seed", o.seed, "N", "initialisation, data order, dropout and sampling");
  flags.value("--threads", o.threads, "N", "CPU threads per rank", {.default_text = "OpenMP default"});
  flags.section("evaluation and sampling:");
  flags.value("--eval-interval", o.eval_interval, "N",
              "evaluate every N steps (and after the last); 0 = after the last only");
  flags.value("--eval-batches", o.eval_batches, "N", "validation batches per evaluation; 0 = the whole file");
  flags.value("--sample", o.sample, "N", "after training, generate N tokens from --prompt and print them");
  flags.value("--prompt", o.prompt, "TEXT", "the prompt", {.default_text = "none: <|endoftext|>"});
  flags.value("--temperature", o.temperature, "X",
              "sampling temperature; 0 = greedy, and a tiny one (1e-300) greedy among the tokens tied for the "
              "largest logit");
  flags.value("--top-k", o.top_k, "K", "sample among the K most likely tokens; 0 = all");
}

void declare_output_and_device_flags(example::Flags& flags, Options& o) {
  flags.section("output:");
  flags.toggle("--json", o.json,
               "one JSON object per line: a \"train\" object per step (step, loss, lr, step_ms, tokens_per_s, "
               "grad_norm), \"eval\" objects (val_loss), \"sample\", \"checkpoint\", a \"memory\" object per rank "
               "(where its bytes are) and a final \"summary\" (with peak_bytes and state_bytes)");
  flags.value("--log-interval", o.log_interval, "N", "steps between text reports when stdout is not a terminal");
  flags.section("weights and checkpoints:");
  flags.value("--init", o.init, "FILE",
              "start from these weights: Hugging Face's GPT-2 safetensors (the hub's model.safetensors, or "
              "GPT2LMHeadModel's state dict), any world size");
  flags.value("--save", o.save, "FILE",
              "save the trained weights as Hugging Face's from_pretrained reads them (\"transformer.\" names, no "
              "lm_head, metadata format=pt)");
  o.checkpoints.declare(flags, "0: at the end only");
  flags.toggle("--allow-data-change", o.allow_data_change,
               "with --resume, continue at the saved position although --data is not the file the checkpoint was "
               "trained on (its token count and the CRC32C of its first tokens are recorded); without it, refused");
  flags.section("devices:");
  flags.choice("--device", o.device, {"cpu", "cuda"}, "cpu or cuda (each rank takes the GPU of its local rank)");
  flags.choice("--dist-backend", o.dist_backend, {"auto", "nccl", "world"},
               "collectives for CUDA parameters, as the MNIST example's");
  flags.choice("--mixed-precision", o.mixed_precision, {"off", "bf16"},
               "off, or bf16: bfloat16 parameters and compute, float32 shards, optimizer state, reductions and "
               "logits (cuda)");
  flags.toggle("--tf32", o.tf32, "allow TF32 tensor cores in float32 matrix products (cuda)");
  flags.section("memory:");
  flags.toggle("--activation-checkpointing", o.activation_checkpointing,
               "recompute every GPT2Block's activations in backward instead of keeping them (bit-identical "
               "results, less memory)");
  flags.custom("--memory-limit", "SIZE",
               "refuse to hold more than SIZE on the device (e.g. 2.5GiB; as "
               "torch.cuda.set_per_process_memory_fraction): past it, an error naming the request, the bytes in "
               "use and FSDP's largest holders",
               {.default_text = "TESSERA_MEMORY_LIMIT, else none"},
               [&o](const std::string& text) { o.memory_limit = ts::parse_memory_size(text, "--memory-limit"); });
}

Options parse_options(int argc, char** argv) {
  Options o;
  example::Flags flags("gpt2", kDescription, kEpilogue);
  declare_model_and_data_flags(flags, o);
  declare_training_flags(flags, o);
  declare_output_and_device_flags(flags, o);
  flags.parse(argc, argv);

  if (o.batch_size < 1) flags.error("--batch-size must be positive");
  if (o.lr <= 0) flags.error("--lr must be positive");
  if (!o.min_lr) o.min_lr = o.lr / 10;
  if (*o.min_lr > o.lr) flags.error("--min-lr must not exceed --lr");
  if (o.warmup_steps > o.steps && o.lr_schedule == "cosine") o.warmup_steps = o.steps;
  if (o.dropout < 0 || o.dropout >= 1) flags.error("--dropout must be in [0, 1)");
  if (o.grad_clip < 0) flags.error(ts::str("--grad-clip must be >= 0 (0 turns clipping off), got ", o.grad_clip));
  if (o.temperature < 0) flags.error(ts::str("--temperature must be >= 0 (0: greedy), got ", o.temperature));
  if (o.allow_data_change && !o.checkpoints.resume) flags.error("--allow-data-change needs --resume");
  o.checkpoints.check(flags);
  if (o.device == "cpu" && o.mixed_precision != "off") {
    flags.error("--mixed-precision bf16 needs --device cuda (the CPU has no bfloat16 kernels)");
  }
  if (o.mixed_precision != "off" && o.dtype != "float32") flags.error("--mixed-precision bf16 needs --dtype float32");
  if (o.log_interval < 1) o.log_interval = 1;
  return o;
}

models::GPTConfig model_config(const Options& o) {
  models::GPTConfig config =
      o.preset.empty() ? models::GPTConfig{.n_layer = 4, .n_head = 4, .n_embd = 256, .block_size = 256}
                       : models::GPTConfig::preset(o.preset);
  if (o.n_layer) config.n_layer = *o.n_layer;
  if (o.n_head) config.n_head = *o.n_head;
  if (o.n_embd) config.n_embd = *o.n_embd;
  if (o.block_size) config.block_size = *o.block_size;
  if (o.vocab_size) config.vocab_size = *o.vocab_size;
  config.dropout = o.dropout;
  return config;
}

// Prints on rank 0 only: JSON lines, a progress bar on a terminal, or plain lines. Every
// event is one JSON object built here, so a new field is one more member in one place.
class Reporter : public example::Printer {
 public:
  Reporter(const Options& options, bool is_rank0)
      : Printer(options.json, is_rank0), steps_(options.steps), log_interval_(options.log_interval) {}

  struct Step {
    int64_t step;  // 0-based
    double loss, lr, step_ms, tokens_per_s, grad_norm;
  };
  void step(const Step& s) {
    if (!active()) return;
    if (json()) {
      print_json({{"event", "train"}, {"step", s.step}, {"loss", s.loss}, {"lr", s.lr}, {"step_ms", s.step_ms},
                  {"tokens_per_s", s.tokens_per_s}, {"grad_norm", s.grad_norm}});
    } else if (tty()) {
      const int width = 30;
      const int done = static_cast<int>(width * (s.step + 1) / std::max<int64_t>(steps_, 1));
      std::printf("\rstep %lld/%lld [%s%s] loss %.4f  lr %.2e  %.0f ms  %.0f tok/s ", static_cast<long long>(s.step + 1),
                  static_cast<long long>(steps_), std::string(static_cast<size_t>(done), '=').c_str(),
                  std::string(static_cast<size_t>(width - done), ' ').c_str(), s.loss, s.lr, s.step_ms, s.tokens_per_s);
      std::fflush(stdout);
      newline_pending_ = true;
    } else if (s.step % log_interval_ == 0 || s.step + 1 == steps_) {
      std::printf("step %lld: loss %.4f, lr %.3e, %.0f ms, %.0f tokens/s\n", static_cast<long long>(s.step), s.loss,
                  s.lr, s.step_ms, s.tokens_per_s);
      std::fflush(stdout);
    }
  }

  void eval(int64_t step, double val_loss, int64_t tokens) {
    if (!active()) return;
    if (json()) {
      print_json({{"event", "eval"}, {"step", step}, {"val_loss", val_loss}, {"val_tokens", tokens}});
      return;
    }
    end_bar();
    std::printf("step %lld: validation loss %.4f (%lld tokens)\n", static_cast<long long>(step), val_loss,
                static_cast<long long>(tokens));
    std::fflush(stdout);
  }

  void sample(const std::string& prompt, const std::vector<int64_t>& tokens, const std::optional<std::string>& text) {
    if (!active()) return;
    if (json()) {
      json::Array ids;
      for (int64_t t : tokens) ids.emplace_back(t);
      json::Object object{{"event", "sample"}, {"prompt", prompt}, {"tokens", std::move(ids)}};
      if (text) object.emplace_back("text", *text);
      print_json_object(std::move(object));
      return;
    }
    end_bar();
    if (text) {
      std::printf("---- sample ----\n%s\n----------------\n", text->c_str());
    } else {
      std::string ids;
      for (int64_t t : tokens) ids += std::to_string(t) + " ";
      std::printf("---- sample (token ids: no tokenizer) ----\n%s\n", ids.c_str());
    }
    std::fflush(stdout);
  }

  void checkpoint(const std::string& event, const std::string& path, uint64_t step) {
    if (!active()) return;
    if (json()) {
      print_json({{"event", event}, {"path", path}, {"step", static_cast<int64_t>(step)}});
      return;
    }
    end_bar();
    std::printf("%s %s (step %llu)\n", event == "resume" ? "resumed from" : "saved checkpoint", path.c_str(),
                static_cast<unsigned long long>(step));
    std::fflush(stdout);
  }

  // Where one rank's bytes are (MemoryFigures below); rank 0 prints every rank's.
  void memory(int rank, const json::Object& figures) {
    if (!active()) return;
    end_bar();
    if (json()) {
      json::Object object{{"event", "memory"}, {"rank", static_cast<int64_t>(rank)}};
      object.insert(object.end(), figures.begin(), figures.end());
      print_json_object(std::move(object));
      return;
    }
    std::string text = "rank " + std::to_string(rank) + " memory:";
    for (const auto& [name, value] : figures) text += " " + name + " " + ts::format_bytes(value.as_int());
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }

  // The run's last object: what a script reads at the end.
  void summary(json::Object fields) {
    if (!active()) return;
    end_bar();
    fields.insert(fields.begin(), json::Member{"event", "summary"});
    if (json()) {
      print_json_object(std::move(fields));
      return;
    }
    std::string text;
    for (size_t i = 1; i < fields.size(); ++i) text += (i > 1 ? ", " : "") + fields[i].first + " " + json::write(fields[i].second);
    std::printf("summary: %s\n", text.c_str());
    std::fflush(stdout);
  }

  void info(const std::string& text) {
    if (!active()) return;
    end_bar();
    line(text);
  }

 private:
  void print_json_object(json::Object object) {
    std::printf("%s\n", json::write(json::Value(std::move(object))).c_str());
    std::fflush(stdout);
  }
  void end_bar() {
    if (newline_pending_) std::printf("\n");
    newline_pending_ = false;
  }

  int64_t steps_, log_interval_;
  bool newline_pending_ = false;
};

// ---- Setup: data ----

// This rank's folder for tokenized text files, made on first use under the temporary folder
// (TMPDIR) and removed when the run ends. A run on .bin files never needs one, so a missing
// or unusable TMPDIR only matters (and is only an error, naming it) for .txt data.
class ScratchFolder {
 public:
  explicit ScratchFolder(int rank) : rank_(rank) {}
  ~ScratchFolder() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  const fs::path& path(const std::string& purpose) {
    if (!path_.empty()) return path_;
    std::error_code error;
    const fs::path temporary = fs::temp_directory_path(error);
    const char* tmpdir = std::getenv("TMPDIR");
    TS_CHECK(!error, ts::io::IOError, purpose, " needs a temporary folder, and TMPDIR ('",
             tmpdir != nullptr ? tmpdir : "", "') is not one: ", error.message());
    fs::path folder = temporary / ts::str("tessera-gpt2-", ::getpid(), "-rank", rank_);
    fs::create_directories(folder, error);
    TS_CHECK(!error, ts::io::IOError, purpose, ": cannot create the temporary folder '", folder.string(),
             "': ", error.message());
    path_ = std::move(folder);
    return path_;
  }

 private:
  int rank_;
  fs::path path_;
};

// A token file for `path`: a .bin as it is, a .txt tokenized (<|endoftext|> first, as
// tessera-tokenize does) into a file of this rank's own under `scratch`.
fs::path token_file(const std::string& path, const std::optional<ts::text::GPT2Tokenizer>& tokenizer,
                    ScratchFolder& scratch, const std::string& vocab) {
  if (fs::path(path).extension() != ".txt") return path;
  TS_CHECK(tokenizer.has_value(), ts::ValueError, "gpt2: ", path, " is text and needs GPT-2's tokenizer in ", vocab,
           " (scripts/get-gpt2-tokenizer, or --vocab DIR)");
  const std::string text = ts::io::read_regular_file(path);
  std::vector<int64_t> ids{tokenizer->eot_token()};
  tokenizer->encode(text, ids);
  std::vector<uint16_t> tokens(ids.begin(), ids.end());
  fs::path out = scratch.path("tokenizing " + path) / (fs::path(path).stem().string() + ".bin");
  ts::data::write_token_file(out, tokens);
  return out;
}

// GPT-2's tokenizer from DIR/encoder.json and DIR/vocab.bpe; none when DIR holds no
// encoder.json. A path that cannot be looked at (too long, a loop of symbolic links, no
// permission) is an error naming it; the tokenizer refuses files that are not regular (a FIFO).
std::optional<ts::text::GPT2Tokenizer> load_tokenizer(const std::string& vocab) {
  const fs::path encoder = fs::path(vocab) / "encoder.json";
  std::error_code error;
  const fs::file_status status = fs::status(encoder, error);
  if (status.type() == fs::file_type::not_found) return std::nullopt;
  TS_CHECK(!error, ts::io::IOError, "--vocab '", vocab, "': cannot look for encoder.json there: ",
           error.message());
  return ts::text::GPT2Tokenizer(vocab);
}

// The training batches; `seed` orders them (the run's, or at --resume the checkpoint's).
ts::data::DataLoader train_loader(const ts::data::TokenDataset& data, const Options& o, uint64_t seed,
                                  const ts::dist::ProcessGroup& world) {
  TS_CHECK(data.size() >= o.batch_size, ts::ValueError, "gpt2: ", data.files().front().path().string(), " holds ",
           data.size(), " windows of ", data.seq_len() + 1, " tokens, fewer than --batch-size ", o.batch_size);
  return ts::data::DataLoader(data, {.batch_size = o.batch_size, .shuffle = o.data_order == "random", .seed = seed,
                                     .drop_last = true, .sampler = {.rank = world.rank(), .world_size = world.size()}});
}

// ---- Memory ----

// This rank's bytes: the allocator's peak on the training device, and the training state
// (parameter shards, their gradients, the optimizer's state), so that peak - state is what
// activations and FSDP's unsharded buffers took at their highest.
struct MemoryFigures {
  int64_t peak = 0, parameter_shards = 0, gradient_shards = 0, optimizer_state = 0, peak_unsharded = 0;
  int64_t state() const { return parameter_shards + gradient_shards + optimizer_state; }
  json::Object json_fields() const {
    return {{"peak_bytes", peak}, {"state_bytes", state()}, {"parameter_shard_bytes", parameter_shards},
            {"gradient_shard_bytes", gradient_shards}, {"optimizer_state_bytes", optimizer_state},
            {"peak_unsharded_bytes", peak_unsharded}};
  }
};

MemoryFigures memory_figures(models::GPT2& model, const ts::optim::Optimizer& optimizer, ts::Device device) {
  const ts::fsdp::MemoryReport report = ts::fsdp::memory_report(model);
  MemoryFigures figures{.peak = ts::memory_stats(device).peak_bytes, .parameter_shards = report.parameter_shard_bytes,
                        .gradient_shards = report.gradient_shard_bytes,
                        .peak_unsharded = report.peak_unsharded_bytes};
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    for (const auto& [name, tensor] : optimizer.state(i)) figures.optimizer_state += static_cast<int64_t>(tensor.nbytes());
  }
  return figures;
}

// Every rank's figures, on every rank (one all-reduce of a [world, 5] table).
std::vector<MemoryFigures> every_ranks_figures(const MemoryFigures& mine, ts::dist::ProcessGroup& world) {
  ts::Tensor table = ts::zeros({world.size(), 5}, {.dtype = ts::DType::i64});
  const std::vector<int64_t> row{mine.peak, mine.parameter_shards, mine.gradient_shards, mine.optimizer_state,
                                 mine.peak_unsharded};
  table.select(0, world.rank()).copy_(ts::tensor<int64_t>(row));
  world.all_reduce(table);
  std::vector<MemoryFigures> all;
  for (int r = 0; r < world.size(); ++r) {
    const std::vector<int64_t> v = table.select(0, r).to_vector<int64_t>();
    all.push_back({.peak = v[0], .parameter_shards = v[1], .gradient_shards = v[2], .optimizer_state = v[3],
                   .peak_unsharded = v[4]});
  }
  return all;
}

// ---- Setup ----

// The training device, with the run's device settings applied before anything is allocated
// there (TESSERA_MEMORY_LIMIT set its limit already; --memory-limit overrides it).
ts::Device prepare_device(const Options& o, const ts::dist::ProcessGroup& world) {
  const ts::Device device = example::training_device(o.device, world);
  if (o.memory_limit) ts::set_memory_limit(device, *o.memory_limit);
  if (o.tf32) ts::cuda::set_allow_tf32(true);
  return device;
}

// The machine's memory: what every rank on it shares.
int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
}

// Refuses, before anything is allocated, a model whose training state cannot fit: each rank
// holds at least its 1/N of the parameters, their gradients and AdamW's two moments (4
// copies), however FSDP gathers the rest. Counted in 128 bits: the sizes can be absurd.
void require_memory_for(const models::GPTConfig& config, const Options& o, ts::Device device,
                        const ts::dist::ProcessGroup& world) {
  const int64_t parameters = config.num_parameters();
  const __int128 element_bytes = o.dtype == "float64" ? 8 : 4;
  const __int128 per_rank = (parameters * element_bytes * 4 + world.size() - 1) / world.size();
  auto text = [](__int128 bytes) {
    return bytes <= std::numeric_limits<int64_t>::max() ? ts::format_bytes(static_cast<int64_t>(bytes))
                                                        : std::string("more than 8 EiB");
  };
  const std::string need = ts::str("the model has ", parameters, " parameters, and its ", o.dtype,
                                   " weights, gradients and AdamW state need at least ", text(per_rank), " on each of ",
                                   world.size(), " rank(s)");
  if (const std::optional<int64_t> limit = ts::memory_limit(device); limit && per_rank > *limit) {
    throw ts::OutOfMemoryError(ts::str(need, ", more than the memory limit of ", ts::format_bytes(*limit), " on ",
                                       device.str(), " (--memory-limit or TESSERA_MEMORY_LIMIT): use more ranks or a "
                                       "smaller model"));
  }
  const int64_t machine = physical_memory_bytes();
  const int ranks_here = example::local_world_size(world);
  if (!device.is_cuda() && machine > 0 && per_rank * ranks_here > machine) {
    const std::string here = ranks_here == 1 ? std::string()
                                             : ts::str(", ", text(per_rank * ranks_here), " for the ", ranks_here,
                                                       " ranks on this machine");
    throw ts::OutOfMemoryError(ts::str(need, here, ", more than this machine's ", ts::format_bytes(machine),
                                       " of memory: use more machines or a smaller model"));
  }
}

models::GPTConfig checked_config(const Options& o, ts::Device device, const ts::dist::ProcessGroup& world) {
  models::GPTConfig config = model_config(o);
  config.check();
  require_memory_for(config, o, device, world);
  return config;
}

// The prompt's tokens, checked before training rather than after it: <|endoftext|> when
// there is no --prompt, as nanoGPT's samples start.
std::vector<int64_t> prompt_tokens(const Options& o, const std::optional<ts::text::GPT2Tokenizer>& tokenizer) {
  if (o.sample == 0 || o.prompt.empty()) return {50256};
  const size_t valid = ts::text::valid_utf8_prefix(o.prompt);
  TS_CHECK(valid == o.prompt.size(), ts::ValueError, "--prompt is not valid UTF-8: byte ", valid, " (0x", std::hex,
           static_cast<int>(static_cast<unsigned char>(o.prompt[valid])), std::dec, ") starts no UTF-8 character");
  TS_CHECK(tokenizer.has_value(), ts::ValueError, "gpt2: --prompt needs GPT-2's tokenizer in ", o.vocab,
           " (scripts/get-gpt2-tokenizer, or --vocab DIR)");
  return tokenizer->encode(o.prompt);
}

// Tokens per row: --seq-len, at most the block size (its default).
int64_t sequence_length(const Options& o, const models::GPTConfig& config) {
  const int64_t seq_len = o.seq_len.value_or(config.block_size);
  if (seq_len < 1 || seq_len > config.block_size) {
    example::usage_error("gpt2",
                         ts::str("--seq-len must be in [1, block size ", config.block_size, "], got ", seq_len));
  }
  return seq_len;
}

// The validation batches (each rank its rows of each), when there is validation data.
std::optional<ts::data::DataLoader> validation_loader(const std::optional<ts::data::TokenDataset>& data,
                                                      const Options& o, const ts::dist::ProcessGroup& world) {
  if (!data) return std::nullopt;
  const int64_t rows = std::min(o.batch_size, data->size());
  TS_CHECK(rows > 0, ts::ValueError, "gpt2: ", o.val_data, " holds no window of ", data->seq_len() + 1, " tokens");
  return ts::data::DataLoader(*data, {.batch_size = rows, .drop_last = true,
                                      .sampler = {.rank = world.rank(), .world_size = world.size()}});
}

// nanoGPT's optimizer: weight decay on the matrices (and embeddings), not on biases and norms.
ts::optim::AdamW make_optimizer(models::GPT2& model, const Options& o) {
  std::vector<ts::Tensor> decay, no_decay;
  for (auto& [name, p] : ts::fsdp::named_original_parameters(model)) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  return ts::optim::AdamW({{decay, {.weight_decay = o.weight_decay}}, {no_decay, {.weight_decay = 0.0}}},
                          {.lr = o.lr, .betas = {o.beta1, o.beta2}, .eps = o.eps});
}

// nanoGPT's get_lr's settings; "constant" is the same warmup with min_lr = lr.
ts::optim::WarmupCosineOptions schedule_settings(const Options& o) {
  return {.lr = o.lr, .min_lr = o.lr_schedule == "cosine" ? *o.min_lr : o.lr, .warmup_steps = o.warmup_steps,
          .decay_steps = std::max(o.steps, o.warmup_steps)};
}

// nanoGPT's get_lr through LambdaLR, reading `settings` at every step (warmup_cosine's
// lambda, by reference), so that --resume can put the checkpoint's in.
ts::optim::LambdaLR make_schedule(ts::optim::Optimizer& optimizer, const ts::optim::WarmupCosineOptions& settings) {
  ts::optim::warmup_cosine(settings);  // only for its ValueError naming a bad setting
  return ts::optim::LambdaLR(optimizer, [&settings](int64_t step) {
    return ts::optim::warmup_cosine_lr(step, settings) / settings.lr;
  });
}

// What a checkpoint records of the schedule this run asked for, to say at --resume when
// another run's differs.
json::Object schedule_record(const Options& o) {
  return {{"lr_schedule", o.lr_schedule}, {"lr", o.lr}, {"min_lr", *o.min_lr}, {"warmup_steps", o.warmup_steps}};
}

// What a checkpoint records of the training data, so that a resumed run does not apply its
// saved position to another file unnoticed: the token count and the CRC32C of the first
// tokens (up to 1 Mi of them: a read of 2 MiB).
json::Value data_record(const ts::data::TokenDataset& data, const std::string& path) {
  const ts::data::TokenFile& file = data.files().front();
  std::vector<uint16_t> head(static_cast<size_t>(std::min<int64_t>(file.size(), int64_t{1} << 20)));
  file.read(0, head);
  return json::Object{{"path", path}, {"tokens", file.size()}, {"head_tokens", static_cast<int64_t>(head.size())},
                      {"head_crc32c", static_cast<int64_t>(ts::io::crc32c(head.data(), head.size() * 2))}};
}

std::string describe_data(const json::Value& record) {
  return ts::str("'", record.at("path").as_string(), "' (", record.at("tokens").as_int(), " tokens, CRC32C ",
                 record.at("head_crc32c").as_int(), " of the first ", record.at("head_tokens").as_int(), ")");
}

// What a checkpoint must agree on to be resumed by this run.
json::Object run_settings(const Options& o, const models::GPTConfig& config, int64_t seq_len) {
  return {{"n_layer", config.n_layer}, {"n_head", config.n_head}, {"n_embd", config.n_embd},
          {"block_size", config.block_size}, {"vocab_size", config.vocab_size}, {"batch_size", o.batch_size},
          {"seq_len", seq_len}, {"data_order", o.data_order}};
}

void check_resumable(const json::Value& saved, const json::Object& ours, const std::string& path) {
  for (const auto& [key, value] : ours) {
    const json::Value* found = saved.find(key);
    TS_CHECK(found != nullptr, ts::ValueError, "--resume: ", path, " was not saved by this example (no '", key, "')");
    TS_CHECK(json::write(*found) == json::write(value), ts::ValueError, "--resume: ", path, " was saved with ", key,
             " ", json::write(*found), ", this run has ", json::write(value), "; resume with the same settings");
  }
}

// ---- The run: setup (the constructor), resume, train, finish ----

class Training {
 public:
  Training(const Options& o, std::shared_ptr<ts::dist::ProcessGroup> world_in)
      : options(o),
        world(std::move(world_in)),
        report(options, world->rank() == 0),
        device(prepare_device(options, *world)),
        group(example::collective_group(options.dist_backend, world, device)),
        config(checked_config(options, device, *world)),
        seq_len(sequence_length(options, config)),
        tokenizer(load_tokenizer(options.vocab)),
        prompt(prompt_tokens(options, tokenizer)),
        scratch(world->rank()),
        train_set(token_file(options.data, tokenizer, scratch, options.vocab), windows()),
        val_set(options.val_data.empty()
                    ? std::nullopt
                    : std::optional(ts::data::TokenDataset(token_file(options.val_data, tokenizer, scratch,
                                                                      options.vocab), windows()))),
        train_batches(train_loader(train_set, options, options.seed, *world)),
        val_batches(validation_loader(val_set, options, *world)),
        model(config),
        optimizer(set_up_model_and_optimizer(model, options, group, device)),
        rates(schedule_settings(options)),
        schedule(make_schedule(optimizer, rates)),
        settings(run_settings(options, config, seq_len)),
        data_file(data_record(train_set, options.data)),
        checkpoints(options.checkpoints.open(*world)),
        state{.step = 0, .epoch = 0, .batch = 0, .seed = options.seed} {
    report.info(description());
  }

  // --resume: the latest checkpoint's model, optimizer, schedule and data position, if there
  // is one (the newest complete one when latest is missing or damaged, saying so).
  void resume() {
    auto restored = checkpoints->restore(model, stateful());
    if (!restored) {
      report.info("no checkpoint in " + options.checkpoints.dir + " yet: starting from scratch");
      return;
    }
    const ts::checkpoint::ResumePoint& from = *checkpoints->resumed_from();
    if (!from.note.empty()) report.info("--resume: " + from.note);
    check_resumable(restored->extra, settings, from.path);
    check_same_data(restored->extra, *restored);
    state = *restored;
    saved_at = state.step;
    report.checkpoint("resume", from.path, state.step);
    if (state.seed != options.seed) {
      report.info(ts::str("--resume: using the checkpoint's seed ", state.seed, ", not --seed ", options.seed,
                          ": the data order, dropout and sampling continue the checkpoint's"));
      train_batches = train_loader(train_set, options, state.seed, *world);
    }
    // Another --data (with --allow-data-change) may hold fewer batches than the saved position.
    state.batch = std::min(state.batch, train_batches.size());
    continue_schedule(restored->extra);
  }

  // Steps until --steps, epoch after epoch, evaluating and saving checkpoints as asked.
  void train() {
    const auto started = std::chrono::steady_clock::now();
    while (static_cast<int64_t>(state.step) < options.steps) {
      for (const ts::data::Batch& batch : train_batches.epoch(state.epoch, state.batch)) {
        if (static_cast<int64_t>(state.step) >= options.steps) break;
        train_step(batch);
        state.batch = batch.index + 1;
        const bool last = static_cast<int64_t>(state.step) == options.steps;
        if (options.eval_interval > 0 && state.step % static_cast<uint64_t>(options.eval_interval) == 0 && !last) {
          evaluate();
        }
        if (checkpoints && options.checkpoints.due(state.step)) {
          save_checkpoint();
        } else if (checkpoints) {
          checkpoints->poll();  // a failed --async-checkpoint write stops the run here
        }
      }
      if (state.batch >= train_batches.size()) {
        ++state.epoch;
        state.batch = 0;
      }
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }

  // After the last step: an evaluation, the final checkpoint, a sample, the weights with
  // --save, and the summary with every rank's memory.
  void finish() {
    evaluate();
    if (checkpoints && saved_at != state.step) save_checkpoint();
    if (checkpoints) checkpoints->wait();  // --async-checkpoint: the last one is on disk
    if (options.sample > 0) sample();
    if (!options.save.empty()) save_weights();
    report_summary();
  }

 private:
  ts::data::TokenDatasetOptions windows() const { return {.seq_len = seq_len, .vocab_size = config.vocab_size}; }

  // Initialises the model (and converts it to --dtype), shards it, loads --init, then makes
  // the optimizer, which must be given the sharded model's parameters.
  static ts::optim::AdamW set_up_model_and_optimizer(models::GPT2& model, const Options& o,
                                                     const std::shared_ptr<ts::dist::ProcessGroup>& group,
                                                     ts::Device device) {
    model.reset_parameters(o.seed);
    if (o.dtype == "float64") model.to(ts::DType::f64);
    ts::fsdp::FullyShardOptions sharding{.wrap_policy = ts::fsdp::WrapPolicy::module_type({models::kBlockTypeName}),
                                         .gradient_reduction = ts::dist::ReduceOp::sum,
                                         .device = device};
    if (o.activation_checkpointing) sharding.activation_checkpointing = {models::kBlockTypeName};
    if (o.mixed_precision == "bf16") {
      sharding.mixed_precision = {.param_dtype = ts::DType::bf16, .reduce_dtype = ts::DType::f32,
                                  .output_dtype = ts::DType::f32};
    }
    ts::fsdp::fully_shard(model, group, sharding);
    if (!o.init.empty()) {
      const ts::StateDict weights = ts::io::load(o.init);
      example::require_finite_weights(weights, "--init " + o.init);
      model.load_hf_state_dict(weights);
    }
    return make_optimizer(model, o);
  }

  ts::checkpoint::Stateful stateful() { return {.optimizer = &optimizer, .scheduler = &schedule}; }

  // --resume onto another data file would take the saved position (epoch, batch) into other
  // tokens: refused unless --allow-data-change. Checkpoints from before the record load.
  void check_same_data(const json::Value& saved, const ts::checkpoint::TrainingState& position) {
    const json::Value* recorded = saved.find("data");
    if (recorded == nullptr) {
      report.info("--resume: the checkpoint does not record its training data (an older checkpoint): --data " +
                  options.data + " is taken as the same");
      return;
    }
    const bool same = recorded->at("tokens").as_int() == data_file.at("tokens").as_int() &&
                      recorded->at("head_tokens").as_int() == data_file.at("head_tokens").as_int() &&
                      recorded->at("head_crc32c").as_int() == data_file.at("head_crc32c").as_int();
    if (same) return;
    const std::string difference = ts::str("the checkpoint was trained on ", describe_data(*recorded), ", and --data is ",
                                           describe_data(data_file));
    TS_CHECK(options.allow_data_change, ts::ValueError, "--resume: ", difference, ": its saved position (epoch ",
             position.epoch, ", batch ", position.batch, ") would continue in other tokens; give the checkpoint's "
             "data, or --allow-data-change to continue on this file anyway");
    report.info("--resume: " + difference + "; continuing on it from the saved position (--allow-data-change)");
  }

  // The learning rates continue the checkpoint's schedule (its base rate was restored with
  // the optimizer); this run's --steps is how far training goes, and where a cosine decay ends.
  void continue_schedule(const json::Value& saved) {
    adopt_saved_schedule(saved);
    if (const json::Value* steps = saved.find("steps"); steps != nullptr && steps->as_int() != options.steps) {
      report.info(ts::str("--resume: --steps ", options.steps, " differs from the checkpoint's ", steps->as_int(),
                          ": training continues to step ", options.steps,
                          rates.min_lr != rates.lr ? ", and the cosine decay now ends there" : ""));
    }
  }

  void adopt_saved_schedule(const json::Value& saved) {
    const json::Value* schedule_saved = saved.find("schedule");
    if (schedule_saved == nullptr) return;
    std::string differences;
    for (const auto& [key, value] : schedule_record(options)) {
      const json::Value& theirs = schedule_saved->at(key);
      if (json::write(theirs) != json::write(value)) {
        std::string flag = "--" + key;
        std::replace(flag.begin(), flag.end(), '_', '-');
        differences += ts::str(differences.empty() ? "" : ", ", flag, " ", json::write(value), " (the checkpoint's ",
                               json::write(theirs), ")");
      }
    }
    if (differences.empty()) return;
    const bool cosine = schedule_saved->at("lr_schedule").as_string() == "cosine";
    rates.lr = schedule_saved->at("lr").as_double();
    rates.min_lr = cosine ? schedule_saved->at("min_lr").as_double() : rates.lr;
    rates.warmup_steps = schedule_saved->at("warmup_steps").as_int();
    rates.decay_steps = std::max(options.steps, rates.warmup_steps);
    report.info("--resume: " + differences + ": using the checkpoint's learning-rate schedule, which its optimizer "
                "state continues (start a new run to change it)");
  }

  std::string description() const {
    return ts::str("GPT-2: ", config.n_layer, " layers, ", config.n_head, " heads, ", config.n_embd, " embedding, block ",
                   config.block_size, ": ", config.num_parameters(), " parameters (", options.dtype, "); ",
                   train_set.num_tokens(), " training tokens, ", train_batches.size(), " batches of ",
                   options.batch_size, " x ", seq_len, " per epoch; ", world->size(), " rank(s), ",
                   ts::get_num_threads(), " thread(s) each",
                   device.is_cuda() ? ts::str("; ", device.str(), ", collectives on ", group->backend_name(),
                                              options.mixed_precision == "bf16" ? ", bfloat16 compute" : "")
                                    : std::string());
  }

  // One optimizer step. Each rank's loss is its rows' summed cross entropy over the global
  // batch's token count, and FSDP sums the gradients: the mean over all tokens, exact at any
  // split of the rows.
  void train_step(const ts::data::Batch& batch) {
    const double lr = optimizer.lr(0);
    const auto started = std::chrono::steady_clock::now();
    ts::nn::BatchScope scope({.seed = state.seed, .step = state.step, .first_row = batch.first_row});
    optimizer.zero_grad();
    const double global_tokens = static_cast<double>(batch.global_rows * batch.data.size(1));
    // model(ids, targets): the logits die inside, not kept through backward.
    ts::Tensor loss = model.forward(batch.data.to(device), batch.target.to(device), {.reduction = ts::Reduction::sum}) /
                      global_tokens;
    loss.backward();
    const double grad_norm = options.grad_clip > 0 ? ts::fsdp::clip_grad_norm(model, options.grad_clip) : 0.0;
    optimizer.step();
    schedule.step();
    last_loss = example::global_sum(*world, loss);  // the global loss: every rank's step is done
    example::require_finite_loss(last_loss, ts::str("step ", state.step));
    // A finite loss can come with an overflowing gradient (whose clipping then makes NaN).
    example::require_finite(grad_norm, "the gradient norm", ts::str("step ", state.step));
    const double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    const int64_t tokens = options.batch_size * seq_len;
    report.step({.step = static_cast<int64_t>(state.step), .loss = last_loss, .lr = lr, .step_ms = step_ms,
                 .tokens_per_s = static_cast<double>(tokens) / (step_ms / 1000.0), .grad_norm = grad_norm});
    if (state.step > 0) {  // the first step warms caches up
      timed_seconds += step_ms / 1000.0;
      timed_tokens += tokens;
    }
    ++state.step;
  }

  // The mean cross entropy over the validation batches (each rank its rows), in eval mode.
  void evaluate() {
    if (!val_batches) return;
    model.eval();
    ts::Tensor loss_sum = ts::zeros({}, {.dtype = ts::DType::f64, .device = device});
    int64_t tokens = 0;
    {
      ts::NoGradGuard no_grad;
      for (const ts::data::Batch& batch : val_batches->epoch(0)) {
        if (options.eval_batches > 0 && batch.index >= options.eval_batches) break;
        ts::Tensor logits = model(batch.data.to(device));
        loss_sum.add_(ts::cross_entropy(logits.flatten(0, 1), batch.target.to(device).flatten(),
                                        {.reduction = ts::Reduction::sum}).to(ts::DType::f64));
        tokens += batch.global_rows * batch.data.size(1);
      }
    }
    model.train();
    last_val_loss = example::global_sum(*world, loss_sum) / static_cast<double>(std::max<int64_t>(tokens, 1));
    example::require_finite_loss(*last_val_loss, ts::str("the validation set after step ", state.step));
    report.eval(static_cast<int64_t>(state.step), *last_val_loss, tokens);
  }

  // Before a save: a step whose loss was finite can still leave non-finite weights (an
  // infinite gradient with --grad-clip 0), and saving them would replace, and let rotation
  // prune, the last good checkpoint. Collective: every rank stops together.
  void require_finite_model(const std::string& before) {
    std::string found;
    for (const auto& [name, parameter] : model.named_parameters()) {
      if (const std::optional<int64_t> bad = ts::first_non_finite(parameter)) {
        found = ts::str(": parameter shard '", name, "' on rank ", world->rank(), " (element ", *bad, ") is not finite");
        break;
      }
    }
    const double ranks = example::global_sum(*world, ts::tensor<double>({found.empty() ? 0.0 : 1.0}).sum());
    if (ranks == 0) return;
    throw ts::ValueError(ts::str("the weights are not finite after step ", state.step, found,
                                 ": training diverged (a learning rate too large, or no --grad-clip); stopping before ",
                                 before, ", which would replace the last good weights"));
  }

  void save_checkpoint() {
    require_finite_model("the checkpoint of step " + std::to_string(state.step));
    ts::checkpoint::TrainingState saved = state;
    json::Object extra = settings;
    extra.emplace_back("data", data_file);
    extra.emplace_back("schedule", schedule_record(options));
    extra.emplace_back("steps", options.steps);
    saved.extra = json::Value(std::move(extra));
    report.checkpoint("checkpoint", checkpoints->save(model, stateful(), saved), saved.step);
    saved_at = state.step;
  }

  // Generates on every rank (the forward passes are collective); rank 0 prints.
  void sample() {
    models::GenerateOptions generation{.temperature = options.temperature, .seed = state.seed};
    if (options.top_k > 0) generation.top_k = options.top_k;
    const std::vector<int64_t> tokens =
        model.generate(ts::tensor<int64_t>(prompt).to(device), options.sample, generation).cpu().to_vector<int64_t>();
    std::optional<std::string> text;
    const bool decodable =
        tokenizer && std::all_of(tokens.begin(), tokens.end(), [&](int64_t t) { return t < tokenizer->vocab_size(); });
    if (decodable) {
      text = tokenizer->decode(std::vector<int64_t>(tokens.begin() + (options.prompt.empty() ? 1 : 0), tokens.end()));
    }
    report.sample(options.prompt, tokens, text);
  }

  void save_weights() {
    require_finite_model("--save " + options.save);
    ts::StateDict weights = ts::fsdp::full_state_dict(model, {.rank0_only = true});
    if (world->rank() == 0) models::save_gpt2_safetensors(weights, options.save);
    report.info("saved " + options.save);
  }

  void report_summary() {
    json::Object summary{{"steps", static_cast<int64_t>(state.step)}, {"seconds", seconds},
                         {"tokens_per_s", timed_seconds > 0 ? static_cast<double>(timed_tokens) / timed_seconds : 0.0},
                         {"parameters", config.num_parameters()}, {"world_size", world->size()}};
    if (state.step > 0) summary.emplace_back("loss", last_loss);
    if (last_val_loss) summary.emplace_back("val_loss", *last_val_loss);
    const std::vector<MemoryFigures> memory = every_ranks_figures(memory_figures(model, optimizer, device), *world);
    for (int r = 0; r < world->size(); ++r) report.memory(r, memory[static_cast<size_t>(r)].json_fields());
    summary.emplace_back("peak_bytes", memory[0].peak);
    summary.emplace_back("state_bytes", memory[0].state());
    if (const std::optional<int64_t> limit = ts::memory_limit(device)) summary.emplace_back("memory_limit", *limit);
    if (checkpoints) summary.emplace_back("checkpoint_staging_bytes", checkpoints->staging_bytes());
    report.summary(std::move(summary));
  }

  const Options options;
  std::shared_ptr<ts::dist::ProcessGroup> world;
  Reporter report;
  const ts::Device device;
  std::shared_ptr<ts::dist::ProcessGroup> group;
  const models::GPTConfig config;
  const int64_t seq_len;
  const std::optional<ts::text::GPT2Tokenizer> tokenizer;
  const std::vector<int64_t> prompt;  // for --sample
  ScratchFolder scratch;
  ts::data::TokenDataset train_set;
  std::optional<ts::data::TokenDataset> val_set;
  ts::data::DataLoader train_batches;
  std::optional<ts::data::DataLoader> val_batches;
  models::GPT2 model;
  ts::optim::AdamW optimizer;
  ts::optim::WarmupCosineOptions rates;  // the schedule's, read at every step
  ts::optim::LambdaLR schedule;
  const json::Object settings;
  const json::Value data_file;  // data_record of --data
  std::optional<ts::checkpoint::CheckpointManager> checkpoints;
  ts::checkpoint::TrainingState state;
  uint64_t saved_at = 0;             // the step of the newest checkpoint (or the start)
  double last_loss = 0;
  std::optional<double> last_val_loss;
  double seconds = 0;                // train()'s
  double timed_seconds = 0;          // the steps' after the first
  int64_t timed_tokens = 0;
};

int run(int argc, char** argv) {
  auto world = ts::dist::init(argc, argv);
  const Options options = parse_options(argc, argv);
  if (options.threads > 0) ts::set_num_threads(options.threads);
  Training training(options, world);
  if (options.checkpoints.resume) training.resume();
  training.train();
  training.finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return example::main_reporting_errors("gpt2", argc, argv, run); }
