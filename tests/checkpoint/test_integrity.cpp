// Corrupt checkpoints give clear errors, never crashes or silent misreads: truncation at
// every byte, a bit flipped at every byte (rank files, metadata.json, full files),
// oversized, overlapping and missing ranges, huge header and metadata lengths, invalid
// JSON, unknown dtypes, newer formats and a bad `latest`. Every error is an io::FormatError
// naming the file and the byte offset. (Run under ASan and UBSan by scripts/test.)
#include "checkpoint_test_support.h"

#include <fcntl.h>
#include <unistd.h>

#include <functional>

using namespace checkpoint_test;
using ts::testing::read_file_bytes;
using ts::testing::TempDir;
using ts::testing::write_file_bytes;
namespace json = ts::io::json;

namespace {

std::shared_ptr<ts::dist::ProcessGroup> one_rank() { return std::make_shared<ts::dist::SingleProcessGroup>(); }

// A saved checkpoint (sharded at `world` ranks and full) and a model to load it into.
struct Fixture {
  TempDir dir;
  std::string sharded = dir.file("sharded");
  std::string full = dir.file("full.safetensors");
  Trained target{one_rank(), 1, 42};

  explicit Fixture(int world = 1) {
    Trained saved(one_rank(), 3);
    ckpt::save_sharded(dir.file("one"), saved.model, saved.with(), {.step = 3});
    ckpt::ShardedCheckpoint one(dir.file("one"));
    ckpt::write_sharded(one, sharded, world);
    ckpt::write_full(one, full);
  }
  std::string rank_file(int rank, int world = 1) const { return sharded + "/" + ckpt::rank_file_name(rank, world); }
  std::string metadata() const { return sharded + "/metadata.json"; }
};

// In-place edits: rewriting a file whole on every iteration makes ext4 flush it on close
// (its replace-via-truncate heuristic), hundreds of times slower than these.
void truncate_to(const std::string& path, size_t length) { REQUIRE(::truncate(path.c_str(), static_cast<off_t>(length)) == 0); }

void poke(const std::string& path, size_t offset, char byte) {
  int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, &byte, 1, static_cast<off_t>(offset)) == 1);
  ::close(fd);
}

struct Outcome {
  bool threw = false;
  bool format_error = false;
  std::string message;
};

Outcome outcome_of(const std::function<void()>& action) {
  Outcome outcome;
  try {
    action();
  } catch (const ts::io::FormatError& error) {
    outcome = {true, true, error.what()};
  } catch (const ts::Error& error) {
    outcome = {true, false, error.what()};
  }
  return outcome;
}

// The load fails with a FormatError naming `file` and a byte offset.
void check_format_error(const Outcome& outcome, const std::string& file) {
  INFO(outcome.message);
  CHECK(outcome.threw);
  CHECK(outcome.format_error);
  CHECK(contains(outcome.message, file));
  CHECK(contains(outcome.message, "byte "));
}

// metadata.json rewritten by `edit` (with a valid CRC, so that the check under test is reached).
void edit_metadata(const std::string& path, const std::function<void(json::Value&)>& edit) {
  json::Value value = json::parse(read_file_bytes(path));
  json::Object members = value.as_object();
  members.pop_back();  // metadata_crc32c
  json::Value content(std::move(members));
  edit(content);
  write_file_bytes(path, ckpt::write_with_crc(content));
}

// expect(edit, words): `edit` made to f's metadata.json must make opening the checkpoint
// fail with a FormatError naming the file, a byte offset and `words`; the file is then put
// back as it was.
auto metadata_edit_check(const Fixture& f) {
  return [&f, original = read_file_bytes(f.metadata())](const std::function<void(json::Value&)>& edit,
                                                        const std::string& words) {
    edit_metadata(f.metadata(), edit);
    Outcome outcome = outcome_of([&] { ckpt::ShardedCheckpoint reader(f.sharded); });
    check_format_error(outcome, f.metadata());
    CHECK_MESSAGE(contains(outcome.message, words), outcome.message);
    write_file_bytes(f.metadata(), original);
  };
}

json::Value& unit(json::Value& metadata, size_t index) {
  return metadata.as_object()[4].second.as_object()[0].second.as_array()[index];  // manifest.units[index]
}

}  // namespace

TEST_CASE("a truncated rank file, metadata.json or full file is refused at every length") {
  Fixture f;
  auto load_sharded = [&] { ckpt::load_sharded(f.sharded, f.target.model, f.target.with()); };
  auto load_full = [&] { ckpt::load_full(f.full, f.target.model, f.target.with()); };
  for (const std::string& path : {f.rank_file(0), f.metadata(), f.full}) {
    const std::string bytes = read_file_bytes(path);
    for (size_t length = bytes.size(); length-- > 0;) {
      CAPTURE(path);
      CAPTURE(length);
      truncate_to(path, length);
      check_format_error(outcome_of(path == f.full ? std::function<void()>(load_full) : load_sharded), path);
    }
    write_file_bytes(path, bytes);
  }
  // Intact again: it loads.
  load_sharded();
  load_full();
}

TEST_CASE("a bit flipped anywhere in a rank file, metadata.json or full file is detected") {
  Fixture f;
  int detected = 0, flips = 0;
  for (const std::string& path : {f.rank_file(0), f.metadata(), f.full}) {
    const std::string bytes = read_file_bytes(path);
    for (size_t at = 0; at < bytes.size(); ++at) {
      poke(path, at, static_cast<char>(bytes[at] ^ (1 << (at % 8))));
      Outcome outcome = outcome_of([&] {
        if (path == f.full) {
          ckpt::load_full(f.full, f.target.model, f.target.with());
        } else {
          ckpt::load_sharded(f.sharded, f.target.model, f.target.with());
        }
      });
      ++flips;
      if (outcome.threw) ++detected;
      CAPTURE(path);
      CAPTURE(at);
      check_format_error(outcome, path);
      poke(path, at, bytes[at]);
    }
    write_file_bytes(path, bytes);
  }
  MESSAGE(detected, " of ", flips, " single-bit flips detected");
}

TEST_CASE("metadata with overlapping, oversized or missing ranges is refused with the byte offset") {
  Fixture f(2);
  auto expect = metadata_edit_check(f);
  auto parameter = [](json::Value& metadata, size_t u, size_t p) -> json::Value& {
    return unit(metadata, u).as_object()[4].second.as_array()[p];
  };
  auto slice = [](json::Value& metadata, size_t file, size_t s) -> json::Value& {
    return metadata.as_object()[5].second.as_array()[file].as_object()[3].second.as_array()[s];
  };

  expect([&](json::Value& m) { parameter(m, 0, 1).set("offset", 30); }, "overlaps the previous parameter");
  expect([&](json::Value& m) { parameter(m, 0, 1).set("offset", int64_t{1} << 40); }, "run past the unit's flat_numel");
  expect([&](json::Value& m) { parameter(m, 0, 1).set("offset", -1); }, "outside");
  expect([&](json::Value& m) { parameter(m, 0, 0).set("numel", 36); }, "numel 36 but shape [5, 7] has 35");
  expect([&](json::Value& m) { unit(m, 0).set("flat_numel", 45); }, "last parameter ends at 41");
  expect([&](json::Value& m) {  // a zero does not excuse the other sizes: strides multiply them
    m.as_object()[4].second.as_object()[1].second.as_array()[0].set("shape", json::Array{0, int64_t{1} << 40, int64_t{1} << 40});
  }, "more than 1125899906842624 elements");
  expect([&](json::Value& m) { unit(m, 0).set("dtype", "F17"); }, "unknown dtype \"F17\"");
  expect([&](json::Value& m) { unit(m, 0).set("dtype", "I64"); }, "not floating");
  expect([&](json::Value& m) { slice(m, 0, 0).set("end", 30); }, "are in two files");       // fc1: [0,21) [21,41)
  expect([&](json::Value& m) { slice(m, 0, 0).set("end", 15); }, "are in no file");
  expect([&](json::Value& m) { slice(m, 1, 0).set("end", 1000); }, "outside its 41 elements");
  expect([&](json::Value& m) { slice(m, 1, 0).set("begin", 40); }, "are in no file");
  expect([&](json::Value& m) { slice(m, 0, 0).set("name", "fc9._flat_param"); }, "unexpected tensor");
  expect([&](json::Value& m) { m.set("world_size", 3); }, "2 files for a world of 3");
  expect([&](json::Value& m) { m.set("world_size", int64_t{1} << 40); }, "world_size");
  expect([&](json::Value& m) { m.set("version", 3); }, "reads up to version 2");
  expect([&](json::Value& m) { m.set("format", "something-else"); }, "is not \"tessera.sharded-checkpoint\"");
  expect([&](json::Value& m) { m.set("crc32c_chunk_bytes", 12); }, "multiple of 8");
  expect([&](json::Value& m) { m.as_object()[5].second.as_array()[1].set("name", "../../etc/passwd"); }, "should be");

  // Invalid JSON, and a CRC that does not match.
  const std::string path = f.metadata();
  const std::string original = read_file_bytes(path);
  write_file_bytes(path, original.substr(0, 40) + "}" + original.substr(41));
  check_format_error(outcome_of([&] { ckpt::ShardedCheckpoint reader(f.sharded); }), path);
  std::string edited = original;
  edited[edited.find("\"step\":3") + 7] = '4';
  Outcome outcome = outcome_of([&] { ckpt::ShardedCheckpoint reader(f.sharded); });
  write_file_bytes(path, edited);
  outcome = outcome_of([&] { ckpt::ShardedCheckpoint reader(f.sharded); });
  check_format_error(outcome, path);
  CHECK(contains(outcome.message, "metadata CRC32C mismatch"));
  write_file_bytes(path, "");
  CHECK(contains(outcome_of([&] { ckpt::ShardedCheckpoint reader(f.sharded); }).message, "the file is empty"));

  // A huge metadata.json (sparse) is refused unread.
  write_file_bytes(path, original);
  REQUIRE(::truncate(path.c_str(), int64_t{3} << 30) == 0);
  outcome = outcome_of([&] { ckpt::ShardedCheckpoint reader(f.sharded); });
  check_format_error(outcome, path);
  CHECK(contains(outcome.message, "over the 67108864-byte limit"));
  write_file_bytes(path, original);
  ckpt::ShardedCheckpoint intact(f.sharded);
  intact.verify_all();
}

// The member `key` of a JSON object, to edit in place.
json::Value& member(json::Value& object, const std::string& key) {
  for (auto& [name, value] : object.as_object()) {
    if (name == key) return value;
  }
  FAIL("no member " << key);
  throw;
}

TEST_CASE("metadata whose optimizer groups or state do not fit the units is refused") {
  Fixture f;
  auto expect = metadata_edit_check(f);
  auto optimizer = [](json::Value& m) -> json::Value& { return member(member(m, "manifest"), "optimizer"); };
  auto params = [&](json::Value& m) -> json::Value& {
    return member(member(optimizer(m), "param_groups").as_array()[0], "params");
  };
  auto state = [&](json::Value& m) -> json::Value& { return member(optimizer(m), "state").as_array()[0]; };

  expect([&](json::Value& m) { params(m).push_back("fc9.weight"); }, "parameter 'fc9.weight' is not in any unit");
  expect([&](json::Value& m) { params(m).push_back("fc1._flat_param"); }, "is in two groups");
  expect([&](json::Value& m) { params(m).push_back("fc1.bias"); }, "stepped both as the flat shard 'fc1._flat_param'");
  expect([&](json::Value& m) { state(m).set("param", "fc1.bias"); }, "state for 'fc1.bias', which is in no group");
  expect([&](json::Value& m) { member(state(m), "tensors").push_back("momentum_buffer"); },
         "state 'momentum_buffer' of '_flat_param' is not stored in unit '(root)'");
  ckpt::load_sharded(f.sharded, f.target.model, f.target.with());  // intact again: it loads
}

TEST_CASE("a version 1 checkpoint (one parameter group, scalars per unit) still loads") {
  // Rewrites a checkpoint's metadata as version 1 wrote it, then loads both.
  Fixture f;
  ckpt::load_sharded(f.sharded, f.target.model, f.target.with());
  const ts::StateDict optimizer = f.target.adam->state_dict();
  const ts::StateDict scheduler = f.target.scheduler->state_dict();
  edit_metadata(f.metadata(), [](json::Value& m) {
    m.set("version", 1);
    json::Value& manifest = member(m, "manifest");
    json::Value& groups = member(member(manifest, "optimizer"), "param_groups");
    json::Value hyper = member(groups.as_array()[0], "hyperparameters");
    json::Object kept;
    for (auto& [name, value] : hyper.as_object()) {
      if (name != "initial_lr") kept.emplace_back(name, value);  // version 1 did not know it
    }
    json::Value states = member(member(manifest, "optimizer"), "state");
    manifest.set("optimizer", json::Object{{"type", "Adam"}, {"hyperparameters", std::move(kept)}});
    for (json::Value& unit_json : member(manifest, "units").as_array()) {
      const std::string flat = member(unit_json, "flat_parameter").as_string();
      for (json::Value& record : states.as_array()) {
        if (member(record, "param").as_string() == flat) member(unit_json, "optimizer_state").set("scalars", member(record, "scalars"));
      }
    }
    json::Value& step_lr = member(member(manifest, "scheduler"), "state");
    json::Object old;
    for (auto& [name, value] : step_lr.as_object()) {
      if (name == "base_lrs") old.emplace_back("base_lr", value.as_array()[0]);
      if (name == "_last_lr") old.emplace_back("last_lr", value.as_array()[0]);
      if (name == "step_size" || name == "gamma" || name == "last_epoch") old.emplace_back(name, value);
    }
    step_lr = json::Value(std::move(old));
  });
  Trained target(one_rank(), 1, 43);
  ckpt::load_sharded(f.sharded, target.model, target.with());
  const ts::StateDict upgraded = target.adam->state_dict();
  for (const auto& [key, value] : optimizer) {
    CAPTURE(key);
    if (contains(key, "initial_lr")) continue;
    CHECK(same_bits(upgraded.at(key), value));
  }
  check_same(target.scheduler->state_dict(), scheduler);
}

TEST_CASE("rank files with a huge header length, an unknown dtype or foreign tensors are refused") {
  Fixture f;
  const std::string path = f.rank_file(0);
  const std::string original = read_file_bytes(path);
  auto load = [&] { return outcome_of([&] { ckpt::load_sharded(f.sharded, f.target.model, f.target.with()); }); };

  std::string huge = original;
  for (int i = 0; i < 8; ++i) huge[i] = static_cast<char>(i == 5 ? 1 : 0);  // 2^40
  write_file_bytes(path, huge);
  Outcome outcome = load();
  check_format_error(outcome, path);
  CHECK(contains(outcome.message, "byte 0"));
  CHECK(contains(outcome.message, "exceeds the limit"));

  std::string unknown = original;
  size_t at = unknown.find("\"F32\"");
  REQUIRE(at != std::string::npos);
  unknown.replace(at, 5, "\"F17\"");
  write_file_bytes(path, unknown);
  outcome = load();
  check_format_error(outcome, path);
  CHECK(contains(outcome.message, "unknown dtype \"F17\""));

  std::string other = original;  // a known dtype that is not the unit's
  other.replace(at, 5, "\"I32\"");
  write_file_bytes(path, other);
  check_format_error(load(), path);

  // Same size, a tensor renamed: the file no longer holds what the metadata records.
  std::string renamed = original;
  at = renamed.find("fc1._flat_param");
  renamed[at + 2] = '9';
  write_file_bytes(path, renamed);
  outcome = load();
  check_format_error(outcome, path);
  CHECK(contains(outcome.message, "has no tensor 'fc1._flat_param'"));

  // Data corrupted: the CRC names the chunk and its bytes.
  std::string corrupt = original;
  corrupt[corrupt.size() - 3] = static_cast<char>(corrupt[corrupt.size() - 3] ^ 0x10);
  write_file_bytes(path, corrupt);
  outcome = load();
  check_format_error(outcome, path);
  CHECK(contains(outcome.message, "CRC32C mismatch"));
  CHECK(contains(outcome.message, "chunk 0"));
}

TEST_CASE("a full file without Tessera's manifest, or with a bad one, is refused") {
  Fixture f;
  ts::StateDict plain = ts::io::load(f.full);
  ts::io::save(plain, f.full);  // tensors only, no manifest
  Outcome outcome = outcome_of([&] { ckpt::FullCheckpoint reader(f.full); });
  check_format_error(outcome, f.full);
  CHECK(contains(outcome.message, "not a Tessera full checkpoint"));
  ts::io::save(plain, f.full, {{"tessera.manifest", "{\"format\": 1,"}});
  outcome = outcome_of([&] { ckpt::FullCheckpoint reader(f.full); });
  check_format_error(outcome, f.full);
  CHECK(contains(outcome.message, "invalid JSON"));
}

TEST_CASE("a corrupt or dangling latest pointer is a clear error") {
  TempDir dir;
  Trained trained(one_rank(), 1);
  ckpt::CheckpointManager manager(dir.file("root"));
  manager.save(trained.model, trained.with(), {.step = 7});
  write_file_bytes(dir.file("root/latest"), "step-0000007x\n");
  Outcome outcome = outcome_of([&] { manager.latest(); });
  check_format_error(outcome, "root/latest");
  write_file_bytes(dir.file("root/latest"), "step-00000008\n");
  outcome = outcome_of([&] { manager.latest(); });
  check_format_error(outcome, "root/latest");
  CHECK(contains(outcome.message, "is not a directory"));
}
