// Sharded checkpoints: writing rank files and metadata.json, validating and reading them
// back at any world size.
#include "tessera/checkpoint/sharded.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>

#include "tessera/checkpoint/chunks.h"
#include "tessera/checkpoint/collective.h"
#include "tessera/checkpoint/errors.h"
#include "tessera/checkpoint/load_into.h"
#include "tessera/checkpoint/manifest_reader.h"
#include "tessera/checkpoint/model_source.h"
#include "tessera/checkpoint/output_folder.h"
#include "tessera/checkpoint/output_folder_claim.h"
#include "tessera/checkpoint/sharded_writer.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/durable.h"
#include "tessera/io/posix_file.h"
#include "tessera/tensor/native.h"

namespace tessera::checkpoint {

namespace json = io::json;
using detail::JsonReader;

namespace {

json::Value file_record_json(const FileRecord& record) {
  json::Array slices;
  for (const SliceRecord& slice : record.slices) {
    json::Array crcs;
    for (uint32_t crc : slice.crc32c) crcs.emplace_back(static_cast<int64_t>(crc));
    slices.push_back(json::Object{{"name", slice.tensor}, {"begin", slice.begin}, {"end", slice.end},
                                  {"crc32c", std::move(crcs)}});
  }
  return json::Object{{"name", record.name},
                      {"rank", record.rank},
                      {"bytes", static_cast<int64_t>(record.bytes)},
                      {"tensors", std::move(slices)}};
}

FileRecord file_record_from(const json::Value& value, const JsonReader& reader) {
  FileRecord record;
  const char* what = "file";
  record.name = reader.string(reader.member(value, "name", what), "file name");
  record.rank = static_cast<int>(reader.integer(reader.member(value, "rank", what), "file rank", 0, kMaxWorldSize - 1));
  record.bytes = static_cast<uint64_t>(reader.integer(reader.member(value, "bytes", what), "file bytes"));
  for (const json::Value& slice_json : reader.array(reader.member(value, "tensors", what), "file tensors")) {
    SliceRecord slice;
    slice.tensor = reader.string(reader.member(slice_json, "name", "tensor"), "tensor name");
    std::string where = "tensor '" + slice.tensor + "' of " + record.name;
    slice.begin = reader.integer(reader.member(slice_json, "begin", where), where + " begin");
    slice.end = reader.integer(reader.member(slice_json, "end", where), where + " end");
    for (const json::Value& crc : reader.array(reader.member(slice_json, "crc32c", where), where + " crc32c")) {
      slice.crc32c.push_back(static_cast<uint32_t>(reader.integer(crc, where + " crc32c", 0, 0xFFFFFFFFll)));
    }
    record.slices.push_back(std::move(slice));
  }
  return record;
}

json::Value metadata_json(const ShardedMetadata& metadata) {
  json::Array files;
  for (const FileRecord& record : metadata.files) files.push_back(file_record_json(record));
  return json::Object{{"format", kShardedFormat},
                      {"version", kFormatVersion},
                      {"world_size", metadata.world_size},
                      {"crc32c_chunk_bytes", static_cast<int64_t>(metadata.chunk_bytes)},
                      {"manifest", to_json(metadata.manifest)},
                      {"files", std::move(files)}};
}

// What every stored tensor must be: its dtype and element count.
struct Expected {
  DType dtype;
  int64_t numel;
};

std::unordered_map<std::string, Expected> expected_tensors(const Manifest& manifest) {
  std::unordered_map<std::string, Expected> expected;
  for (const UnitRecord& unit : manifest.units) {
    expected[sharded_tensor_name(unit, "")] = {unit.dtype, unit.flat_numel};
    for (const std::string& state : unit.state_tensors) expected[sharded_tensor_name(unit, state)] = {unit.dtype, unit.flat_numel};
  }
  for (const BufferRecord& buffer : manifest.buffers) {
    expected[sharded_buffer_name(buffer.name)] = {buffer.dtype, shape_numel(buffer.shape)};
  }
  return expected;
}

std::string read_text_file(const std::string& path, uint64_t limit) {
  uint64_t size = 0;
  io::FileDescriptor fd = io::open_regular_file(path, &size);
  if (size > limit) {
    throw io::FormatError(tessera::detail::concat(path, ": byte 0: the file is ", size, " bytes, over the ", limit,
                                                  "-byte limit for metadata (corrupt?)"));
  }
  std::string text(size, '\0');
  int64_t got = io::pread_full(fd.get(), text.data(), size, 0);
  if (got < 0) throw io::IOError(tessera::detail::concat("cannot read '", path, "': ", io::os_error(static_cast<int>(-got))));
  text.resize(static_cast<size_t>(got));
  return text;
}

// One rank's file: its slice of every flat tensor (`range_of(unit)`), and on rank 0 the buffers.
FileRecord write_rank_file(const FlatSource& source, const std::string& directory, int rank, int world_size,
                           const std::function<fsdp::ElementRange(size_t)>& range_of, uint64_t chunk_bytes) {
  const Manifest& manifest = source.manifest();
  FileRecord record;
  record.name = rank_file_name(rank, world_size);
  record.rank = rank;
  StateDict tensors;
  auto add = [&](const std::string& name, Tensor tensor, int64_t begin, int64_t end) {
    record.slices.push_back({name, begin, end, chunk_crcs(tensor, chunk_bytes)});
    tensors.insert(name, std::move(tensor));
  };
  for (size_t u = 0; u < manifest.units.size(); ++u) {
    const UnitRecord& unit = manifest.units[u];
    fsdp::ElementRange range = range_of(u);
    add(sharded_tensor_name(unit, ""), source.slice(u, "", range.begin, range.size()), range.begin, range.end);
    for (const std::string& state : unit.state_tensors) {
      add(sharded_tensor_name(unit, state), source.slice(u, state, range.begin, range.size()), range.begin, range.end);
    }
  }
  if (rank == 0) {
    for (const BufferRecord& buffer : manifest.buffers) {
      Tensor value = native::view(source.buffer(buffer.name), {-1});
      add(sharded_buffer_name(buffer.name), value, 0, value.numel());
    }
  }
  const std::string path = directory + "/" + record.name;
  io::save(tensors, path);
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    int error = errno;
    throw io::IOError(tessera::detail::concat("cannot stat '", path, "' after writing it: ", io::os_error(error)));
  }
  record.bytes = static_cast<uint64_t>(info.st_size);
  return record;
}

std::string temporary_for(const std::string& directory) {
  std::string trimmed = directory;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  std::string name = std::filesystem::path(trimmed).filename().string();
  TS_CHECK(!name.empty() && name != "." && name != "..", ValueError, "checkpoint: '", directory,
           "' does not name a directory to create");
  return io::parent_directory(trimmed) + "/." + name + ".tmp";
}

void prepare_temporary(const std::string& temporary) {
  std::filesystem::create_directories(io::parent_directory(temporary));
  std::filesystem::remove_all(temporary);  // left by a crashed save
  std::filesystem::create_directory(temporary);
}

// Writes metadata.json into the temporary directory and fsyncs the directory.
void write_metadata(const ShardedMetadata& metadata, const std::string& temporary) {
  std::string text = write_with_crc(metadata_json(metadata));
  io::AtomicFile file(temporary + "/" + kMetadataFile);
  file.write(text.data(), text.size());
  file.commit();
  io::fsync_path(temporary);
}

// Writes metadata.json into the temporary directory and moves it into place.
void finish(const ShardedMetadata& metadata, const std::string& temporary, const std::string& directory) {
  write_metadata(metadata, temporary);
  io::replace_directory(temporary, directory);
}

// A new temporary folder beside `directory`, named for it and unique (mkdtemp), so that
// nothing already there is reused or removed.
std::string make_temporary_beside(const std::string& directory) {
  const std::string parent = io::parent_directory(directory);
  std::filesystem::create_directories(parent);
  std::string name = parent + "/." + std::filesystem::path(directory).filename().string() + ".tmp-XXXXXX";
  if (::mkdtemp(name.data()) == nullptr) {
    int error = errno;
    throw io::IOError(tessera::detail::concat("cannot create a temporary folder '", name, "': ", io::os_error(error)));
  }
  return name;
}

// Filesystem errors as IOError (std::filesystem throws its own type).
template <class F>
auto filesystem_step(const std::string& what, F&& step) {
  try {
    return step();
  } catch (const std::filesystem::filesystem_error& error) {
    throw io::IOError(tessera::detail::concat(what, ": ", error.what()));
  }
}

}  // namespace

std::string rank_file_name(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", rank, world_size);
  return name;
}

ShardedCheckpoint::ShardedCheckpoint(const std::string& directory)
    : directory_(directory), metadata_path_(directory + "/" + kMetadataFile) {
  std::string text = read_text_file(metadata_path_, kMaxMetadataBytes);
  JsonReader reader(metadata_path_);
  json::Value parsed;
  try {
    parsed = json::parse(text, json::file_limits(text.size()));
  } catch (const json::ParseError& error) {
    throw io::FormatError(tessera::detail::concat(metadata_path_, ": byte ", error.offset(), ": invalid JSON: ",
                                                  error.reason(), text.empty() ? " (the file is empty)" : ""));
  }
  json::Value value = check_and_strip_crc(std::move(parsed), reader);

  const json::Value& format = reader.member(value, "format", "metadata");
  if (reader.string(format, "format") != kShardedFormat) {
    reader.fail(format, "format \"", format.as_string(), "\" is not \"", kShardedFormat, "\"");
  }
  const int64_t version = reader.integer(reader.member(value, "version", "metadata"),
                                         "version (this Tessera reads up to version 2)", 1, kFormatVersion);
  metadata_.world_size =
      static_cast<int>(reader.integer(reader.member(value, "world_size", "metadata"), "world_size", 1, kMaxWorldSize));
  const json::Value& chunk_json = reader.member(value, "crc32c_chunk_bytes", "metadata");
  metadata_.chunk_bytes = static_cast<uint64_t>(reader.integer(chunk_json, "crc32c_chunk_bytes", 8, int64_t{1} << 30));
  if (metadata_.chunk_bytes % 8 != 0) reader.fail(chunk_json, "crc32c_chunk_bytes must be a multiple of 8");
  metadata_.manifest = manifest_from_json(reader.member(value, "manifest", "metadata"), reader, version);

  const json::Value& files_json = reader.member(value, "files", "metadata");
  const json::Array& files = reader.array(files_json, "files");
  if (static_cast<int>(files.size()) != metadata_.world_size) {
    reader.fail(files_json, "files: ", files.size(), " files for a world of ", metadata_.world_size);
  }
  std::unordered_map<std::string, Expected> expected = expected_tensors(metadata_.manifest);
  metadata_.files.resize(files.size());
  std::vector<bool> seen(files.size(), false);
  for (const json::Value& file_json : files) {
    FileRecord record = file_record_from(file_json, reader);
    if (record.rank >= metadata_.world_size || seen[static_cast<size_t>(record.rank)]) {
      reader.fail(file_json, "file '", record.name, "': rank ", record.rank, " is out of range or repeated");
    }
    if (record.name != rank_file_name(record.rank, metadata_.world_size)) {
      reader.fail(file_json, "file name '", record.name, "' should be '", rank_file_name(record.rank, metadata_.world_size), "'");
    }
    seen[static_cast<size_t>(record.rank)] = true;
    std::set<std::string> names;
    const json::Array& slices_json = file_json.at("tensors").as_array();
    for (size_t s = 0; s < record.slices.size(); ++s) {
      const SliceRecord& slice = record.slices[s];
      const json::Value& at = slices_json[s];
      auto found = expected.find(slice.tensor);
      if (found == expected.end()) reader.fail(at, "file '", record.name, "': unexpected tensor '", slice.tensor, "'");
      if (!names.insert(slice.tensor).second) reader.fail(at, "file '", record.name, "': tensor '", slice.tensor, "' twice");
      if (slice.begin > slice.end || slice.end > found->second.numel) {
        reader.fail(at, "file '", record.name, "': tensor '", slice.tensor, "' elements [", slice.begin, ", ", slice.end,
                    ") are outside its ", found->second.numel, " elements");
      }
      uint64_t bytes = static_cast<uint64_t>(slice.end - slice.begin) * element_size(found->second.dtype);
      if (slice.crc32c.size() != chunk_count(bytes, metadata_.chunk_bytes)) {
        reader.fail(at, "file '", record.name, "': tensor '", slice.tensor, "' has ", slice.crc32c.size(),
                    " chunk CRCs for ", bytes, " bytes (", chunk_count(bytes, metadata_.chunk_bytes), " expected)");
      }
    }
    metadata_.files[static_cast<size_t>(record.rank)] = std::move(record);
  }

  // Every stored tensor must be tiled exactly by the files' slices.
  for (size_t f = 0; f < metadata_.files.size(); ++f) {
    for (const SliceRecord& slice : metadata_.files[f].slices) {
      if (slice.end > slice.begin) pieces_[slice.tensor].push_back({f, &slice});
    }
  }
  for (const auto& [name, want] : expected) {
    std::vector<Piece>& pieces = pieces_[name];
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.slice->begin < b.slice->begin; });
    int64_t covered = 0;
    for (const Piece& piece : pieces) {
      if (piece.slice->begin > covered) {
        reader.fail(files_json, "tensor '", name, "': elements [", covered, ", ", piece.slice->begin, ") are in no file");
      }
      if (piece.slice->begin < covered) {
        reader.fail(files_json, "tensor '", name, "': elements [", piece.slice->begin, ", ", covered,
                    ") are in two files (overlapping ranges; one is in ", metadata_.files[piece.file].name, ")");
      }
      covered = piece.slice->end;
    }
    if (covered != want.numel) {
      reader.fail(files_json, "tensor '", name, "': elements [", covered, ", ", want.numel, ") are in no file");
    }
  }
  open_files_.resize(metadata_.files.size());
}

ShardedCheckpoint::~ShardedCheckpoint() = default;

const io::SafetensorsFile& ShardedCheckpoint::file(size_t index) const {
  if (open_files_[index]) return *open_files_[index];
  const FileRecord& record = metadata_.files[index];
  const std::string path = directory_ + "/" + record.name;
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    int error = errno;
    throw io::IOError(tessera::detail::concat("cannot open '", path, "': ", io::os_error(error)));
  }
  if (!S_ISREG(info.st_mode)) {
    throw io::IOError(tessera::detail::concat("cannot read '", path, "': it is ", io::file_type_name(info.st_mode),
                                              ", not a regular file (", metadata_path_, " records a ", record.bytes,
                                              "-byte rank file)"));
  }
  if (static_cast<uint64_t>(info.st_size) != record.bytes) {
    throw io::FormatError(tessera::detail::concat(path, ": byte ", std::min<uint64_t>(info.st_size, record.bytes),
                                                  ": the file is ", info.st_size, " bytes but ", metadata_path_,
                                                  " records ", record.bytes,
                                                  info.st_size < static_cast<off_t>(record.bytes) ? " (truncated?)" : ""));
  }
  auto opened = std::make_unique<io::SafetensorsFile>(path);
  std::unordered_map<std::string, Expected> expected = expected_tensors(metadata_.manifest);
  for (const SliceRecord& slice : record.slices) {
    check_entry(*opened, slice.tensor, expected.at(slice.tensor).dtype, {slice.end - slice.begin}, slice.crc32c,
                metadata_.chunk_bytes, metadata_path_);
  }
  if (opened->entries().size() != record.slices.size()) {
    throw io::FormatError(tessera::detail::concat(path, ": byte 8: the header lists ", opened->entries().size(), " tensors but ",
                                                  metadata_path_, " records ", record.slices.size()));
  }
  open_files_[index] = std::move(opened);
  return *open_files_[index];
}

void ShardedCheckpoint::read_pieces(const std::string& tensor, int64_t first, const Tensor& destination) const {
  const int64_t last = first + destination.numel();
  auto found = pieces_.find(tensor);
  TS_CHECK(found != pieces_.end(), ValueError, "checkpoint '", directory_, "' has no tensor '", tensor, "'");
  for (const Piece& piece : found->second) {
    const int64_t begin = std::max(first, piece.slice->begin), end = std::min(last, piece.slice->end);
    if (end <= begin) continue;
    read_verified(file(piece.file), tensor, piece.slice->crc32c, metadata_.chunk_bytes, begin - piece.slice->begin,
                  native::narrow(destination, 0, begin - first, end - begin));
  }
}

void ShardedCheckpoint::read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const {
  const UnitRecord& record = manifest().units.at(unit);
  TS_CHECK(state.empty() || std::count(record.state_tensors.begin(), record.state_tensors.end(), state), ValueError,
           "checkpoint '", directory_, "': unit '", record.name, "' has no optimizer state '", state, "'");
  TS_CHECK(first >= 0 && destination.numel() <= record.flat_numel - first, IndexError, "checkpoint '", directory_,
           "': elements [", first, ", ", first + destination.numel(), ") of unit '", record.name, "' leave its ",
           record.flat_numel);
  read_pieces(sharded_tensor_name(record, state), first, destination);
}

Tensor ShardedCheckpoint::buffer(const std::string& name) const {
  for (const BufferRecord& record : manifest().buffers) {
    if (record.name != name) continue;
    Tensor out = native::empty({shape_numel(record.shape)}, record.dtype, Device::cpu());
    read_pieces(sharded_buffer_name(name), 0, out);
    return native::view(out, record.shape);
  }
  throw ValueError(tessera::detail::concat("checkpoint '", directory_, "' has no buffer '", name, "'"));
}

void ShardedCheckpoint::check_files() const {
  for (size_t f = 0; f < metadata_.files.size(); ++f) file(f);
}

void ShardedCheckpoint::verify_all() const {
  for (size_t f = 0; f < metadata_.files.size(); ++f) {
    for (const SliceRecord& slice : metadata_.files[f].slices) {
      const io::SafetensorsFile& opened = file(f);
      Tensor whole = native::empty({slice.end - slice.begin}, opened.entry(slice.tensor).dtype, Device::cpu());
      read_verified(opened, slice.tensor, slice.crc32c, metadata_.chunk_bytes, 0, whole);
    }
  }
}

namespace detail {

std::vector<std::string> describe_on_every_rank(const ModelView& view, const Stateful& with,
                                                const TrainingState& training, const std::string& what,
                                                std::optional<ModelSource>& described,
                                                const std::function<std::string(ModelSource&)>& inspect) {
  dist::ProcessGroup& group = *view.group;
  TS_CHECK(group.size() <= kMaxWorldSize, CheckpointError, what, ": a world of ", group.size(),
           " ranks is more than a sharded checkpoint holds (", kMaxWorldSize, ": rank files are numbered with five digits)");
  return run_on_every_rank(group, what, [&] {
    described.emplace(view, with, describe(*view.model, with, training));
    (void)json::write(to_json(described->manifest()));
    return inspect ? inspect(*described) : std::string();
  });
}

void write_sharded_files(dist::ProcessGroup& group, const FlatSource& source, const WrittenRange& written,
                         const std::string& directory) {
  const std::string what = "saving checkpoint '" + directory + "'";
  const std::string temporary = temporary_for(directory);
  run_on_every_rank(group, what, [&] {
    if (group.rank() == 0) filesystem_step(what, [&] { prepare_temporary(temporary); });
    return std::string();
  });
  std::vector<std::string> records = run_on_every_rank(group, what, [&] {
    FileRecord record = write_rank_file(source, temporary, group.rank(), group.size(), written, kDefaultChunkBytes);
    return json::write(file_record_json(record));
  });
  run_on_every_rank(group, what, [&] {
    if (group.rank() != 0) return std::string();
    ShardedMetadata metadata;
    metadata.manifest = source.manifest();
    metadata.world_size = group.size();
    metadata.chunk_bytes = kDefaultChunkBytes;
    for (size_t rank = 0; rank < records.size(); ++rank) {
      metadata.files.push_back(file_record_from(json::parse(records[rank]), JsonReader("rank " + std::to_string(rank) + "'s file record")));
    }
    filesystem_step(what, [&] { finish(metadata, temporary, directory); });
    return std::string();
  });
}

}  // namespace detail

namespace {

// The save proper, by the ranks of one shard group (every rank of a model without replicas).
void save_within_shard_group(const std::string& directory, nn::Module& model, const Stateful& with,
                             const TrainingState& training) {
  detail::ModelView view = detail::ModelView::of(model, with.optimizer);
  std::optional<detail::ModelSource> described;
  detail::describe_on_every_rank(view, with, training, "saving checkpoint '" + directory + "'", described);
  detail::write_sharded_files(*view.group, *described, [&](size_t unit) { return described->written(unit); }, directory);
}

}  // namespace

void save_sharded(const std::string& directory, nn::Module& model, const Stateful& with, const TrainingState& training) {
  detail::on_first_replica(model, "saving checkpoint '" + directory + "'",
                           [&] { save_within_shard_group(directory, model, with, training); });
}

TrainingState load_sharded(const std::string& directory, nn::Module& model, const Stateful& with) {
  return detail::load_into_model(
      "loading checkpoint '" + directory + "'", [&] { return std::make_unique<ShardedCheckpoint>(directory); }, model,
      with);
}

void write_sharded(const FlatSource& source, const std::string& directory, int world_size) {
  TS_CHECK(world_size >= 1 && world_size <= kMaxWorldSize, ValueError, "write_sharded: world size ", world_size,
           " is out of range: 1 to ", kMaxWorldSize, " (rank files are numbered with five digits)");
  const std::string what = "writing checkpoint '" + directory + "'";
  const detail::OutputFolderClaim claim(directory);  // missing, empty or our own; held under its parent's lock
  const std::string& target = claim.path();
  const std::string temporary = filesystem_step(what, [&] { return make_temporary_beside(target); });
  try {
    ShardedMetadata metadata;
    metadata.manifest = source.manifest();
    metadata.world_size = world_size;
    metadata.chunk_bytes = kDefaultChunkBytes;
    for (int rank = 0; rank < world_size; ++rank) {
      metadata.files.push_back(write_rank_file(source, temporary, rank, world_size, [&](size_t unit) {
        return detail::save_range(source.manifest().units[unit].flat_numel, world_size, rank);
      }, kDefaultChunkBytes));
    }
    io::AtomicFile marker(temporary + "/" + kConvertedMarker);
    const std::string note = "written by tessera-checkpoint (write_sharded); it may replace this folder\n";
    marker.write(note.data(), note.size());
    marker.commit();
    write_metadata(metadata, temporary);
    if (claim.exists() && !claim.is_empty()) {
      io::replace_directory(temporary, target);  // our own earlier output: swapped, then removed
    } else {
      // rename() replaces only an empty folder: one that gained a file since the check stays.
      if (::rename(temporary.c_str(), target.c_str()) != 0) {
        int error = errno;
        throw io::IOError(tessera::detail::concat(what, ": cannot rename '", temporary, "' to '", target, "': ",
                                                  io::os_error(error)));
      }
      io::fsync_path(io::parent_directory(target));
    }
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(temporary, ignored);
    throw;
  }
}

}  // namespace tessera::checkpoint
