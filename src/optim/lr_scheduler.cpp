// The LRScheduler base, following torch.optim.lr_scheduler._LRScheduler (torch 1.13):
// initial_lr and base_lrs, the initial step, step() and step(epoch), the state dict.
#include "tessera/optim/lr_scheduler.h"

#include <cmath>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::optim {
namespace {

Tensor integer_tensor(int64_t value) {
  Tensor out = full({}, 0.0, {.dtype = DType::i64});
  out.data_ptr<int64_t>()[0] = value;  // exact beyond 2^53
  return out;
}

Tensor doubles_tensor(const std::vector<double>& values) {
  return tensor<double>(values, {static_cast<int64_t>(values.size())});
}

// A float64 vector of `count` values under `key`.
std::vector<double> doubles_at(const StateDict& state, const std::string& key, size_t count, const std::string& where) {
  TS_CHECK(state.contains(key), ValueError, where, ": missing key '", key, "'");
  const Tensor& value = state.at(key);
  TS_CHECK(value.dim() == 1 && is_floating(value.dtype()) && value.numel() == static_cast<int64_t>(count), ValueError,
           where, ": '", key, "' should hold ", count, " floating values (one per parameter group), got ", value.str());
  return value.to(DType::f64).to_vector<double>();
}

}  // namespace

void LRScheduler::start(int64_t last_epoch, std::vector<Setting> settings) {
  const std::string where = type_name();
  settings_ = std::move(settings);
  check_settings(where);
  TS_CHECK(last_epoch >= -1, ValueError, where, ": last_epoch must be -1 (a new schedule) or an epoch, got ",
           last_epoch);
  const size_t groups = optimizer_.param_group_count();
  for (size_t g = 0; g < groups; ++g) {
    if (last_epoch == -1) {
      if (!optimizer_.initial_lr(g)) optimizer_.set_initial_lr(g, optimizer_.lr(g));
    } else {
      TS_CHECK(optimizer_.initial_lr(g).has_value(), ValueError, where, ": param 'initial_lr' is not specified in ",
               "param_groups[", g, "] when resuming an optimizer (build the schedule with last_epoch = -1, or ",
               "load the optimizer's state_dict first)");
    }
    base_lrs_.push_back(*optimizer_.initial_lr(g));
  }
  last_epoch_ = last_epoch;
  initial_step();
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

template <class Rate>
void LRScheduler::apply(Rate rate) {
  const size_t groups = optimizer_.param_group_count();
  TS_CHECK(groups == base_lrs_.size(), ValueError, type_name(), ": the optimizer has ", groups,
           " parameter groups, but the schedule was built for ", base_lrs_.size());
  std::vector<double> lrs;
  for (size_t g = 0; g < groups; ++g) lrs.push_back(rate(g));
  for (size_t g = 0; g < groups; ++g) optimizer_.set_lr(g, lrs[g]);
  last_lr_ = current_lrs();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply([this](size_t group) { return get_lr(group, optimizer_.lr(group)); });
}

void LRScheduler::step_to(int64_t epoch) {
  ++step_count_;
  last_epoch_ = epoch;
  apply([this](size_t group) { return closed_form_lr(group); });
}

void LRScheduler::check_settings(const std::string& where) const {
  for (const Setting& setting : settings_) {
    const std::string& name = setting.name;
    std::visit(
        [&](const auto* member) {
          const auto value = *member;  // an int64_t or a double
          const auto number = static_cast<double>(value);
          switch (setting.range) {
            case Range::positive:
              TS_CHECK(number > 0.0, ValueError, where, ": ", name, " must be positive, got ", value);
              break;
            case Range::non_negative:
              TS_CHECK(std::isfinite(number) && number >= 0.0, ValueError, where, ": ", name,
                       " must be finite and >= 0, got ", value);
              break;
            case Range::unit_interval:
              TS_CHECK(number >= 0.0 && number <= 1.0, ValueError, where, ": ", name, " ", value, " must be in [0, 1]");
              break;
            case Range::positive_unit_interval:
              TS_CHECK(number > 0.0 && number <= 1.0, ValueError, where, ": ", name, " ", value, " must be in (0, 1]");
              break;
          }
        },
        setting.member);
  }
}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> lrs;
  for (size_t g = 0; g < optimizer_.param_group_count(); ++g) lrs.push_back(optimizer_.lr(g));
  return lrs;
}

StateDict LRScheduler::state_dict() const {
  StateDict out = settings_dict();
  out.insert("base_lrs", doubles_tensor(base_lrs_));
  out.insert("last_epoch", integer_tensor(last_epoch_));
  out.insert("_step_count", integer_tensor(step_count_));
  out.insert("_last_lr", doubles_tensor(last_lr_));
  return out;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  const std::string where = type_name() + ".load_state_dict";
  const StateDict expected = state_dict();
  for (const auto& [key, value] : state) {
    TS_CHECK(expected.contains(key), ValueError, where, ": unexpected key '", key, "'");
  }
  const size_t groups = base_lrs_.size();
  std::vector<double> base_lrs = doubles_at(state, "base_lrs", groups, where);
  std::vector<double> last_lr = doubles_at(state, "_last_lr", groups, where);
  const int64_t last_epoch = integer_at(state, "last_epoch", where);
  const int64_t step_count = integer_at(state, "_step_count", where);
  TS_CHECK(last_epoch >= -1 && step_count >= 0, ValueError, where, ": last_epoch ", last_epoch, " and _step_count ",
           step_count, " are out of range");
  load_settings(state, where);  // leaves the settings as they were when it throws; the rest cannot fail
  base_lrs_ = std::move(base_lrs);
  last_lr_ = std::move(last_lr);
  last_epoch_ = last_epoch;
  step_count_ = step_count;
}

StateDict LRScheduler::settings_dict() const {
  StateDict out;
  for (const Setting& setting : settings_) {
    if (const auto* integer = std::get_if<int64_t*>(&setting.member)) {
      out.insert(setting.name, integer_tensor(**integer));
    } else {
      out.insert(setting.name, full({}, *std::get<double*>(setting.member), {.dtype = DType::f64}));
    }
  }
  return out;
}

void LRScheduler::load_settings(const StateDict& state, const std::string& where) {
  using Value = std::variant<int64_t, double>;
  const auto read = [](const Setting& setting) -> Value {
    if (const auto* integer = std::get_if<int64_t*>(&setting.member)) return **integer;
    return *std::get<double*>(setting.member);
  };
  const auto write = [](const Setting& setting, const Value& value) {
    if (const auto* integer = std::get_if<int64_t*>(&setting.member)) {
      **integer = std::get<int64_t>(value);
    } else {
      *std::get<double*>(setting.member) = std::get<double>(value);
    }
  };
  std::vector<Value> loaded, previous;
  for (const Setting& setting : settings_) {
    previous.push_back(read(setting));
    if (std::holds_alternative<int64_t*>(setting.member)) {
      loaded.emplace_back(integer_at(state, setting.name, where));
    } else {
      loaded.emplace_back(number_at(state, setting.name, where));
    }
  }
  for (size_t i = 0; i < settings_.size(); ++i) write(settings_[i], loaded[i]);
  try {
    check_settings(where);
  } catch (...) {
    for (size_t i = 0; i < settings_.size(); ++i) write(settings_[i], previous[i]);
    throw;
  }
}

int64_t LRScheduler::integer_at(const StateDict& state, const std::string& key, const std::string& where) {
  TS_CHECK(state.contains(key), ValueError, where, ": missing key '", key, "'");
  const Tensor& value = state.at(key);
  TS_CHECK(value.numel() == 1, ValueError, where, ": '", key, "' should hold one value, got ", value.str());
  if (value.dtype() == DType::i64) return value.item<int64_t>();
  const double number = value.item<double>();
  TS_CHECK(std::abs(number) < 0x1p62 && number == std::trunc(number), ValueError, where, ": '", key,
           "' should be an integer, got ", number);
  return static_cast<int64_t>(number);
}

double LRScheduler::number_at(const StateDict& state, const std::string& key, const std::string& where) {
  TS_CHECK(state.contains(key), ValueError, where, ": missing key '", key, "'");
  const Tensor& value = state.at(key);
  TS_CHECK(value.numel() == 1, ValueError, where, ": '", key, "' should hold one value, got ", value.str());
  return value.item<double>();
}

}  // namespace tessera::optim
