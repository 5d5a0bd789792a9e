// Stopping a run whose loss is no longer finite, shared by the examples. A NaN or infinite
// loss means the weights already are (a learning rate too large, a NaN in the data): every
// later step, report and checkpoint would only spread it. The loss checked is the one the
// ranks all-reduced, so every rank stops at the same step.
#pragma once

#include <cmath>
#include <string>

#include <tessera/tessera.h>

namespace example {

// `where`: "epoch 1, batch 30 (step 30)". Throws tessera::ValueError (the examples exit with status 1).
inline void require_finite_loss(double loss, const std::string& where) {
  if (std::isfinite(loss)) return;
  throw tessera::ValueError(tessera::detail::concat(
      "the loss is ", loss, " at ", where,
      ": training diverged (a learning rate too large, or a NaN in the data or the initial weights); stopping before "
      "it is reported or saved"));
}

}  // namespace example
