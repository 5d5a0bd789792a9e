// The NCCL group: calls are checked and numbered by ProcessGroup, then ordered after the
// compute stream by an event, run on the group's stream, and handed back to the compute
// stream by the Work (see the header for why the Work holds the tensors).
#include "tessera/dist/nccl_process_group.h"

#include <unistd.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "tessera/dist/errors.h"
#include "tessera/dist/nccl_check.h"
#include "tessera/tensor/cuda/cuda_runtime.h"
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

// "host-name 0000:18:00.0": which physical GPU a rank uses.
std::string gpu_identity(int device) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  char bus[64] = {0};
  TS_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  return detail::concat(host, " ", bus);
}

// NCCL needs one GPU per rank; with two ranks on one GPU its initialisation fails with a
// terse "duplicate GPU" error. Every rank sees the same table, so every rank throws alike.
void check_one_gpu_per_rank(ProcessGroup& parent, int device) {
  constexpr int64_t kIdentityBytes = 128;
  std::string mine = gpu_identity(device);
  mine.resize(kIdentityBytes, '\0');
  Tensor mine_bytes = native::empty({kIdentityBytes}, DType::u8, Device::cpu());
  std::memcpy(mine_bytes.data_ptr(), mine.data(), kIdentityBytes);
  Tensor all_bytes = native::empty({kIdentityBytes * parent.size()}, DType::u8, Device::cpu());
  parent.all_gather_into(all_bytes, mine_bytes);
  const char* all = static_cast<const char*>(all_bytes.data_ptr());
  auto identity_of = [&](int rank) { return std::string(all + rank * kIdentityBytes); };
  for (int a = 0; a < parent.size(); ++a) {
    for (int b = a + 1; b < parent.size(); ++b) {
      TS_CHECK(identity_of(a) != identity_of(b), DistError, "new_group(Backend::nccl) on rank ", parent.rank(),
               " of group '", parent.name(), "': ranks ", a, " and ", b, " both chose the GPU ", identity_of(a),
               "; NCCL needs one GPU per rank. Pass GroupOptions::device, or, to share one GPU between ranks, ",
               "use the MPI group itself, which stages CUDA tensors through host memory");
    }
  }
}

// The handle on one NCCL call (see the header): wait() orders the compute stream after it.
class NcclWork final : public Work {
 public:
  NcclWork(std::string description, int device, std::unique_ptr<cuda::Event> done, std::vector<Tensor> tensors,
           bool host_waits)
      : description_(std::move(description)),
        device_(device),
        done_(std::move(done)),
        tensors_(std::move(tensors)),
        host_waits_(host_waits) {}

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
    if (host_waits_) done_->synchronize();
  }

  bool is_completed() const override { return done_->query(); }
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
  std::unique_ptr<cuda::Event> done_;
  std::vector<Tensor> tensors_;
  bool host_waits_;
  std::mutex mutex_;
  bool ordered_ = false;
};

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

  ncclComm_t communicator = nullptr;
  {
    cuda::DeviceGuard guard(device);
    TS_NCCL_CHECK(ncclCommInitRank(&communicator, parent.size(), id, parent.rank()));
  }
  try {
    return std::shared_ptr<NcclProcessGroup>(new NcclProcessGroup(
        communicator, device, parent.rank(), parent.size(), std::move(name), debug.item<int64_t>() != 0, timeout));
  } catch (...) {
    ncclCommDestroy(communicator);
    throw;
  }
}

NcclProcessGroup::NcclProcessGroup(ncclComm_t communicator, int device, int rank, int size, std::string name,
                                   bool debug_checks, std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size, Backend::nccl, std::move(name), debug_checks, timeout),
      communicator_(communicator),
      device_(device),
      stream_(std::make_unique<cuda::Stream>(device)),
      barrier_scratch_(native::zeros({1}, DType::f32, Device::cuda(device))) {}

NcclProcessGroup::~NcclProcessGroup() {
  // Queued collectives finish first; errors are ignored (at exit the runtime may be gone).
  cudaStreamSynchronize(stream_->handle());
  ncclCommDestroy(communicator_);
}

void NcclProcessGroup::check_supported(const CollectiveCall& call) const {
  if (!call.has_tensors()) return;
  std::string_view op = collective_name(call.kind);
  TS_CHECK(call.input.is_cuda() && call.input.device().index == device_, DeviceError, where(op), ": got ",
           call.input.str(), "; this NCCL group carries CUDA tensors on cuda:", device_,
           call.input.is_cuda() ? "" : " (CPU tensors go through the MPI or single-rank group)");
}

std::shared_ptr<Work> NcclProcessGroup::start(CollectiveCall call) {
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
  enqueue(call, input, call.output);
  auto done = std::make_unique<cuda::Event>(device_);
  done->record(stream_->handle());
  return std::make_shared<NcclWork>(detail::concat(describe(call), " on group '", name(), "'"), device_,
                                    std::move(done), std::vector<Tensor>{call.input, call.output, input},
                                    call.kind == CollectiveKind::barrier);
}

void NcclProcessGroup::enqueue(const CollectiveCall& call, const Tensor& input, const Tensor& output) {
  cudaStream_t stream = stream_->handle();
  if (call.kind == CollectiveKind::barrier) {
    TS_NCCL_CHECK(ncclAllReduce(barrier_scratch_.data_ptr(), barrier_scratch_.data_ptr(), 1, ncclFloat32, ncclSum,
                                communicator_, stream));
    return;
  }
  if (call.count() == 0) return;  // every rank has the same count (debug mode checks it)
  const ncclDataType_t datatype = nccl_datatype(call.input.dtype());
  switch (call.kind) {
    case CollectiveKind::all_gather:
      TS_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()), datatype,
                                  communicator_, stream));
      return;
    case CollectiveKind::reduce_scatter:
      TS_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                                      datatype, nccl_reduce_op(call.reduce_op), communicator_, stream));
      return;
    case CollectiveKind::all_reduce:
      TS_NCCL_CHECK(ncclAllReduce(output.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), datatype,
                                  nccl_reduce_op(call.reduce_op), communicator_, stream));
      return;
    case CollectiveKind::broadcast:
      TS_NCCL_CHECK(ncclBroadcast(output.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), datatype,
                                  call.root, communicator_, stream));
      return;
    case CollectiveKind::barrier:
    case CollectiveKind::duplicate: break;
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
  TS_NCCL_CHECK(ncclAllGather(mine_device.data_ptr(), all_device.data_ptr(), static_cast<size_t>(kBytes), ncclUint8,
                              communicator_, stream_->handle()));
  cuda::Event gathered(device_);
  gathered.record(stream_->handle());
  gathered.synchronize();
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
    TS_NCCL_CHECK(ncclCommSplit(communicator_, 0, rank(), &copy, nullptr));
  }
  try {
    return std::shared_ptr<NcclProcessGroup>(
        new NcclProcessGroup(copy, device_, rank(), size(), std::move(name), *options.debug_checks, *options.timeout));
  } catch (...) {
    ncclCommDestroy(copy);
    throw;
  }
}

}  // namespace tessera::dist
