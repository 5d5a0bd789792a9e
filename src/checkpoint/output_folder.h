// Where a conversion (tessera-checkpoint to-sharded, to-full) may write, so that it never
// destroys what it did not make: the input itself, a folder above or around it, a folder of
// the user's files, a running job's checkpoint folder.
//
//   ts::checkpoint::check_output_apart("ckpt-8", "ckpt");   // ValueError: "ckpt" would be lost
//   ts::checkpoint::write_sharded(source, "ckpt-8", 8);     // checks the folder itself
//
// write_sharded writes a folder only when it is missing, empty, or one write_sharded wrote
// before (it holds the marker file kConvertedMarker and nothing but metadata.json and rank
// files); anything else there is refused with a CheckpointError naming it. When the
// folder's parent is a checkpoint folder (it holds `.lock`), the parent's lock is taken for
// the write, so a running job's folder is refused, naming the job.
#pragma once

#include <string>

namespace tessera::checkpoint {

// The file write_sharded leaves in each folder it writes: its own, to replace later.
inline constexpr const char* kConvertedMarker = ".written-by-tessera-checkpoint";

// ValueError when `output` is `input`, lies inside it, or contains it, once both are
// resolved (symbolic links, "..", "."): writing it would replace or remove the input.
void check_output_apart(const std::string& output, const std::string& input);

}  // namespace tessera::checkpoint
