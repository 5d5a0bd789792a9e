#include "tessera/checkpoint/staging.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "tessera/checkpoint/finite.h"
#include "tessera/tensor/finite_scan.h"
#include "tessera/tensor/native.h"

namespace tessera::checkpoint::detail {

namespace {

// Host memory for `like` elements of `dtype`: `reuse` when it fits exactly (the previous
// save's buffer), else a new one, pinned when the data comes from a GPU.
Tensor host_buffer(Tensor reuse, int64_t numel, DType dtype, bool pinned) {
  if (reuse.defined() && reuse.numel() == numel && reuse.dtype() == dtype && reuse.is_pinned() == pinned) return reuse;
  reuse = Tensor();  // freed before the new one is allocated: never both under the limit
  return pinned ? native::empty_pinned({numel}, dtype) : native::empty({numel}, dtype, Device::cpu());
}

// Copies `from` into `to` (both 1-D, as many elements) and returns the index of the first
// non-finite element (-1: none). From host memory: 1 MiB chunks spread over the threads
// (training waits for this copy, so it may use them all), each chunk checked while it is
// in cache; from a GPU, one transfer, then one pass.
int64_t copy_checking(Tensor to, const Tensor& from) {
  if (!from.device().is_cpu() || !from.is_contiguous() || from.dtype() != to.dtype()) {
    native::copy_(to, from);
    return first_non_finite(to);
  }
  if (to.numel() == 0) return -1;
  const DType dtype = to.dtype();
  const int64_t element = static_cast<int64_t>(element_size(dtype));
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / element), numel = to.numel();
  const int64_t chunks = (numel + chunk - 1) / chunk;
  char* destination = static_cast<char*>(to.data_ptr());
  const char* source = static_cast<const char*>(from.data_ptr());
  int64_t first_bad = std::numeric_limits<int64_t>::max();
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t start = c * chunk, count = std::min(chunk, numel - start);
    std::memcpy(destination + start * element, source + start * element, static_cast<size_t>(count * element));
    const int64_t bad = native::first_non_finite(destination + start * element, count, dtype);
    if (bad >= 0) first_bad = std::min(first_bad, start + bad);
  }
  return first_bad == std::numeric_limits<int64_t>::max() ? -1 : first_bad;
}

double element(const Tensor& values, int64_t index) {
  return native::narrow(values, 0, index, 1).to(DType::f64).item<double>();
}

}  // namespace

std::optional<std::string> StagedState::stage(const ModelSource& source, int rank) {
  std::map<std::pair<size_t, std::string>, Tensor> previous = std::move(slices_);
  std::map<std::string, Tensor> previous_buffers = std::move(buffers_);
  slices_.clear();
  buffers_.clear();
  ranges_.clear();
  manifest_ = source.manifest();
  std::optional<std::string> problem;
  for (size_t u = 0; u < manifest_.units.size(); ++u) {
    const UnitRecord& unit = manifest_.units[u];
    const fsdp::ElementRange range = source.written(u);
    ranges_.push_back(range);
    std::vector<std::string> states{""};
    states.insert(states.end(), unit.state_tensors.begin(), unit.state_tensors.end());
    const bool pinned = !source.shard_slice(u, "", range.begin, 0).device().is_cpu();
    for (const std::string& state : states) {
      auto key = std::make_pair(u, state);
      Tensor to = host_buffer(std::move(previous[key]), range.size(), unit.dtype, pinned);
      int64_t bad = -1;
      if (state.empty()) {
        bad = copy_checking(to, source.shard_slice(u, state, range.begin, range.size()));
      } else {  // optimizer state is not checked (finite.h)
        source.copy_state_slice(u, state, range.begin, to);
      }
      if (bad >= 0 && !problem) problem = non_finite_message(unit, range.begin + bad, element(to, bad), rank);
      slices_.emplace(std::move(key), std::move(to));
    }
  }
  if (rank == 0) {
    for (const BufferRecord& record : manifest_.buffers) {
      const Tensor from = native::view(source.buffer(record.name), {-1});
      Tensor& reuse = previous_buffers[record.name];
      Tensor to = host_buffer(std::move(reuse), from.numel(), from.dtype(), false);
      const int64_t bad = copy_checking(to, from);
      if (bad >= 0 && !problem) problem = non_finite_buffer_message(record.name, bad, element(to, bad));
      buffers_.emplace(record.name, std::move(to));
    }
  }
  return problem;
}

const Tensor& StagedState::staged(size_t unit, const std::string& state) const {
  auto found = slices_.find({unit, state});
  TS_CHECK(found != slices_.end(), ValueError, "checkpoint: nothing staged for unit ", unit, " state '", state, "'");
  return found->second;
}

Tensor StagedState::slice(size_t unit, const std::string& state, int64_t first, int64_t count) const {
  const fsdp::ElementRange range = written(unit);
  TS_CHECK(first >= range.begin && count >= 0 && first + count <= range.end, IndexError, "checkpoint: elements [",
           first, ", ", first + count, ") of unit ", unit, " were not staged (staged: [", range.begin, ", ", range.end,
           "))");
  return native::narrow(staged(unit, state), 0, first - range.begin, count);
}

void StagedState::read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const {
  Tensor target = destination;
  native::copy_(target, slice(unit, state, first, destination.numel()));
}

Tensor StagedState::buffer(const std::string& name) const {
  for (const BufferRecord& record : manifest_.buffers) {
    if (record.name != name) continue;
    auto found = buffers_.find(name);
    TS_CHECK(found != buffers_.end(), ValueError, "checkpoint: buffer '", name, "' was not staged (rank 0 stages buffers)");
    return native::view(found->second, record.shape);
  }
  throw ValueError(tessera::detail::concat("checkpoint: the staged state has no buffer '", name, "'"));
}

int64_t StagedState::bytes() const {
  int64_t total = 0;
  for (const auto& [key, values] : slices_) total += static_cast<int64_t>(values.nbytes());
  for (const auto& [name, values] : buffers_) total += static_cast<int64_t>(values.nbytes());
  return total;
}

bool StagedState::pinned() const {
  return std::any_of(slices_.begin(), slices_.end(), [](const auto& entry) { return entry.second.is_pinned(); });
}

}  // namespace tessera::checkpoint::detail
