// NcclProcessGroup: collectives on CUDA tensors over NCCL, one GPU per rank.
//
// Made by new_group(parent, Backend::nccl) (new_group.h): rank 0 of the parent creates the
// ncclUniqueId, the parent broadcasts it (a CPU tensor: the parent is the MPI world, or the
// single-rank group when no launcher started the program, so one rank needs no MPI), and
// every rank joins the communicator on its device.
//
// Streams: each group has its own stream on its device. A call records an event on the
// device's compute stream (where Tessera queues every kernel) and makes the group's stream
// wait for it, so the collective reads inputs the program has computed; it then queues
// the NCCL call and records a `done` event after it. The host never waits: Work::wait()
// makes the compute stream wait for `done` (kernels queued after wait() see the result)
// and returns at once; only barrier() waits on the host as well. While the collective
// runs, the compute stream goes on with whatever was queued before wait(), which is how
// FSDP's prefetched all-gathers and its reduce-scatters overlap compute.
//
// Memory: the caching allocator reuses a freed block at once on the compute stream, so a
// tensor a collective uses must not be freed before the compute stream is ordered after
// the collective. The Work holds the call's tensors until wait() has ordered the compute
// stream after `done` (or, if it is dropped unwaited, until its destructor has done so).
//
// Inputs that overlap their output in ways NCCL cannot take in place are copied first
// (NCCL's in-place forms: an all-gather input that is this rank's slice of the output, a
// reduce-scatter output that is this rank's slice of the input). ReduceOp::avg is
// ncclAvg. dtypes: float32, float64, bfloat16, int64, uint8.
//
// Internal (needs the CUDA and NCCL headers); built only with TESSERA_HAS_NCCL.
#pragma once

#include <nccl.h>

#include <memory>
#include <string>

#include "tessera/dist/fingerprint.h"
#include "tessera/dist/process_group.h"
#include "tessera/tensor/cuda/stream.h"

namespace tessera::dist {

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Collective over `parent`'s ranks, which must carry CPU tensors (single or mpi): every
  // rank calls it at the same point of the parent's sequence. Throws DistError when two
  // ranks of one host chose the same GPU (NCCL needs one GPU per rank).
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

  ncclComm_t communicator_;
  int device_;
  std::unique_ptr<cuda::Stream> stream_;
  Tensor barrier_scratch_;  // one float32 on the device, all-reduced by barrier()
};

}  // namespace tessera::dist
