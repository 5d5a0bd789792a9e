// examples/mnist as a user runs it: on a small fake dataset in MNIST's layout, its JSON
// output, its flags, saving and loading weights, and the clear errors and non-zero exit
// it gives for missing, truncated and corrupt files; --save to a device, a FIFO, a folder.
#include <unistd.h>

#include "example_test.h"
#include "special_files.h"

namespace {

Run run_example(const std::string& arguments) { return example_test::run_program_of("MNIST_EXAMPLE", arguments); }

void write_fake_mnist(const std::filesystem::path& root) {
  example_test::write_fake_mnist_split(root, "train", 96);
  example_test::write_fake_mnist_split(root, "t10k", 40);
}

std::string read_text(const std::string& path) {
  Bytes bytes = data_test::read_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

TEST_CASE("--help lists the flags; an unknown flag is a usage error") {
  Run help = run_example("--help");
  CHECK(help.status == 0);
  for (const char* flag : {"--data", "--epochs", "--batch-size", "--test-batch-size", "--lr", "--optimizer",
                           "--momentum", "--gamma", "--seed", "--threads", "--save", "--init", "--log-interval",
                           "--dry-run", "--json", "--checkpoint-dir", "--checkpoint-every", "--keep-checkpoints",
                           "--resume", "--overwrite-checkpoints", "--async-checkpoint"}) {
    CHECK_MESSAGE(contains(help.out, flag), flag);
  }
  Run bad = run_example("--epochs two");
  CHECK(bad.status == 2);
  CHECK(contains(bad.err, "--epochs expects an integer from 0 to 9223372036854775807, got 'two'"));
  CHECK(run_example("--frobnicate").status == 2);
}

TEST_CASE("training on a fake dataset prints one JSON object per line with the epoch summary") {
  TempDir data;
  write_fake_mnist(data.path());
  Run run = run_example("--data " + data.path().string() + " --epochs 2 --batch-size 16 --test-batch-size 20 " +
                        "--optimizer sgd --lr 0.05 --momentum 0.9 --json --threads 1");
  INFO(run.err);
  REQUIRE(run.status == 0);
  std::istringstream lines(run.out);
  int epochs = 0;
  for (std::string line; std::getline(lines, line);) {
    ts::io::json::Value value = ts::io::json::parse(line);  // every line is JSON
    if (value.at("event").as_string() != "epoch") continue;
    ++epochs;
    CHECK(value.at("epoch").as_int() == epochs);
    CHECK(value.at("train_loss").as_double() > 0);
    CHECK(value.at("test_loss").as_double() > 0);
    double accuracy = value.at("test_accuracy").as_double();
    CHECK(accuracy >= 0.0);
    CHECK(accuracy <= 1.0);
    CHECK(value.at("samples_per_s").as_double() > 0);
  }
  CHECK(epochs == 2);
}

TEST_CASE("--save writes PyTorch-named weights that --init loads back") {
  TempDir data;
  write_fake_mnist(data.path());
  std::string weights = (data / "net.safetensors").string();
  std::string common = "--data " + data.path().string() + " --dry-run --json --threads 1";
  Run saved = run_example(common + " --save " + weights);
  INFO(saved.err);
  REQUIRE(saved.status == 0);
  ts::StateDict state = ts::io::load(weights);
  CHECK(state.keys() == std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                                 "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(state.at("fc1.weight").sizes() == ts::Shape{128, 9216});
  CHECK(state.at("conv2.weight").sizes() == ts::Shape{64, 32, 3, 3});
  Run loaded = run_example(common + " --init " + weights);
  INFO(loaded.err);
  CHECK(loaded.status == 0);
}

TEST_CASE("--save goes through the shared writer: a character device stays one, a FIFO gets the file, a folder is refused") {
  TempDir data;
  write_fake_mnist(data.path());
  const std::string common = "--data " + data.path().string() + " --dry-run --json --threads 1";
  const std::string weights = (data / "net.safetensors").string();
  REQUIRE(run_example(common + " --save " + weights).status == 0);
  const std::string null = (data / "null").string();
  if (test_support::make_null_device(null)) {  // as root, --save /dev/null once replaced /dev/null with a file
    Run to_null = run_example(common + " --save " + null);
    CHECK_MESSAGE(to_null.status == 0, to_null.err);
    CHECK(test_support::is_null_device(null));
  }
  const std::string pipe = (data / "pipe").string();
  REQUIRE(test_support::make_fifo(pipe));
  {
    test_support::FifoReader reader(pipe);
    REQUIRE(reader.opened());
    Run to_pipe = run_example(common + " --save " + pipe);
    CHECK_MESSAGE(to_pipe.status == 0, to_pipe.err);
    CHECK(reader.bytes() == read_text(weights));  // the dry run's weights: the same at every run
  }
  std::filesystem::create_directory(data / "folder");
  Run to_folder = run_example(common + " --save " + (data / "folder").string());
  CHECK(to_folder.status != 0);
  CHECK(contains(to_folder.err, "cannot save to '" + (data / "folder").string() + "': it is a directory"));
}

TEST_CASE("--init checks the file's names and shapes before reading it: a sparse 16 GiB tensor of the wrong shape costs nothing") {
  TempDir data;
  write_fake_mnist(data.path());
  const std::string common = "--data " + data.path().string() + " --dry-run --json --threads 1";
  const std::string weights = (data / "net.safetensors").string();
  REQUIRE(run_example(common + " --save " + weights).status == 0);
  // Under a 6 GB address-space limit the run still works with the right file, but could not
  // allocate the 16 GiB tensor: only a check before reading gives the shape error.
  const std::string limited = "ulimit -v 6000000 && ";
  Run control = test_support::run_program(limited + test_support::program_from_env("MNIST_EXAMPLE") + " " + common +
                                          " --init " + weights);
  INFO(control.err);
  REQUIRE(control.status == 0);

  const std::string hostile = (data / "hostile.safetensors").string();
  const uint64_t tensor_bytes = uint64_t{16} << 30;
  std::string header = "{\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[4194304,1024],\"data_offsets\":[0," +
                       std::to_string(tensor_bytes) + "]}}";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  Bytes bytes(8, 0);
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>((header.size() >> (8 * i)) & 0xFF);
  bytes.insert(bytes.end(), header.begin(), header.end());
  data_test::write_raw(hostile, bytes);
  REQUIRE(::truncate(hostile.c_str(), static_cast<off_t>(bytes.size() + tensor_bytes)) == 0);  // sparse
  Run refused = test_support::run_program(limited + test_support::program_from_env("MNIST_EXAMPLE") + " " + common +
                                          " --init " + hostile);
  CHECK(refused.status == 1);
  CHECK(contains(refused.err, "load_state_dict: the state does not match this Net (--init " + hostile + ")."));
  CHECK(contains(refused.err, "conv1.weight: checkpoint [4194304, 1024], model [32, 1, 3, 3]"));
  CHECK(contains(refused.err, "missing keys:"));
}

TEST_CASE("missing, truncated and corrupt inputs end with a clear error and a non-zero exit") {
  TempDir data;
  write_fake_mnist(data.path());
  std::string common = " --dry-run --threads 1";

  Run missing = run_example("--data " + (data / "nowhere").string() + common);
  CHECK(missing.status != 0);
  CHECK(contains(missing.err, "looked for"));
  CHECK(contains(missing.err, "nowhere"));

  // Wrong magic: the first two bytes of an IDX file must be zero.
  Bytes images = data_test::read_bytes(data / "train-images-idx3-ubyte");
  Bytes corrupt = images;
  corrupt[0] = 0x1f;
  corrupt[1] = 0x00;
  data_test::write_raw(data / "train-images-idx3-ubyte", corrupt);
  Run magic = run_example("--data " + data.path().string() + common);
  CHECK(magic.status != 0);
  CHECK(contains(magic.err, "train-images-idx3-ubyte"));
  CHECK(contains(magic.err, "byte offset 0"));

  // Truncated: the data ends early.
  data_test::write_raw(data / "train-images-idx3-ubyte", Bytes(images.begin(), images.end() - 100));
  Run truncated = run_example("--data " + data.path().string() + common);
  CHECK(truncated.status != 0);
  CHECK(contains(truncated.err, "train-images-idx3-ubyte"));
  data_test::write_raw(data / "train-images-idx3-ubyte", images);

  // Weights: missing, truncated, and of the wrong shapes.
  Run no_weights = run_example("--data " + data.path().string() + common + " --init " + (data / "none.safetensors").string());
  CHECK(no_weights.status != 0);
  CHECK(contains(no_weights.err, "none.safetensors"));
  ts::StateDict small;
  small.insert("fc1.weight", ts::zeros({2, 2}));
  ts::io::save(small, (data / "small.safetensors").string());
  Bytes file = data_test::read_bytes(data / "small.safetensors");
  data_test::write_raw(data / "cut.safetensors", Bytes(file.begin(), file.begin() + 20));
  Run cut = run_example("--data " + data.path().string() + common + " --init " + (data / "cut.safetensors").string());
  CHECK(cut.status != 0);
  CHECK(contains(cut.err, "cut.safetensors"));
  CHECK(contains(cut.err, "byte"));
  Run wrong = run_example("--data " + data.path().string() + common + " --init " + (data / "small.safetensors").string());
  CHECK(wrong.status != 0);
  CHECK(contains(wrong.err, "fc1.weight: checkpoint [2, 2], model [128, 9216]"));
  CHECK(contains(wrong.err, "missing keys"));
}

namespace {

struct TrainLine {
  int64_t epoch, batch;
  std::string loss;  // as printed: shortest round-trip text, so equal text is equal bits
  bool operator==(const TrainLine&) const = default;
};

struct Printed {
  std::vector<TrainLine> train;
  std::vector<std::string> epoch_train_losses;
  std::vector<int64_t> saved_steps;
  int64_t resumed_step = -1;
};

Printed parse_printed(const std::string& out) {
  Printed printed;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    ts::io::json::Value value = ts::io::json::parse(line);
    const std::string& event = value.at("event").as_string();
    if (event == "train") {
      printed.train.push_back({value.at("epoch").as_int(), value.at("batch").as_int(),
                               ts::io::json::write(value.at("loss"))});
    } else if (event == "epoch") {
      printed.epoch_train_losses.push_back(ts::io::json::write(value.at("train_loss")));
    } else if (event == "checkpoint") {
      printed.saved_steps.push_back(value.at("step").as_int());
    } else if (event == "resume") {
      printed.resumed_step = value.at("step").as_int();
    }
  }
  return printed;
}

}  // namespace

TEST_CASE("--checkpoint-dir, --checkpoint-every and --resume continue a run exactly") {
  TempDir data;
  write_fake_mnist(data.path());
  const std::string checkpoints = (data / "ckpt").string();
  // 96 images in batches of 16: 6 steps per epoch, 12 in all; a checkpoint every 4 steps.
  const std::string common = "--data " + data.path().string() + " --epochs 2 --batch-size 16 --test-batch-size 20 " +
                             "--optimizer adam --lr 0.01 --gamma 0.5 --json --threads 1 --log-interval 1 " +
                             "--checkpoint-dir " + checkpoints + " --checkpoint-every 4";
  Run full = run_example(common);
  INFO(full.err);
  REQUIRE(full.status == 0);
  Printed uninterrupted = parse_printed(full.out);
  REQUIRE(uninterrupted.train.size() == 12);
  // Steps 4, 8 and 12, and step 12 again at the end of training (after the last epoch's test).
  CHECK(uninterrupted.saved_steps == std::vector<int64_t>{4, 8, 12, 12});
  CHECK(read_text(checkpoints + "/latest") == "step-00000012\n");

  // Stopped after step 4 (epoch 1, batch 4 of 6): point latest there and resume. The rest of
  // the run, including the first epoch's summary, is printed again bit for bit.
  example_test::point_latest_at(checkpoints, "step-00000004");
  Run resumed = run_example(common + " --resume");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  Printed continued = parse_printed(resumed.out);
  CHECK(continued.resumed_step == 4);
  CHECK(continued.train == std::vector<TrainLine>(uninterrupted.train.begin() + 4, uninterrupted.train.end()));
  CHECK(continued.epoch_train_losses == uninterrupted.epoch_train_losses);

  // Resumed at the end, with two more epochs: it goes on from step 12.
  Run more = run_example(common + " --resume --epochs 3");
  INFO(more.err);
  REQUIRE(more.status == 0);
  Printed extended = parse_printed(more.out);
  CHECK(extended.resumed_step == 12);
  REQUIRE(extended.train.size() == 6);
  CHECK(extended.train.front().epoch == 3);

  // A different batch size cannot continue this run; --resume needs a folder.
  Run mismatched = run_example(common + " --resume --batch-size 32");
  CHECK(mismatched.status == 1);
  CHECK(contains(mismatched.err, "was saved with --batch-size 16"));
  CHECK(run_example("--resume").status == 2);
  // Nothing to resume from: a fresh start, said so.
  Run fresh = run_example("--data " + data.path().string() + " --dry-run --json --threads 1 --checkpoint-dir " +
                          (data / "empty").string() + " --resume");
  CHECK(fresh.status == 0);
  CHECK(contains(fresh.out, "starting from scratch"));
}

namespace {

// --async-checkpoint, run by `launcher` ("" for one rank, or "mpirun -np 2 ..."): the same
// losses as without it, the same checkpoint files, and a resumed run bit for bit.
void check_async_checkpoints(const std::string& launcher) {
  TempDir data;
  write_fake_mnist(data.path());
  auto run = [&](const std::string& arguments) {
    return test_support::run_program(launcher + test_support::program_from_env("MNIST_EXAMPLE") + " " + arguments);
  };
  const std::string common = "--data " + data.path().string() + " --epochs 2 --batch-size 16 --test-batch-size 20 " +
                             "--optimizer adam --lr 0.01 --gamma 0.5 --json --threads 1 --log-interval 1 " +
                             "--checkpoint-every 4 --checkpoint-dir ";
  const std::string sync_dir = (data / "sync").string(), async_dir = (data / "async").string();
  Run sync = run(common + sync_dir);
  INFO(sync.err);
  REQUIRE(sync.status == 0);
  Run async = run(common + async_dir + " --async-checkpoint");
  INFO(async.err);
  REQUIRE(async.status == 0);
  const Printed uninterrupted = parse_printed(sync.out), with_async = parse_printed(async.out);
  REQUIRE(uninterrupted.train.size() == 12);
  CHECK(with_async.train == uninterrupted.train);
  CHECK(with_async.epoch_train_losses == uninterrupted.epoch_train_losses);
  CHECK(with_async.saved_steps == std::vector<int64_t>{4, 8, 12, 12});
  CHECK(read_text(async_dir + "/latest") == "step-00000012\n");
  CHECK(contains(async.out, "checkpoint staging: "));
  for (const char* step : {"step-00000004", "step-00000008", "step-00000012"}) {
    for (const auto& entry : std::filesystem::directory_iterator(sync_dir + "/" + step)) {
      const std::string name = entry.path().filename().string();
      CAPTURE(name);
      CHECK(read_text(async_dir + "/" + step + "/" + name) == read_text(entry.path().string()));
    }
  }
  // Stopped after step 4: resumed with --async-checkpoint, the rest of the run bit for bit.
  example_test::point_latest_at(async_dir, "step-00000004");
  Run resumed = run(common + async_dir + " --async-checkpoint --resume");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  const Printed continued = parse_printed(resumed.out);
  CHECK(continued.resumed_step == 4);
  CHECK(continued.train == std::vector<TrainLine>(uninterrupted.train.begin() + 4, uninterrupted.train.end()));
  CHECK(continued.epoch_train_losses == uninterrupted.epoch_train_losses);
  CHECK(read_text(async_dir + "/latest") == "step-00000012\n");
}

}  // namespace

TEST_CASE("--async-checkpoint trains, saves and resumes exactly as synchronous checkpoints do") {
  check_async_checkpoints("");
  CHECK(run_example("--async-checkpoint").status == 2);  // needs --checkpoint-dir
}

TEST_CASE("under mpirun -np 2, --async-checkpoint trains, saves and resumes exactly as synchronous checkpoints do") {
  check_async_checkpoints(test_support::program_from_env("MPIRUN") + " -np 2 --oversubscribe ");
}

TEST_CASE("another run's checkpoints are refused without --resume or --overwrite-checkpoints; a lost latest is recovered") {
  TempDir data;
  write_fake_mnist(data.path());
  const std::string checkpoints = (data / "ckpt").string();
  const std::string common = "--data " + data.path().string() + " --epochs 1 --batch-size 16 --test-batch-size 20 " +
                             "--json --threads 1 --checkpoint-dir " + checkpoints + " --checkpoint-every 2";
  REQUIRE(run_example(common).status == 0);  // steps 2, 4, 6
  Run again = run_example(common);
  CHECK(again.status == 1);
  CHECK(contains(again.err, "checkpoint folder '" + checkpoints + "' holds the checkpoints of another run (latest, "
                            "step-00000006, step-00000004, step-00000002)"));
  CHECK(parse_printed(again.out).train.empty());  // refused before training
  CHECK(read_text(checkpoints + "/latest") == "step-00000006\n");
  CHECK(run_example(common + " --overwrite-checkpoints").status == 0);

  std::filesystem::remove(checkpoints + "/latest");
  Run resumed = run_example(common + " --resume --epochs 2");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(parse_printed(resumed.out).resumed_step == 6);
  CHECK(contains(resumed.out, "--resume: '" + checkpoints + "/latest' is missing (a crash right after a save?); "
                              "resuming from the newest complete checkpoint, " + checkpoints + "/step-00000006"));

  Run not_a_folder = run_example("--data " + data.path().string() + " --dry-run --checkpoint-dir " +
                                 (data / "train-images-idx3-ubyte").string());
  CHECK(not_a_folder.status == 1);
  CHECK(contains(not_a_folder.err, "train-images-idx3-ubyte' is a regular file, not a folder"));
}

TEST_CASE("numbers on the command line are read exactly, in range, or refused naming the flag and the text") {
  struct Bad {
    const char* arguments;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"--epochs 1e30", "--epochs expects an integer from 0 to 9223372036854775807, got '1e30'"},
           {"--batch-size 0x10", "--batch-size expects an integer from 0 to 9223372036854775807, got '0x10'"},
           {"--keep-checkpoints 3e9", "--keep-checkpoints expects an integer from 0 to 2147483647, got '3e9'"},
           {"--keep-checkpoints 3000000000", "--keep-checkpoints expects an integer from 0 to 2147483647, got '3000000000'"},
           {"--seed 18446744073709551616", "--seed expects an integer from 0 to 18446744073709551615, got '18446744073709551616'"},
           {"--threads -1", "--threads expects an integer from 0 to 2147483647, got '-1'"},
           {"--log-interval 2.5", "--log-interval expects an integer from 0 to 9223372036854775807, got '2.5'"},
           {"--lr inf", "--lr expects a finite number, got 'inf'"},
           {"--gamma nan", "--gamma expects a finite number, got 'nan'"},
           {"--momentum 0.9x", "--momentum expects a finite number, got '0.9x'"},
       }) {
    Run run = run_example(bad.arguments);
    CHECK_MESSAGE(run.status == 2, bad.arguments);
    CHECK_MESSAGE(contains(run.err, std::string("mnist: ") + bad.message), bad.arguments, ": ", run.err);
  }

  // 2^53 + 1 keeps its last digit (a double would round it to 2^53).
  TempDir data;
  write_fake_mnist(data.path());
  Run seeded = run_example("--data " + data.path().string() + " --dry-run --threads 1 --seed 9007199254740993 " +
                           "--checkpoint-dir " + (data / "ckpt").string() + " --checkpoint-every 1");
  INFO(seeded.err);
  REQUIRE(seeded.status == 0);
  CHECK(contains(read_text((data / "ckpt" / "step-00000001" / "metadata.json").string()), "\"seed\":9007199254740993"));
}

TEST_CASE("a run that diverges stops with a clear message on a non-finite loss, before printing or saving it") {
  TempDir data;
  write_fake_mnist(data.path());
  Run diverged = run_example("--data " + data.path().string() + " --epochs 1 --batch-size 16 --json --threads 1 " +
                             "--log-interval 1 --optimizer sgd --lr 1e30 --checkpoint-dir " + (data / "ckpt").string() +
                             " --checkpoint-every 1");
  CHECK(diverged.status == 1);
  CHECK(contains(diverged.err, "mnist: error: the loss is "));
  CHECK(contains(diverged.err, "training diverged (a learning rate too large"));
  CHECK_FALSE(contains(diverged.err, "has no JSON form"));
  // Every checkpoint written holds a finite loss: the diverged step was not saved.
  for (const auto& entry : std::filesystem::directory_iterator(data / "ckpt")) {
    if (entry.path().filename().string().rfind("step-", 0) != 0) continue;
    std::string metadata = read_text((entry.path() / "metadata.json").string());
    CHECK_FALSE(contains(metadata, "\"loss_sum\":\"nan\""));
    CHECK_FALSE(contains(metadata, "\"loss_sum\":\"inf\""));
  }
}
