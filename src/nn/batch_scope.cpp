#include "tessera/nn/batch_scope.h"

namespace tessera::nn {

namespace {
thread_local const BatchPosition* current_position = nullptr;
}  // namespace

BatchScope::BatchScope(const BatchPosition& position) : position_(position), previous_(current_position) {
  current_position = &position_;
}

BatchScope::~BatchScope() { current_position = previous_; }

const BatchPosition* BatchScope::current() { return current_position; }

}  // namespace tessera::nn
