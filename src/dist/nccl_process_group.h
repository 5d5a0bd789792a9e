// NcclProcessGroup: collectives on CUDA tensors over NCCL, one GPU per rank.
//
// Made by new_group(parent, Backend::nccl) (new_group.h): rank 0 of the parent creates the
// ncclUniqueId, the parent broadcasts it (a CPU tensor: the parent is the MPI world, or the
// single-rank group when no launcher started the program, so one rank needs no MPI), and
// every rank joins the communicator on its device, which becomes the calling thread's
// current device for good (as torch.cuda.set_device(local_rank) before init).
//
// Streams: each group has its own stream on its device. A call records an event on the
// device's compute stream (where Tessera queues every kernel) and makes the group's stream
// wait for it, so the collective reads inputs the program has computed; it then queues
// the NCCL call and records a `done` event after it. The host never waits: Work::wait()
// makes the compute stream wait for `done` (kernels queued after wait() see the result)
// and returns at once; only barrier() waits on the host as well. While the collective
// runs, the compute stream goes on with whatever was queued before wait(), which is how
// FSDP's prefetched all-gathers and its reduce-scatters overlap compute. (FSDP gives its
// reductions a duplicate() of the group, so the two kinds have a stream each.) Events
// come from the device's event pool, never created per call.
//
// Failures: communicators are non-blocking (ncclConfig_t::blocking = 0), so no NCCL call
// can block the host; each is polled until issued, within the group's timeout. A watchdog
// thread (nccl_watchdog.h) aborts the communicator when NCCL reports an asynchronous error
// or a collective outlives the timeout, and the error is thrown by the host wait that was
// stuck (item(), a copy to the host), by Work::wait() and by every later call. The
// destructor waits for queued collectives within the timeout too, and aborts the
// communicator instead of hanging.
//
// Memory: the caching allocator reuses a freed block at once on the compute stream, so a
// tensor a collective uses must not be freed before the compute stream is ordered after
// the collective. The Work holds the call's tensors until wait() has ordered the compute
// stream after `done` (or, if it is dropped unwaited, until its destructor has done so).
//
// Inputs that overlap their output in ways NCCL cannot take in place are copied first
// (NCCL's in-place forms: an all-gather input that is this rank's slice of the output, a
// reduce-scatter output that is this rank's slice of the input). ReduceOp::avg is
// ncclAvg. dtypes: float32, float64, bfloat16, int64, uint8, bool.
//
// Internal (needs the CUDA and NCCL headers); built only with TESSERA_HAS_NCCL.
#pragma once

#include <nccl.h>

#include <chrono>
#include <memory>
#include <string>

#include "tessera/dist/fingerprint.h"
#include "tessera/dist/nccl_watchdog.h"
#include "tessera/dist/process_group.h"
#include "tessera/tensor/cuda/stream.h"

namespace tessera::dist {

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Collective over `parent`'s ranks, which must carry CPU tensors (single or mpi): every
  // rank calls it at the same point of the parent's sequence. Throws DistError when two
  // ranks chose the same GPU (NCCL needs one GPU per rank), or when the communicator is
  // not up within `timeout` (a rank that never joins).
  static std::shared_ptr<NcclProcessGroup> create(ProcessGroup& parent, int device, std::string name,
                                                  bool debug_checks, std::chrono::milliseconds timeout);
  ~NcclProcessGroup() override;

  // The CUDA device this rank's communicator runs on.
  int device() const { return device_; }

 protected:
  void check_supported(const CollectiveCall& call) const override;
  std::shared_ptr<Work> start(CollectiveCall call) override;
  std::shared_ptr<ProcessGroup> start_duplicate(CollectiveCall call, std::string name,
                                                const GroupOptions& options) override;

 private:
  NcclProcessGroup(ncclComm_t communicator, int device, int rank, int size, std::string name, bool debug_checks,
                   std::chrono::milliseconds timeout);

  // Debug mode: all-gathers the fingerprints over NCCL and waits for them on the host.
  void check_fingerprints(const CallFingerprint& mine);
  // Queues the NCCL call for `call` on the group's stream.
  void enqueue(const CollectiveCall& call, const Tensor& input, const Tensor& output);
  // Runs one NCCL call (`what` names it in errors) under the watchdog's call lock and polls
  // until the communicator has issued it; an error or the timeout aborts the group.
  template <class NcclCall>
  void issue(const std::string& what, NcclCall&& nccl_call);

  ncclComm_t communicator_;
  int device_;
  std::unique_ptr<cuda::Stream> stream_;
  Tensor barrier_scratch_;  // one float32 on the device, all-reduced by barrier()
  std::string placement_;   // "rank 1 of group 'world.nccl' (size 2)", for messages
  std::shared_ptr<NcclWatchdog> watchdog_;  // shared with the Works, which rethrow its failure
};

}  // namespace tessera::dist
