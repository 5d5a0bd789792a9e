// The marks a sharding wrapper (fsdp::fully_shard) leaves on the tensors it manages, so that
// code which knows nothing of FSDP (the optimizers, nn::clip_grad_norm) can tell them from
// ordinary parameters.
//
// fully_shard replaces each unit's parameters by one flat shard per rank, and marks
//   - the flat shard ("fc1._flat_param", what model.parameters() lists afterwards) with a
//     FlatShard;
//   - every original parameter ("fc1.weight": the same tensor as before fully_shard, now a
//     view of the unit's gathered buffer, with no gradient of its own) with a
//     ShardedParameter saying which of its elements this rank holds, and where in the shard.
// An optimizer given an original parameter steps that segment of the shard, with the
// hyper-parameters of the parameter's group; one given a flat shard steps all of it.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/autograd/meta.h"
#include "tessera/tensor/tensor.h"

namespace tessera::nn {

struct FlatShard final : autograd::TensorAttachment {
  std::string name;     // "fc1._flat_param" ("_flat_param" for the root's)
  bool sharded = true;  // false for NO_SHARD: every rank holds the whole flat parameter
};

struct ShardedParameter final : autograd::TensorAttachment {
  std::string name;           // the parameter's full dotted name, "fc1.weight"
  std::string flat_name;      // its unit's flat shard, "fc1._flat_param"
  Tensor flat_shard;          // that shard (a leaf; its gradient is this rank's reduced gradient)
  int64_t numel = 0;          // elements of the parameter this rank holds (0 on ranks holding none)
  int64_t shard_offset = 0;   // where they start in flat_shard
  int64_t first_element = 0;  // the index of the first in the flattened parameter
  bool sharded = true;        // false for NO_SHARD (the segment is then the whole parameter)
};

// The mark on `tensor`, or null for an ordinary tensor.
inline const ShardedParameter* find_sharded_parameter(const Tensor& tensor) {
  return autograd::find_attachment<ShardedParameter>(tensor);
}
inline const FlatShard* find_flat_shard(const Tensor& tensor) { return autograd::find_attachment<FlatShard>(tensor); }

}  // namespace tessera::nn
