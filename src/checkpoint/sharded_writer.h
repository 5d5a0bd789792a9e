// Writing a sharded checkpoint's files (internal): the collective steps every save runs,
// from any FlatSource, on any group of writers. save_sharded writes from the live model on
// the model's group; CheckpointManager's asynchronous saves write from a staged copy
// (staging.h) on a duplicate of it, from a background thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessera/checkpoint/model_source.h"
#include "tessera/dist/process_group.h"

namespace tessera::checkpoint::detail {

// The elements [begin, end) of unit `unit`'s flat tensors that this rank writes.
using WrittenRange = std::function<fsdp::ElementRange(size_t unit)>;

// Describes `view`'s model for saving, on every rank of its group (collective): the
// manifest, checked to serialise, so that a bad value on one rank (a NaN in its `extra`)
// fails the save on all. `inspect` (optional) runs on the described source in the same
// step (the manager's finiteness check or staging copy); what it returns is gathered, in
// rank order.
std::vector<std::string> describe_on_every_rank(const ModelView& view, const Stateful& with,
                                                const TrainingState& training, const std::string& what,
                                                std::optional<ModelSource>& described,
                                                const std::function<std::string(ModelSource&)>& inspect = {});

// Writes the sharded checkpoint `directory` from `source` (this rank's `written` ranges;
// rank 0's file also holds the buffers): rank 0 makes the temporary folder, every rank of
// `group` writes its file, rank 0 writes metadata.json and renames the folder into place.
// Collective over `group`; an error on any rank fails it on all, and leaves no `directory`.
void write_sharded_files(dist::ProcessGroup& group, const FlatSource& source, const WrittenRange& written,
                         const std::string& directory);

}  // namespace tessera::checkpoint::detail
