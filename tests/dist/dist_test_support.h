// Shared by the dist tests: the world group the test main started (under mpirun: N ranks;
// alone: one), and small helpers. Test cases must issue the same collectives on every
// rank, so they use CHECK (which continues) rather than REQUIRE (which would leave the test
// case on one rank only and desynchronise the ranks).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <tessera/tessera.h>
#include "test_support.h"

namespace dist_test {

// Set by the test main before any test case runs.
const std::shared_ptr<tessera::dist::ProcessGroup>& world();

// The message of the tessera::Error `action` throws, or "" when it throws none.
using test_support::error_of;

// This rank's rows of a global batch of `global_rows`, as DistributedSampler splits it.
inline tessera::data::RowRange my_rows(int64_t global_rows) {
  const auto& group = world();
  return tessera::data::DistributedSampler{group->rank(), group->size()}.rows_of(global_rows);
}

}  // namespace dist_test
