// examples/gpt2 as a user runs it, on a tiny GPT (2 layers, width 32, block 16) and a
// token file whose next token is always predictable: flags and usage errors, one JSON
// object per step with nanoGPT's learning rates, evaluation lines, --save writing Hugging
// Face's names that --init reads back, greedy sampling, clear errors for bad files, and
// --resume continuing bit for bit. Under mpirun -np 2 (suite dist) the losses of a float64
// run equal the one-rank run's and a greedy sample is the same.
#include <cmath>
#include <sstream>

#include "example_test.h"

using example_test::events;
using test_support::program_from_env;
using test_support::run_program;

namespace {

Run run_example(const std::string& arguments) { return example_test::run_program_of("GPT2_EXAMPLE", arguments); }

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
  Data data;
  const std::string checkpoints = (data.dir / "ckpt").string();
  const std::string common = "--data " + data.train + kTiny + " --steps 8 --lr 0.01 --warmup-steps 2 --dropout 0.1" +
                             " --checkpoint-dir " + checkpoints + " --checkpoint-every 4";
  Run full = run_example(common);
  INFO(full.err);
  REQUIRE(full.status == 0);
  const std::vector<std::string> losses = printed_losses(full.out);
  REQUIRE(losses.size() == 8);
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
