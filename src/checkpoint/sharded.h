// Sharded checkpoints: a directory with one safetensors file per rank and metadata.json.
//
//   step-00001200/
//     metadata.json                       format, world size, the manifest (units, optimizer,
//                                         scheduler, training position) and, per file, the
//                                         flat range and chunk CRC32Cs of every tensor in it
//     rank-00000-of-00004.safetensors     rank 0's slice of every flat parameter
//     rank-00001-of-00004.safetensors     ("conv1._flat_param") and of every optimizer state
//     ...                                 tensor ("optimizer.conv1._flat_param.exp_avg");
//                                         rank 0's file also holds the buffers ("buffer.<name>")
//
// Saving needs no gather: each rank writes its own slices (the unpadded part of its shard)
// and rank 0 writes the metadata after all files are on disk. Loading at any world size:
// each rank reads exactly the ranges of its new shard from the files that hold them, checks
// the CRC32C of every chunk it reads, and zeroes its padding.
//
// The directory appears atomically: everything is written into "<parent>/.<name>.tmp",
// fsynced, and renamed to `directory` (replacing an older one atomically), and the parent
// is fsynced. A crash leaves either the old directory or the complete new one.
//
//   ts::checkpoint::save_sharded("ckpt/step-100", model, {.optimizer = &adam, .scheduler = &lr}, state);
//   ts::checkpoint::TrainingState state = ts::checkpoint::load_sharded("ckpt/step-100", model, {...});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/checkpoint/flat_source.h"
#include "tessera/io/safetensors.h"

namespace tessera::checkpoint {

inline constexpr const char* kShardedFormat = "tessera.sharded-checkpoint";
inline constexpr const char* kMetadataFile = "metadata.json";
// metadata.json files larger than this are refused unread (a corrupt or hostile directory).
// Real ones take about 11 bytes per MiB of checkpoint (the chunk CRCs): 64 MiB covers
// several TB. Parsing one may take at most io::json::kFileMemoryPerByte times its size.
inline constexpr uint64_t kMaxMetadataBytes = uint64_t{64} << 20;

// The largest world a sharded checkpoint is written for or read at: rank files are named
// with five-digit numbers. (A larger --world-size would also mean as many files.)
inline constexpr int kMaxWorldSize = 99999;

// "rank-00002-of-00004.safetensors".
std::string rank_file_name(int rank, int world_size);

// One tensor of a rank file: elements [begin, end) of a flat tensor (or of a buffer).
struct SliceRecord {
  std::string tensor;
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<uint32_t> crc32c;  // one per chunk
};

struct FileRecord {
  std::string name;
  int rank = 0;
  uint64_t bytes = 0;
  std::vector<SliceRecord> slices;
};

struct ShardedMetadata {
  Manifest manifest;
  int world_size = 1;
  uint64_t chunk_bytes = 0;
  std::vector<FileRecord> files;  // by rank
};

// A sharded checkpoint opened for reading. The constructor reads metadata.json and
// validates all of it (its CRC32C, every field, and that the files' slices tile each flat
// tensor exactly: no gap, no overlap, nothing past the end). Rank files are opened on first
// use and checked against the metadata (size, tensors, dtypes, shapes). Not thread-safe.
class ShardedCheckpoint final : public FlatSource {
 public:
  explicit ShardedCheckpoint(const std::string& directory);
  ~ShardedCheckpoint() override;

  const std::string& directory() const { return directory_; }
  const ShardedMetadata& metadata() const { return metadata_; }
  const Manifest& manifest() const override { return metadata_.manifest; }
  void read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const override;
  Tensor buffer(const std::string& name) const override;

  // Reads every tensor of every file, checking every CRC (tessera-checkpoint verify).
  void verify_all() const;
  // Opens every rank file and checks it against the metadata (type, size, header), without
  // reading tensor data: is the checkpoint complete?
  void check_files() const;

 private:
  struct Piece {
    size_t file = 0;
    const SliceRecord* slice = nullptr;
  };
  void read_pieces(const std::string& tensor, int64_t first, const Tensor& destination) const;
  const io::SafetensorsFile& file(size_t index) const;

  std::string directory_;
  std::string metadata_path_;
  ShardedMetadata metadata_;
  std::unordered_map<std::string, std::vector<Piece>> pieces_;  // stored tensor -> slices by begin
  mutable std::vector<std::unique_ptr<io::SafetensorsFile>> open_files_;
};

// Saves `model` (sharded with fsdp::fully_shard) and `with` as a sharded checkpoint at
// `directory`. Collective: every rank of the model's group calls it; each writes its own
// file. An error on any rank fails the save on every rank (see errors.h) and leaves no
// directory (a stale "<parent>/.<name>.tmp" is removed by the next save).
void save_sharded(const std::string& directory, nn::Module& model, const Stateful& with,
                  const TrainingState& training);

// Loads a sharded checkpoint saved at any world size into `model` (sharded at this world
// size) and `with` (each optional; a checkpoint's optimizer or scheduler state is ignored
// when none is given). Collective. The model must have the checkpoint's units and
// parameters. Nothing is changed unless every rank read and verified all it needs.
TrainingState load_sharded(const std::string& directory, nn::Module& model, const Stateful& with = {});

// Writes `source` as a sharded checkpoint for `world_size` ranks, in this one process
// (tessera-checkpoint to-sharded). Atomic like save_sharded, but `directory` must be
// missing, an empty folder or one write_sharded wrote before; anything else is refused and
// nothing write_sharded did not write is removed (see output_folder.h).
void write_sharded(const FlatSource& source, const std::string& directory, int world_size);

}  // namespace tessera::checkpoint
