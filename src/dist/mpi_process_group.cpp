// The MPI group: calls are checked and numbered by ProcessGroup, their buffers resolved on
// the calling thread (which may materialise a deferred storage), and the MPI collective
// run on the group's communication thread, preceded in debug mode by the fingerprint
// exchange.
#include "tessera/dist/mpi_process_group.h"

#include <array>
#include <climits>
#include <cstring>
#include <vector>

#include "tessera/dist/errors.h"
#include "tessera/dist/mpi_check.h"
#include "tessera/tensor/native.h"

namespace tessera::dist {

namespace {

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16: return MPI_UINT16_T;  // moved as bits; reductions go through float32
    case DType::boolean: return MPI_UINT8_T;  // moved as bytes; reductions are refused
  }
  throw DTypeError(detail::concat("no MPI datatype for ", dtype_name(dtype)));
}

MPI_Op mpi_reduce_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

// avg = sum / size; the division is exact for a power-of-two size.
void divide(void* data, DType dtype, int64_t count, int divisor) {
  if (dtype == DType::f32) {
    auto* values = static_cast<float*>(data);
    for (int64_t i = 0; i < count; ++i) values[i] /= static_cast<float>(divisor);
  } else if (dtype == DType::f64) {
    auto* values = static_cast<double*>(data);
    for (int64_t i = 0; i < count; ++i) values[i] /= static_cast<double>(divisor);
  }
}

std::vector<float> bf16_to_float(const void* data, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  const auto* source = static_cast<const BFloat16*>(data);
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<float>(source[i]);
  return values;
}

void float_to_bf16(const std::vector<float>& values, void* data) {
  auto* destination = static_cast<BFloat16*>(data);
  for (size_t i = 0; i < values.size(); ++i) destination[i] = BFloat16(values[i]);
}

// A host copy of `tensor` that the collective may overwrite (a CPU tensor is cloned, which
// is what force_host_staging tests). From a CUDA tensor this waits for the device.
Tensor host_copy_of(const Tensor& tensor) {
  return tensor.device().is_cpu() ? native::clone(tensor) : native::to_device(tensor, Device::cpu());
}

// The call with its tensors replaced by host buffers: the input copied, the output fresh
// (all_reduce and broadcast work in place on one tensor, which stays one tensor).
CollectiveCall on_host(const CollectiveCall& call) {
  CollectiveCall host = call;
  if (!call.has_tensors()) return host;
  host.input = host_copy_of(call.input);
  host.output = call.input.is_same(call.output) ? host.input
                                                 : native::empty(call.output.sizes(), call.output.dtype(), Device::cpu());
  return host;
}

bool agree_on_debug_checks(MPI_Comm communicator, bool wanted_here) {
  int wanted = wanted_here ? 1 : 0;
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wanted, 1, MPI_INT, MPI_MAX, communicator));
  return wanted != 0;
}

// The ranks in MPI_COMM_WORLD of `communicator`'s members, in its rank order.
std::vector<int> world_ranks_of(MPI_Comm communicator, int size) {
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  TS_MPI_CHECK(MPI_Comm_group(communicator, &mine));
  TS_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> local(static_cast<size_t>(size)), global(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) local[static_cast<size_t>(i)] = i;
  const int status = MPI_Group_translate_ranks(mine, size, local.data(), world, global.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  TS_MPI_CHECK(status);
  return global;
}

}  // namespace

std::shared_ptr<MpiProcessGroup> MpiProcessGroup::create(std::shared_ptr<MpiRuntime> runtime, MPI_Comm communicator,
                                                         std::string name, bool debug_checks,
                                                         std::chrono::milliseconds timeout, bool force_host_staging) {
  TS_MPI_CHECK(MPI_Comm_set_errhandler(communicator, MPI_ERRORS_RETURN));
  int rank = 0;
  int size = 1;
  TS_MPI_CHECK(MPI_Comm_rank(communicator, &rank));
  TS_MPI_CHECK(MPI_Comm_size(communicator, &size));
  bool debug = agree_on_debug_checks(communicator, debug_checks);
  if (size < runtime->world_size()) {
    // A group of some ranks (a split's part): the others never hold its calls back.
    std::vector<int> members = world_ranks_of(communicator, size);
    if (ExitWatch* watch = runtime->exit_watch()) watch->set_members(name, members);
    if (CollectiveWatchdog* watchdog = runtime->watchdog()) watchdog->set_members(name, std::move(members));
  }
  return std::shared_ptr<MpiProcessGroup>(
      new MpiProcessGroup(std::move(runtime), communicator, rank, size, std::move(name), debug, timeout,
                          force_host_staging));
}

MpiProcessGroup::MpiProcessGroup(std::shared_ptr<MpiRuntime> runtime, MPI_Comm communicator, int rank, int size,
                                 std::string name, bool debug_checks, std::chrono::milliseconds timeout,
                                 bool force_host_staging)
    : ProcessGroup(rank, size, Backend::mpi, std::move(name), debug_checks, timeout),
      runtime_(std::move(runtime)),
      communicator_(communicator),
      force_host_staging_(force_host_staging),
      thread_(std::make_unique<CommunicationThread>()) {}

bool MpiProcessGroup::stages_through_host(const CollectiveCall& call) const {
  return call.has_tensors() && (force_host_staging_ || !call.input.device().is_cpu());
}

MpiProcessGroup::~MpiProcessGroup() {
  thread_.reset();  // runs what is queued, then joins: nothing uses the communicator after
  if (mpi_is_running()) MPI_Comm_free(&communicator_);
}

void MpiProcessGroup::check_supported(const CollectiveCall& call) const {
  if (call.kind == CollectiveKind::duplicate || call.kind == CollectiveKind::split) {
    TS_CHECK(runtime_->thread_multiple(), DistError, where(collective_name(call.kind)),
             ": several groups run collectives from several threads, which needs MPI_THREAD_MULTIPLE, "
             "and this MPI provides only MPI_THREAD_SERIALIZED");
    return;
  }
  if (!call.has_tensors()) return;
  std::string_view op = collective_name(call.kind);
  // CUDA tensors are staged through host memory (see the header).
  TS_CHECK(call.count() <= INT_MAX, ValueError, where(op), ": ", call.input.str(), " has ", call.count(),
           " elements, more than MPI's int count (", INT_MAX, "); split the tensor");
}

std::shared_ptr<Work> MpiProcessGroup::start(CollectiveCall call) {
  // Staged calls run on host copies and copy the result back to `device_output` last. Both
  // the copies and the buffers may throw (a released storage): before the exit watch counts the call.
  const bool staged = stages_through_host(call);
  CollectiveCall to_run = staged ? on_host(call) : call;
  Tensor device_output = staged ? call.output : Tensor();
  Buffers buffers;
  if (to_run.count() > 0) {
    buffers.input = to_run.input.data_ptr();
    buffers.output = to_run.output.data_ptr();
    buffers.overlap = !to_run.input.is_same(to_run.output) && memory_overlaps(to_run.input, to_run.output);
    if (staged) device_output.data_ptr();
  }
  before_issue(call);
  CallFingerprint fingerprint = fingerprint_of(call);  // of the call as issued: its device included
  auto work = new_work(fingerprint, name());
  submit(fingerprint, work, [this, to_run = std::move(to_run), device_output, buffers]() mutable {
    run(to_run, buffers);
    // Queued on the device's compute stream before the Work completes: kernels queued after wait() see it.
    if (device_output.defined()) native::copy_(device_output, to_run.output);
  });
  return work;
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::start_duplicate(CollectiveCall call, std::string name,
                                                               const GroupOptions& options) {
  const std::string work_group = name;  // the work is named after the new group
  return start_new_group(std::move(call), work_group, std::move(name), options, [this] {
    MPI_Comm copy = MPI_COMM_NULL;
    TS_MPI_CHECK(MPI_Comm_dup(communicator_, &copy));
    return copy;
  });
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::start_split(CollectiveCall call, int color, std::string name,
                                                           const GroupOptions& options) {
  return start_new_group(std::move(call), this->name(), std::move(name), options, [this, color] {
    MPI_Comm part = MPI_COMM_NULL;
    TS_MPI_CHECK(MPI_Comm_split(communicator_, color, rank(), &part));
    return part;
  });
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::start_new_group(CollectiveCall call, const std::string& work_group,
                                                               std::string name, const GroupOptions& options,
                                                               std::function<MPI_Comm()> communicator) {
  before_issue(call);
  CallFingerprint fingerprint = fingerprint_of(call);
  auto work = new_work(fingerprint, work_group);
  auto made = std::make_shared<std::shared_ptr<ProcessGroup>>();
  bool debug_checks = *options.debug_checks;
  std::chrono::milliseconds timeout = *options.timeout;
  bool force_host_staging = options.force_host_staging;
  submit(fingerprint, work,
         [this, made, communicator = std::move(communicator), name = std::move(name), debug_checks, timeout,
          force_host_staging] {
           MPI_Comm made_communicator = communicator();
           try {
             *made = create(runtime_, made_communicator, name, debug_checks, timeout, force_host_staging);
           } catch (...) {
             MPI_Comm_free(&made_communicator);
             throw;
           }
         });
  work->wait();
  return *made;
}

void MpiProcessGroup::before_issue(const CollectiveCall& call) {
  if (ExitWatch* watch = runtime_->exit_watch()) watch->before_issue(name(), call.sequence, describe(call));
  if (CollectiveWatchdog* watchdog = runtime_->watchdog()) watchdog->issued(name(), call.sequence);
}

std::shared_ptr<PendingWork> MpiProcessGroup::new_work(const CallFingerprint& fingerprint,
                                                       const std::string& group_name) const {
  std::function<void(bool)> waits;
  // A thread waits only on a call not yet done, so while its group, the runtime and the
  // watchdog exist.
  if (CollectiveWatchdog* watchdog = runtime_->watchdog()) {
    waits = [watchdog](bool waiting) { waiting ? watchdog->wait_begins() : watchdog->wait_ends(); };
  }
  return std::make_shared<PendingWork>(detail::concat(describe(fingerprint), " on group '", group_name, "'"),
                                       std::move(waits));
}

void MpiProcessGroup::submit(const CallFingerprint& fingerprint, std::shared_ptr<PendingWork> work,
                             std::function<void()> body) {
  thread_->submit([this, fingerprint, work = std::move(work), body = std::move(body)]() mutable {
    std::exception_ptr error;
    CollectiveWatchdog* watchdog = runtime_->watchdog();
    if (watchdog) watchdog->begins(name(), describe(fingerprint), timeout());
    try {
      if (debug_checks()) {
        check_fingerprints(fingerprint, true);
      } else if (size() > 1) {
        check_signature(fingerprint);
      }
      body();
    } catch (const CollectiveMismatch&) {
      error = std::current_exception();
    } catch (const DistError& failure) {
      error = std::make_exception_ptr(DistError(detail::concat(work->description(), ": ", failure.what())));
    } catch (...) {
      error = std::current_exception();
    }
    if (watchdog) watchdog->ends(name());
    // Release the call's tensors before the waiter resumes, so that memory counters read
    // right after wait() do not still include them.
    body = nullptr;
    work->finish(error);
  });
}

void MpiProcessGroup::check_signature(const CallFingerprint& mine) {
  constexpr size_t kWords = sizeof(CallFingerprint) / sizeof(uint64_t);
  std::array<uint64_t, 2 * kWords> words{};
  std::memcpy(words.data(), &mine, sizeof mine);
  for (size_t i = 0; i < kWords; ++i) words[kWords + i] = ~words[i];
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, words.data(), static_cast<int>(words.size()), MPI_UINT64_T, MPI_MAX,
                             communicator_));
  for (size_t i = 0; i < kWords; ++i) {
    if (words[i] != ~words[kWords + i]) return check_fingerprints(mine, false);  // they differ: name the calls
  }
}

void MpiProcessGroup::check_fingerprints(const CallFingerprint& mine, bool debug_mode) {
  std::vector<CallFingerprint> per_rank(static_cast<size_t>(size()));
  TS_MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, per_rank.data(), sizeof mine, MPI_BYTE, communicator_));
  std::string message = mismatch_message(per_rank, name(), rank(), debug_mode);
  if (!message.empty()) throw CollectiveMismatch(message);
}

void MpiProcessGroup::run(const CollectiveCall& call, const Buffers& buffers) {
  switch (call.kind) {
    case CollectiveKind::all_gather: return run_all_gather(call, buffers);
    case CollectiveKind::reduce_scatter: return run_reduce_scatter(call, buffers);
    case CollectiveKind::all_reduce: return run_all_reduce(call, buffers);
    case CollectiveKind::broadcast:
      TS_MPI_CHECK(MPI_Bcast(buffers.output, static_cast<int>(call.count()), mpi_datatype(call.input.dtype()),
                             call.root, communicator_));
      return;
    case CollectiveKind::barrier: TS_MPI_CHECK(MPI_Barrier(communicator_)); return;
    case CollectiveKind::duplicate: break;  // runs through start_duplicate
    case CollectiveKind::split: break;      // runs through start_split
  }
  throw DistError(detail::concat("MpiProcessGroup::run: unexpected ", describe(call)));
}

void MpiProcessGroup::run_all_gather(const CollectiveCall& call, const Buffers& buffers) {
  int count = static_cast<int>(call.count());
  MPI_Datatype datatype = mpi_datatype(call.input.dtype());
  size_t slice_bytes = call.input.nbytes();
  const void* send = buffers.input;
  std::vector<std::byte> staged;
  if (count > 0 && buffers.input == static_cast<char*>(buffers.output) + rank() * slice_bytes) {
    send = MPI_IN_PLACE;  // the input already is this rank's slice of the output (FSDP's shard)
  } else if (buffers.overlap) {
    staged.resize(slice_bytes);
    std::memcpy(staged.data(), buffers.input, slice_bytes);
    send = staged.data();
  }
  TS_MPI_CHECK(MPI_Allgather(send, count, datatype, buffers.output, count, datatype, communicator_));
}

void MpiProcessGroup::run_reduce_scatter(const CollectiveCall& call, const Buffers& buffers) {
  DType dtype = call.input.dtype();
  int count = static_cast<int>(call.output.numel());
  MPI_Op op = mpi_reduce_op(call.reduce_op);
  if (dtype == DType::bf16) {
    std::vector<float> input = bf16_to_float(buffers.input, call.input.numel());
    std::vector<float> output(static_cast<size_t>(count));
    TS_MPI_CHECK(MPI_Reduce_scatter_block(input.data(), output.data(), count, MPI_FLOAT, op, communicator_));
    if (call.reduce_op == ReduceOp::avg) divide(output.data(), DType::f32, count, size());
    float_to_bf16(output, buffers.output);
    return;
  }
  MPI_Datatype datatype = mpi_datatype(dtype);
  if (count > 0 && buffers.input == buffers.output) {
    // The output is the head of the input: MPI_IN_PLACE reads the input from the output buffer.
    TS_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, buffers.output, count, datatype, op, communicator_));
  } else {
    const void* send = buffers.input;
    std::vector<std::byte> staged;
    if (buffers.overlap) {
      staged.resize(call.input.nbytes());
      std::memcpy(staged.data(), buffers.input, staged.size());
      send = staged.data();
    }
    TS_MPI_CHECK(MPI_Reduce_scatter_block(send, buffers.output, count, datatype, op, communicator_));
  }
  if (call.reduce_op == ReduceOp::avg) divide(buffers.output, dtype, count, size());
}

void MpiProcessGroup::run_all_reduce(const CollectiveCall& call, const Buffers& buffers) {
  DType dtype = call.input.dtype();
  int count = static_cast<int>(call.count());
  MPI_Op op = mpi_reduce_op(call.reduce_op);
  if (dtype == DType::bf16) {
    std::vector<float> values = bf16_to_float(buffers.output, count);
    TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), count, MPI_FLOAT, op, communicator_));
    if (call.reduce_op == ReduceOp::avg) divide(values.data(), DType::f32, count, size());
    float_to_bf16(values, buffers.output);
    return;
  }
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buffers.output, count, mpi_datatype(dtype), op, communicator_));
  if (call.reduce_op == ReduceOp::avg) divide(buffers.output, dtype, count, size());
}

}  // namespace tessera::dist
