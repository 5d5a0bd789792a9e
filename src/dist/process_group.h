// ProcessGroup: the ranks of a job and the collectives among them, on tensors.
//
// Element counts and element types always come from the tensors, never from the caller.
// Tensors must be contiguous; outputs are written in place. A Tensor is a handle, so the
// output parameters are `const Tensor&`: a view such as `flat.narrow(0, 0, n)` can be
// passed directly, and the collective writes the elements it views.
//
// Every rank of a group must issue the same collectives in the same order, with the same
// dtypes, counts and roots; debug mode (TESSERA_DIST_DEBUG=1) checks that at every call.
// A blocking call is its `_async` form followed by wait(), so blocking and asynchronous
// calls on one group run in the order they were issued. Issue a group's collectives from one
// thread at a time; to run two streams of collectives concurrently, duplicate() the group.
//
//   auto world = ts::dist::init(argc, argv);
//   ts::Tensor shard = ts::full({4}, world->rank());
//   ts::Tensor full = ts::empty({4 * world->size()});
//   world->all_gather_into(full, shard);          // [0 0 0 0 1 1 1 1 ...]
//   ts::Tensor grad = ts::full({10}, world->rank());
//   auto pending = world->all_reduce_async(grad, ts::dist::ReduceOp::avg);
//   ...                                           // compute while it runs
//   pending->wait();                              // grad: the mean over ranks
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/dist/collective.h"
#include "tessera/dist/work.h"
#include "tessera/tensor/tensor.h"

namespace tessera::dist {

// single: one rank, no MPI; copies on any device. mpi: CPU tensors over MPI, CUDA tensors
// staged through host memory. nccl: CUDA tensors over NCCL, one GPU per rank (new_group.h).
enum class Backend : uint8_t { single, mpi, nccl };
std::string_view backend_name(Backend backend);

// How long a collective may wait for the other ranks before the job fails with a message
// naming the call and the ranks that did not arrive (docs/distributed.md), as PyTorch's
// init_process_group(timeout=) whose default is also 10 minutes. Every backend reads it
// from ProcessGroup::timeout().
inline constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(10);

struct GroupOptions {
  // Debug mode for the new group; unset: the parent group's setting.
  std::optional<bool> debug_checks{};
  // nccl: this rank's CUDA device; unset: the rank's local rank on its host (from the
  // launcher's variables, else its rank) modulo the visible devices.
  std::optional<int> device{};
  // mpi: copy CPU tensors through host staging buffers too, as CUDA tensors always are.
  // Only for testing the staging path on machines without a GPU.
  bool force_host_staging = false;
  // Collective timeout of the new group; unset: the parent group's.
  std::optional<std::chrono::milliseconds> timeout{};
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Backend backend() const { return backend_; }
  std::string_view backend_name() const { return dist::backend_name(backend_); }
  // "world", "world.1", ...: how messages name the group.
  const std::string& name() const { return name_; }
  bool debug_checks() const { return debug_checks_; }
  // How long one collective may wait for the other ranks (dist::init's InitOptions, or
  // TESSERA_DIST_TIMEOUT; GroupOptions::timeout for duplicates and new groups).
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Rank r's `input` (n elements) lands at output elements [r*n, (r+1)*n); the output has
  // size() * n elements, in any shape. The input may be that very slice of the output.
  void all_gather_into(const Tensor& output, const Tensor& input);
  // Reduces the inputs (size() * n elements each) over ranks and leaves elements
  // [r*n, (r+1)*n) of the result in rank r's `output` (n elements). sum, avg or max.
  void reduce_scatter_into(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum);
  // Reduces `tensor` over ranks, in place: sum, avg or max.
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum);
  // Copies rank `root`'s `tensor` into every rank's `tensor`.
  void broadcast(const Tensor& tensor, int root);
  // Returns once every rank has entered it.
  void barrier();

  std::shared_ptr<Work> all_gather_into_async(const Tensor& output, const Tensor& input);
  std::shared_ptr<Work> reduce_scatter_into_async(const Tensor& output, const Tensor& input,
                                                  ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root);
  std::shared_ptr<Work> barrier_async();

  // A new group over the same ranks, with its own sequence and (for MPI) its own
  // communicator and communication thread, so that its collectives can overlap this
  // group's. Collective: every rank calls it at the same point of this group's sequence.
  std::shared_ptr<ProcessGroup> duplicate(const GroupOptions& options = {});

  // A new group of the ranks of this group that pass the same `color` (>= 0), ranked in
  // their order here (MPI_Comm_split): how a DeviceMesh (device_mesh.h) gets its shard and
  // replica groups. Collective: every rank calls it at the same point of this group's
  // sequence. Named `name`, or "<this group>.split<k>.<color>" when empty. The single and
  // MPI groups split; an NCCL group does not (split the MPI world and make NCCL groups of
  // its parts with new_group, as init_device_mesh does).
  std::shared_ptr<ProcessGroup> split(int color, std::string name = {}, const GroupOptions& options = {});

  // Sequence number the next collective on this group will carry.
  uint64_t next_sequence() const;

 protected:
  ProcessGroup(int rank, int size, Backend backend, std::string name, bool debug_checks,
               std::chrono::milliseconds timeout);

  // Refuses what this backend cannot carry (MPI: counts beyond int; CUDA tensors it stages
  // through host memory; NCCL: anything but CUDA tensors on its device).
  // Called before the call takes a sequence number, so a refused call leaves no trace.
  virtual void check_supported(const CollectiveCall& call) const;
  // Starts a checked call, numbered and in issue order (calls arrive one at a time).
  virtual std::shared_ptr<Work> start(CollectiveCall call) = 0;
  // Creates the group for duplicate(); `call` is the duplicate's place in this sequence.
  // `options.debug_checks` and `options.timeout` are always set (resolved against this group's).
  virtual std::shared_ptr<ProcessGroup> start_duplicate(CollectiveCall call, std::string name,
                                                        const GroupOptions& options) = 0;
  // Creates the group for split(); the default refuses (see split()).
  virtual std::shared_ptr<ProcessGroup> start_split(CollectiveCall call, int color, std::string name,
                                                    const GroupOptions& options);

  // "all_gather_into on rank 1 of group 'world' (size 2)", the prefix of argument errors.
  std::string where(std::string_view op) const;

 private:
  std::shared_ptr<Work> issue(CollectiveCall call);

  int rank_;
  int size_;
  Backend backend_;
  std::string name_;
  bool debug_checks_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex issue_mutex_;  // numbering and starting a call is one step
  uint64_t next_sequence_ = 0;
  int duplicates_made_ = 0;
  int splits_made_ = 0;
};

}  // namespace tessera::dist
