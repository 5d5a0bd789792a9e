#include "tessera/checkpoint/flat_source.h"

#include "tessera/tensor/native.h"

namespace tessera::checkpoint {

Tensor FlatSource::slice(size_t unit, const std::string& state, int64_t first, int64_t count) const {
  Tensor out = native::empty({count}, manifest().units.at(unit).dtype, Device::cpu());
  read(unit, state, first, out);
  return out;
}

std::string sharded_tensor_name(const UnitRecord& unit, const std::string& state) {
  return state.empty() ? unit.flat_parameter : "optimizer." + unit.flat_parameter + "." + state;
}

std::string sharded_buffer_name(const std::string& buffer) { return "buffer." + buffer; }

std::string full_tensor_name(const std::string& parameter, const std::string& state) {
  return state.empty() ? parameter : "optimizer.state." + parameter + "." + state;
}

}  // namespace tessera::checkpoint
