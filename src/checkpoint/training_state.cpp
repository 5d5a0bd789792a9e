#include "tessera/checkpoint/training_state.h"

namespace tessera::checkpoint {

GeneratorState GeneratorState::of(const Generator& generator) {
  return {generator.seed(), generator.stream(), generator.offset()};
}

Generator GeneratorState::restore() const {
  Generator generator(seed, stream);
  generator.advance(offset);
  return generator;
}

}  // namespace tessera::checkpoint
