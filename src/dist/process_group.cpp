// ProcessGroup's checks and numbering, shared by every backend: a call is checked here
// (with messages naming the rank, the shapes and the dtypes), numbered, and only then
// handed to the backend.
#include "tessera/dist/process_group.h"

#include "tessera/tensor/shape.h"

namespace tessera::dist {

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::single: return "single";
    case Backend::mpi: return "mpi";
    case Backend::nccl: return "nccl";
  }
  return "unknown";
}

namespace {

// "Tensor[4, 3] float32 cpu (strides [1, 4])"
std::string with_strides(const Tensor& tensor) {
  return detail::concat(tensor.str(), " (strides ", shape_str(tensor.strides()), ")");
}

void check_tensor(const std::string& where, const Tensor& tensor, std::string_view role) {
  TS_CHECK(tensor.defined(), ValueError, where, ": the ", role, " is an undefined tensor");
  // An empty tensor has no layout to get wrong (Tensor::is_contiguous() says false for some).
  TS_CHECK(tensor.numel() == 0 || tensor.is_contiguous(), ValueError, where, ": the ", role, " must be contiguous, got ",
           with_strides(tensor), "; call .contiguous() first");
}

void check_pair(const std::string& where, const Tensor& output, const Tensor& input) {
  check_tensor(where, output, "output");
  check_tensor(where, input, "input");
  TS_CHECK(output.dtype() == input.dtype(), DTypeError, where, ": output ", output.str(), " and input ",
           input.str(), " differ in dtype");
  TS_CHECK(output.device() == input.device(), DeviceError, where, ": output ", output.str(), " and input ",
           input.str(), " are on different devices");
}

void check_reduce_op(const std::string& where, ReduceOp op, DType dtype) {
  // A sum of bytes holding 0 and 1 would not be a bool (2 is not a valid bool byte).
  TS_CHECK(dtype != DType::boolean, DTypeError, where,
           ": reductions are not defined on bool tensors; convert to int64 (a count) or uint8 first");
  TS_CHECK(op != ReduceOp::avg || is_floating(dtype), DTypeError, where,
           ": ReduceOp::avg needs a floating dtype (float32, float64, bfloat16), got ", dtype_name(dtype),
           "; an integer average would truncate, so reduce with sum and divide yourself");
}

}  // namespace

ProcessGroup::ProcessGroup(int rank, int size, Backend backend, std::string name, bool debug_checks,
                           std::chrono::milliseconds timeout)
    : rank_(rank),
      size_(size),
      backend_(backend),
      name_(std::move(name)),
      debug_checks_(debug_checks),
      timeout_(timeout) {
  TS_CHECK(timeout_.count() > 0, ValueError, "process group '", name_, "': the collective timeout must be positive, got ",
           timeout_.count(), " ms");
}

std::string ProcessGroup::where(std::string_view op) const {
  return detail::concat(op, " on rank ", rank_, " of group '", name_, "' (size ", size_, ")");
}

void ProcessGroup::check_supported(const CollectiveCall&) const {}

uint64_t ProcessGroup::next_sequence() const {
  std::lock_guard lock(issue_mutex_);
  return next_sequence_;
}

std::shared_ptr<Work> ProcessGroup::issue(CollectiveCall call) {
  check_supported(call);
  std::lock_guard lock(issue_mutex_);
  call.sequence = next_sequence_;
  std::shared_ptr<Work> work = start(std::move(call));
  ++next_sequence_;
  return work;
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_async(const Tensor& output, const Tensor& input) {
  std::string at = where("all_gather_into");
  check_pair(at, output, input);
  TS_CHECK(output.numel() == size_ * input.numel(), ShapeError, at, ": the output ", output.str(), " has ",
           output.numel(), " elements but must hold world size ", size_, " x the input's ", input.numel(),
           " elements (input ", input.str(), ") = ", size_ * input.numel());
  return issue({.kind = CollectiveKind::all_gather, .input = input, .output = output});
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_into_async(const Tensor& output, const Tensor& input,
                                                              ReduceOp op) {
  std::string at = where("reduce_scatter_into");
  check_pair(at, output, input);
  TS_CHECK(input.numel() == size_ * output.numel(), ShapeError, at, ": the input ", input.str(), " has ",
           input.numel(), " elements but must hold world size ", size_, " x the output's ", output.numel(),
           " elements (output ", output.str(), ") = ", size_ * output.numel());
  check_reduce_op(at, op, input.dtype());
  return issue({.kind = CollectiveKind::reduce_scatter, .input = input, .output = output, .reduce_op = op});
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  std::string at = where("all_reduce");
  check_tensor(at, tensor, "tensor");
  check_reduce_op(at, op, tensor.dtype());
  return issue({.kind = CollectiveKind::all_reduce, .input = tensor, .output = tensor, .reduce_op = op});
}

std::shared_ptr<Work> ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  std::string at = where("broadcast");
  check_tensor(at, tensor, "tensor");
  TS_CHECK(root >= 0 && root < size_, IndexError, at, ": root rank ", root, " is outside [0, ", size_, ")");
  return issue({.kind = CollectiveKind::broadcast, .input = tensor, .output = tensor, .root = root});
}

std::shared_ptr<Work> ProcessGroup::barrier_async() { return issue({.kind = CollectiveKind::barrier}); }

void ProcessGroup::all_gather_into(const Tensor& output, const Tensor& input) {
  all_gather_into_async(output, input)->wait();
}

void ProcessGroup::reduce_scatter_into(const Tensor& output, const Tensor& input, ReduceOp op) {
  reduce_scatter_into_async(output, input, op)->wait();
}

void ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op)->wait(); }

void ProcessGroup::broadcast(const Tensor& tensor, int root) { broadcast_async(tensor, root)->wait(); }

void ProcessGroup::barrier() { barrier_async()->wait(); }

std::shared_ptr<ProcessGroup> ProcessGroup::duplicate(const GroupOptions& options) {
  CollectiveCall call{.kind = CollectiveKind::duplicate};
  check_supported(call);
  std::lock_guard lock(issue_mutex_);
  call.sequence = next_sequence_;
  std::string name = detail::concat(name_, ".", duplicates_made_ + 1);
  GroupOptions resolved = options;
  resolved.debug_checks = options.debug_checks.value_or(debug_checks_);
  resolved.timeout = options.timeout.value_or(timeout_);
  std::shared_ptr<ProcessGroup> group = start_duplicate(std::move(call), std::move(name), resolved);
  ++next_sequence_;
  ++duplicates_made_;
  return group;
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, std::string name, const GroupOptions& options) {
  TS_CHECK(color >= 0, ValueError, where("split"), ": the color must be non-negative, got ", color);
  CollectiveCall call{.kind = CollectiveKind::split};
  check_supported(call);
  std::lock_guard lock(issue_mutex_);
  call.sequence = next_sequence_;
  if (name.empty()) name = detail::concat(name_, ".split", splits_made_ + 1, ".", color);
  GroupOptions resolved = options;
  resolved.debug_checks = options.debug_checks.value_or(debug_checks_);
  resolved.timeout = options.timeout.value_or(timeout_);
  std::shared_ptr<ProcessGroup> group = start_split(std::move(call), color, std::move(name), resolved);
  ++next_sequence_;
  ++splits_made_;
  return group;
}

std::shared_ptr<ProcessGroup> ProcessGroup::start_split(CollectiveCall, int, std::string, const GroupOptions&) {
  throw ValueError(detail::concat(where("split"), ": a ", backend_name(), " group cannot be split; split the MPI world "
                                  "(or the single-rank group) and make ", backend_name(), " groups of its parts with "
                                  "new_group, as init_device_mesh does"));
}

}  // namespace tessera::dist
