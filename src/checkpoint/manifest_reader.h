// Reading what manifest.h writes: a checkpoint's JSON metadata back into a Manifest, its small
// tensors and training position, every value validated with the file and byte offset of what
// is wrong (detail::JsonReader). Internal: the loaders (sharded.cpp, full.cpp) use it.
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/checkpoint/json_reader.h"
#include "tessera/checkpoint/manifest.h"

namespace tessera::checkpoint {

// Validates everything (kinds, ranges, overlapping or oversized offsets, duplicate names,
// optimizer parameters and state that the units hold); FormatError naming `reader.file()`
// and the byte offset otherwise. `version` is the file's format version (1 or 2).
Manifest manifest_from_json(const io::json::Value& value, const detail::JsonReader& reader,
                            int64_t version = kFormatVersion);

StateDict small_tensors_from_json(const io::json::Value& value, const detail::JsonReader& reader,
                                  std::string_view what);

TrainingState training_state_from_json(const io::json::Value& value, const detail::JsonReader& reader);

// Verifies write_with_crc's "metadata_crc32c" (FormatError on mismatch or absence) and returns
// the value without it.
io::json::Value check_and_strip_crc(io::json::Value value, const detail::JsonReader& reader);

}  // namespace tessera::checkpoint
