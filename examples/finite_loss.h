// Stopping a run whose loss is no longer finite, shared by the examples. A NaN or infinite
// loss means the weights already are (a learning rate too large, a NaN in the data): every
// later step, report and checkpoint would only spread it. The loss checked is the one the
// ranks all-reduced, so every rank stops at the same step. Weights read from a file (--init)
// are checked the same way before training starts from them.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <tessera/tessera.h>

namespace example {

// `what`: "the loss", "the gradient norm"; `where`: "epoch 1, batch 30 (step 30)". Throws
// tessera::ValueError (the examples exit with status 1).
inline void require_finite(double value, const std::string& what, const std::string& where) {
  if (std::isfinite(value)) return;
  throw tessera::ValueError(tessera::str(
      what, " is ", value, " at ", where,
      ": training diverged (a learning rate too large, or a NaN in the data or the initial weights); stopping before "
      "it is reported or saved"));
}

inline void require_finite_loss(double loss, const std::string& where) { require_finite(loss, "the loss", where); }

// `source`: "--init model.safetensors". ValueError naming the first tensor holding a NaN or
// infinity, the element and its value.
inline void require_finite_weights(const tessera::StateDict& weights, const std::string& source) {
  for (const auto& [name, tensor] : weights) {
    if (const std::optional<int64_t> bad = tessera::first_non_finite(tensor)) {
      throw tessera::ValueError(tessera::str(
          source, ": tensor '", name, "' ", tessera::shape_str(tensor.sizes()), " is not finite: element ", *bad,
          " (flat index) is ", tensor.flatten().select(0, *bad).to(tessera::DType::f64).item<double>()));
    }
  }
}

}  // namespace example
