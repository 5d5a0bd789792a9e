// The Optimizer base: parameter checks, the step loop, and the flat state dict layout
// described in optimizer.h.
#include "tessera/optim/optimizer.h"

#include <algorithm>
#include <charconv>

#include "tessera/autograd/grad_mode.h"
#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/shape.h"

namespace tessera::optim {
namespace {

constexpr const char* kGroupPrefix = "param_groups.0.";
constexpr const char* kStatePrefix = "state.";

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

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  TS_CHECK(!params_.empty(), ValueError, "optimizer got an empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    TS_CHECK(p.defined(), ValueError, "optimizer parameter ", i, " is an undefined tensor");
    TS_CHECK(p.is_leaf(), ValueError, "optimizer parameter ", i, " (", p.str(),
             ") is not a leaf tensor: an optimizer can only update leaves");
    TS_CHECK(is_floating(p.dtype()), DTypeError, "optimizer parameter ", i, " has dtype ", dtype_name(p.dtype()),
             "; parameters must be floating");
    for (size_t j = 0; j < i; ++j) {
      TS_CHECK(!params_[j].is_same(p), ValueError, "optimizer parameters ", j, " and ", i,
               " are the same tensor; each parameter may appear once");
    }
  }
  state_.resize(params_.size());
}

void Optimizer::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& param = params_[i];
    Tensor grad = param.grad();
    if (!grad.defined()) continue;
    // Built only when a check fails (TS_CHECK evaluates its message lazily).
    auto where = [&] { return type_name() + ".step: parameter " + std::to_string(i) + " (" + param.str() + ")"; };
    TS_CHECK(grad.device() == param.device(), DeviceError, where(), ": gradient is on ", grad.device().str());
    TS_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64, DTypeError, where(),
             ": expected float32 or float64");
    TS_CHECK(grad.dtype() == param.dtype(), DTypeError, where(), ": gradient has dtype ", dtype_name(grad.dtype()));
    TS_CHECK(grad.sizes() == param.sizes(), ShapeError, where(), ": gradient has shape ", shape_str(grad.sizes()));
    // The fused loops walk raw memory; every parameter Tessera creates (module
    // parameters, FSDP shards) is contiguous, and a strided view would need a copy back.
    TS_CHECK(param.is_contiguous(), ValueError, where(), ": parameter must be contiguous");
    grad = grad.contiguous();
    update(param, grad, state_[i]);
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& param : params_) {
    Tensor grad = param.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      param.set_grad(Tensor());
    } else {
      grad.zero_();
    }
  }
}

double Optimizer::lr() const { return *std::get<double*>(hyperparameter("lr").slot); }

void Optimizer::set_lr(double lr) {
  double* slot = std::get<double*>(hyperparameter("lr").slot);
  const double previous = *slot;
  *slot = lr;
  try {
    validate_options();
  } catch (...) {
    *slot = previous;
    throw;
  }
}

const StateDict& Optimizer::state(size_t index) const {
  TS_CHECK(index < state_.size(), IndexError, type_name(), ".state: index ", index, " out of range for ",
           state_.size(), " parameters");
  return state_[index];
}

void Optimizer::register_hyperparameter(const std::string& name, double& slot) {
  hyperparameters_.push_back({name, &slot});
}
void Optimizer::register_hyperparameter(const std::string& name, bool& slot) {
  hyperparameters_.push_back({name, &slot});
}
void Optimizer::register_hyperparameter(const std::string& name, std::array<double, 2>& slot) {
  hyperparameters_.push_back({name, &slot});
}

const Optimizer::Hyperparameter& Optimizer::hyperparameter(const std::string& name) const {
  for (const auto& entry : hyperparameters_) {
    if (entry.name == name) return entry;
  }
  throw ValueError(detail::concat(type_name(), " has no hyper-parameter '", name, "'"));
}

std::vector<Optimizer::Value> Optimizer::hyperparameter_values() const {
  std::vector<Value> values;
  for (const auto& entry : hyperparameters_) {
    std::visit([&](auto* slot) { values.emplace_back(*slot); }, entry.slot);
  }
  return values;
}

void Optimizer::set_hyperparameter_values(const std::vector<Value>& values) {
  for (size_t k = 0; k < hyperparameters_.size(); ++k) {
    std::visit([&](auto* slot) { *slot = std::get<std::remove_pointer_t<decltype(slot)>>(values[k]); },
               hyperparameters_[k].slot);
  }
}

StateDict Optimizer::param_groups_state_dict() const {
  StateDict out;
  for (const auto& entry : hyperparameters_) {
    const std::string key = kGroupPrefix + entry.name;
    if (auto* value = std::get_if<double*>(&entry.slot)) {
      out.insert(key, scalar_f64(**value));
    } else if (auto* flag = std::get_if<bool*>(&entry.slot)) {
      out.insert(key, scalar_f64(**flag ? 1.0 : 0.0));
    } else {
      const auto& pair = *std::get<std::array<double, 2>*>(entry.slot);
      out.insert(key, tensor<double>({pair[0], pair[1]}));
    }
  }
  out.insert(std::string(kGroupPrefix) + "params",
             arange(static_cast<double>(params_.size()), {.dtype = DType::i64}));
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

Optimizer::Value Optimizer::hyperparameter_from(const StateDict& state, const Hyperparameter& entry) const {
  const std::string key = kGroupPrefix + entry.name;
  if (std::holds_alternative<double*>(entry.slot)) return scalar_from(state, key);
  if (std::holds_alternative<bool*>(entry.slot)) {
    const double flag = scalar_from(state, key);
    TS_CHECK(flag == 0.0 || flag == 1.0, ValueError, "optimizer state dict: '", key,
             "' is a flag and should be 0 or 1, got ", flag);
    return flag == 1.0;
  }
  const Tensor& pair = state.at(key);
  TS_CHECK(pair.numel() == 2 && is_floating(pair.dtype()), ValueError, "optimizer state dict: '", key,
           "' should hold 2 floating values, got ", pair.str());
  const auto values = pair.to_vector<double>();
  return std::array<double, 2>{values[0], values[1]};
}

// Parses and checks the "state.<i>.<name>" entries against the current hyper-parameters.
std::vector<StateDict> Optimizer::states_from(const StateDict& state) const {
  const std::vector<StateSlot> slots = state_slots();
  std::vector<StateDict> states(params_.size());
  std::vector<std::string> problems;
  for (const auto& [key, value] : state) {
    if (key.rfind(kGroupPrefix, 0) == 0) continue;
    const std::string prefix = kStatePrefix;
    const size_t dot = key.find('.', prefix.size());
    size_t index = 0;
    const bool parsed = key.rfind(prefix, 0) == 0 && dot != std::string::npos &&
                        std::from_chars(key.data() + prefix.size(), key.data() + dot, index).ptr == key.data() + dot;
    if (!parsed || index >= params_.size()) {
      problems.push_back("unexpected key '" + key + "'");
      continue;
    }
    const std::string name = key.substr(dot + 1);
    auto slot = std::find_if(slots.begin(), slots.end(), [&](const StateSlot& s) { return s.name == name; });
    if (slot == slots.end()) {
      problems.push_back("unexpected key '" + key + "'");
      continue;
    }
    const Tensor& param = params_[index];
    if (slot->per_element) {
      if (value.sizes() != param.sizes() || !is_floating(value.dtype())) {
        problems.push_back("'" + key + "' is " + value.str() + " but parameter " + std::to_string(index) + " is " +
                           param.str());
        continue;
      }
      // A private copy in the parameter's dtype and device, as PyTorch casts on load.
      states[index].insert(name, value.detach().to(param.dtype()).to(param.device()).clone().contiguous());
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
    for (const auto& slot : slots) {
      if (slot.required && !states[i].contains(slot.name)) {
        problems.push_back("missing key 'state." + std::to_string(i) + "." + slot.name + "'");
      }
    }
  }
  TS_CHECK(problems.empty(), ValueError, type_name(), ".load_state_dict: ", join(problems));
  return states;
}

void Optimizer::load_state_dict(const StateDict& state) {
  const std::string where = type_name() + ".load_state_dict";
  std::vector<std::string> missing;
  for (const auto& entry : hyperparameters_) {
    if (!state.contains(kGroupPrefix + entry.name)) missing.push_back(kGroupPrefix + entry.name);
  }
  const std::string params_key = std::string(kGroupPrefix) + "params";
  if (!state.contains(params_key)) missing.push_back(params_key);
  TS_CHECK(missing.empty(), ValueError, where, ": missing keys ", join(missing));
  std::vector<std::string> unexpected;
  for (const auto& [key, value] : state) {
    if (key.rfind(kGroupPrefix, 0) != 0 || key == params_key) continue;
    const std::string name = key.substr(std::string(kGroupPrefix).size());
    const bool known = std::any_of(hyperparameters_.begin(), hyperparameters_.end(),
                                   [&](const Hyperparameter& h) { return h.name == name; });
    if (!known) unexpected.push_back(key);
  }
  TS_CHECK(unexpected.empty(), ValueError, where, ": unexpected keys ", join(unexpected));
  const int64_t count = state.at(params_key).numel();
  TS_CHECK(count == static_cast<int64_t>(params_.size()), ValueError, where, ": the state dict is for ", count,
           " parameters but this optimizer has ", params_.size());

  std::vector<Value> loaded;
  for (const auto& entry : hyperparameters_) loaded.push_back(hyperparameter_from(state, entry));
  // Apply the new hyper-parameters, check them and the state against them, and roll back
  // on any failure so that a bad file leaves the optimizer as it was.
  const std::vector<Value> previous = hyperparameter_values();
  set_hyperparameter_values(loaded);
  try {
    validate_options();
    state_ = states_from(state);
  } catch (...) {
    set_hyperparameter_values(previous);
    throw;
  }
}

}  // namespace tessera::optim
