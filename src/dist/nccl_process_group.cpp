// The NCCL group: calls are checked and numbered by ProcessGroup, then ordered after the
// compute stream by an event, run on the group's stream, and handed back to the compute
// stream by the Work (see the header for why the Work holds the tensors). Every NCCL call
// goes through issue(), which polls the non-blocking communicator within the timeout.
#include "tessera/dist/nccl_process_group.h"

#include <unistd.h>

#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/dist/errors.h"
#include "tessera/dist/nccl_check.h"
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_errors.h"
#include "tessera/tensor/native.h"

namespace tessera::dist {

namespace {

ncclDataType_t nccl_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    case DType::boolean: return ncclUint8;  // moved as bytes; reductions are refused
  }
  throw DTypeError(detail::concat("no NCCL datatype for ", dtype_name(dtype)));
}

ncclRedOp_t nccl_reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  throw ValueError("no NCCL reduce op for this ReduceOp");
}

const char* byte_pointer(const Tensor& tensor) { return static_cast<const char*>(tensor.data_ptr()); }

// True when NCCL cannot read `call`'s input where it is: it overlaps the output other than
// in NCCL's in-place layout (the input is this rank's slice of an all-gather's output, or
// a reduce-scatter's output is this rank's slice of its input).
bool input_needs_copy(const CollectiveCall& call, int rank) {
  if (call.count() == 0 || call.input.is_same(call.output) || !memory_overlaps(call.input, call.output)) return false;
  if (call.kind == CollectiveKind::all_gather) {
    return byte_pointer(call.input) != byte_pointer(call.output) + rank * call.input.nbytes();
  }
  if (call.kind == CollectiveKind::reduce_scatter) {
    return byte_pointer(call.output) != byte_pointer(call.input) + rank * call.output.nbytes();
  }
  return false;
}

using Clock = std::chrono::steady_clock;

// Polls a non-blocking communicator until it is no longer busy with its last call
// (ncclInProgress), up to `deadline`; returns its state then (ncclInProgress: timed out).
ncclResult_t await_communicator(ncclComm_t communicator, Clock::time_point deadline) {
  auto pause = std::chrono::microseconds(20);
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(communicator, &state);
    if (asked != ncclSuccess) return asked;
    if (state != ncclInProgress || Clock::now() >= deadline) return state;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(2));
  }
}

std::string nccl_error(ncclResult_t status, ncclComm_t communicator) {
  return detail::describe_nccl_status(static_cast<int>(status), communicator);
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

double seconds(std::chrono::milliseconds duration) { return static_cast<double>(duration.count()) / 1000.0; }

// Which physical GPU a rank uses: its UUID ("GPU-8c1e..."), the same in every container
// and process that sees the device, whatever its index or PCI address there; and the host,
// for messages.
struct GpuIdentity {
  char uuid[48];
  char host[80];
};

GpuIdentity gpu_identity(int device) {
  GpuIdentity identity{};
  cudaDeviceProp properties{};
  TS_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  std::string text = "GPU-";
  const auto* bytes = reinterpret_cast<const unsigned char*>(properties.uuid.bytes);
  for (int i = 0; i < 16; ++i) {
    static const char* const kHex = "0123456789abcdef";
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += kHex[bytes[i] >> 4];
    text += kHex[bytes[i] & 15];
  }
  std::strncpy(identity.uuid, text.c_str(), sizeof identity.uuid - 1);
  gethostname(identity.host, sizeof identity.host - 1);
  return identity;
}

// NCCL needs one GPU per rank; with two ranks on one GPU its initialisation fails with a
// terse "duplicate GPU" error. Every rank sees the same table, so every rank throws alike.
void check_one_gpu_per_rank(ProcessGroup& parent, int device) {
  constexpr auto kBytes = static_cast<int64_t>(sizeof(GpuIdentity));
  const GpuIdentity mine = gpu_identity(device);
  Tensor mine_bytes = native::empty({kBytes}, DType::u8, Device::cpu());
  std::memcpy(mine_bytes.data_ptr(), &mine, sizeof mine);
  Tensor all_bytes = native::empty({kBytes * parent.size()}, DType::u8, Device::cpu());
  parent.all_gather_into(all_bytes, mine_bytes);
  std::vector<GpuIdentity> all(static_cast<size_t>(parent.size()));
  std::memcpy(all.data(), all_bytes.data_ptr(), all.size() * sizeof(GpuIdentity));
  for (size_t a = 0; a < all.size(); ++a) {
    for (size_t b = a + 1; b < all.size(); ++b) {
      TS_CHECK(std::strncmp(all[a].uuid, all[b].uuid, sizeof all[a].uuid) != 0, DistError,
               "new_group(Backend::nccl) on rank ", parent.rank(), " of group '", parent.name(), "': ranks ", a,
               " (on ", all[a].host, ") and ", b, " (on ", all[b].host, ") both chose the GPU ", all[a].uuid,
               "; NCCL needs one GPU per rank. Pass GroupOptions::device, or, to share one GPU between ranks, ",
               "use the MPI group itself, which stages CUDA tensors through host memory");
    }
  }
}

// The handle on one NCCL call (see the header): wait() orders the compute stream after it,
// and rethrows the group's failure if the watchdog aborted it.
class NcclWork final : public Work {
 public:
  NcclWork(std::string description, int device, std::shared_ptr<cuda::Event> done, std::vector<Tensor> tensors,
           bool host_waits, std::shared_ptr<NcclWatchdog> watchdog)
      : description_(std::move(description)),
        device_(device),
        done_(std::move(done)),
        tensors_(std::move(tensors)),
        host_waits_(host_waits),
        watchdog_(std::move(watchdog)) {}

  ~NcclWork() override {
    std::lock_guard lock(mutex_);
    if (ordered_) return;
    try {
      order_compute_stream();  // before the tensors' memory can be reused there
    } catch (...) {            // a destructor must not throw; the fault resurfaces at the next CUDA call
    }
  }

  void wait() override {
    std::lock_guard lock(mutex_);
    if (!ordered_) order_compute_stream();
    if (host_waits_) done_->synchronize();  // bounded: the watchdog aborts a collective past the timeout
    watchdog_->check();
  }

  bool is_completed() const override { return done_->query() || watchdog_->failure() != nullptr; }
  std::string description() const override { return description_; }

 private:
  void order_compute_stream() {
    cuda::DeviceGuard guard(device_);
    done_->block(cuda::compute_stream(device_));
    ordered_ = true;
    tensors_.clear();  // kernels that reuse their memory now run after the collective
  }

  std::string description_;
  int device_;
  std::shared_ptr<cuda::Event> done_;
  std::vector<Tensor> tensors_;
  bool host_waits_;
  std::shared_ptr<NcclWatchdog> watchdog_;
  std::mutex mutex_;
  bool ordered_ = false;
};

// A new communicator of the non-blocking kind, polled until it is up: a rank that never
// joins makes this throw after `timeout` on the others, instead of hanging them.
ncclComm_t join_communicator(const ncclUniqueId& id, int size, int rank, std::chrono::milliseconds timeout,
                             const std::string& where) {
  ncclConfig_t config = nonblocking_config();
  ncclComm_t communicator = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&communicator, size, id, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    if (communicator != nullptr) ncclCommAbort(communicator);
    throw DistError(detail::concat(where, ": ncclCommInitRankConfig failed: ", nccl_error(started, nullptr)));
  }
  const ncclResult_t state = await_communicator(communicator, Clock::now() + timeout);
  if (state != ncclSuccess) {
    const std::string why = state == ncclInProgress
                                ? detail::concat("not every rank joined within the timeout of ", seconds(timeout), " s")
                                : nccl_error(state, communicator);
    ncclCommAbort(communicator);
    throw DistError(detail::concat(where, ": the NCCL communicator did not come up: ", why));
  }
  return communicator;
}

}  // namespace

std::shared_ptr<NcclProcessGroup> NcclProcessGroup::create(ProcessGroup& parent, int device, std::string name,
                                                           bool debug_checks, std::chrono::milliseconds timeout) {
  TS_CHECK(parent.backend() != Backend::nccl, ValueError, "new_group(Backend::nccl): the parent group '", parent.name(),
           "' is an NCCL group; make NCCL groups from a group that carries CPU tensors (the world from dist::init)");
  cuda::check_device_index(device);
  check_one_gpu_per_rank(parent, device);

  ncclUniqueId id{};
  if (parent.rank() == 0) TS_NCCL_CHECK(ncclGetUniqueId(&id));
  Tensor id_bytes = native::empty({static_cast<int64_t>(sizeof id)}, DType::u8, Device::cpu());
  std::memcpy(id_bytes.data_ptr(), &id, sizeof id);
  parent.broadcast(id_bytes, 0);
  std::memcpy(&id, id_bytes.data_ptr(), sizeof id);
  // Debug mode is on for every rank if any rank asks for it, as for MPI groups.
  Tensor debug = native::full({1}, debug_checks ? 1.0 : 0.0, DType::i64, Device::cpu());
  parent.all_reduce(debug, ReduceOp::max);

  // The rank's GPU becomes this thread's device for good: NCCL joins on the current
  // device, and every later guard on it then has nothing to switch.
  TS_CUDA_CHECK(cudaSetDevice(device));
  ncclComm_t communicator =
      join_communicator(id, parent.size(), parent.rank(), timeout,
                        detail::concat("new_group(Backend::nccl) on rank ", parent.rank(), " of group '", parent.name(), "'"));
  try {
    return std::shared_ptr<NcclProcessGroup>(new NcclProcessGroup(
        communicator, device, parent.rank(), parent.size(), std::move(name), debug.item<int64_t>() != 0, timeout));
  } catch (...) {
    ncclCommAbort(communicator);
    throw;
  }
}

NcclProcessGroup::NcclProcessGroup(ncclComm_t communicator, int device, int rank, int size, std::string name,
                                   bool debug_checks, std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size, Backend::nccl, std::move(name), debug_checks, timeout),
      communicator_(communicator),
      device_(device),
      stream_(std::make_unique<cuda::Stream>(device)),
      barrier_scratch_(native::zeros({1}, DType::f32, Device::cuda(device))),
      placement_(detail::concat("rank ", rank, " of group '", this->name(), "' (size ", size, ")")) {
  NcclWatchdog::Hooks hooks;
  hooks.thread_start = [device] { TS_CUDA_CHECK(cudaSetDevice(device)); };
  hooks.async_error = [this]() -> std::string {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(communicator_, &state) != ncclSuccess) return "ncclCommGetAsyncError failed";
    return state == ncclSuccess || state == ncclInProgress ? std::string() : nccl_error(state, communicator_);
  };
  hooks.abort = [this] { ncclCommAbort(communicator_); };  // the kernels waiting for peers return
  hooks.post = [device](std::exception_ptr error) { cuda::post_device_error(device, std::move(error)); };
  watchdog_ = std::make_shared<NcclWatchdog>(placement_, timeout, std::move(hooks));
}

NcclProcessGroup::~NcclProcessGroup() {
  // Queued collectives may finish within the timeout; a communicator that cannot (a dead
  // peer) is aborted rather than waited for forever. Errors are ignored: at exit the
  // runtime may be gone. Works that outlive the group keep its (stopped) watchdog.
  watchdog_->stop();
  const auto deadline = Clock::now() + timeout();
  bool quiet = watchdog_->failure() == nullptr;
  while (quiet && cudaStreamQuery(stream_->handle()) == cudaErrorNotReady) {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(communicator_, &state);
    if ((state != ncclSuccess && state != ncclInProgress) || Clock::now() >= deadline) quiet = false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  cudaGetLastError();
  if (watchdog_->failure() != nullptr) return;  // aborted (and freed) already
  const ncclResult_t finalizing = quiet ? ncclCommFinalize(communicator_) : ncclInternalError;
  if ((finalizing == ncclSuccess || finalizing == ncclInProgress) &&
      await_communicator(communicator_, deadline) == ncclSuccess) {
    ncclCommDestroy(communicator_);
  } else {
    ncclCommAbort(communicator_);
  }
}

template <class NcclCall>
void NcclProcessGroup::issue(const std::string& what, NcclCall&& nccl_call) {
  std::lock_guard call(watchdog_->call_lock());
  watchdog_->check();
  const ncclResult_t status = nccl_call();
  ncclResult_t state = status;
  if (status == ncclInProgress || status == ncclSuccess) state = await_communicator(communicator_, Clock::now() + timeout());
  if (state == ncclSuccess) return;
  watchdog_->fail(state == ncclInProgress
                      ? detail::concat(what, " on ", placement_, " was not issued within the timeout of ",
                                       seconds(timeout()), " s (a peer is gone?); the communicator was aborted")
                      : detail::concat(what, " on ", placement_, " failed: ", nccl_error(state, communicator_),
                                       "; the communicator was aborted"));
  watchdog_->check();
}

void NcclProcessGroup::check_supported(const CollectiveCall& call) const {
  if (!call.has_tensors()) return;
  std::string_view op = collective_name(call.kind);
  TS_CHECK(call.input.is_cuda() && call.input.device().index == device_, DeviceError, where(op), ": got ",
           call.input.str(), "; this NCCL group carries CUDA tensors on cuda:", device_,
           call.input.is_cuda() ? "" : " (CPU tensors go through the MPI or single-rank group)");
}

std::shared_ptr<Work> NcclProcessGroup::start(CollectiveCall call) {
  watchdog_->check();  // an aborted group refuses every call, with the reason
  if (debug_checks()) check_fingerprints(fingerprint_of(call));
  cuda::DeviceGuard guard(device_);
  // Inputs NCCL cannot read in place are copied, and deferred storages are filled, on the
  // compute stream: before the event that the collective waits for.
  Tensor input = input_needs_copy(call, rank()) ? native::clone(call.input) : call.input;
  if (call.count() > 0) {
    input.data_ptr();
    call.output.data_ptr();
  }
  cuda::Event ready(device_);
  ready.record(cuda::compute_stream(device_));
  ready.block(stream_->handle());
  std::string description = detail::concat(describe(call), " on group '", name(), "'");
  enqueue(call, input, call.output);
  auto done = std::make_shared<cuda::Event>(device_);
  done->record(stream_->handle());
  watchdog_->watch(describe(call), [done] { return done->query(); });
  return std::make_shared<NcclWork>(std::move(description), device_, std::move(done),
                                    std::vector<Tensor>{call.input, call.output, input},
                                    call.kind == CollectiveKind::barrier, watchdog_);
}

void NcclProcessGroup::enqueue(const CollectiveCall& call, const Tensor& input, const Tensor& output) {
  cudaStream_t stream = stream_->handle();
  const std::string what = describe(call);
  if (call.kind == CollectiveKind::barrier) {
    issue(what, [&] {
      return ncclAllReduce(barrier_scratch_.data_ptr(), barrier_scratch_.data_ptr(), 1, ncclFloat32, ncclSum,
                           communicator_, stream);
    });
    return;
  }
  if (call.count() == 0) return;  // every rank has the same count (debug mode checks it)
  const ncclDataType_t datatype = nccl_datatype(call.input.dtype());
  switch (call.kind) {
    case CollectiveKind::all_gather:
      issue(what, [&] {
        return ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()), datatype,
                             communicator_, stream);
      });
      return;
    case CollectiveKind::reduce_scatter:
      issue(what, [&] {
        return ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), datatype,
                                 nccl_reduce_op(call.reduce_op), communicator_, stream);
      });
      return;
    case CollectiveKind::all_reduce:
      issue(what, [&] {
        return ncclAllReduce(output.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), datatype,
                             nccl_reduce_op(call.reduce_op), communicator_, stream);
      });
      return;
    case CollectiveKind::broadcast:
      issue(what, [&] {
        return ncclBroadcast(output.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), datatype,
                             call.root, communicator_, stream);
      });
      return;
    case CollectiveKind::barrier:
    case CollectiveKind::duplicate:
    case CollectiveKind::split: break;
  }
  throw DistError(detail::concat("NcclProcessGroup::enqueue: unexpected ", describe(call)));
}

void NcclProcessGroup::check_fingerprints(const CallFingerprint& mine) {
  constexpr int64_t kBytes = sizeof(CallFingerprint);
  cuda::DeviceGuard guard(device_);
  Tensor mine_host = native::empty({kBytes}, DType::u8, Device::cpu());
  std::memcpy(mine_host.data_ptr(), &mine, sizeof mine);
  Tensor mine_device = native::to_device(mine_host, Device::cuda(device_));
  Tensor all_device = native::empty({kBytes * size()}, DType::u8, Device::cuda(device_));
  // On the group's stream, behind the collectives already queued there (one NCCL call at a
  // time per communicator), and after the copy above on the compute stream.
  cuda::Event ready(device_);
  ready.record(cuda::compute_stream(device_));
  ready.block(stream_->handle());
  issue("the debug-mode fingerprint all-gather", [&] {
    return ncclAllGather(mine_device.data_ptr(), all_device.data_ptr(), static_cast<size_t>(kBytes), ncclUint8,
                         communicator_, stream_->handle());
  });
  auto gathered = std::make_shared<cuda::Event>(device_);
  gathered->record(stream_->handle());
  watchdog_->watch("the debug-mode fingerprint all-gather", [gathered] { return gathered->query(); });
  gathered->synchronize();  // bounded by the watchdog
  watchdog_->check();
  Tensor all_host = native::to_device(all_device, Device::cpu());
  std::vector<CallFingerprint> per_rank(static_cast<size_t>(size()));
  std::memcpy(per_rank.data(), all_host.data_ptr(), static_cast<size_t>(kBytes * size()));
  std::string message = mismatch_message(per_rank, name(), rank());
  if (!message.empty()) throw CollectiveMismatch(message);
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::start_duplicate(CollectiveCall, std::string name,
                                                                const GroupOptions& options) {
  ncclComm_t copy = nullptr;
  {
    cuda::DeviceGuard guard(device_);
    ncclConfig_t config = nonblocking_config();
    issue("ncclCommSplit", [&] { return ncclCommSplit(communicator_, 0, rank(), &copy, &config); });
    const ncclResult_t state = await_communicator(copy, Clock::now() + *options.timeout);
    if (state != ncclSuccess) {
      ncclCommAbort(copy);
      throw DistError(detail::concat(where("duplicate"), ": the split communicator did not come up: ",
                                     state == ncclInProgress ? std::string("timed out") : nccl_error(state, copy)));
    }
  }
  try {
    return std::shared_ptr<NcclProcessGroup>(
        new NcclProcessGroup(copy, device_, rank(), size(), std::move(name), *options.debug_checks, *options.timeout));
  } catch (...) {
    ncclCommAbort(copy);
    throw;
  }
}

}  // namespace tessera::dist
