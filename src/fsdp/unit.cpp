#include "tessera/fsdp/unit.h"

#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/dist/errors.h"
#include "tessera/nn/sharded_parameter.h"
#include "tessera/tensor/native.h"
#include "tessera/tensor/shape.h"

namespace tessera::fsdp::detail {

namespace {

// The layout entries of `parameters`, checking that they share one dtype and device.
std::vector<FlatEntry> entries_of(const std::string& unit, const std::vector<ParameterRef>& parameters,
                                  DType& dtype, Device& device) {
  std::vector<FlatEntry> entries;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& p = *parameters[i].slot;
    if (i == 0) {
      dtype = p.dtype();
      device = p.device();
    }
    TS_CHECK(p.dtype() == dtype && p.device() == device, ValueError, "fully_shard: unit '", unit,
             "' mixes parameters of ", dtype_name(dtype), " on ", device.str(), " and ", dtype_name(p.dtype()),
             " on ", p.device().str(), " ('", parameters[i].full_name, "'); convert the model first");
    TS_CHECK(is_floating(p.dtype()), DTypeError, "fully_shard: parameter '", parameters[i].full_name, "' is ",
             dtype_name(p.dtype()), "; only floating parameters can be sharded");
    entries.push_back({parameters[i].full_name, p.sizes(), 0, 0});
  }
  return entries;
}

// "fc1 (fc1.weight [128, 9216], fc1.bias [128])": how errors name a unit.
std::string unit_description(const std::string& unit, const std::vector<ParameterRef>& parameters) {
  constexpr size_t kListed = 4;
  std::string text = unit + " (";
  for (size_t i = 0; i < parameters.size() && i < kListed; ++i) {
    text += tessera::detail::concat(i > 0 ? ", " : "", parameters[i].full_name, " ", shape_str(parameters[i].slot->sizes()));
  }
  if (parameters.size() > kListed) text += tessera::detail::concat(" and ", parameters.size() - kListed, " more");
  return text + ")";
}

// Runs one of the unit's collective steps; an error (an argument refused by the group, a
// mismatch, a failed call) says which unit and step it came from, and keeps its type.
template <class Step>
void in_context(const std::string& context, Step&& step) {
  try {
    step();
  } catch (const dist::CollectiveMismatch& e) {
    throw dist::CollectiveMismatch(context + e.what());
  } catch (const dist::DistError& e) {
    throw dist::DistError(context + e.what());
  } catch (const ShapeError& e) {
    throw ShapeError(context + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(context + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(context + e.what());
  } catch (const ValueError& e) {
    throw ValueError(context + e.what());
  }
}

}  // namespace

std::string Unit::context(std::string_view step) const {
  return tessera::detail::concat("FSDP unit ", description_, ", ", step, " on rank ", group_.rank(), ": ");
}

Unit::Unit(std::string name, nn::Module& module, std::vector<ParameterRef> parameters, dist::ProcessGroup& group,
           ShardingStrategy strategy, dist::ReduceOp gradient_reduction, const MixedPrecision& mixed_precision,
           bool is_root, Counters& counters, const std::optional<CPUOffloadPolicy>& offload)
    : name_(std::move(name)),
      module_(module),
      parameters_(std::move(parameters)),
      group_(group),
      strategy_(strategy),
      gradient_reduction_(gradient_reduction),
      is_root_(is_root),
      sharded_(strategy != ShardingStrategy::no_shard),
      counters_(counters),
      offload_(offload) {
  DType dtype = DType::f32;
  std::vector<FlatEntry> entries = entries_of(name_, parameters_, dtype, device_);
  description_ = unit_description(name_ == "(root)" ? "'(root)'" : "'" + name_ + "'", parameters_);
  layout_ = FlatLayout(std::move(entries), dtype, sharded_ ? group.size() : 1);
  param_dtype_ = mixed_precision.param_dtype.value_or(dtype);
  reduce_dtype_ = mixed_precision.reduce_dtype.value_or(param_dtype_);
  TS_CHECK(sharded_ || param_dtype_ == dtype, ValueError, "fully_shard: unit '", name_,
           "': mixed precision needs a sharded strategy (FULL_SHARD or SHARD_GRAD_OP), not NO_SHARD");

  NoGradGuard no_grad;
  full_storage_ = std::make_shared<Storage>(0, device_);
  full_storage_->set_released_note(tessera::detail::concat(
      "it is a parameter of FSDP unit ", description_, ", whose gathered parameters exist only during the unit's "
      "forward and backward, at every world size: call model(x), not model.forward(x); a weight another module "
      "uses too (tied) must be in one unit with it (leave both to the root, or wrap a module that holds both); "
      "read them elsewhere inside fsdp::SummonFullParams, or through model.state_dict()"));
  auto full_impl = std::make_shared<TensorImpl>();
  full_impl->storage = full_storage_;
  full_impl->sizes = {layout_.padded_numel()};
  full_impl->strides = {1};
  full_impl->dtype = param_dtype_;
  full_ = Tensor(std::move(full_impl));

  // A group of one rank holds the whole flat parameter as its shard: the shard is then the
  // gathered buffer too (as NO_SHARD's), so that no second copy exists and nothing is
  // gathered, as PyTorch's FSDP switches to NO_SHARD at world size 1. Not with mixed
  // precision, whose gathered buffer has another dtype, nor with CPU offload, whose shard
  // lives on the host while the gathered buffer is on the compute device.
  // The parameters view full_storage_ all the same, which then borrows the shard's bytes
  // while the unit is "gathered" and drops them when it is "released": a sharded strategy's
  // parameters are readable at one rank exactly when they are at N, so that a program that
  // reads one outside its unit fails at one rank too (NO_SHARD keeps them readable).
  shard_is_full_ = !sharded_ || (group.size() == 1 && !offload_ && param_dtype_ == dtype && reduce_dtype_ == dtype);

  // This rank's shard: the parameters' elements in its range, zero in gaps and padding.
  ElementRange range = shard_range();
  Tensor shard;
  if (shard_is_full_) {
    shard = native::zeros({layout_.padded_numel()}, dtype, device_);
  } else if (offload_ && offload_->pin_memory) {
    shard = native::empty_pinned({layout_.shard_numel()}, dtype);
    native::fill_(shard, 0.0);
  } else {
    shard = native::zeros({layout_.shard_numel()}, dtype, offload_ ? Device::cpu() : device_);
  }
  for (size_t i = 0; i < parameters_.size(); ++i) {
    ElementRange part = layout_.overlap(i, range);
    if (part.empty()) continue;
    const FlatEntry& entry = layout_.entries()[i];
    Tensor destination = native::narrow(shard, 0, part.begin - range.begin, part.size());
    Tensor& slot = *parameters_[i].slot;
    if (PendingInit* pending = slot.storage()->pending()) {
      // Never used: compute just this slice from (seed, name, index).
      Tensor values = native::empty({part.size()}, dtype, Device::cpu());
      pending->rule.fill(values.data_ptr(), dtype, part.size(), pending->seed, pending->key, part.begin - entry.offset);
      native::copy_(destination, values);
    } else {
      Tensor flat = native::view(native::contiguous(slot), {-1});
      native::copy_(destination, native::narrow(flat, 0, part.begin - entry.offset, part.size()));
    }
  }
  shard_ = shard;
  shard_.requires_grad_(true);
  if (!sharded_) borrow_shard();  // NO_SHARD: kept whole, always readable

  // The parameters become views of the full buffer for good; releasing and re-gathering
  // the buffer changes their bytes, not what they point at.
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].slot->set_data(view_of(i));
}

Unit::~Unit() {
  for (auto* pending : {&pending_gather_, &pending_reduction_}) {
    if (!*pending) continue;
    try {
      (*pending)->wait();
    } catch (...) {  // a failed collective is already reported by whoever waited first
    }
  }
}

int64_t Unit::padded_bytes() const {
  return layout_.padded_numel() * static_cast<int64_t>(element_size(param_dtype_));
}

int64_t Unit::gradient_bytes() const {
  return layout_.padded_numel() * static_cast<int64_t>(element_size(reduce_dtype_));
}

Tensor Unit::view_of(size_t index) const { return view_in(full_, index); }

Tensor Unit::view_in(const Tensor& flat, size_t index) const {
  const FlatEntry& entry = layout_.entries()[index];
  return native::as_strided(flat, entry.shape, contiguous_strides(entry.shape), entry.offset);
}

void Unit::allocate_full() {
  full_storage_->resize(static_cast<size_t>(padded_bytes()));
  counters_.add_parameter_bytes(padded_bytes());
}

void Unit::borrow_shard() {
  full_storage_->borrow(shard_.storage());
  state_ = State::gathered;
}

void Unit::start_gather() {
  if (state_ != State::released) return;
  if (shard_is_full_) return borrow_shard();  // nothing to send, nothing to allocate
  allocate_full();
  if (post_forward_shard_.defined()) {
    // hpZ: the part kept after forward, gathered over its N ranks (it is freed once waited for).
    in_context(context("all-gathering its parameters within its post-forward group"),
               [&] { pending_gather_ = post_forward_group_->all_gather_into_async(full_, post_forward_shard_); });
    counters_.all_gathered_bytes += padded_bytes();
    ++counters_.all_gathers;
    counters_.post_forward_all_gathered_bytes += padded_bytes();
    ++counters_.post_forward_all_gathers;
    state_ = State::gathering;
    return;
  }
  // Mixed precision gathers the shard cast to param_dtype (the cast copy lives in the Work).
  Tensor source = offload_ ? shard_on_device(true) : shard_.detach();
  if (mixed_precision()) source = native::to_dtype(source, param_dtype_);
  in_context(context("all-gathering its parameters"),
             [&] { pending_gather_ = group_.all_gather_into_async(full_, source); });
  counters_.all_gathered_bytes += padded_bytes();
  ++counters_.all_gathers;
  state_ = State::gathering;
}

void Unit::wait_gathered() {
  start_gather();
  if (state_ != State::gathering) return;
  std::shared_ptr<dist::Work> work = std::move(pending_gather_);
  try {
    in_context(context("all-gathering its parameters"), [&] { work->wait(); });
  } catch (...) {
    // The buffer holds nothing usable: release it, so that the next forward gathers anew.
    release_full();
    throw;
  }
  state_ = State::gathered;
  drop_post_forward_shard();
}

void Unit::release_full() {
  pending_gather_.reset();
  full_storage_->resize(0);
  if (!shard_is_full_) counters_.add_parameter_bytes(-padded_bytes());
  state_ = State::released;
}

void Unit::reshard() {
  if (sharded_ && state_ == State::gathering) wait_gathered();  // a pending gather may read the kept part
  drop_post_forward_shard();
  if (!sharded_ || state_ == State::released) return;
  release_full();
}

void Unit::reshard_after_forward() {
  if (post_forward_group_ == nullptr || shard_is_full_) return reshard();
  if (state_ == State::released) return;
  if (state_ == State::gathering) wait_gathered();
  NoGradGuard no_grad;
  const int64_t part = layout_.padded_numel() / post_forward_group_->size();
  post_forward_shard_ = native::clone(native::narrow(full_, 0, part * post_forward_group_->rank(), part));
  counters_.add_parameter_bytes(static_cast<int64_t>(post_forward_shard_.nbytes()));
  release_full();
}

void Unit::drop_post_forward_shard() {
  if (!post_forward_shard_.defined()) return;
  const auto bytes = static_cast<int64_t>(post_forward_shard_.nbytes());
  post_forward_shard_ = Tensor();
  counters_.add_parameter_bytes(-bytes);
}

void Unit::accumulate_gradient(size_t index, const Tensor& grad) {
  add_to_gradient_buffer(index, grad.dtype() == reduce_dtype_ ? grad : native::to_dtype(grad, reduce_dtype_));
  ++gradients_received_;
}

bool Unit::add_gradient_contribution(size_t index, const Tensor& grad) {
  if (grad.dtype() != reduce_dtype_ || grad.device() != device_) return false;
  if (full_gradient_.defined() && !gradient_buffer_is_this_backwards_) return false;
  add_to_gradient_buffer(index, grad);
  return true;
}

void Unit::add_to_gradient_buffer(size_t index, const Tensor& grad) {
  NoGradGuard no_grad;
  if (!full_gradient_.defined()) {
    full_gradient_ = native::zeros({layout_.padded_numel()}, reduce_dtype_, device_);
    counters_.add_gradient_bytes(gradient_bytes());
    gradient_buffer_is_this_backwards_ = true;
  }
  const FlatEntry& entry = layout_.entries()[index];
  Tensor slot = native::view(native::narrow(full_gradient_, 0, entry.offset, entry.numel), entry.shape);
  native::add_scaled_(slot, grad, 1.0);
}

void Unit::start_reduction(const std::optional<RowWeight>& weight) {
  if (!full_gradient_.defined() || pending_reduction_) return;
  NoGradGuard no_grad;
  dist::ReduceOp op = gradient_reduction_;
  if (weight) {
    if (weight->no_rows_here) {
      native::fill_(full_gradient_, 0.0);
    } else {
      native::binary_(native::BinaryOp::mul, full_gradient_, native::to_dtype(weight->factor, reduce_dtype_));
    }
    op = dist::ReduceOp::sum;
  }
  in_context(context("reducing its gradients"), [&] {
    if (!shard_is_full_) {
      reducing_into_ = native::empty({layout_.shard_numel()}, reduce_dtype_, device_);
      pending_reduction_ = reduction_group_->reduce_scatter_into_async(reducing_into_, full_gradient_, op);
    } else {
      reducing_into_ = full_gradient_;
      pending_reduction_ = reduction_group_->all_reduce_async(reducing_into_, op);
    }
  });
  counters_.reduce_scattered_bytes += gradient_bytes();
  ++counters_.reduce_scatters;
  if (shard_is_full_) {
    counters_.all_reduced_bytes += gradient_bytes();
    ++counters_.all_reduces;
  }
}

void Unit::finish_reduction() {
  if (!pending_reduction_) return;
  NoGradGuard no_grad;
  std::shared_ptr<dist::Work> work = std::move(pending_reduction_);
  try {
    in_context(context("reducing its gradients"), [&] { work->wait(); });
  } catch (...) {
    // This step's gradient is lost; none of it may leak into the next step's.
    reducing_into_ = Tensor();
    drop_unsharded_gradient();
    throw;
  }
  Tensor reduced = std::move(reducing_into_);
  all_reduce_across_replicas(reduced);
  if (reduced.dtype() != layout_.dtype()) reduced = native::to_dtype(reduced, layout_.dtype());
  if (offload_) reduced = to_host(reduced);
  Tensor existing = shard_.grad();
  if (existing.defined()) {
    native::add_scaled_(existing, reduced, 1.0);
  } else {
    shard_.set_grad(reduced);
  }
  drop_unsharded_gradient();
}

void Unit::reduce_gradients() {
  start_reduction();
  finish_reduction();
}

void Unit::abandon_backward() {
  if (pending_reduction_) {
    try {
      pending_reduction_->wait();
    } catch (...) {  // already reported where the backward failed
    }
    pending_reduction_.reset();
    reducing_into_ = Tensor();
  }
  drop_unsharded_gradient();
  gradients_received_ = 0;
  for (const ParameterRef& parameter : parameters_) parameter.slot->set_grad(Tensor());
}

void Unit::drop_unsharded_gradient() {
  if (!full_gradient_.defined()) return;
  full_gradient_ = Tensor();
  counters_.add_gradient_bytes(-gradient_bytes());
  gradients_received_ = 0;
}

void Unit::write_back() {
  if (shard_is_full_ || state_ == State::released) return;
  wait_gathered();
  NoGradGuard no_grad;
  wait_for_host_reads();
  ElementRange range = shard_range();
  Tensor mine = native::narrow(full_, 0, range.begin, range.size());
  native::copy_(shard_, mine);
}

Tensor Unit::full_parameter(size_t index) const {
  TS_CHECK(state_ == State::gathered, Error, "FSDP unit ", description_, " is not gathered");
  return native::clone(view_of(index));
}

Tensor Unit::gather_full_precision() {
  NoGradGuard no_grad;
  Tensor flat = native::empty({layout_.padded_numel()}, layout_.dtype(), device_);
  if (sharded_) {
    Tensor source = offload_ ? shard_on_device(false) : shard_.detach();
    in_context(context("all-gathering its full-precision parameters"),
               [&] { group_.all_gather_into(flat, source); });
  } else {
    native::copy_(flat, shard_.detach());
  }
  return flat;
}

void Unit::begin_full_precision_summon() {
  summoned_ = gather_full_precision();
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].slot->set_data(view_in(summoned_, i));
}

void Unit::end_full_precision_summon(bool writeback) {
  if (!summoned_.defined()) return;
  NoGradGuard no_grad;
  if (writeback) {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      Tensor& slot = *parameters_[i].slot;
      if (slot.storage() == summoned_.storage()) continue;
      Tensor view = view_in(summoned_, i);  // the user reassigned the parameter: take its values
      native::copy_(view, slot);
    }
    ElementRange range = shard_range();
    wait_for_host_reads();
    native::copy_(shard_, native::narrow(summoned_, 0, range.begin, range.size()));
  }
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].slot->set_data(view_of(i));
  summoned_ = Tensor();
}

void Unit::load_parameter(size_t index, const Tensor& full) {
  NoGradGuard no_grad;
  const FlatEntry& entry = layout_.entries()[index];
  ElementRange range = shard_range();
  ElementRange part = layout_.overlap(index, range);
  if (part.empty()) return;
  Tensor flat = native::view(native::contiguous(native::to_device(full, shard_.device())), {-1});
  wait_for_host_reads();
  Tensor destination = native::narrow(shard_, 0, part.begin - range.begin, part.size());
  native::copy_(destination, native::narrow(flat, 0, part.begin - entry.offset, part.size()));
}

void Unit::repoint_parameters() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Tensor& slot = *parameters_[i].slot;
    if (slot.storage() == full_storage_) continue;
    Tensor view = view_of(i);
    native::copy_(view, slot);
    slot.set_data(view);
  }
}

void Unit::mark_tensors(const std::string& flat_name) {
  auto flat = std::make_shared<nn::FlatShard>();
  flat->name = flat_name;
  flat->sharded = sharded_;
  autograd::attach(shard_, std::move(flat));
  const ElementRange range = shard_range();
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const FlatEntry& entry = layout_.entries()[i];
    const ElementRange part = layout_.overlap(i, range);
    auto mark = std::make_shared<nn::ShardedParameter>();
    mark->name = parameters_[i].full_name;
    mark->flat_name = flat_name;
    mark->flat_shard = shard_;
    mark->numel = part.size();
    mark->shard_offset = part.empty() ? 0 : part.begin - range.begin;
    mark->first_element = part.empty() ? 0 : part.begin - entry.offset;
    mark->sharded = sharded_;
    autograd::attach(*parameters_[i].slot, std::move(mark));
  }
}

}  // namespace tessera::fsdp::detail
