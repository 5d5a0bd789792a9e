// Trying ranked candidates in order until one runs.
//
// cuDNN's heuristics rank the algorithms for a convolution, but the first one may still
// refuse the problem when it is run (CUDNN_STATUS_NOT_SUPPORTED) or need a workspace the
// device no longer has room for. So on first use every candidate is tried in rank order,
// and the first that runs is the one cached, as PyTorch does with cudnn.benchmark off.
// Nothing here touches CUDA, so the rule is tested on any machine
// (tests/tensor/test_cuda_api.cpp).
#pragma once

#include <string>
#include <vector>

namespace tessera::cuda {

// Calls `attempt(candidate)` (which may note what it learnt in it) for each candidate in order until one returns an empty string
// (it ran); a non-empty string says why that one did not. Returns the index of the one that
// ran, or -1 when none did; `report` then lists every candidate's reason, "; "-separated.
template <class Candidate, class Attempt>
int first_that_runs(std::vector<Candidate>& candidates, Attempt&& attempt, std::string& report) {
  report.clear();
  for (size_t i = 0; i < candidates.size(); ++i) {
    std::string failure = attempt(candidates[i]);
    if (failure.empty()) return static_cast<int>(i);
    if (!report.empty()) report += "; ";
    report += failure;
  }
  return -1;
}

}  // namespace tessera::cuda
