#include "tessera/nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <ostream>
#include <map>
#include <set>
#include <sstream>

#include "tessera/autograd/grad_mode.h"
#include "tessera/tensor/native.h"

namespace tessera::nn {

namespace {

// A deferred copy of `tensor` with another dtype or device: still no memory, same rule.
Tensor redeferred(const Tensor& tensor, DType dtype, Device device) {
  PendingInit pending = *tensor.storage()->pending();
  pending.dtype = dtype;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(tensor.numel()) * element_size(dtype), device, pending);
  impl->sizes = tensor.sizes();
  impl->strides = contiguous_strides(tensor.sizes());
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool is_deferred(const Tensor& t) { return t.defined() && t.storage()->is_deferred(); }

}  // namespace

Tensor Module::deferred_parameter(const Shape& shape, const InitRule& rule, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  // Keyed by the default generator's seed, so ts::manual_seed(s) before building a model
  // sets its initialisation, as in PyTorch (reset_parameters re-keys it later).
  PendingInit pending{rule, dtype, "", initial_seed()};
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * element_size(dtype),
                                            Device::cpu(), std::move(pending));
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Module::operator()(Tensor input) {
  std::vector<Tensor> inputs;
  inputs.push_back(std::move(input));
  return call(std::move(inputs), [this](std::vector<Tensor>& x) { return std::vector<Tensor>{forward(std::move(x[0]))}; })
      .front();
}

std::vector<Tensor> Module::call(std::vector<Tensor> inputs, const CallForward& forward) {
  TS_CHECK(!inputs.empty(), ValueError, type_name(), " '", path_, "': a call needs at least one tensor argument");
  if (!call_wrapper_) return call_with_hooks(std::move(inputs), forward);
  TS_CHECK(inputs.size() == 1, ValueError, type_name(), " '", path_,
           "' has a call wrapper (activation checkpointing), which takes one tensor, but this call passes ",
           inputs.size(), "; checkpoint a module that holds it and is called with one tensor");
  // Captured by value: checkpointing runs the call again in backward, after this returns.
  Tensor output = call_wrapper_(*this, std::move(inputs.front()), [this, forward](Tensor x) {
    std::vector<Tensor> args;
    args.push_back(std::move(x));
    std::vector<Tensor> outputs = call_with_hooks(std::move(args), forward);
    TS_CHECK(outputs.size() == 1, ValueError, type_name(), " '", path_,
             "' has a call wrapper (activation checkpointing), which returns one tensor, but this call returns ",
             outputs.size(), "; checkpoint a module that holds it and returns one tensor");
    return outputs.front();
  });
  return {std::move(output)};
}

std::vector<Tensor> Module::call_with_hooks(std::vector<Tensor> inputs, const CallForward& forward) {
  for (HookEntry& h : hooks_) {
    if (h.pre) h.pre(*this, inputs.front());
    if (h.pre_args) h.pre_args(*this, std::span<Tensor>(inputs));
  }
  std::vector<Tensor> outputs = forward(inputs);
  TS_CHECK(!outputs.empty(), Error, type_name(), " '", path_, "': its forward returned no tensor");
  for (HookEntry& h : hooks_) {
    if (h.post) h.post(*this, outputs.front());
    if (h.post_outputs) h.post_outputs(*this, std::span<Tensor>(outputs));
  }
  return outputs;
}

Tensor Module::forward(Tensor) {
  throw Error(detail::concat(type_name(), " '", path_, "' has no forward(Tensor); call its own call operator"));
}

void Module::check_new_name(const std::string& name, const char* what) const {
  TS_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, "register_", what,
           ": invalid name '", name, "' (must be non-empty and contain no '.')");
  auto taken = [&](const auto& entries) {
    return std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.name == name; });
  };
  TS_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), ValueError, "register_", what, ": '",
           qualified(name), "' is already registered in this ", type_name());
}

void Module::register_parameter(const std::string& name, Tensor& slot, bool requires_grad) {
  check_new_name(name, "parameter");
  if (slot.defined()) {
    if (requires_grad) slot.requires_grad_(true);
    if (is_deferred(slot)) slot.storage()->pending()->key = qualified(name);
  }
  parameters_.push_back({name, &slot, false, is_deferred(slot)});
}

void Module::register_buffer(const std::string& name, Tensor& slot, bool persistent) {
  check_new_name(name, "buffer");
  buffers_.push_back({name, &slot, persistent});
}

void Module::register_module(const std::string& name, Module& child) {
  check_new_name(name, "module");
  TS_CHECK(&child != this, ValueError, "register_module: a module cannot be its own child ('", name, "')");
  children_.push_back({name, &child});
  child.set_path(qualified(name));
}

void Module::register_modules(std::initializer_list<std::pair<std::string, std::reference_wrapper<Module>>> children) {
  for (const auto& [name, child] : children) register_module(name, child.get());
}

void Module::set_path(const std::string& path) {
  path_ = path;
  for (ParameterEntry& p : parameters_) {
    if (is_deferred(*p.slot)) p.slot->storage()->pending()->key = qualified(p.name);
  }
  for (ChildEntry& c : children_) c.module->set_path(qualified(c.name));
}

void Module::collect_named(const std::string& prefix, bool recurse, bool want_parameters, bool persistent_only,
                           std::vector<std::pair<std::string, Tensor>>& out) const {
  if (want_parameters) {
    for (const ParameterEntry& p : parameters_) {
      if (!p.hidden && p.slot->defined()) out.emplace_back(prefix + p.name, *p.slot);
    }
  } else {
    for (const BufferEntry& b : buffers_) {
      if (b.slot->defined() && (b.persistent || !persistent_only)) out.emplace_back(prefix + b.name, *b.slot);
    }
  }
  if (!recurse) return;
  for (const ChildEntry& c : children_) {
    c.module->collect_named(prefix + c.name + ".", true, want_parameters, persistent_only, out);
  }
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect_named("", recurse, true, false, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect_named("", recurse, false, false, out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (const ChildEntry& c : children_) out.push_back(c.module);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const ChildEntry& c : children_) out.emplace_back(c.name, c.module);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::vector<std::pair<std::string, Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [name, module] = stack.back();
    stack.pop_back();
    out.emplace_back(name, module);
    for (auto it = module->children_.rbegin(); it != module->children_.rend(); ++it) {
      stack.emplace_back(name.empty() ? it->name : name + "." + it->name, it->module);
    }
  }
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (auto& [name, module] : named_modules()) out.push_back(module);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (ChildEntry& c : children_) c.module->apply(fn);
  fn(*this);
  return *this;
}

void Module::train(bool on) {
  training_ = on;
  for (ChildEntry& c : children_) c.module->train(on);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      grad.zero_();
    }
  }
}

namespace {

// Converts the tensor in `slot` in place (identity kept), deferred ones without memory.
void convert_slot(Tensor& slot, DType dtype, Device device) {
  if (!slot.defined()) return;
  if (slot.dtype() == dtype && slot.device() == device) return;
  NoGradGuard no_grad;
  Tensor converted = is_deferred(slot) ? redeferred(slot, dtype, device)
                                       : native::contiguous(native::to_device(native::to_dtype(slot, dtype), device));
  slot.set_data(converted);
  Tensor grad = slot.grad();
  if (grad.defined()) slot.set_grad(native::to_device(native::to_dtype(grad, dtype), device));
}

}  // namespace

Module& Module::to(Device device) {
  for (Module* m : modules()) {
    for (ParameterEntry& p : m->parameters_) convert_slot(*p.slot, p.slot->defined() ? p.slot->dtype() : DType::f32, device);
    for (BufferEntry& b : m->buffers_) convert_slot(*b.slot, b.slot->defined() ? b.slot->dtype() : DType::f32, device);
  }
  return *this;
}

Module& Module::to(DType dtype) {
  TS_CHECK(is_floating(dtype), DTypeError, "Module::to: expected a floating dtype, got ", dtype_name(dtype));
  for (Module* m : modules()) {
    for (ParameterEntry& p : m->parameters_) {
      if (p.slot->defined() && is_floating(p.slot->dtype())) convert_slot(*p.slot, dtype, p.slot->device());
    }
    for (BufferEntry& b : m->buffers_) {
      if (b.slot->defined() && is_floating(b.slot->dtype())) convert_slot(*b.slot, dtype, b.slot->device());
    }
  }
  return *this;
}

void Module::reset_parameters(uint64_t seed) {
  for (Module* m : modules()) {
    for (ParameterEntry& p : m->parameters_) {
      Tensor& slot = *p.slot;
      if (!slot.defined() || !p.from_rule) continue;  // values the user gave stay as they are
      TS_CHECK(is_deferred(slot), ValueError, "reset_parameters: '", m->qualified(p.name),
               "' already holds values (it was used or loaded); call reset_parameters before first use");
      slot.storage()->pending()->seed = seed;
    }
  }
}

void Module::collect_state(const std::string& prefix, StateDict& out) {
  for (const ParameterEntry& p : parameters_) {
    if (p.slot->defined()) out.insert(prefix + p.name, p.slot->detach());
  }
  for (const BufferEntry& b : buffers_) {
    if (b.slot->defined() && b.persistent) out.insert(prefix + b.name, b.slot->detach());
  }
  for (ChildEntry& c : children_) c.module->collect_state(prefix + c.name + ".", out);
}

StateDict Module::state_dict() {
  if (state_dict_override_) return state_dict_override_(*this);
  StateDict out;
  collect_state("", out);
  return out;
}

void check_state_dict_match(const std::vector<std::pair<std::string, Shape>>& expected,
                            const std::vector<std::pair<std::string, Shape>>& found, bool strict,
                            const std::string& what) {
  std::vector<std::string> missing, unexpected, mismatched;
  std::map<std::string, const Shape*> found_shapes;
  for (const auto& [name, shape] : found) found_shapes.emplace(name, &shape);
  std::set<std::string> known;
  for (const auto& [name, shape] : expected) {
    known.insert(name);
    auto it = found_shapes.find(name);
    if (it == found_shapes.end()) {
      missing.push_back(name);
    } else if (*it->second != shape) {
      mismatched.push_back(name + ": checkpoint " + shape_str(*it->second) + ", model " + shape_str(shape));
    }
  }
  for (const auto& [name, shape] : found) {
    if (known.count(name) == 0) unexpected.push_back(name);
  }
  if (mismatched.empty() && (!strict || (missing.empty() && unexpected.empty()))) return;
  std::ostringstream message;
  message << "load_state_dict: the state does not match this " << what << ".";
  auto list = [&](const char* title, const std::vector<std::string>& names) {
    if (names.empty()) return;
    message << "\n  " << title << ":";
    for (const std::string& n : names) message << "\n    " << n;
  };
  list("missing keys", missing);
  list("unexpected keys", unexpected);
  list("shape mismatches", mismatched);
  throw ValueError(message.str());
}

void check_state_dict_match(const std::vector<std::pair<std::string, Shape>>& expected, const StateDict& state,
                            bool strict, const std::string& what) {
  std::vector<std::pair<std::string, Shape>> found;
  for (const auto& [name, tensor] : state) found.emplace_back(name, tensor.sizes());
  check_state_dict_match(expected, found, strict, what);
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  if (load_state_dict_override_) {
    load_state_dict_override_(*this, state, strict);
    return;
  }
  std::vector<std::pair<std::string, Tensor*>> slots = state_slots();
  check_state_dict_match(state_shapes(), state, strict, type_name());
  // Copy into the registered tensors (their identity is kept, as optimizers hold them).
  NoGradGuard no_grad;
  for (auto& [name, target] : slots) {
    if (!state.contains(name)) continue;
    Tensor& slot = *target;
    if (is_deferred(slot)) slot.storage()->resize(slot.storage()->nbytes());  // allocate without filling
    native::copy_(slot, state.at(name));
  }
}

std::vector<std::pair<std::string, Shape>> Module::state_shapes() {
  if (state_shapes_override_) return state_shapes_override_(*this);
  std::vector<std::pair<std::string, Shape>> shapes;
  for (auto& [name, slot] : state_slots()) shapes.emplace_back(name, slot->sizes());
  return shapes;
}

std::vector<std::pair<std::string, Tensor*>> Module::state_slots() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& [prefix, m] : named_modules()) {
    std::string dotted = prefix.empty() ? "" : prefix + ".";
    for (ParameterEntry& p : m->parameters_) {
      if (p.slot->defined()) out.emplace_back(dotted + p.name, p.slot);
    }
    for (BufferEntry& b : m->buffers_) {
      if (b.slot->defined() && b.persistent) out.emplace_back(dotted + b.name, b.slot);
    }
  }
  return out;
}

int Module::register_forward_pre_hook(ForwardPreHook hook) {
  int handle = next_hook_handle_++;
  hooks_.push_back({handle, std::move(hook), nullptr, nullptr, nullptr});
  return handle;
}

int Module::register_forward_hook(ForwardHook hook) {
  int handle = next_hook_handle_++;
  hooks_.push_back({handle, nullptr, std::move(hook), nullptr, nullptr});
  return handle;
}

int Module::register_forward_args_pre_hook(ForwardArgsPreHook hook) {
  int handle = next_hook_handle_++;
  hooks_.push_back({handle, nullptr, nullptr, std::move(hook), nullptr});
  return handle;
}

int Module::register_forward_outputs_hook(ForwardOutputsHook hook) {
  int handle = next_hook_handle_++;
  hooks_.push_back({handle, nullptr, nullptr, nullptr, std::move(hook)});
  return handle;
}

void Module::remove_hook(int handle) {
  std::erase_if(hooks_, [handle](const HookEntry& h) { return h.handle == handle; });
}

void Module::set_state_dict_override(StateDictOverride state_dict, LoadStateDictOverride load,
                                     StateShapesOverride shapes) {
  state_dict_override_ = std::move(state_dict);
  load_state_dict_override_ = std::move(load);
  state_shapes_override_ = std::move(shapes);
}

Tensor& Module::hide_parameter(const std::string& name) {
  for (ParameterEntry& p : parameters_) {
    if (p.name == name) {
      p.hidden = true;
      return *p.slot;
    }
  }
  throw ValueError(detail::concat("hide_parameter: ", type_name(), " '", path_, "' has no parameter '", name, "'"));
}

std::vector<std::pair<std::string, Tensor*>> Module::parameter_slots() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (ParameterEntry& p : parameters_) out.emplace_back(p.name, p.slot);
  return out;
}

std::string class_name_of(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : type.name();
  std::free(demangled);
  // Without template arguments, then without namespaces and enclosing functions
  // ("f()::Net", "(anonymous namespace)::Net").
  name = name.substr(0, name.find('<'));
  const size_t last = name.rfind("::");
  return last == std::string::npos ? name : name.substr(last + 2);
}

std::string Module::type_name() const { return class_name_of(typeid(*this)); }

namespace {

// Every line after the first indented by `spaces` (PyTorch's _addindent).
std::string indent_continuation(const std::string& text, size_t spaces) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out.append(spaces, ' ');
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  if (text.empty()) return lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

// torch.nn.Module.__repr__: the extra_repr's lines, then "(name): child" per child; one
// line inside the parentheses when there is a single extra line and no child.
std::string repr(const Module& module) {
  std::vector<std::string> lines = split_lines(module.extra_repr());
  const size_t extra_lines = lines.size();
  for (auto& [name, child] : module.named_children()) {
    lines.push_back("(" + name + "): " + indent_continuation(repr(*child), 2));
  }
  std::string out = module.type_name() + "(";
  if (extra_lines == 1 && lines.size() == 1) {
    out += lines[0];
  } else if (!lines.empty()) {
    for (const std::string& line : lines) out += "\n  " + line;
    out += "\n";
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& out, const Module& module) { return out << repr(module); }

}  // namespace tessera::nn
