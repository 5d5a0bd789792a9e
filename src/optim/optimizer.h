// Optimizer: the base of SGD, Adam, AdamW and Adadelta, with PyTorch's behaviour, parameter
// groups included.
//
// An optimizer holds parameter groups (PyTorch's param_groups), each a list of parameters
// with its own hyper-parameters. A group names only what differs from the defaults:
//
//   ts::optim::SGD sgd(model.parameters(), {.lr = 0.01, .momentum = 0.9});   // one group
//   ts::optim::AdamW adamw({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
//                          {.lr = 6e-4, .betas = {0.9, 0.95}});
//   adamw.add_param_group({head, {.lr = 1e-3}});
//   adamw.set_lr(1, 3e-4);                                  // group 1 only; set_lr(x): every group
//
// Per parameter it keeps named state tensors, created on the parameter's first step.
// step() updates, under NoGradGuard, every parameter that has a gradient; the update is
// element-wise, so a parameter may have any shape.
//
// Under FSDP (src/fsdp) the parameters may be the flat shards (model.parameters() after
// fsdp::fully_shard: every element of a unit gets its group's hyper-parameters) or the
// original parameters (the tensors named_parameters() gave before fully_shard, or
// fsdp::named_original_parameters(model) after). An original parameter's gradient and
// values live in its unit's flat shard: step() updates this rank's segment of it (from the
// mark fully_shard leaves, nn/sharded_parameter.h) with the parameter's group's
// hyper-parameters, and its state holds that segment only (1-D; empty on a rank that holds
// none of it, whose step still counts). Gaps and padding of the shard are never touched.
//
// state_dict() flattens PyTorch's dict into named tensors:
//   "param_groups.<g>.<hyper-parameter>"  0-d float64 (booleans as 0 or 1; Adam's "betas" a
//                                         float64 vector of 2), e.g. "param_groups.0.lr"
//   "param_groups.<g>.initial_lr"        0-d float64, once a scheduler has set it (as PyTorch)
//   "param_groups.<g>.params"            int64 indices of group g's parameters; they number
//                                         the parameters of all groups in order, as PyTorch
//   "state.<i>.<name>"                   parameter i's state, e.g. "state.0.exp_avg" (shaped
//                                         as the parameter, or its segment under FSDP) or
//                                         "state.0.step" (0-d float64)
// load_state_dict() restores it exactly, hyper-parameters included, as PyTorch does.
#pragma once

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "tessera/tensor/error.h"
#include "tessera/tensor/state_dict.h"
#include "tessera/tensor/tensor.h"

namespace tessera::optim {

// One hyper-parameter's value, and a group's hyper-parameters under PyTorch's names.
using HyperparameterValue = std::variant<double, bool, std::array<double, 2>>;
using Hyperparameters = std::vector<std::pair<std::string, HyperparameterValue>>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter with a gradient; the others (and their state) are untouched.
  void step();
  // Drops (default, as PyTorch 2.x) or zeroes every parameter's gradient. For an FSDP
  // original parameter that is its segment of the unit's gradient, which is one tensor:
  // dropping drops the whole unit's.
  void zero_grad(bool set_to_none = true);

  size_t param_group_count() const { return groups_.size(); }
  // Every parameter, group after group: the indices of state(i) and of state_dict().
  const std::vector<Tensor>& params() const { return params_; }
  // Group `group`'s parameters.
  std::vector<Tensor> params(size_t group) const;
  // Group `group`'s hyper-parameters under PyTorch's names, in its order.
  virtual Hyperparameters hyperparameters(size_t group) const = 0;

  double lr(size_t group = 0) const;
  // Sets every group's learning rate (a loop over param_groups in PyTorch).
  void set_lr(double lr);
  void set_lr(size_t group, double lr);
  // PyTorch's param_group["initial_lr"]: set by the first scheduler built on this
  // optimizer, the base its schedule starts from.
  std::optional<double> initial_lr(size_t group) const;
  void set_initial_lr(size_t group, double lr);

  // Parameter `index`'s state (empty before its first step).
  const StateDict& state(size_t index) const;

  StateDict state_dict() const;
  // The "param_groups.*" entries of state_dict() alone, without the per-parameter state.
  StateDict param_groups_state_dict() const;
  // Replaces hyper-parameters and state with `state`. It must have this optimizer's groups
  // (as many, of as many parameters each, as PyTorch checks), every hyper-parameter present
  // and valid, every state tensor shaped as its parameter (its segment under FSDP);
  // otherwise ValueError naming the keys, and this optimizer is left unchanged.
  void load_state_dict(const StateDict& state);

  // "SGD", "Adam", ... for messages and checkpoints.
  const std::string& type_name() const { return type_name_; }

 protected:
  // A stored name, not a virtual one, so that the base's constructor can name the
  // optimizer in its messages before the derived class exists.
  explicit Optimizer(std::string type_name) : type_name_(std::move(type_name)) {}

  // One kind of per-parameter state tensor.
  struct StateSlot {
    std::string name;
    bool per_element;  // shaped like the parameter; otherwise a 0-d float64 counter
    bool required;     // present in every parameter's state once it has stepped
  };

  // A per-element state tensor for `param`: zeros beside it, on its device and, when it is
  // pinned (FSDP's CPU offload), in pinned host memory too, so the optimizer's state lives
  // with the host shards.
  static Tensor zeros_state(const Tensor& param);

  // Whether update() takes parameters of `dtype`: float32 and float64 for every optimizer;
  // SGD also takes bfloat16 (PyTorch's per-op rounding, sgd.cpp).
  virtual bool updates_bf16() const { return false; }

  // Appends a group of `params` (checked: defined, floating leaves, none already in this
  // optimizer, no flat shard together with an original parameter it holds).
  void add_group_params(std::vector<Tensor> params);

  // One parameter's update with group `group`'s hyper-parameters. `param` is a contiguous
  // float32/float64 tensor (or bfloat16 where updates_bf16()) (CPU or CUDA), `grad` a contiguous tensor of its shape, dtype
  // and device; `state` is this parameter's state (per-element tensors on the parameter's
  // device, counters on the CPU).
  virtual void update(size_t group, Tensor& param, const Tensor& grad, StateDict& state) = 0;
  // The state slots under group `group`'s current hyper-parameters (to check loaded state).
  virtual std::vector<StateSlot> state_slots(size_t group) const = 0;
  // Replaces group `group`'s hyper-parameters with `values` (every one, by name, of the
  // kinds hyperparameters() gives); ValueError, and nothing changed, when one is invalid.
  virtual void set_hyperparameters(size_t group, const Hyperparameters& values) = 0;

 private:
  struct Group {
    std::vector<size_t> params;  // indices into params_
    std::optional<double> initial_lr;
  };
  // What step() updates for parameter `index`: the parameter, or this rank's segment of
  // an FSDP original parameter's flat shard.
  struct Target {
    Tensor values;
    Tensor grad;  // undefined when there is none to apply
  };
  Target target_of(size_t index) const;
  Shape state_shape(size_t index) const;
  std::string describe(size_t index) const;
  size_t group_of(size_t index) const;
  std::vector<StateDict> states_from(const StateDict& state) const;
  std::vector<Hyperparameters> groups_from(const StateDict& state) const;

  std::string type_name_;
  std::vector<Tensor> params_;
  std::vector<StateDict> state_;
  std::vector<Group> groups_;
};

// One hyper-parameter of a parameter group: left unset, the optimizer's default applies.
//   {.lr = 0.1}   {.betas = {0.9, 0.95}}   {.nesterov = true}
template <class T>
class GroupValue {
 public:
  GroupValue() = default;
  GroupValue(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor): {.lr = 0.1}
  template <class... Parts>
    requires(sizeof...(Parts) > 1 && requires(Parts... parts) { T{parts...}; })
  GroupValue(Parts... parts) : value_(T{parts...}) {}  // {.betas = {0.9, 0.95}}
  bool has_value() const { return value_.has_value(); }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
};

// An optimizer whose groups hold options of type `Options` (SGDOptions, AdamOptions, ...),
// each built from the defaults and a group's `GroupOptions` (the same fields as
// GroupValues). It declares what every optimizer has beyond its update: the constructors
// (a derived optimizer inherits them: `using OptimizerWithGroups::OptimizerWithGroups;`),
// the groups' options and add_param_group. From `Options` it takes
//   Options::optimizer_name                the optimizer's type_name() ("SGD");
//   options.validate(name)                 ValueError, prefixed by `name`, when a
//                                          hyper-parameter is out of range;
//   Options::visit(options, f)             f(name, field) for every hyper-parameter under
//                                          PyTorch's name, in its order; it works on a
//                                          GroupOptions too, whose fields have the same names.
template <class Options, class GroupOptions>
class OptimizerWithGroups : public Optimizer {
 public:
  struct ParamGroup {
    std::vector<Tensor> params;
    GroupOptions options = {};
  };

  // One group of every parameter:  SGD(model.parameters(), {.lr = 0.01, .momentum = 0.9})
  OptimizerWithGroups(std::vector<Tensor> params, const Options& options = {})
      : OptimizerWithGroups(Options::optimizer_name, {ParamGroup{std::move(params)}}, options) {}
  // Groups, each naming only what differs from the defaults:
  //   AdamW({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}}, {.lr = 6e-4})
  OptimizerWithGroups(std::vector<ParamGroup> groups, const Options& defaults = {})
      : OptimizerWithGroups(Options::optimizer_name, std::move(groups), defaults) {}

  // The options of group `group` (defaults and the group's own values).
  const Options& options(size_t group = 0) const {
    TS_CHECK(group < group_options_.size(), IndexError, type_name(), ": no parameter group ", group, " (it has ",
             group_options_.size(), ")");
    return group_options_[group];
  }
  const Options& defaults() const { return defaults_; }

  // PyTorch's add_param_group: a new group, its unset hyper-parameters from the defaults.
  void add_param_group(ParamGroup group) {
    Options options = defaults_;
    Hyperparameters overrides;
    Options::visit(group.options, [&](const char* name, const auto& value) {
      if (value.has_value()) overrides.emplace_back(name, *value);
    });
    assign(options, overrides);
    options.validate(type_name());
    add_group_params(std::move(group.params));
    group_options_.push_back(options);
  }

  Hyperparameters hyperparameters(size_t group) const override {
    Hyperparameters out;
    Options::visit(options(group), [&](const char* name, const auto& value) { out.emplace_back(name, value); });
    return out;
  }

 protected:
  // For an optimizer with another's options under its own name (AdamW: AdamOptions).
  OptimizerWithGroups(std::string type_name, std::vector<ParamGroup> groups, const Options& defaults)
      : Optimizer(std::move(type_name)), defaults_(defaults) {
    size_t count = 0;
    for (const ParamGroup& group : groups) count += group.params.size();
    TS_CHECK(count > 0, ValueError, this->type_name(), ": optimizer got an empty parameter list");
    for (ParamGroup& group : groups) add_param_group(std::move(group));
  }

  void set_hyperparameters(size_t group, const Hyperparameters& values) override {
    Options options = this->options(group);
    assign(options, values);
    options.validate(type_name());
    group_options_[group] = options;
  }

 private:
  // Sets the fields of `options` named in `values` (an unknown name or another kind of
  // value is a ValueError).
  void assign(Options& options, const Hyperparameters& values) const {
    for (const auto& [name, value] : values) {
      bool found = false;
      Options::visit(options, [&](const char* field_name, auto& field) {
        if (name != field_name) return;
        using Field = std::decay_t<decltype(field)>;
        TS_CHECK(std::holds_alternative<Field>(value), ValueError, type_name(), ": hyper-parameter '", name,
                 "' has the wrong kind of value");
        field = std::get<Field>(value);
        found = true;
      });
      TS_CHECK(found, ValueError, type_name(), " has no hyper-parameter '", name, "'");
    }
  }

  Options defaults_;
  std::vector<Options> group_options_;
};

}  // namespace tessera::optim
