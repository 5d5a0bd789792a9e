// SingleProcessGroup: a group of one rank, for programs started without mpirun. Its
// collectives are copies or nothing (the reduction of one value is that value), done at
// once; their Work is already complete. It needs no MPI and works for tensors on any
// device, since it only copies.
//
//   auto group = std::make_shared<ts::dist::SingleProcessGroup>();
//   group->all_gather_into(output, input);   // output = input
#pragma once

#include "tessera/dist/process_group.h"

namespace tessera::dist {

class SingleProcessGroup final : public ProcessGroup {
 public:
  explicit SingleProcessGroup(std::string name = "world", bool debug_checks = false,
                              std::chrono::milliseconds timeout = kDefaultTimeout);

 protected:
  std::shared_ptr<Work> start(CollectiveCall call) override;
  std::shared_ptr<ProcessGroup> start_duplicate(CollectiveCall call, std::string name,
                                                const GroupOptions& options) override;
  std::shared_ptr<ProcessGroup> start_split(CollectiveCall call, int color, std::string name,
                                            const GroupOptions& options) override;
};

}  // namespace tessera::dist
