// The Optimizer base: parameter groups and their checks, the step loop (over FSDP segments
// where a parameter is sharded), and the flat state dict layout described in optimizer.h.
#include "tessera/optim/optimizer.h"

#include <algorithm>
#include <charconv>

#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/sharded_parameter.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/native.h"
#include "tessera/tensor/shape.h"

namespace tessera::optim {
namespace {

constexpr const char* kStatePrefix = "state.";

std::string group_prefix(size_t group) { return "param_groups." + std::to_string(group) + "."; }

Tensor scalar_f64(double value) { return full({}, value, {.dtype = DType::f64}); }

// The single value of a 0-d (or one-element) floating tensor under `key`.
double scalar_from(const StateDict& state, const std::string& key) {
  const Tensor& tensor = state.at(key);
  TS_CHECK(tensor.numel() == 1 && is_floating(tensor.dtype()), ValueError, "optimizer state dict: '", key,
           "' should be a one-element floating tensor, got ", tensor.str());
  return tensor.item<double>();
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Parses "<prefix><index>.<rest>"; false when `key` has another form.
bool parse_indexed(const std::string& key, const std::string& prefix, size_t& index, std::string& rest) {
  if (key.rfind(prefix, 0) != 0) return false;
  const size_t dot = key.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  const char* first = key.data() + prefix.size();
  const char* last = key.data() + dot;
  if (first == last || std::from_chars(first, last, index).ptr != last) return false;
  rest = key.substr(dot + 1);
  return true;
}

}  // namespace

Tensor Optimizer::zeros_state(const Tensor& param) {
  if (!param.is_pinned()) return zeros_like(param);
  Tensor state = native::empty_pinned(param.sizes(), param.dtype());
  native::fill_(state, 0.0);
  return state;
}

void Optimizer::add_group_params(std::vector<Tensor> params) {
  const size_t first = params_.size();
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& p = params[k];
    const size_t i = first + k;
    TS_CHECK(p.defined(), ValueError, type_name(), ": parameter ", i, " is an undefined tensor");
    TS_CHECK(p.is_leaf(), ValueError, type_name(), ": parameter ", i, " (", p.str(),
             ") is not a leaf tensor: an optimizer can only update leaves");
    TS_CHECK(is_floating(p.dtype()), DTypeError, type_name(), ": parameter ", i, " has dtype ", dtype_name(p.dtype()),
             "; parameters must be floating");
    for (size_t j = 0; j < i; ++j) {
      const Tensor& other = j < first ? params_[j] : params[j - first];
      TS_CHECK(!other.is_same(p), ValueError, type_name(), ": parameters ", j, " and ", i,
               " are the same tensor; each parameter may appear once, in one group");
    }
  }
  // A flat shard and an original parameter inside it would both update the same elements.
  std::vector<Tensor> all = params_;
  all.insert(all.end(), params.begin(), params.end());
  for (size_t i = 0; i < all.size(); ++i) {
    const nn::ShardedParameter* mark = nn::find_sharded_parameter(all[i]);
    if (mark == nullptr) continue;
    for (size_t j = 0; j < all.size(); ++j) {
      TS_CHECK(!all[j].is_same(mark->flat_shard), ValueError, type_name(), ": parameter ", i, " ('", mark->name,
               "') lives in the flat shard '", mark->flat_name, "', which is parameter ", j,
               " too; give the optimizer either the flat shards (model.parameters() after fully_shard) or the "
               "original parameters, not both");
    }
  }
  Group group;
  for (size_t k = 0; k < params.size(); ++k) group.params.push_back(first + k);
  params_ = std::move(all);
  groups_.push_back(std::move(group));
  state_.resize(params_.size());
}

std::vector<Tensor> Optimizer::params(size_t group) const {
  TS_CHECK(group < groups_.size(), IndexError, type_name(), ": no parameter group ", group, " (it has ", groups_.size(),
           ")");
  std::vector<Tensor> out;
  for (size_t i : groups_[group].params) out.push_back(params_[i]);
  return out;
}

size_t Optimizer::group_of(size_t index) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& members = groups_[g].params;
    if (!members.empty() && index >= members.front() && index <= members.back()) return g;
  }
  throw IndexError(detail::concat(type_name(), ": no parameter ", index));
}

std::string Optimizer::describe(size_t index) const {
  const Tensor& p = params_[index];
  if (const nn::ShardedParameter* mark = nn::find_sharded_parameter(p)) {
    return detail::concat("parameter ", index, " ('", mark->name, "' ", shape_str(p.sizes()), ")");
  }
  return detail::concat("parameter ", index, " (", p.str(), ")");
}

Optimizer::Target Optimizer::target_of(size_t index) const {
  const Tensor& param = params_[index];
  const nn::ShardedParameter* mark = nn::find_sharded_parameter(param);
  if (mark == nullptr) return {param, param.grad()};
  Tensor values = mark->flat_shard.detach().narrow(0, mark->shard_offset, mark->numel);
  Tensor flat_grad = mark->flat_shard.grad();
  if (!flat_grad.defined()) return {values, Tensor()};
  return {values, flat_grad.narrow(0, mark->shard_offset, mark->numel)};
}

Shape Optimizer::state_shape(size_t index) const {
  const nn::ShardedParameter* mark = nn::find_sharded_parameter(params_[index]);
  return mark != nullptr ? Shape{mark->numel} : params_[index].sizes();
}

void Optimizer::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<StateSlot> slots = state_slots(g);
    for (size_t i : groups_[g].params) {
      Target target = target_of(i);
      if (!target.grad.defined()) continue;
      // Built only when a check fails (TS_CHECK evaluates its message lazily).
      auto where = [&] { return type_name() + ".step: " + describe(i); };
      Tensor& values = target.values;
      const Tensor& grad = target.grad;
      TS_CHECK(grad.device() == values.device(), DeviceError, where(), ": gradient is on ", grad.device().str());
      TS_CHECK(values.dtype() == DType::f32 || values.dtype() == DType::f64 ||
                   (values.dtype() == DType::bf16 && updates_bf16()),
               DTypeError, where(), ": expected float32 or float64",
               values.dtype() == DType::bf16 ? " (SGD updates bfloat16 parameters; this optimizer does not yet)" : "");
      TS_CHECK(grad.dtype() == values.dtype(), DTypeError, where(), ": gradient has dtype ", dtype_name(grad.dtype()));
      TS_CHECK(grad.sizes() == values.sizes(), ShapeError, where(), ": gradient has shape ", shape_str(grad.sizes()));
      // The fused loops walk raw memory; every parameter Tessera creates (module
      // parameters, FSDP shards and their segments) is contiguous, and a strided view
      // would need a copy back.
      TS_CHECK(values.is_contiguous(), ValueError, where(), ": parameter must be contiguous");
      for (const StateSlot& slot : slots) {
        if (!slot.per_element || !state_[i].contains(slot.name)) continue;
        const Tensor& existing = state_[i].at(slot.name);
        TS_CHECK(existing.sizes() == values.sizes(), ValueError, where(), ": its state '", slot.name, "' is ",
                 existing.str(), " but the parameter now updates ", shape_str(values.sizes()),
                 " elements on this rank: fsdp::fully_shard sharded it after this optimizer had stepped it. "
                 "Build the optimizer after fully_shard (the optimizer's state does not move into the shards)");
      }
      update(g, values, grad.contiguous(), state_[i]);
    }
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& param : params_) {
    const nn::ShardedParameter* mark = nn::find_sharded_parameter(param);
    Tensor owner = mark != nullptr ? mark->flat_shard : param;
    Tensor grad = owner.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      owner.set_grad(Tensor());
    } else if (mark != nullptr) {
      grad.narrow(0, mark->shard_offset, mark->numel).zero_();
    } else {
      grad.zero_();
    }
  }
}

double Optimizer::lr(size_t group) const {
  for (const auto& [name, value] : hyperparameters(group)) {
    if (name == "lr") return std::get<double>(value);
  }
  throw ValueError(detail::concat(type_name(), " has no hyper-parameter 'lr'"));
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

void Optimizer::set_lr(size_t group, double lr) {
  Hyperparameters values = hyperparameters(group);
  for (auto& [name, value] : values) {
    if (name == "lr") value = lr;
  }
  set_hyperparameters(group, values);
}

std::optional<double> Optimizer::initial_lr(size_t group) const {
  TS_CHECK(group < groups_.size(), IndexError, type_name(), ": no parameter group ", group);
  return groups_[group].initial_lr;
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  TS_CHECK(group < groups_.size(), IndexError, type_name(), ": no parameter group ", group);
  groups_[group].initial_lr = lr;
}

const StateDict& Optimizer::state(size_t index) const {
  TS_CHECK(index < state_.size(), IndexError, type_name(), ".state: index ", index, " out of range for ",
           state_.size(), " parameters");
  return state_[index];
}

StateDict Optimizer::param_groups_state_dict() const {
  StateDict out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = group_prefix(g);
    for (const auto& [name, value] : hyperparameters(g)) {
      if (const auto* number = std::get_if<double>(&value)) {
        out.insert(prefix + name, scalar_f64(*number));
      } else if (const auto* flag = std::get_if<bool>(&value)) {
        out.insert(prefix + name, scalar_f64(*flag ? 1.0 : 0.0));
      } else {
        const auto& pair = std::get<std::array<double, 2>>(value);
        out.insert(prefix + name, tensor<double>({pair[0], pair[1]}));
      }
    }
    if (groups_[g].initial_lr) out.insert(prefix + "initial_lr", scalar_f64(*groups_[g].initial_lr));
    std::vector<int64_t> indices(groups_[g].params.begin(), groups_[g].params.end());
    out.insert(prefix + "params", tensor<int64_t>(indices, {static_cast<int64_t>(indices.size())}));
  }
  return out;
}

StateDict Optimizer::state_dict() const {
  StateDict out = param_groups_state_dict();
  for (size_t i = 0; i < state_.size(); ++i) {
    for (const auto& [name, value] : state_[i]) {
      out.insert(kStatePrefix + std::to_string(i) + "." + name, value.detach().clone());
    }
  }
  return out;
}

// Parses and checks the "param_groups.*" entries: every group's hyper-parameters, typed
// as this optimizer's (an "initial_lr" is checked but kept apart, see load_state_dict).
std::vector<Hyperparameters> Optimizer::groups_from(const StateDict& state) const {
  const std::string where = type_name() + ".load_state_dict";
  size_t saved_groups = 0;
  for (const auto& [key, value] : state) {
    size_t group = 0;
    std::string rest;
    if (parse_indexed(key, "param_groups.", group, rest) && rest == "params") saved_groups = std::max(saved_groups, group + 1);
  }
  TS_CHECK(saved_groups == groups_.size(), ValueError, where, ": the state dict has ", saved_groups,
           " parameter group(s) but this optimizer has ", groups_.size());
  std::vector<std::string> missing, unexpected;
  std::vector<Hyperparameters> loaded(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = group_prefix(g);
    if (!state.contains(prefix + "params")) {
      missing.push_back(prefix + "params");
      continue;
    }
    const int64_t count = state.at(prefix + "params").numel();
    TS_CHECK(count == static_cast<int64_t>(groups_[g].params.size()), ValueError, where, ": parameter group ", g,
             " of the state dict has ", count, " parameters but this optimizer's has ", groups_[g].params.size());
    for (const auto& [name, current] : hyperparameters(g)) {
      const std::string key = prefix + name;
      if (!state.contains(key)) {
        missing.push_back(key);
        continue;
      }
      if (std::holds_alternative<double>(current)) {
        loaded[g].emplace_back(name, scalar_from(state, key));
      } else if (std::holds_alternative<bool>(current)) {
        const double flag = scalar_from(state, key);
        TS_CHECK(flag == 0.0 || flag == 1.0, ValueError, "optimizer state dict: '", key,
                 "' is a flag and should be 0 or 1, got ", flag);
        loaded[g].emplace_back(name, flag == 1.0);
      } else {
        const Tensor& pair = state.at(key);
        TS_CHECK(pair.numel() == 2 && is_floating(pair.dtype()), ValueError, "optimizer state dict: '", key,
                 "' should hold 2 floating values, got ", pair.str());
        const auto values = pair.to_vector<double>();
        loaded[g].emplace_back(name, std::array<double, 2>{values[0], values[1]});
      }
    }
    if (state.contains(prefix + "initial_lr")) (void)scalar_from(state, prefix + "initial_lr");
  }
  for (const auto& [key, value] : state) {
    size_t group = 0;
    std::string name;
    if (!parse_indexed(key, "param_groups.", group, name)) continue;
    bool known = name == "params" || name == "initial_lr";
    if (group < groups_.size()) {
      for (const auto& entry : hyperparameters(group)) known = known || entry.first == name;
    }
    if (!known) unexpected.push_back(key);
  }
  TS_CHECK(missing.empty(), ValueError, where, ": missing keys ", join(missing));
  TS_CHECK(unexpected.empty(), ValueError, where, ": unexpected keys ", join(unexpected));
  return loaded;
}

// Parses and checks the "state.<i>.<name>" entries against the current hyper-parameters.
std::vector<StateDict> Optimizer::states_from(const StateDict& state) const {
  std::vector<StateDict> states(params_.size());
  std::vector<std::string> problems;
  for (const auto& [key, value] : state) {
    if (key.rfind("param_groups.", 0) == 0) continue;
    size_t index = 0;
    std::string name;
    if (!parse_indexed(key, kStatePrefix, index, name) || index >= params_.size()) {
      problems.push_back("unexpected key '" + key + "'");
      continue;
    }
    const std::vector<StateSlot> slots = state_slots(group_of(index));
    auto slot = std::find_if(slots.begin(), slots.end(), [&](const StateSlot& s) { return s.name == name; });
    if (slot == slots.end()) {
      problems.push_back("unexpected key '" + key + "'");
      continue;
    }
    if (slot->per_element) {
      const Shape shape = state_shape(index);
      if (value.sizes() != shape || !is_floating(value.dtype())) {
        problems.push_back("'" + key + "' is " + value.str() + " but " + describe(index) + " has state of shape " +
                           shape_str(shape));
        continue;
      }
      // A private copy in the dtype and on the device of what steps, as PyTorch casts on load.
      const Tensor values = target_of(index).values;
      Tensor loaded = value.detach().to(values.dtype()).to(values.device()).clone().contiguous();
      states[index].insert(name, values.is_pinned() ? loaded.pin_memory() : loaded);
    } else {
      if (value.numel() != 1 || !is_floating(value.dtype())) {
        problems.push_back("'" + key + "' should be a one-element floating tensor, got " + value.str());
        continue;
      }
      states[index].insert(name, scalar_f64(value.item<double>()));
    }
  }
  for (size_t i = 0; i < states.size(); ++i) {
    if (states[i].empty()) continue;
    for (const auto& slot : state_slots(group_of(i))) {
      if (slot.required && !states[i].contains(slot.name)) {
        problems.push_back("missing key 'state." + std::to_string(i) + "." + slot.name + "'");
      }
    }
  }
  TS_CHECK(problems.empty(), ValueError, type_name(), ".load_state_dict: ", join(problems));
  return states;
}

void Optimizer::load_state_dict(const StateDict& state) {
  const std::vector<Hyperparameters> loaded = groups_from(state);
  // Apply the new hyper-parameters, check them and the state against them, and roll back
  // on any failure so that a bad file leaves the optimizer as it was.
  std::vector<Hyperparameters> previous;
  for (size_t g = 0; g < groups_.size(); ++g) previous.push_back(hyperparameters(g));
  try {
    for (size_t g = 0; g < groups_.size(); ++g) set_hyperparameters(g, loaded[g]);
    state_ = states_from(state);
  } catch (...) {
    for (size_t g = 0; g < groups_.size(); ++g) set_hyperparameters(g, previous[g]);
    throw;
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string key = group_prefix(g) + "initial_lr";
    if (state.contains(key)) {
      groups_[g].initial_lr = state.at(key).item<double>();
    } else {
      groups_[g].initial_lr.reset();
    }
  }
}

}  // namespace tessera::optim
