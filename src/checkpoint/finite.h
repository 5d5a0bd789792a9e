// Finding NaN and infinities in what a checkpoint saves (internal). CheckpointManager
// refuses to save non-finite parameters or buffers unless told to (CheckpointManagerOptions::
// allow_non_finite), naming the first such element; the check reads the bytes the save
// copies or writes anyway, by exponent bits (tensor/finite_scan.h, which
// tessera::first_non_finite uses on the CPU too). Optimizer state is not checked: Adam's second moment
// may overflow to infinity while the weights stay finite (those elements then stop
// moving), and a NaN moment makes the weights NaN at the next step, which the next save
// refuses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tessera/checkpoint/model_source.h"
#include "tessera/tensor/tensor.h"

namespace tessera::checkpoint::detail {

// The index of the first NaN or infinite element of `values` (contiguous, in host memory);
// -1 when every element is finite or the dtype is not a floating one. (Host buffers:
// native::first_non_finite, tensor/finite_scan.h.)
int64_t first_non_finite(const Tensor& values);

// "rank 1: parameter 'fc1.weight' (unit 'fc1') holds nan at element 17 of its 35: refusing
// ..." for flat element `flat_index` of unit `unit`'s parameter, whose value is `value`.
std::string non_finite_message(const UnitRecord& unit, int64_t flat_index, double value, int rank);
// The same for element `index` of buffer `name`.
std::string non_finite_buffer_message(const std::string& name, int64_t index, double value);

// The first non-finite element of what this rank writes from the live model (its written
// range of every flat parameter, read where it is, and the buffers on rank 0), described;
// nullopt when all of it is finite. For synchronous saves.
std::optional<std::string> find_non_finite(const ModelSource& source, int rank);

}  // namespace tessera::checkpoint::detail
