// What a checkpoint holds, independent of how it is stored (sharded or full): every FSDP
// unit's flat layout and per-parameter table, the optimizer's type, parameter groups
// (hyper-parameters and parameter names) and state (per element, flat like the
// parameters, or scalar, per optimizer parameter), the scheduler's type and state, the
// model's buffers and the training position. Sharded and full checkpoints both embed it
// as JSON (see docs/checkpoints.md for the layout).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessera/checkpoint/stateful.h"
#include "tessera/checkpoint/training_state.h"
#include "tessera/fsdp/flat_layout.h"
#include "tessera/io/json.h"
#include "tessera/nn/module.h"
#include "tessera/tensor/state_dict.h"

namespace tessera::checkpoint {

// Format version of the metadata this code writes; readers refuse newer versions. Version
// 2 added parameter groups and per-parameter optimizer state; version 1 is still read.
inline constexpr int64_t kFormatVersion = 2;

struct UnitRecord {
  std::string name;            // the unit's module path; "(root)" for the root's leftovers
  std::string flat_parameter;  // the flat shard's name in named_parameters(): "conv1._flat_param"
  DType dtype = DType::f32;
  int64_t flat_numel = 0;      // the unpadded flat vector (the same at every world size)
  std::vector<fsdp::FlatEntry> parameters;  // name, shape, offset, numel, in flat order
  // The optimizer's per-element state of the unit's elements ("exp_avg"), stored flat beside
  // the parameter: every name some optimizer parameter of the unit has (elements of the
  // others are zero there).
  std::vector<std::string> state_tensors;
};

struct BufferRecord {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};

// One parameter group of the optimizer.
struct OptimizerGroupRecord {
  StateDict hyperparameters;  // "lr", "betas", ..., and "initial_lr" once a scheduler set it
  // Its parameters by name: original parameters ("fc1.weight") or flat shards ("fc1._flat_param").
  std::vector<std::string> params;
};

// One optimizer parameter's state (only those that have stepped).
struct OptimizerStateRecord {
  std::string param;                 // as in OptimizerGroupRecord::params
  std::vector<std::string> tensors;  // per-element state, stored flat in the parameter's unit
  StateDict scalars;                 // "step"
};

struct Manifest {
  std::vector<UnitRecord> units;
  std::vector<BufferRecord> buffers;  // persistent buffers, replicated (rank 0's are saved)
  std::string optimizer;              // its type_name(); empty when none was saved
  std::vector<OptimizerGroupRecord> optimizer_groups;
  std::vector<OptimizerStateRecord> optimizer_state;
  std::string scheduler;              // its type_name(): "StepLR", "SequentialLR", ...; empty when none
  StateDict scheduler_state;          // its state_dict()
  TrainingState training;
  // Whether every parameter and floating buffer saved was finite (no NaN or infinity), as
  // CheckpointManager checks while saving; unset when it
  // was not checked (save_sharded, write_full, checkpoints of older versions). Rotation
  // never prunes the newest finite checkpoint in favour of non-finite ones.
  std::optional<bool> finite;

  // Unit `name`, or null.
  const UnitRecord* find_unit(const std::string& name) const;
  // Elements of all the model's parameters (what a full state dict holds).
  int64_t parameter_numel() const;
  // The state of optimizer parameter `param`, or null.
  const OptimizerStateRecord* find_optimizer_state(const std::string& param) const;
  // The per-element state names that parameter `entry` of `unit` has: its own record's, or
  // those of its unit's flat shard when the optimizer stepped that.
  std::vector<std::string> state_tensors_of(const UnitRecord& unit, const fsdp::FlatEntry& entry) const;
};

// The manifest of `model` (sharded with fsdp::fully_shard) and `with`, as they are now.
// ValueError when the model is not sharded or the optimizer steps tensors that are neither
// the model's flat shards nor its original parameters.
Manifest describe(nn::Module& model, const Stateful& with, const TrainingState& training);

// The manifest as JSON (read back, validated, by manifest_from_json: manifest_reader.h).
io::json::Value to_json(const Manifest& manifest);

// Small tensors (hyper-parameters, scalar state) as JSON: a 0-d float64 as a number, a
// 0-d int64 as an integer, a 1-D float64 as an array of numbers (non-finite values as the
// strings "nan", "inf", "-inf"), anything else as {"dtype", "shape", "values"}. Exact:
// doubles are written in their shortest round-trip form.
io::json::Value small_tensors_to_json(const StateDict& tensors);

io::json::Value training_state_to_json(const TrainingState& state);

// The JSON text of `value` with a "metadata_crc32c" member appended: the CRC32C of the
// compact text without it (check_and_strip_crc, manifest_reader.h, verifies it).
std::string write_with_crc(io::json::Value value);

}  // namespace tessera::checkpoint
