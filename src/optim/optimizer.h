// Optimizer: the base of SGD, Adam, AdamW and Adadelta, with PyTorch's behaviour.
//
// An optimizer holds handles to its parameters (one parameter group) and, per parameter,
// named state tensors created on that parameter's first step. step() updates, under
// NoGradGuard, every parameter that has a gradient; the update is element-wise, so a
// parameter may have any shape (FSDP hands over 1-D flat shards).
//
//   ts::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
//   opt.zero_grad();
//   loss.backward();
//   opt.step();
//
// state_dict() flattens everything a checkpoint needs into named tensors:
//   "param_groups.0.<hyper-parameter>"  0-d float64 (booleans as 0 or 1; Adam's "betas" is
//                                       a float64 vector of 2), e.g. "param_groups.0.lr"
//   "param_groups.0.params"             int64 [0, 1, ..., n-1], as in PyTorch
//   "state.<i>.<name>"                  parameter i's state, e.g. "state.0.exp_avg" (the
//                                       parameter's shape and dtype) or "state.0.step"
//                                       (0-d float64)
// load_state_dict() restores it exactly: hyper-parameters included, as PyTorch does.
#pragma once

#include <array>
#include <string>
#include <variant>
#include <vector>

#include "tessera/tensor/state_dict.h"
#include "tessera/tensor/tensor.h"

namespace tessera::optim {

class Optimizer {
 public:
  // Throws ValueError on an empty list, an undefined, non-leaf or repeated tensor, or a
  // non-floating dtype.
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter with a gradient; the others (and their state) are untouched.
  void step();
  // Drops (default, as PyTorch 2.x) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);

  double lr() const;
  void set_lr(double lr);

  const std::vector<Tensor>& params() const { return params_; }
  // Parameter `index`'s state (empty before its first step).
  const StateDict& state(size_t index) const;

  StateDict state_dict() const;
  // The "param_groups.0.*" entries of state_dict() alone (hyper-parameters and "params"),
  // without copying the per-parameter state: what a checkpoint records beside the state
  // it writes straight from state(i).
  StateDict param_groups_state_dict() const;
  // Replaces hyper-parameters and state with `state`. Every key must be known, every
  // hyper-parameter present and valid, every state tensor shaped as its parameter;
  // otherwise ValueError naming the keys, and this optimizer is left unchanged.
  void load_state_dict(const StateDict& state);

  // "SGD", "Adam", ... for messages.
  virtual std::string type_name() const = 0;

 protected:
  // One kind of per-parameter state tensor.
  struct StateSlot {
    std::string name;
    bool per_element;  // shaped like the parameter; otherwise a 0-d float64 counter
    bool required;     // present in every parameter's state once it has stepped
  };

  // One parameter's update. `param` is a contiguous float32/float64 tensor (CPU or CUDA),
  // `grad` a contiguous tensor of its shape, dtype and device; `state` is this parameter's
  // state (per-element tensors on the parameter's device, counters on the CPU).
  virtual void update(Tensor& param, const Tensor& grad, StateDict& state) = 0;
  // The state slots under the current hyper-parameters (used to check loaded state).
  virtual std::vector<StateSlot> state_slots() const = 0;
  // Throws ValueError when a hyper-parameter is out of range.
  virtual void validate_options() const = 0;

  // Hyper-parameters, registered once by reference to the option struct's fields (the
  // registry reads and writes them in place). One named "lr" is required.
  void register_hyperparameter(const std::string& name, double& slot);
  void register_hyperparameter(const std::string& name, bool& slot);
  void register_hyperparameter(const std::string& name, std::array<double, 2>& slot);

 private:
  using Slot = std::variant<double*, bool*, std::array<double, 2>*>;
  using Value = std::variant<double, bool, std::array<double, 2>>;
  struct Hyperparameter {
    std::string name;
    Slot slot;
  };

  const Hyperparameter& hyperparameter(const std::string& name) const;
  std::vector<Value> hyperparameter_values() const;
  void set_hyperparameter_values(const std::vector<Value>& values);
  Value hyperparameter_from(const StateDict& state, const Hyperparameter& entry) const;
  std::vector<StateDict> states_from(const StateDict& state) const;

  std::vector<Tensor> params_;
  std::vector<StateDict> state_;
  std::vector<Hyperparameter> hyperparameters_;
};

}  // namespace tessera::optim
