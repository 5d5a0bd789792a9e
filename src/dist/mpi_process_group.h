// MpiProcessGroup: collectives on CPU tensors over an MPI communicator.
//
// Every call, blocking or not, is queued to the group's CommunicationThread, which runs the
// blocking MPI collective (see communication_thread.h for why). Only that thread uses the
// communicator, so MPI_THREAD_SERIALIZED suffices for one group; several groups
// (duplicate()) call MPI from several threads at once and need MPI_THREAD_MULTIPLE.
//
// CUDA tensors are staged through host memory: the call copies its input to a host
// buffer on the calling thread (waiting for the device's queued work, so the copy holds
// the values the program computed), the communication thread runs the MPI collective on
// host buffers and then queues the copy of the result into the device output on the
// device's compute stream, before the Work completes; kernels queued after wait() see it.
// The host transfers go through the CUDA backend's pinned staging buffers. This is what
// lets several ranks share one GPU (NCCL needs one GPU per rank); it is slower than NCCL
// and does not overlap the device's work, since every call waits for the device.
//
// Datatypes follow the tensor: float32 MPI_FLOAT, float64 MPI_DOUBLE, int64 MPI_INT64_T,
// uint8 MPI_UINT8_T (sums wrap modulo 256, as in PyTorch). bfloat16 travels as its 2-byte
// bits (MPI_UINT16_T) for gathers and broadcasts; bfloat16 reductions are computed in
// float32 staging buffers and rounded to bfloat16 once at the end, which is more accurate
// than summing in bfloat16 and needs no user-defined MPI_Op. avg is an MPI sum followed by
// a division by the group size. Element counts are MPI ints: a tensor of more than
// 2^31 - 1 elements is refused (split it).
//
// Internal (needs <mpi.h>); users get groups from init() and duplicate().
#pragma once

#include <memory>

#include "tessera/dist/communication_thread.h"
#include "tessera/dist/fingerprint.h"
#include "tessera/dist/mpi_check.h"
#include "tessera/dist/mpi_runtime.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist {

class MpiProcessGroup final : public ProcessGroup {
 public:
  // Takes `communicator` over (it is freed with the group). Collective over its ranks:
  // all agree on debug mode (it is on if any rank asks for it).
  // `force_host_staging` stages CPU tensors too (GroupOptions, for tests).
  static std::shared_ptr<MpiProcessGroup> create(std::shared_ptr<MpiRuntime> runtime, MPI_Comm communicator,
                                                 std::string name, bool debug_checks,
                                                 std::chrono::milliseconds timeout, bool force_host_staging = false);
  ~MpiProcessGroup() override;

 protected:
  void check_supported(const CollectiveCall& call) const override;
  std::shared_ptr<Work> start(CollectiveCall call) override;
  std::shared_ptr<ProcessGroup> start_duplicate(CollectiveCall call, std::string name,
                                                const GroupOptions& options) override;
  std::shared_ptr<ProcessGroup> start_split(CollectiveCall call, int color, std::string name,
                                            const GroupOptions& options) override;

 private:
  struct Buffers {
    void* input = nullptr;
    void* output = nullptr;
    bool overlap = false;  // distinct input and output share bytes
  };

  MpiProcessGroup(std::shared_ptr<MpiRuntime> runtime, MPI_Comm communicator, int rank, int size, std::string name,
                  bool debug_checks, std::chrono::milliseconds timeout, bool force_host_staging);

  bool stages_through_host(const CollectiveCall& call) const;

  // Tells the exit watch and the watchdog, on the issuing thread; the exit watch may refuse the call.
  void before_issue(const CollectiveCall& call);
  std::shared_ptr<PendingWork> new_work(const CallFingerprint& fingerprint, const std::string& group_name) const;
  // duplicate() and split(): `communicator()` (MPI_Comm_dup or MPI_Comm_split of this group's)
  // run on the communication thread as a collective call, its work named after
  // `work_group`; the result becomes the group `name` with `options`.
  std::shared_ptr<ProcessGroup> start_new_group(CollectiveCall call, const std::string& work_group, std::string name,
                                                const GroupOptions& options, std::function<MPI_Comm()> communicator);
  // Queues `body` behind the debug check; its outcome finishes `work`.
  void submit(const CallFingerprint& fingerprint, std::shared_ptr<PendingWork> work, std::function<void()> body);
  // On the communication thread:
  // Always on: one all-reduce of the fingerprint's words and their complements (MPI_MAX)
  // tells every rank alike whether all fingerprints are equal (each word's maximum and
  // minimum agree); only when they differ is the table gathered, to name the calls.
  void check_signature(const CallFingerprint& mine);
  // Gathers every rank's fingerprint (debug mode: at every call) and throws
  // CollectiveMismatch naming them when they differ.
  void check_fingerprints(const CallFingerprint& mine, bool debug_mode);
  void run(const CollectiveCall& call, const Buffers& buffers);
  void run_all_gather(const CollectiveCall& call, const Buffers& buffers);
  void run_reduce_scatter(const CollectiveCall& call, const Buffers& buffers);
  void run_all_reduce(const CollectiveCall& call, const Buffers& buffers);

  std::shared_ptr<MpiRuntime> runtime_;  // first in, last out: MPI outlives the communicator
  MPI_Comm communicator_;
  bool force_host_staging_;
  std::unique_ptr<CommunicationThread> thread_;
};

}  // namespace tessera::dist
