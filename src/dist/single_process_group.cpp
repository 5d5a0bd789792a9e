// The one-rank group: gathers and scatters are copies, reductions and broadcasts leave the
// tensor as it is (avg divides by a world size of 1).
#include "tessera/dist/single_process_group.h"

#include "tessera/tensor/native.h"

namespace tessera::dist {

SingleProcessGroup::SingleProcessGroup(std::string name, bool debug_checks, std::chrono::milliseconds timeout)
    : ProcessGroup(0, 1, Backend::single, std::move(name), debug_checks, timeout) {}

std::shared_ptr<Work> SingleProcessGroup::start(CollectiveCall call) {
  bool copies = call.kind == CollectiveKind::all_gather || call.kind == CollectiveKind::reduce_scatter;
  if (copies && call.count() > 0 && call.output.data_ptr() != call.input.data_ptr()) {
    // Both are contiguous with equal element counts (checked), so flat views line up.
    Tensor destination = native::view(call.output, {call.count()});
    Tensor source = native::view(call.input, {call.count()});
    native::copy_(destination, memory_overlaps(destination, source) ? native::clone(source) : source);
  }
  return std::make_shared<CompletedWork>(detail::concat(describe(call), " on group '", name(), "'"));
}

std::shared_ptr<ProcessGroup> SingleProcessGroup::start_duplicate(CollectiveCall, std::string name,
                                                                  const GroupOptions& options) {
  return std::make_shared<SingleProcessGroup>(std::move(name), *options.debug_checks, *options.timeout);
}

std::shared_ptr<ProcessGroup> SingleProcessGroup::start_split(CollectiveCall call, int, std::string name,
                                                              const GroupOptions& options) {
  return start_duplicate(std::move(call), std::move(name), options);
}

}  // namespace tessera::dist
