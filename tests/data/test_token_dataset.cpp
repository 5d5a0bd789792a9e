// llm.c token files and the TokenDataset over them: the header written byte by byte, every
// header fault as a DataError naming the file and byte offset, the windows of T+1 tokens,
// llm.c's sequential order (compared with its loader's arithmetic: batch k reads tokens
// [k*B*T, k*B*T + B*T]), the seeded random order, and the ranks' rows making up the same
// global batch at any world size.
#include <doctest/doctest.h>
#include <tessera/tessera.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <set>

#include "temp_dir.h"
#include "test_support.h"

namespace ts = tessera;
using test_support::contains;
using test_support::error_of;
using ts::data::Batch;
using ts::data::DataLoader;
using ts::data::TokenDataset;
using ts::data::TokenFile;
using ts::testing::read_file_bytes;
using ts::testing::TempDir;
using ts::testing::write_file_bytes;

namespace {

// Tokens 0, 1, 2, ... (mod 50000): a window says where it came from.
std::vector<uint16_t> counting(int64_t count, int64_t first = 0) {
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) tokens[static_cast<size_t>(i)] = static_cast<uint16_t>((first + i) % 50000);
  return tokens;
}

// A token file's bytes built here, independently of write_token_file.
std::string token_file_bytes(int32_t magic, int32_t version, int32_t count, const std::vector<uint16_t>& tokens) {
  std::string bytes(1024, '\0');
  std::memcpy(bytes.data(), &magic, 4);
  std::memcpy(bytes.data() + 4, &version, 4);
  std::memcpy(bytes.data() + 8, &count, 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), 2 * tokens.size());
  return bytes;
}

std::vector<int64_t> values(const ts::Tensor& tensor) { return tensor.contiguous().to_vector<int64_t>(); }

std::vector<Batch> collect(const DataLoader& loader, int64_t epoch) {
  std::vector<Batch> batches;
  for (const Batch& batch : loader.epoch(epoch)) batches.push_back(batch);
  return batches;
}

}  // namespace

TEST_CASE("write_token_file writes llm.c's header and the tokens; TokenFile reads them back") {
  TempDir dir;
  const std::vector<uint16_t> tokens{50256, 31373, 995, 0, 65535};
  ts::data::write_token_file(dir.file("t.bin"), tokens);
  CHECK(read_file_bytes(dir.file("t.bin")) == token_file_bytes(20240520, 1, 5, tokens));
  const TokenFile file(dir.file("t.bin"));
  CHECK(file.size() == 5);
  CHECK(file.read_all() == tokens);
  std::vector<uint16_t> middle(3);
  file.read(1, middle);
  CHECK(middle == std::vector<uint16_t>{31373, 995, 0});
  CHECK(contains(error_of<ts::IndexError>([&] { file.read(3, middle); }), "tokens [3, 6) are out of range for its 5 tokens"));
  CHECK(file.path() == dir.file("t.bin"));
  // An empty file is a header alone.
  ts::data::write_token_file(dir.file("empty.bin"), std::vector<uint16_t>{});
  CHECK(read_file_bytes(dir.file("empty.bin")).size() == 1024);
  CHECK(TokenFile(dir.file("empty.bin")).size() == 0);
  // Moving keeps the open file.
  TokenFile moved = TokenFile(dir.file("t.bin"));
  TokenFile target(dir.file("empty.bin"));
  target = std::move(moved);
  CHECK(target.read_all()[1] == 31373);
}

TEST_CASE("a bad token file is a DataError naming the file, the byte offset and the field") {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  auto error_for = [&](const std::string& bytes) {
    write_file_bytes(path, bytes);
    return error_of<ts::data::DataError>([&] { TokenFile file(path); });
  };
  const std::string prefix = "token file '" + path + "': at byte offset ";
  CHECK(contains(error_for(""), prefix + "0: the file ends inside the header: expected the magic number 20240520"));
  CHECK(contains(error_for(token_file_bytes(20240520, 1, 3, {}).substr(0, 6)),
                 prefix + "6: the file ends inside the header: expected the version at bytes 4..7"));
  CHECK(contains(error_for(token_file_bytes(20240520, 1, 3, {}).substr(0, 10)),
                 prefix + "10: the file ends inside the header: expected the token count"));
  CHECK(contains(error_for(token_file_bytes(20240520, 1, 0, {}).substr(0, 500)),
                 prefix + "500: the file ends inside the header: expected 1024 header bytes, found 500"));
  CHECK(contains(
      error_for(token_file_bytes(0x46554747, 1, 0, {})),
      prefix + "0: expected the magic number 20240520 of an llm.c token file, found 1179993927 (not a token file)"));
  CHECK(contains(error_for(token_file_bytes(20240520, 2, 0, {})),
                 prefix + "4: expected version 1 (uint16 tokens), found 2"));
  CHECK(
      contains(error_for(token_file_bytes(20240520, 1, -5, {})), prefix + "8: expected a token count >= 0, found -5"));
  CHECK(contains(error_for(token_file_bytes(20240520, 1, 4, counting(3))),
                 prefix +
                     "1030: the file ends inside the tokens: the header's token count 4 promises 8 bytes of tokens "
                     "at offsets [1024, 1032), found 6"));
  CHECK(contains(error_for(token_file_bytes(20240520, 1, 2, counting(3))),
                 prefix + "1028: expected the end of the file after the tokens (the header's token count 2 promises 4 "
                          "bytes of tokens at offsets [1024, 1028)), found 2 more bytes"));
  CHECK(contains(error_for(token_file_bytes(20240520, 1, 3, counting(3)) + "x"), "found 1 more bytes"));
  CHECK(contains(error_of<ts::data::DataError>([&] { TokenFile file(dir.file("missing.bin")); }),
                 "token file '" + dir.file("missing.bin") + "': cannot open '" + dir.file("missing.bin") +
                     "': No such file or directory"));
  CHECK(contains(error_of<ts::data::DataError>([&] { TokenFile file(dir.path()); }),
                 "it is a directory, not a regular file"));
  // Tokens at or above the vocabulary, when the dataset is asked to check.
  write_file_bytes(path, token_file_bytes(20240520, 1, 4, {1, 2, 50257, 3}));
  CHECK(
      contains(error_of<ts::data::DataError>([&] { TokenDataset dataset(path, {.seq_len = 2, .vocab_size = 50257}); }),
               prefix + "1028: token 50257 (number 2) is not below the vocabulary size 50257"));
  CHECK_NOTHROW(TokenDataset(path, {.seq_len = 2}));
}

TEST_CASE("a FIFO is refused without waiting for a writer; a file truncated while in use is a DataError, not SIGBUS") {
  TempDir dir;
  const std::string fifo = dir.file("tokens.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opening a FIFO with no writer would block this test forever.
  CHECK(contains(error_of<ts::data::DataError>([&] { TokenFile file(fifo); }),
                 "token file '" + fifo + "': cannot read '" + fifo + "': it is a FIFO (named pipe), not a regular file"));

  const std::string path = dir.file("shrinking.bin");
  ts::data::write_token_file(path, counting(100));
  const TokenDataset dataset(path, {.seq_len = 9});  // 11 windows
  CHECK(dataset.window(10) == counting(10, 90));
  REQUIRE(::truncate(path.c_str(), 1024 + 2 * 50) == 0);  // 50 of the 100 tokens left
  CHECK(dataset.window(4) == counting(10, 36));              // still there
  CHECK(contains(error_of<ts::data::DataError>([&] { dataset.get_batch({0, 6}); }),
                 "token file '" + path + "': at byte offset 1132: expected 20 more bytes of tokens, but the file is "
                 "now 1124 bytes (1224 when it was opened): it was truncated while in use"));
}

TEST_CASE("TokenDataset: windows of T+1 tokens, inputs the first T, targets the last T") {
  TempDir dir;
  ts::data::write_token_file(dir.file("a.bin"), counting(23));
  const TokenDataset dataset(dir.file("a.bin"), {.seq_len = 5});
  CHECK(dataset.size() == 4);  // floor((23 - 1) / 5)
  CHECK(dataset.num_tokens() == 23);
  CHECK(dataset.seq_len() == 5);
  for (int64_t k = 0; k < 4; ++k) {
    const auto window = dataset.window(k);
    CHECK(std::vector<uint16_t>(window.begin(), window.end()) == counting(6, 5 * k));
  }
  const Batch batch = dataset.get_batch({3, 0});
  CHECK(batch.data.shape() == ts::Shape{2, 5});
  CHECK(batch.data.dtype() == ts::DType::i64);
  CHECK(batch.target.shape() == ts::Shape{2, 5});
  CHECK(values(batch.data) == std::vector<int64_t>{15, 16, 17, 18, 19, 0, 1, 2, 3, 4});
  CHECK(values(batch.target) == std::vector<int64_t>{16, 17, 18, 19, 20, 1, 2, 3, 4, 5});
  CHECK(dataset.get_batch({}).rows() == 0);
  CHECK(contains(error_of<ts::IndexError>([&] { dataset.get_batch({4}); }), "window 4 is out of range for 4 windows"));
  // Exactly T+1 tokens make one window; T make none.
  ts::data::write_token_file(dir.file("six.bin"), counting(6));
  CHECK(TokenDataset(dir.file("six.bin"), {.seq_len = 5}).size() == 1);
  CHECK(contains(
      error_of<ts::data::DataError>([&] { TokenDataset d(dir.file("six.bin"), {.seq_len = 6}); }),
      "no window of seq_len + 1 = 7 tokens fits in any of the token files '" + dir.file("six.bin") + "' (6 tokens)"));
  CHECK(contains(error_of<ts::ValueError>([&] { TokenDataset d(dir.file("six.bin"), {.seq_len = 0}); }),
                 "seq_len must be at least 1"));
}

TEST_CASE("TokenDataset over several files: each file's windows in turn, none across a boundary") {
  TempDir dir;
  ts::data::write_token_file(dir.file("0.bin"), counting(12, 0));     // 2 windows of T = 5
  ts::data::write_token_file(dir.file("1.bin"), counting(4, 1000));   // none
  ts::data::write_token_file(dir.file("2.bin"), counting(16, 2000));  // 3
  const TokenDataset dataset({dir.file("0.bin"), dir.file("1.bin"), dir.file("2.bin")}, {.seq_len = 5});
  CHECK(dataset.size() == 5);
  CHECK(dataset.files().size() == 3);
  const std::vector<int64_t> first_tokens{0, 5, 2000, 2005, 2010};
  for (int64_t k = 0; k < 5; ++k) CHECK(dataset.window(k)[0] == first_tokens[static_cast<size_t>(k)]);
}

TEST_CASE("sequential order is llm.c's: global batch k is tokens [k*B*T, k*B*T + B*T]") {
  TempDir dir;
  const int64_t B = 4, T = 8, n = 300;
  ts::data::write_token_file(dir.file("seq.bin"), counting(n));
  const TokenDataset dataset(dir.file("seq.bin"), {.seq_len = T});
  const DataLoader loader(dataset, {.batch_size = B, .shuffle = false, .drop_last = true});
  const std::vector<Batch> batches = collect(loader, 0);
  // llm.c: (ntok * 2 - 2) / (B * T * 2) batches; batch k reads B*T+1 tokens from k*B*T.
  REQUIRE(static_cast<int64_t>(batches.size()) == (n - 1) / (B * T));
  for (int64_t k = 0; k < static_cast<int64_t>(batches.size()); ++k) {
    std::vector<int64_t> inputs, targets;
    for (int64_t i = 0; i < B * T; ++i) {
      inputs.push_back(k * B * T + i);
      targets.push_back(k * B * T + i + 1);
    }
    CHECK(batches[static_cast<size_t>(k)].data.shape() == ts::Shape{B, T});
    CHECK(values(batches[static_cast<size_t>(k)].data) == inputs);
    CHECK(values(batches[static_cast<size_t>(k)].target) == targets);
  }
}

TEST_CASE("random order: every window once per epoch, in an order of (seed, epoch)") {
  TempDir dir;
  const int64_t T = 4;
  ts::data::write_token_file(dir.file("r.bin"), counting(4 * 50 + 1));
  const TokenDataset dataset(dir.file("r.bin"), {.seq_len = T});
  REQUIRE(dataset.size() == 50);
  auto first_tokens = [&](const DataLoader& loader, int64_t epoch) {
    std::vector<int64_t> starts;
    for (const Batch& batch : collect(loader, epoch)) {
      const std::vector<int64_t> data = values(batch.data);
      for (int64_t row = 0; row < batch.rows(); ++row) starts.push_back(data[static_cast<size_t>(row * T)] / T);
    }
    return starts;
  };
  const DataLoader loader(dataset, {.batch_size = 8, .shuffle = true, .seed = 5});
  const std::vector<int64_t> epoch0 = first_tokens(loader, 0), epoch1 = first_tokens(loader, 1);
  CHECK(epoch0 == ts::data::epoch_permutation(50, 5, 0));
  CHECK(std::set<int64_t>(epoch0.begin(), epoch0.end()).size() == 50);
  CHECK(epoch0 != epoch1);
  CHECK(first_tokens(DataLoader(dataset, {.batch_size = 8, .shuffle = true, .seed = 5}), 1) == epoch1);
  CHECK(first_tokens(DataLoader(dataset, {.batch_size = 8, .shuffle = true, .seed = 6}), 0) != epoch0);
}

TEST_CASE("the ranks' rows of each global batch, put together, are the one-rank batch, in both orders") {
  TempDir dir;
  const int64_t T = 6;
  ts::data::write_token_file(dir.file("d.bin"), counting(6 * 41 + 3));
  const TokenDataset dataset(dir.file("d.bin"), {.seq_len = T});
  for (bool shuffle : {false, true}) {
    for (int64_t B : {6, 5}) {
      const DataLoader single(dataset, {.batch_size = B, .shuffle = shuffle, .seed = 3, .drop_last = true});
      const std::vector<Batch> whole = collect(single, 2);
      for (int64_t world : {2, 3, 4}) {
        std::vector<std::vector<Batch>> parts;
        for (int64_t rank = 0; rank < world; ++rank) {
          parts.push_back(collect(DataLoader(dataset, {.batch_size = B,
                                                       .shuffle = shuffle,
                                                       .seed = 3,
                                                       .drop_last = true,
                                                       .sampler = {.rank = rank, .world_size = world}}),
                                  2));
          REQUIRE(parts.back().size() == whole.size());
        }
        for (size_t k = 0; k < whole.size(); ++k) {
          std::vector<int64_t> data, target;
          for (int64_t rank = 0; rank < world; ++rank) {
            const Batch& part = parts[static_cast<size_t>(rank)][k];
            CHECK(part.global_rows == B);
            for (int64_t v : values(part.data)) data.push_back(v);
            for (int64_t v : values(part.target)) target.push_back(v);
          }
          CHECK(data == values(whole[k].data));
          CHECK(target == values(whole[k].target));
        }
      }
    }
  }
}

TEST_CASE("InMemoryTokenDataset gives TokenDataset's windows and batches for the same tokens") {
  TempDir dir;
  const std::vector<uint16_t> tokens = counting(1000, 7);
  ts::data::write_token_file(dir.file("t.bin"), tokens);
  TokenDataset from_file(dir.file("t.bin"), {.seq_len = 16, .vocab_size = 50257});
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  ts::data::InMemoryTokenDataset in_memory(ids, {.seq_len = 16, .vocab_size = 50257});
  REQUIRE(in_memory.size() == from_file.size());
  CHECK(in_memory.size() == 999 / 16);
  CHECK(in_memory.num_tokens() == 1000);
  // A shuffled loader over each: the same batches, row for row.
  const ts::data::DataLoaderOptions options{.batch_size = 8, .shuffle = true, .seed = 3, .drop_last = true};
  DataLoader file_loader(from_file, options), memory_loader(in_memory, options);
  std::vector<Batch> file_batches, memory_batches;
  for (const Batch& batch : file_loader.epoch(1)) file_batches.push_back(batch);
  for (const Batch& batch : memory_loader.epoch(1)) memory_batches.push_back(batch);
  REQUIRE(file_batches.size() == memory_batches.size());
  CHECK(file_batches.size() == 62 / 8);
  for (size_t b = 0; b < file_batches.size(); ++b) {
    CHECK(values(memory_batches[b].data) == values(file_batches[b].data));
    CHECK(values(memory_batches[b].target) == values(file_batches[b].target));
  }
  // Window 3: tokens [48, 64] of the sequence; the target is the data shifted by one.
  const Batch one = in_memory.get_batch({3});
  CHECK(values(one.data).front() == 7 + 48);
  CHECK(values(one.target).back() == 7 + 64);
  // From a tensor of any integer dtype, on any device.
  ts::data::InMemoryTokenDataset from_tensor(ts::arange(0, 33, 1, {.dtype = ts::DType::u8}), {.seq_len = 8});
  CHECK(from_tensor.size() == 4);
  CHECK(values(from_tensor.get_batch({2}).target) == std::vector<int64_t>{17, 18, 19, 20, 21, 22, 23, 24});
}

TEST_CASE("InMemoryTokenDataset: bad tokens and too few of them are errors naming the position") {
  CHECK(contains(error_of<ts::ValueError>([] { ts::data::InMemoryTokenDataset({1, 2, 70000, 3}, {.seq_len = 2, .vocab_size = 50257}); }),
                 "token 2 is 70000, outside [0, 50257)"));
  CHECK(contains(error_of<ts::ValueError>([] { ts::data::InMemoryTokenDataset({1, -4, 2}, {.seq_len = 1}); }),
                 "token 1 is -4"));
  CHECK(contains(error_of<ts::ValueError>([] { ts::data::InMemoryTokenDataset({1, 2, 3}, {.seq_len = 4}); }),
                 "no window of seq_len + 1 = 5 tokens fits in 3 tokens"));
  CHECK(contains(error_of<ts::DTypeError>([] { ts::data::InMemoryTokenDataset(ts::ones({4})); }),
                 "expected integer ids, got float32"));
  ts::data::InMemoryTokenDataset dataset({1, 2, 3, 4, 5}, {.seq_len = 2});
  CHECK(contains(error_of<ts::IndexError>([&] { dataset.get_batch({2}); }), "window 2 is out of range for 2 windows"));
}
