// examples/gpt2 as a user runs it, on a tiny GPT (2 layers, width 32, block 16) and a
// token file whose next token is always predictable: flags and usage errors, one JSON
// object per step with nanoGPT's learning rates, evaluation lines, --save writing Hugging
// Face's names that --init reads back, greedy sampling, clear errors for bad files, and
// --resume continuing bit for bit. Under mpirun -np 2 (suite dist) the losses of a float64
// run equal the one-rank run's and a greedy sample is the same. Data safety (issues #31 and
// #32): a non-finite loss or weights stop the run before a save, FIFOs and unusable paths
// are refused without waiting, a token file truncated during training is named, absurd
// sizes are refused before allocating, and --resume keeps the checkpoint's seed and
// schedule and refuses another data file.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "../text/tiny_vocabulary.h"
#include "example_test.h"

using example_test::events;
using test_support::program_from_env;
using test_support::run_program;

namespace {

Run run_example(const std::string& arguments) { return example_test::run_program_of("GPT2_EXAMPLE", arguments); }

// The example under `timeout`: a run that would block (on a FIFO) fails the test instead of
// hanging it (status 124).
Run run_bounded(const std::string& arguments, const std::string& environment = "") {
  return run_program(environment + " timeout 60 " + program_from_env("GPT2_EXAMPLE") + " " + arguments);
}

// Tokens 100, 101, ..., 131, 100, ...: a cycle of 32 the model learns within a few steps.
void write_cycle(const std::filesystem::path& file, size_t tokens) {
  std::vector<uint16_t> ids(tokens);
  for (size_t i = 0; i < tokens; ++i) ids[i] = static_cast<uint16_t>(100 + i % 32);
  ts::data::write_token_file(file, ids);
}

struct Data {
  TempDir dir;
  std::string train, val;
  Data() : train((dir / "train.bin").string()), val((dir / "val.bin").string()) {
    write_cycle(train, 4096);
    write_cycle(val, 512);
  }
};

const std::string kTiny = " --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch-size 4 --threads 1 --json";

// The losses as printed: shortest round-trip text, so equal text is equal bits.
std::vector<std::string> printed_losses(const std::string& out) {
  std::vector<std::string> losses;
  for (const json::Value& step : events(out, "train")) losses.push_back(json::write(step.at("loss")));
  return losses;
}

// An 8-step run (dropout on) that saves checkpoints at steps 4 and 8, and its losses.
struct CheckpointedRun {
  Data data;
  std::string checkpoints = (data.dir / "ckpt").string();
  std::string common = "--data " + data.train + kTiny + " --steps 8 --lr 0.01 --warmup-steps 2 --dropout 0.1" +
                       " --checkpoint-dir " + checkpoints + " --checkpoint-every 4";
  Run full = run_example(common);
  std::vector<std::string> losses = printed_losses(full.out);

  CheckpointedRun() {
    INFO(full.err);
    REQUIRE(full.status == 0);
    REQUIRE(losses.size() == 8);
  }
};

}  // namespace

TEST_CASE("--help lists the issue's flags; bad values are usage errors") {
  Run help = run_example("--help");
  CHECK(help.status == 0);
  for (const char* flag :
       {"--data", "--val-data", "--vocab", "--preset", "--n-layer", "--n-head", "--n-embd", "--block-size",
        "--batch-size", "--seq-len", "--steps", "--lr", "--min-lr", "--warmup-steps", "--lr-schedule", "--beta1",
        "--beta2", "--eps", "--weight-decay", "--grad-clip", "--dropout", "--dtype", "--data-order", "--threads",
        "--seed", "--init", "--save", "--checkpoint-dir", "--checkpoint-every", "--resume", "--sample", "--prompt",
        "--temperature", "--top-k", "--eval-interval", "--json", "--device", "--mixed-precision"}) {
    CHECK_MESSAGE(contains(help.out, flag), flag);
  }
  Run dtype = run_example("--dtype float16");
  CHECK(dtype.status == 2);
  CHECK(contains(dtype.err, "--dtype must be one of float32, float64, got 'float16'"));
  Run schedule = run_example("--lr-schedule linear");
  CHECK(schedule.status == 2);
  CHECK(contains(schedule.err, "--lr-schedule must be one of cosine, constant"));
  Run preset = run_example("--preset gpt3");
  CHECK(preset.status == 2);
  CHECK(contains(preset.err, "--preset must be one of gpt2, gpt2-medium, gpt2-large, gpt2-xl"));
  Data data;
  Run seq = run_example("--data " + data.train + kTiny + " --seq-len 17");
  CHECK(seq.status == 2);
  CHECK(contains(seq.err, "--seq-len must be in [1, block size 16], got 17"));
  CHECK(run_example("--steps x").status == 2);
  CHECK(run_example("--resume").status == 2);
  CHECK(run_example("--mixed-precision bf16").status == 2);  // needs --device cuda
  CHECK(run_example("--frobnicate").status == 2);
}

TEST_CASE("training prints a JSON object per step with nanoGPT's rates, evaluations and a summary") {
  Data data;
  Run run = run_example("--data " + data.train + " --val-data " + data.val + kTiny +
                        " --steps 12 --lr 0.01 --min-lr 0.001 --warmup-steps 3 --eval-interval 6 --eval-batches 2");
  INFO(run.err);
  REQUIRE(run.status == 0);
  std::vector<json::Value> steps = events(run.out, "train");
  REQUIRE(steps.size() == 12);
  const ts::optim::WarmupCosineOptions schedule{.lr = 0.01, .min_lr = 0.001, .warmup_steps = 3, .decay_steps = 12};
  for (int64_t i = 0; i < 12; ++i) {
    const json::Value& step = steps[static_cast<size_t>(i)];
    CHECK(step.at("step").as_int() == i);
    CHECK(step.at("lr").as_double() == ts::optim::warmup_cosine_lr(i, schedule));  // the rate this step used
    CHECK(step.at("step_ms").as_double() > 0);
    CHECK(step.at("tokens_per_s").as_double() > 0);
    CHECK(step.at("grad_norm").as_double() > 0);
  }
  CHECK(steps[0].at("lr").as_double() == doctest::Approx(0.01 / 4).epsilon(1e-15));  // nanoGPT: lr (it + 1) / (warmup + 1)
  // The first loss is near ln(50257) = 10.8 (GPT-2's init); the cycle is learnt quickly
  // (measured: 10.84 -> 7.27 in 12 steps).
  const double first = steps.front().at("loss").as_double(), last = steps.back().at("loss").as_double();
  MESSAGE("loss ", first, " -> ", last);
  CHECK(std::abs(first - std::log(50257.0)) < 0.2);
  CHECK(last < first - 3);
  std::vector<json::Value> evals = events(run.out, "eval");
  REQUIRE(evals.size() == 2);
  CHECK(evals[0].at("step").as_int() == 6);
  CHECK(evals[1].at("step").as_int() == 12);
  CHECK(evals[0].at("val_tokens").as_int() == 2 * 4 * 16);
  CHECK(evals[1].at("val_loss").as_double() < evals[0].at("val_loss").as_double());
  std::vector<json::Value> summary = events(run.out, "summary");
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].at("steps").as_int() == 12);
  CHECK(summary[0].at("val_loss").as_double() == evals[1].at("val_loss").as_double());
  CHECK(summary[0].at("parameters").as_int() == ts::models::GPTConfig{.n_layer = 2, .n_head = 2, .n_embd = 32,
                                                                       .block_size = 16}.num_parameters());
}

TEST_CASE("--save writes Hugging Face's names; --init reads them back and --sample decodes greedily") {
  Data data;
  const std::string weights = (data.dir / "gpt2.safetensors").string();
  Run trained = run_example("--data " + data.train + kTiny + " --steps 40 --lr 0.02 --warmup-steps 2 --save " + weights);
  INFO(trained.err);
  REQUIRE(trained.status == 0);
  ts::StateDict saved = ts::io::load(weights);
  CHECK(saved.size() == 2 + 12 * 2 + 2);  // wte, wpe; 12 tensors per block; ln_f
  CHECK(saved.contains("transformer.wte.weight"));
  CHECK(saved.contains("transformer.h.1.attn.c_attn.weight"));
  CHECK_FALSE(saved.contains("lm_head.weight"));  // tied: from_pretrained restores it from wte
  CHECK(saved.at("transformer.h.0.mlp.c_fc.weight").sizes() == ts::Shape{32, 128});  // Conv1D: [in, out]
  CHECK(saved.at("transformer.wpe.weight").sizes() == ts::Shape{16, 32});
  CHECK(ts::io::load_metadata(weights).at("format") == "pt");

  // The trained model (measured: loss 0.09 after 40 steps) continues the cycle from its
  // first guess after <|endoftext|>: 101 -> 102 103 ...
  Run sampled = run_example("--data " + data.train + kTiny + " --steps 0 --init " + weights +
                            " --sample 6 --temperature 0 --vocab " + (data.dir / "no-vocab").string());
  INFO(sampled.err);
  REQUIRE(sampled.status == 0);
  std::vector<json::Value> samples = events(sampled.out, "sample");
  REQUIRE(samples.size() == 1);
  std::vector<int64_t> tokens;
  for (const json::Value& id : samples[0].at("tokens").as_array()) tokens.push_back(id.as_int());
  REQUIRE(tokens.size() == 7);  // <|endoftext|> and 6 new tokens
  CHECK(tokens[0] == 50256);
  for (size_t i = 2; i < tokens.size(); ++i) CHECK(tokens[i] == 100 + (tokens[i - 1] - 100 + 1) % 32);
}

TEST_CASE("bad files end the run with a message naming them") {
  Data data;
  Run missing = run_example("--data " + (data.dir / "absent.bin").string() + kTiny + " --steps 1");
  CHECK(missing.status == 1);
  CHECK(contains(missing.err, "absent.bin"));
  Bytes bytes = data_test::read_bytes(data.train);
  bytes[0] ^= 0xff;  // the magic number
  data_test::write_raw(data.dir / "corrupt.bin", bytes);
  Run corrupt = run_example("--data " + (data.dir / "corrupt.bin").string() + kTiny + " --steps 1");
  CHECK(corrupt.status == 1);
  CHECK(contains(corrupt.err, "corrupt.bin"));
  CHECK(contains(corrupt.err, "byte offset 0"));
  Run text = run_example("--data " + (data.dir / "notes.txt").string() + kTiny + " --vocab " +
                         (data.dir / "no-vocab").string());
  CHECK(text.status == 1);
  CHECK(contains(text.err, "is text and needs GPT-2's tokenizer"));

  ts::StateDict wrong;
  wrong.insert("transformer.wte.weight", ts::zeros({10, 32}));
  ts::io::save(wrong, (data.dir / "wrong.safetensors").string());
  Run init = run_example("--data " + data.train + kTiny + " --steps 0 --init " + (data.dir / "wrong.safetensors").string());
  CHECK(init.status == 1);
  CHECK(contains(init.err, "wte.weight"));
  CHECK(contains(init.err, "[10, 32]"));
}

TEST_CASE("--resume continues a run bit for bit; a different batch size is refused") {
  const CheckpointedRun run;
  const auto& [data, checkpoints, common, full, losses] = run;
  CHECK(events(full.out, "checkpoint").size() == 2);  // steps 4 and 8

  // Stopped after step 4: point latest there and resume.
  example_test::point_latest_at(checkpoints, "step-00000004");
  Run resumed = run_example(common + " --resume");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  std::vector<json::Value> resume = events(resumed.out, "resume");
  REQUIRE(resume.size() == 1);
  CHECK(resume[0].at("step").as_int() == 4);
  CHECK(printed_losses(resumed.out) == std::vector<std::string>(losses.begin() + 4, losses.end()));

  Run mismatched = run_example(common + " --resume --batch-size 8");
  CHECK(mismatched.status == 1);
  CHECK(contains(mismatched.err, "was saved with batch_size 4, this run has 8"));
}

TEST_CASE("another run's checkpoints are refused before training without --resume or --overwrite-checkpoints") {
  Data data;
  const std::string checkpoints = (data.dir / "ckpt").string();
  const std::string common = "--data " + data.train + kTiny + " --steps 4 --checkpoint-dir " + checkpoints +
                             " --checkpoint-every 2";
  REQUIRE(run_example(common).status == 0);  // steps 2 and 4
  Run again = run_example(common);
  CHECK(again.status == 1);
  CHECK(contains(again.err, "checkpoint folder '" + checkpoints + "' holds the checkpoints of another run (latest, "
                            "step-00000004, step-00000002)"));
  CHECK(events(again.out, "train").empty());  // refused before the first step
  CHECK(ts::testing::read_file_bytes(checkpoints + "/latest") == "step-00000004\n");
  Run overwritten = run_example(common + " --overwrite-checkpoints");
  INFO(overwritten.err);
  CHECK(overwritten.status == 0);
  CHECK(events(overwritten.out, "checkpoint").size() == 2);

  // A lost latest: --resume says so and continues from the newest complete checkpoint.
  std::filesystem::remove(checkpoints + "/latest");
  Run resumed = run_example(common + " --resume --steps 6");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(contains(resumed.out, "is missing (a crash right after a save?); resuming from the newest complete "
                              "checkpoint, " + checkpoints + "/step-00000004"));
  CHECK(events(resumed.out, "resume").at(0).at("step").as_int() == 4);
  CHECK(events(resumed.out, "train").size() == 2);  // steps 4 and 5
  CHECK(run_example("--data " + data.train + " --overwrite-checkpoints").status == 2);  // needs --checkpoint-dir
}

TEST_CASE("under mpirun -np 2 the float64 losses are the one-rank run's and the greedy sample is the same") {
  Data data;
  const std::string arguments = " --data " + data.train + " --val-data " + data.val + kTiny +
                                " --dtype float64 --steps 6 --lr 0.01 --warmup-steps 2 --dropout 0.1" +
                                " --eval-interval 3 --eval-batches 2 --sample 5 --temperature 0";
  Run one = run_example(arguments);
  INFO(one.err);
  REQUIRE(one.status == 0);
  Run two = run_program(program_from_env("MPIRUN") + " -np 2 --oversubscribe " + program_from_env("GPT2_EXAMPLE") + arguments);
  INFO(two.err);
  REQUIRE(two.status == 0);
  CHECK(contains(two.out, "2 rank(s)"));
  std::vector<json::Value> a = events(one.out, "train"), b = events(two.out, "train");
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == 6);
  // Each rank sums its rows' cross entropy and FSDP sums the gradients: the same values
  // added in another order, so float64 agrees to rounding (measured: 3.3e-16 relative at most).
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(b[i].at("loss").as_double() == doctest::Approx(a[i].at("loss").as_double()).epsilon(1e-12));
  }
  std::vector<json::Value> eval_a = events(one.out, "eval"), eval_b = events(two.out, "eval");
  REQUIRE(eval_a.size() == 2);
  REQUIRE(eval_b.size() == 2);
  CHECK(eval_b[1].at("val_loss").as_double() == doctest::Approx(eval_a[1].at("val_loss").as_double()).epsilon(1e-12));
  CHECK(json::write(events(two.out, "sample").at(0).at("tokens")) == json::write(events(one.out, "sample").at(0).at("tokens")));
}

namespace {

// Every tensor of a safetensors file is finite.
bool all_finite(const std::string& path) {
  for (const auto& [name, tensor] : ts::io::load(path)) {
    if (ts::first_non_finite(tensor)) return false;
  }
  return true;
}

// The member `key` of a JSON object.
json::Value& member(json::Value& object, const std::string& key) {
  for (auto& [name, value] : object.as_object()) {
    if (name == key) return value;
  }
  FAIL("no member '" << key << "'");
  throw;
}

// The checkpoint's metadata.json with `edit` made to its training state's "extra" object
// (manifest.training.extra), with a valid CRC again.
void edit_training_extra(const std::string& step_folder, const std::function<void(json::Object&)>& edit) {
  const std::string path = step_folder + "/metadata.json";
  json::Value value = json::parse(ts::testing::read_file_bytes(path));
  value.as_object().pop_back();  // metadata_crc32c
  edit(member(member(member(value, "manifest"), "training"), "extra").as_object());
  ts::testing::write_file_bytes(path, ts::checkpoint::write_with_crc(std::move(value)));
}

}  // namespace

TEST_CASE("a non-finite loss stops the run at its step: nothing non-finite is reported or saved, the last good checkpoint is kept") {
  Data data;
  const std::string checkpoints = (data.dir / "ckpt").string();
  const std::string weights = (data.dir / "diverged.safetensors").string();
  // Issue #32's run: a huge rate without clipping.
  const std::string diverging = "--data " + data.train + kTiny + " --steps 30 --lr 300 --grad-clip 0 --warmup-steps 0" +
                                " --checkpoint-dir " + checkpoints + " --checkpoint-every 1 --keep-checkpoints 2";
  Run run = run_example(diverging + " --save " + weights);
  INFO(run.err);
  CHECK(run.status == 1);
  CHECK(contains(run.err, "training diverged"));
  CHECK(contains(run.err, "stopping before"));
  const std::vector<json::Value> steps = events(run.out, "train");  // every line parsed: all finite
  REQUIRE(!steps.empty());
  CHECK(steps.size() < 30);
  MESSAGE("stopped after ", steps.size(), " reported steps: ", run.err);
  const bool loss_stopped = contains(run.err, ts::str("the loss is ")) && contains(run.err, ts::str("at step ", steps.size()));
  const bool weights_stopped = contains(run.err, ts::str("the weights are not finite after step ", steps.size()));
  CHECK((loss_stopped || weights_stopped));
  CHECK_FALSE(std::filesystem::exists(weights));  // --save never ran
  CHECK_FALSE(contains(run.err, "has no JSON form"));
  // The newest checkpoint is the last step's with finite weights (measured: the weights
  // were NaN after step 5, whose loss was finite, so step 4's): resuming from it with
  // nothing left to train saves them.
  const int64_t last_good = static_cast<int64_t>(steps.size()) - (loss_stopped ? 0 : 1);
  const std::vector<json::Value> saved = events(run.out, "checkpoint");
  REQUIRE(!saved.empty());
  CHECK(saved.back().at("step").as_int() == last_good);
  char latest[32];
  std::snprintf(latest, sizeof latest, "step-%08lld\n", static_cast<long long>(last_good));
  CHECK(ts::testing::read_file_bytes(checkpoints + "/latest") == latest);
  const std::string recovered = (data.dir / "recovered.safetensors").string();
  Run resumed = run_example(diverging + " --resume --steps " + std::to_string(last_good) + " --save " + recovered);
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(events(resumed.out, "resume").at(0).at("step").as_int() == last_good);
  CHECK(all_finite(recovered));
}

TEST_CASE("with clipping on, a gradient norm that is not finite stops the run at its step like a loss") {
  Data data;
  // Measured: step 4's loss is finite (2.2e9) and its gradient norm NaN; before, the JSON
  // line of that step failed with "json::write: nan has no JSON form".
  Run run = run_example("--data " + data.train + kTiny + " --steps 30 --lr 300 --warmup-steps 0");
  INFO(run.err);
  CHECK(run.status == 1);
  const std::vector<json::Value> steps = events(run.out, "train");  // every line parsed
  REQUIRE(!steps.empty());
  CHECK(contains(run.err, ts::str(" at step ", steps.size(), ": training diverged")));
  CHECK((contains(run.err, "the gradient norm is ") || contains(run.err, "the loss is ")));
  CHECK_FALSE(contains(run.err, "has no JSON form"));
  for (const json::Value& step : steps) CHECK(std::isfinite(step.at("grad_norm").as_double()));
}

TEST_CASE("--init: a NaN or infinity is an error naming the tensor, also in the tied lm_head") {
  Data data;
  const std::string good = (data.dir / "good.safetensors").string();
  REQUIRE(run_example("--data " + data.train + kTiny + " --steps 0 --save " + good).status == 0);
  ts::StateDict weights = ts::io::load(good);
  weights.at("transformer.h.1.mlp.c_fc.weight").view({-1}).select(0, 5).fill_(std::nan(""));
  const std::string nan_file = (data.dir / "nan.safetensors").string();
  ts::io::save(weights, nan_file);
  Run nan = run_example("--data " + data.train + kTiny + " --steps 1 --init " + nan_file);
  CHECK(nan.status == 1);
  CHECK(contains(nan.err, "--init " + nan_file + ": tensor 'transformer.h.1.mlp.c_fc.weight' [32, 128] is not finite: "
                          "element 5 (flat index) is nan"));
  CHECK(events(nan.out, "train").empty());

  ts::StateDict tied = ts::io::load(good);
  ts::Tensor head = tied.at("transformer.wte.weight").clone();
  head.view({-1}).select(0, 7).fill_(std::numeric_limits<double>::infinity());
  tied.insert("lm_head.weight", head);
  const std::string tied_file = (data.dir / "tied.safetensors").string();
  ts::io::save(tied, tied_file);
  Run inf = run_example("--data " + data.train + kTiny + " --steps 1 --init " + tied_file);
  CHECK(inf.status == 1);
  CHECK(contains(inf.err, "tensor 'lm_head.weight' [50257, 32] is not finite: element 7 (flat index) is inf"));
  CHECK_FALSE(contains(inf.err, "differs from"));
}

TEST_CASE("FIFOs and unusable paths are refused with their names, never waited on or aborted on") {
  Data data;
  const std::string fifo = (data.dir / "pipe.bin").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string fifo_words = "'" + fifo + "': it is a FIFO (named pipe), not a regular file";
  for (const std::string& flags : {"--data " + fifo, "--data " + data.train + " --val-data " + fifo,
                                   "--data " + data.train + " --init " + fifo}) {
    CAPTURE(flags);
    Run run = run_bounded(flags + kTiny + " --steps 1");
    CHECK(run.status == 1);  // not 124: it did not block
    CHECK(contains(run.err, fifo_words));
  }
  const std::string text_fifo = (data.dir / "pipe.txt").string();
  REQUIRE(::mkfifo(text_fifo.c_str(), 0600) == 0);
  std::filesystem::create_directory(data.dir / "vocab");
  const text_test::TinyVocabulary vocabulary = text_test::tiny_vocabulary({{"a", "b"}});
  ts::testing::write_file_bytes((data.dir / "vocab" / "encoder.json").string(), vocabulary.encoder_json);
  ts::testing::write_file_bytes((data.dir / "vocab" / "vocab.bpe").string(), vocabulary.vocab_bpe);
  const std::string vocab = (data.dir / "vocab").string();
  Run text = run_bounded("--data " + text_fifo + " --vocab " + vocab + kTiny + " --steps 1");
  CHECK(text.status == 1);
  CHECK(contains(text.err, "'" + text_fifo + "': it is a FIFO (named pipe), not a regular file"));
  // A vocabulary folder whose vocab.bpe is a FIFO.
  std::filesystem::create_directory(data.dir / "fifo-vocab");
  ts::testing::write_file_bytes((data.dir / "fifo-vocab" / "encoder.json").string(), vocabulary.encoder_json);
  const std::string bpe_fifo = (data.dir / "fifo-vocab" / "vocab.bpe").string();
  REQUIRE(::mkfifo(bpe_fifo.c_str(), 0600) == 0);
  Run bpe = run_bounded("--data " + data.train + " --vocab " + (data.dir / "fifo-vocab").string() + kTiny + " --steps 1");
  CHECK(bpe.status == 1);
  CHECK(contains(bpe.err, "'" + bpe_fifo + "': it is a FIFO (named pipe), not a regular file"));

  // --vocab too long for the system, or a loop of symbolic links.
  Run long_path = run_bounded("--data " + data.train + " --vocab " + std::string(5000, 'v') + kTiny + " --steps 1");
  CHECK(long_path.status == 1);
  CHECK(contains(long_path.err, "--vocab '" + std::string(5000, 'v') + "': cannot look for encoder.json there: File name too long"));
  const std::string loop = (data.dir / "loop").string();
  std::filesystem::create_symlink(loop, loop);
  Run looped = run_bounded("--data " + data.train + " --vocab " + loop + kTiny + " --steps 1");
  CHECK(looped.status == 1);
  CHECK(contains(looped.err, "--vocab '" + loop + "': cannot look for encoder.json there: Too many levels of symbolic links"));

  // TMPDIR missing or a file: only text data needs a temporary folder, and then says so.
  const std::string text_file = (data.dir / "story.txt").string();
  ts::testing::write_file_bytes(text_file, std::string(200, 'a') + "b");
  for (const std::string& tmpdir : {(data.dir / "absent").string(), data.train}) {
    CAPTURE(tmpdir);
    Run binary = run_bounded("--data " + data.train + kTiny + " --steps 1", "TMPDIR=" + tmpdir);
    CHECK(binary.status == 0);
    Run tokenized = run_bounded("--data " + text_file + " --vocab " + vocab + kTiny + " --steps 1", "TMPDIR=" + tmpdir);
    CHECK(tokenized.status == 1);
    CHECK(contains(tokenized.err, "gpt2: error: tokenizing " + text_file + " needs a temporary folder, and TMPDIR ('" + tmpdir +
                                      "') is not one"));
  }
  Run tokenized = run_bounded("--data " + text_file + " --vocab " + vocab + kTiny + " --steps 1 --seq-len 8");
  INFO(tokenized.err);
  CHECK(tokenized.status == 0);
}

TEST_CASE("a token file truncated while gpt2 trains ends the run with a message naming it, not SIGBUS") {
  Data data;
  const std::string big = (data.dir / "big.bin").string();
  write_cycle(big, 1 << 16);
  const std::string out = (data.dir / "out").string(), err = (data.dir / "err").string();
  // Start a long run, truncate the file once it reports its first step, wait for it.
  const std::string script = (data.dir / "truncate.sh").string();
  ts::testing::write_file_bytes(
      script, program_from_env("GPT2_EXAMPLE") + " --data " + big + kTiny + " --steps 100000 > " + out + " 2> " + err +
                  " &\npid=$!\nfor i in $(seq 600); do grep -q train " + out + " && break; sleep 0.05; done\n" +
                  "truncate -s 2048 " + big + "\nwait $pid\n");
  Run run = run_program("timeout 120 sh " + script);
  const std::string message = ts::testing::read_file_bytes(err);
  INFO(message);
  CHECK(run.status == 1);  // not 135 (SIGBUS) nor 124
  CHECK(contains(message, "token file '" + big + "'"));
  CHECK(contains(message, "it was truncated while in use"));
  CHECK_FALSE(events(ts::testing::read_file_bytes(out), "train").empty());
}

TEST_CASE("absurd sizes are refused before anything is allocated, naming the count and the memory") {
  Data data;
  const std::string tiny = " --data " + data.train + kTiny + " --steps 1";
  Run layers = run_bounded(tiny + " --n-layer 9223372036854775807");
  CHECK(layers.status == 1);
  CHECK(contains(layers.err, "GPTConfig: n_layer 9223372036854775807, n_embd 32, block_size 16 and vocab_size 50257 "
                             "make more than 9223372036854775807 parameters"));
  Run width = run_bounded(tiny + " --n-embd 3000000000");
  CHECK(width.status == 1);
  CHECK(contains(width.err, "make more than 9223372036854775807 parameters"));
  // Counts within int64 but far beyond this machine (measured in the message).
  for (const char* size : {" --n-layer 1000000", " --vocab-size 1000000000000", " --n-embd 1000000"}) {
    CAPTURE(size);
    Run run = run_bounded(tiny + size);
    CHECK(run.status == 1);
    CHECK(contains(run.err, "gpt2: error: the model has "));
    CHECK(contains(run.err, "more than this machine's"));
    CHECK(contains(run.err, "of memory: use more machines or a smaller model"));
    CHECK(events(run.out, "train").empty());
  }
  // The tiny model's 1.6M parameters need 26 MB of state: more than a 1 MiB limit.
  const int64_t parameters =
      ts::models::GPTConfig{.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 16}.num_parameters();
  Run limited = run_bounded(tiny + " --memory-limit 1MiB");
  CHECK(limited.status == 1);
  CHECK(contains(limited.err, ts::str("gpt2: error: the model has ", parameters, " parameters, and its float32 weights, "
                                      "gradients and AdamW state need at least ",
                                      ts::format_bytes(16 * parameters), " on each of 1 rank(s), more than the memory "
                                      "limit of 1.00 MiB on cpu")));
}

TEST_CASE("unclear values are refused before training: --grad-clip, --memory-limit, --prompt; a tiny temperature is greedy") {
  Data data;
  const std::string tiny = "--data " + data.train + kTiny + " --steps 3";
  Run clip = run_example(tiny + " --grad-clip -1");
  CHECK(clip.status == 2);
  CHECK(contains(clip.err, "--grad-clip must be >= 0 (0 turns clipping off), got -1"));
  Run limit = run_example(tiny + " --memory-limit 0x10");
  CHECK(limit.status == 2);
  CHECK(contains(limit.err, "--memory-limit: '0x10' is not a memory size"));
  CHECK(run_example(tiny + " --temperature -0.5").status == 2);
  Run prompt = run_example(tiny + " --sample 3 --prompt \"$(printf 'ab\\377')\"");
  CHECK(prompt.status == 1);
  CHECK(contains(prompt.err, "gpt2: error: --prompt is not valid UTF-8: byte 2 (0xff) starts no UTF-8 character"));
  CHECK(events(prompt.out, "train").empty());  // refused before training, not after

  Run greedy = run_example(tiny + " --sample 6 --temperature 0");
  Run tiny_temperature = run_example(tiny + " --sample 6 --temperature 1e-300");
  INFO(tiny_temperature.err);
  REQUIRE(greedy.status == 0);
  REQUIRE(tiny_temperature.status == 0);
  CHECK(json::write(events(tiny_temperature.out, "sample").at(0).at("tokens")) ==
        json::write(events(greedy.out, "sample").at(0).at("tokens")));
}

TEST_CASE("--resume keeps the checkpoint's seed and schedule, saying so, and refuses another data file") {
  const CheckpointedRun run;
  const auto& [data, checkpoints, common, full, losses] = run;
  const std::vector<std::string> after_4(losses.begin() + 4, losses.end());
  // Each resumes from step 4's checkpoint (a resumed run's saves move latest on).
  auto resume_at_step_4 = [&run](const std::string& flags) {
    example_test::point_latest_at(run.checkpoints, "step-00000004");
    Run resumed = run_example(run.common + " --resume" + flags);
    INFO(resumed.err);
    REQUIRE(resumed.status == 0);
    return resumed;
  };

  const Run seed = resume_at_step_4(" --seed 7");
  CHECK(contains(seed.out, "--resume: using the checkpoint's seed 1, not --seed 7: the data order, dropout and "
                           "sampling continue the checkpoint's"));
  CHECK(printed_losses(seed.out) == after_4);  // before: all differed (a new data order)

  const Run rate = resume_at_step_4(" --lr 0.02");
  CHECK(contains(rate.out, "--resume: --lr 0.02 (the checkpoint's 0.01), --min-lr 0.002 (the checkpoint's 0.001): "
                           "using the checkpoint's learning-rate schedule"));
  CHECK(printed_losses(rate.out) == after_4);

  const Run longer = resume_at_step_4(" --steps 10");
  CHECK(contains(longer.out, "--resume: --steps 10 differs from the checkpoint's 8: training continues to step 10, "
                             "and the cosine decay now ends there"));
  CHECK(events(longer.out, "train").size() == 6);
  // The rates follow the checkpoint's peak and warmup with the decay over 10 steps.
  const ts::optim::WarmupCosineOptions extended{.lr = 0.01, .min_lr = 0.001, .warmup_steps = 2, .decay_steps = 10};
  CHECK(events(longer.out, "train").at(1).at("lr").as_double() ==
        doctest::Approx(ts::optim::warmup_cosine_lr(5, extended)).epsilon(1e-12));

  // Another data file: refused, naming both, unless --allow-data-change.
  const std::string other = (data.dir / "other.bin").string();
  std::vector<uint16_t> shifted(4096);
  for (size_t i = 0; i < shifted.size(); ++i) shifted[i] = static_cast<uint16_t>(200 + i % 32);
  ts::data::write_token_file(other, shifted);
  example_test::point_latest_at(checkpoints, "step-00000004");
  Run refused = run_example(common + " --resume --data " + other);
  CHECK(refused.status == 1);
  CHECK(contains(refused.err, "--resume: the checkpoint was trained on '" + data.train + "' (4096 tokens, CRC32C "));
  CHECK(contains(refused.err, "and --data is '" + other + "' (4096 tokens, CRC32C "));
  CHECK(contains(refused.err, "its saved position (epoch 0, batch 4) would continue in other tokens; give the "
                              "checkpoint's data, or --allow-data-change"));
  CHECK(events(refused.out, "train").empty());
  const Run allowed = resume_at_step_4(" --data " + other + " --allow-data-change");
  CHECK(contains(allowed.out, "continuing on it from the saved position (--allow-data-change)"));
  CHECK(events(allowed.out, "train").size() == 4);
  CHECK(run_example(common + " --allow-data-change").status == 2);  // needs --resume

  // A checkpoint from before the record (no data, schedule or steps in its state) still
  // resumes, bit for bit, saying that it cannot compare the data.
  edit_training_extra(checkpoints + "/step-00000004", [](json::Object& extra) {
    std::erase_if(extra, [](const json::Member& m) {
      return m.first == "data" || m.first == "schedule" || m.first == "steps";
    });
  });
  const Run old = resume_at_step_4("");
  CHECK(contains(old.out, "--resume: the checkpoint does not record its training data (an older checkpoint)"));
  CHECK(printed_losses(old.out) == after_4);
}
