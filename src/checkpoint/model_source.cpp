#include "tessera/checkpoint/model_source.h"

#include <algorithm>

#include "tessera/tensor/native.h"

namespace tessera::checkpoint::detail {

fsdp::ElementRange ModelSource::held(size_t unit) const {
  const fsdp::UnitInfo& info = view_.units.at(unit).info;
  const int64_t flat = info.layout.flat_numel();
  return {std::min(info.range.begin, flat), std::min(info.range.end, flat)};
}

Tensor ModelSource::shard(size_t unit, const std::string& state) const {
  const ModelUnit& model_unit = view_.units.at(unit);
  if (state.empty()) return model_unit.info.shard.detach();
  TS_CHECK(with_.optimizer != nullptr, ValueError, "checkpoint: unit '", model_unit.info.name, "' has no optimizer state");
  // The state of the optimizer parameters in this unit, placed where they sit in the shard
  // (the whole shard's, or each original parameter's segment); zero elsewhere.
  Tensor out;
  for (size_t i = 0; i < view_.optimizer_params.size(); ++i) {
    const OptimizerParam& where = view_.optimizer_params[i];
    const StateDict& states = with_.optimizer->state(i);
    if (where.unit != unit || !states.contains(state)) continue;
    const Tensor values = states.at(state).detach();
    if (where.entry < 0) return values;
    if (!out.defined()) out = native::zeros({model_unit.info.shard.numel()}, values.dtype(), values.device());
    Tensor segment = native::narrow(out, 0, where.shard_offset, where.numel);
    native::copy_(segment, values);
  }
  TS_CHECK(out.defined(), ValueError, "checkpoint: unit '", model_unit.info.name, "' has no optimizer state '", state,
           "'");
  return out;
}

std::vector<ModelSource::StatePiece> ModelSource::state_pieces(size_t unit, const std::string& state, int64_t first,
                                                               int64_t count) const {
  const ModelUnit& model_unit = view_.units.at(unit);
  TS_CHECK(with_.optimizer != nullptr, ValueError, "checkpoint: unit '", model_unit.info.name, "' has no optimizer state");
  const int64_t shard_begin = model_unit.info.range.begin;
  const int64_t begin = first - shard_begin, end = begin + count;  // in the shard
  std::vector<StatePiece> pieces;
  bool found = false;
  for (size_t i = 0; i < view_.optimizer_params.size(); ++i) {
    const OptimizerParam& where = view_.optimizer_params[i];
    const StateDict& states = with_.optimizer->state(i);
    if (where.unit != unit || !states.contains(state)) continue;
    found = true;
    const Tensor values = states.at(state).detach();
    if (where.entry < 0) return {{first, native::narrow(values, 0, begin, count)}};
    const int64_t from = std::max(begin, where.shard_offset), to = std::min(end, where.shard_offset + where.numel);
    if (to > from) pieces.push_back({shard_begin + from, native::narrow(values, 0, from - where.shard_offset, to - from)});
  }
  TS_CHECK(found, ValueError, "checkpoint: unit '", model_unit.info.name, "' has no optimizer state '", state, "'");
  return pieces;
}

void ModelSource::copy_state_slice(size_t unit, const std::string& state, int64_t first, Tensor destination) const {
  const std::vector<StatePiece> pieces = state_pieces(unit, state, first, destination.numel());
  if (pieces.size() != 1 || pieces[0].values.numel() != destination.numel()) native::fill_(destination, 0.0);
  for (const StatePiece& piece : pieces) {
    Tensor part = native::narrow(destination, 0, piece.first - first, piece.values.numel());
    native::copy_(part, piece.values);
  }
}

fsdp::ElementRange ModelSource::written(size_t unit) const {
  const ModelUnit& model_unit = view_.units.at(unit);
  if (!model_unit.replicated) return held(unit);
  return save_range(model_unit.info.layout.flat_numel(), view_.group->size(), view_.group->rank());
}

Tensor ModelSource::shard_slice(size_t unit, const std::string& state, int64_t first, int64_t count) const {
  fsdp::ElementRange range = held(unit);
  TS_CHECK(first >= range.begin && count >= 0 && first + count <= range.end, IndexError, "checkpoint: elements [",
           first, ", ", first + count, ") of unit '", view_.units.at(unit).info.name, "' are not held by rank ",
           view_.group->rank(), " (it holds [", range.begin, ", ", range.end, "))");
  return native::narrow(shard(unit, state), 0, first - view_.units[unit].info.range.begin, count);
}

Tensor ModelSource::slice(size_t unit, const std::string& state, int64_t first, int64_t count) const {
  Tensor part = shard_slice(unit, state, first, count);
  if (part.is_cuda()) part = native::to_device(part, Device::cpu());
  return native::contiguous(part);
}

void ModelSource::read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const {
  Tensor target = destination;
  native::copy_(target, slice(unit, state, first, destination.numel()));
}

Tensor ModelSource::buffer(const std::string& name) const {
  for (const auto& [buffer_name, slot] : view_.buffers) {
    if (buffer_name == name) {
      Tensor host = slot->detach();
      if (host.is_cuda()) host = native::to_device(host, Device::cpu());
      return native::contiguous(host);
    }
  }
  throw ValueError(tessera::detail::concat("checkpoint: the model has no buffer '", name, "'"));
}

}  // namespace tessera::checkpoint::detail
