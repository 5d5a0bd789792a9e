// Module: the base of every layer and model, with libtorch's names.
//
// Parameters, buffers and child modules are registered once, by reference to the member
// that holds them: the registry reads the member each time, so reassigning a member
// (model.fc.weight = other) never leaves parameters() pointing at a stale tensor. For the
// same reason modules cannot be copied or moved once built.
//
//   struct Net : ts::nn::Module {
//     ts::nn::Linear fc1{784, 128}, fc2{128, 10};
//     Net() { register_modules({{"fc1", fc1}, {"fc2", fc2}}); }
//     ts::Tensor forward(ts::Tensor x) override { return fc2(ts::relu(fc1(x))); }
//   };
//   Net net;
//   ts::Tensor y = net(x);                  // runs forward hooks, then forward
//   for (auto& [name, p] : net.named_parameters()) ...   // "fc1.weight", ...
//
// Parameters start deferred: they know their shape and init rule and take memory only on
// first use, with values keyed by (seed, full dotted name, element index). So a model is
// the same whatever the world size, and FSDP can fill each rank's shard without building
// the full model. The seed is the default generator's when the parameter is made
// (ts::manual_seed, tensor/random.h; 0 unless set); reset_parameters(seed) re-keys every
// parameter to another.
#pragma once

#include <functional>
#include <iosfwd>
#include <typeinfo>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/tensor/random.h"
#include "tessera/tensor/state_dict.h"
#include "tessera/tensor/tensor.h"

namespace tessera::nn {

// Something a module keeps alive for as long as it lives (FSDP's per-unit state).
struct ModuleAttachment {
  virtual ~ModuleAttachment() = default;
};

class Module {
 public:
  using ForwardPreHook = std::function<void(Module& module, Tensor& input)>;
  using ForwardHook = std::function<void(Module& module, Tensor& output)>;
  // Hooks that see every tensor of a call, as PyTorch's see the args tuple and the output
  // tuple: MultiheadAttention's (query, key, value) and (output, weights). They may replace
  // any of them. A ForwardPreHook sees inputs[0] and a ForwardHook outputs[0].
  using ForwardArgsPreHook = std::function<void(Module& module, std::span<Tensor> inputs)>;
  using ForwardOutputsHook = std::function<void(Module& module, std::span<Tensor> outputs)>;
  // The computation of one call, given its tensor arguments after the pre-hooks.
  using CallForward = std::function<std::vector<Tensor>(std::vector<Tensor>& inputs)>;
  using StateDictOverride = std::function<StateDict(Module& module)>;
  using LoadStateDictOverride = std::function<void(Module& module, const StateDict& state, bool strict)>;
  using StateShapesOverride = std::function<std::vector<std::pair<std::string, Shape>>(Module& module)>;
  // Runs a call of the module: `call` is the call itself (forward hooks and forward).
  using CallWrapper = std::function<Tensor(Module& module, Tensor input, const std::function<Tensor(Tensor)>& call)>;

  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = delete;
  Module& operator=(Module&&) = delete;

  // Calls forward through the forward hooks (FSDP gathers parameters in them), and the
  // hooks and forward through the call wrapper when one is set.
  Tensor operator()(Tensor input);
  // The same for any signature: a module whose forward takes or returns several tensors
  // defines its call operator through this, so that hooks run as for one tensor (FSDP's
  // gathering, resharding and backward registration among them). `inputs` are the call's
  // tensor arguments (non-tensor ones and masks go in `forward`'s closure, captured by
  // value: a checkpointed call runs it again in backward), `forward` returns the outputs.
  // A call wrapper (activation checkpointing) takes one tensor and returns one, so a
  // wrapped module's call must too; anything else is refused, naming the module.
  std::vector<Tensor> call(std::vector<Tensor> inputs, const CallForward& forward);
  // The computation. Modules whose forward takes something other than one tensor define
  // their own call operator (through call()) and leave this one throwing.
  virtual Tensor forward(Tensor input);
  // The class name used in messages, printing and FSDP's module_type policy: by default the
  // class's own name without namespaces ("Linear", "Net"), as PyTorch's repr shows it.
  virtual std::string type_name() const;
  // Extra text inside the printed form ("in_features=784, out_features=128"); several
  // lines are printed one per line, as PyTorch does.
  virtual std::string extra_repr() const { return ""; }
  // True for modules that only hold others and are never called themselves (ModuleList,
  // ModuleDict). FSDP never makes one a unit: its forward hooks would never run.
  virtual bool is_container() const { return false; }

  // Registration. Names may not contain '.', nor repeat within one module.
  void register_parameter(const std::string& name, Tensor& slot, bool requires_grad = true);
  void register_buffer(const std::string& name, Tensor& slot, bool persistent = true);
  void register_module(const std::string& name, Module& child);
  void register_modules(std::initializer_list<std::pair<std::string, std::reference_wrapper<Module>>> children);

  // Traversal, in registration order: a module's own entries, then its children's.
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Module*> children() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  // This module and every descendant, parents before children.
  std::vector<Module*> modules();
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Calls fn on every descendant, children first, then on this module (PyTorch's order).
  Module& apply(const std::function<void(Module&)>& fn);

  // The dotted path of this module from the root it was registered under ("" at the root).
  const std::string& path() const { return path_; }

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Drops (default) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);

  // Moves or converts parameters and buffers in place (their slots are reassigned).
  Module& to(Device device);
  Module& to(DType dtype);

  // Re-keys every parameter drawn from an InitRule to `seed` (they take it when first
  // used); values the user assigned stay. Throws if such a parameter is already in use.
  void reset_parameters(uint64_t seed);

  // Parameters and persistent buffers under their dotted names, detached.
  StateDict state_dict();
  // Copies `state` into the registered tensors. Strict: every key must match, and the
  // error lists missing keys, unexpected keys and shape mismatches together.
  void load_state_dict(const StateDict& state, bool strict = true);
  // The names and shapes load_state_dict() expects, in state_dict() order, without
  // gathering or reading anything: check a file's header against them before reading its
  // tensors (check_state_dict_match below), so that a wrong file costs no memory.
  std::vector<std::pair<std::string, Shape>> state_shapes();

  // Hooks; the returned handle removes them.
  int register_forward_pre_hook(ForwardPreHook hook);
  int register_forward_hook(ForwardHook hook);
  int register_forward_args_pre_hook(ForwardArgsPreHook hook);
  int register_forward_outputs_hook(ForwardOutputsHook hook);
  void remove_hook(int handle);
  // Every call of this module goes through `wrapper` (null removes it). Activation
  // checkpointing (checkpoint.h) wraps the whole call, hooks included, so that FSDP's
  // hooks run again when the call is recomputed.
  void set_call_wrapper(CallWrapper wrapper) { call_wrapper_ = std::move(wrapper); }
  bool has_call_wrapper() const { return call_wrapper_ != nullptr; }

  // Extension points for FSDP, which replaces how a sharded model's state is gathered.
  void set_state_dict_override(StateDictOverride state_dict, LoadStateDictOverride load,
                               StateShapesOverride shapes = {});
  // Hides a registered parameter from parameters()/named_parameters() (FSDP exposes the
  // flat shard instead) while keeping it in the registry; the slot is returned.
  Tensor& hide_parameter(const std::string& name);
  // Every registered parameter slot of this module (not its children), hidden ones too.
  std::vector<std::pair<std::string, Tensor*>> parameter_slots();
  void attach(std::shared_ptr<ModuleAttachment> attachment) { attachments_.push_back(std::move(attachment)); }
  // The first attachment of type T, or null.
  template <class T>
  T* find_attachment() const {
    for (const auto& a : attachments_) {
      if (auto* typed = dynamic_cast<T*>(a.get())) return typed;
    }
    return nullptr;
  }
  // The slots behind state_dict(), in its order: parameters (hidden ones too) and
  // persistent buffers, with dotted names. An override of state_dict uses this.
  std::vector<std::pair<std::string, Tensor*>> state_slots();

 protected:
  // A parameter of `shape` whose values come from `rule` on first use (see above).
  static Tensor deferred_parameter(const Shape& shape, const InitRule& rule, DType dtype = DType::f32);

 private:
  struct ParameterEntry {
    std::string name;
    Tensor* slot;
    bool hidden = false;
    bool from_rule = false;  // registered deferred, i.e. its values come from an InitRule
  };
  struct BufferEntry {
    std::string name;
    Tensor* slot;
    bool persistent = true;
  };
  struct ChildEntry {
    std::string name;
    Module* module;
  };
  struct HookEntry {
    int handle;
    ForwardPreHook pre;
    ForwardHook post;
    ForwardArgsPreHook pre_args;
    ForwardOutputsHook post_outputs;
  };

  void check_new_name(const std::string& name, const char* what) const;
  void set_path(const std::string& path);
  std::string qualified(const std::string& name) const { return path_.empty() ? name : path_ + "." + name; }
  void collect_named(const std::string& prefix, bool recurse, bool want_parameters, bool persistent_only,
                     std::vector<std::pair<std::string, Tensor>>& out) const;
  // Parameters (hidden ones too) and persistent buffers in state_dict order.
  void collect_state(const std::string& prefix, StateDict& out);

  std::vector<ParameterEntry> parameters_;
  std::vector<BufferEntry> buffers_;
  std::vector<ChildEntry> children_;
  std::vector<Tensor> call_with_hooks(std::vector<Tensor> inputs, const CallForward& forward);

  std::vector<HookEntry> hooks_;
  CallWrapper call_wrapper_;
  std::vector<std::shared_ptr<ModuleAttachment>> attachments_;
  StateDictOverride state_dict_override_;
  LoadStateDictOverride load_state_dict_override_;
  StateShapesOverride state_shapes_override_;
  std::string path_;
  bool training_ = true;
  int next_hook_handle_ = 0;
};

// Checks `state` against the expected names and shapes of a module's state dict and throws
// one ValueError listing missing keys, unexpected keys and shape mismatches together.
// Shape mismatches always fail; missing and unexpected keys only when strict.
void check_state_dict_match(const std::vector<std::pair<std::string, Shape>>& expected, const StateDict& state,
                            bool strict, const std::string& what);
// The same on names and shapes alone (`found`: a safetensors file's header, say).
void check_state_dict_match(const std::vector<std::pair<std::string, Shape>>& expected,
                            const std::vector<std::pair<std::string, Shape>>& found, bool strict,
                            const std::string& what);

// "Block" for a class tessera::models::Block<float> or a local class Block: the class's own
// name, as type_name() gives it by default.
std::string class_name_of(const std::type_info& type);

// PyTorch's repr: "Net(\n  (fc1): Linear(in_features=784, ...)\n ...)", children indented
// by two spaces per level; a module's extra_repr comes first, on its own line when it has
// children.
std::string repr(const Module& module);
std::ostream& operator<<(std::ostream& out, const Module& module);

}  // namespace tessera::nn
