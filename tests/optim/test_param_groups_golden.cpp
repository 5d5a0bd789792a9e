// Parameter groups and learning-rate schedulers against PyTorch 1.13, compared with
// tests/optim/data/param_groups_golden.safetensors (make_param_groups_golden.py).
//
// Tolerance: none. Each group's parameters and state after every step, each group's lr, the
// final param_groups of the state dict, and every scheduler's rates and final state dict
// must equal PyTorch's bit for bit: the updates are the single-tensor kernels the plain
// golden test pins down (test_optim_golden.cpp) with each group's scalars, and the
// schedulers evaluate PyTorch's formulas in double in its order. The same configurations
// run fully sharded at 1 to 4 ranks in tests/fsdp/test_fsdp_param_groups.cpp.
#include "param_groups_golden.h"

namespace pg = param_groups_golden;
namespace ts = tessera;
using ts::Tensor;

TEST_CASE("parameter groups match PyTorch 1.13 bit for bit over 6 steps, float32 and float64") {
  const ts::StateDict& file = pg::golden();
  int compared = 0;
  for (const pg::Config& config : pg::configs()) {
    for (const std::string dtype_name : {"f32", "f64"}) {
      CAPTURE(config.name);
      CAPTURE(dtype_name);
      pg::Params params;
      for (const std::string& name : pg::kNames) params[name] = pg::Net::initial(dtype_name, name).requires_grad_();
      pg::Run run = config.make(params);
      const std::string prefix = config.name + "." + dtype_name + ".";
      for (int step = 0; step < pg::kSteps; ++step) {
        CAPTURE(step);
        if (step == run.add_at) run.add_group();
        for (const std::string& name : pg::kNames) {
          params[name].set_grad(file.at("inputs." + dtype_name + ".grad." + std::to_string(step) + "." + name).clone());
        }
        run.optimizer->step();
        if (run.schedule() != nullptr) {
          run.schedule()->step();
          const auto lrs = file.at(prefix + "lr").to_vector<double>();
          const size_t groups = run.optimizer->param_group_count();
          for (size_t g = 0; g < groups; ++g) {
            CHECK(run.optimizer->lr(g) == lrs[static_cast<size_t>(step) * groups + g]);
            CHECK(run.schedule()->get_last_lr()[g] == lrs[static_cast<size_t>(step) * groups + g]);
          }
        }
        const std::string at = prefix + "step" + std::to_string(step) + ".";
        const std::vector<Tensor>& order = run.optimizer->params();
        for (const std::string& name : pg::kNames) {
          CAPTURE(name);
          CHECK(pg::same_bits(params[name].detach(), file.at(at + "param." + name)));
          size_t index = order.size();  // the parameter's index in the optimizer, if it has one yet
          for (size_t i = 0; i < order.size(); ++i) index = order[i].is_same(params[name]) ? i : index;
          size_t expected_states = 0;
          for (const auto& [key, expected] : file) {
            const std::string suffix = "." + name;
            if (key.rfind(at, 0) != 0 || key.size() < suffix.size() ||
                key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) {
              continue;
            }
            const std::string state = key.substr(at.size(), key.size() - at.size() - suffix.size());
            if (state == "param") continue;
            CAPTURE(state);
            ++expected_states;
            REQUIRE(index < order.size());
            REQUIRE(run.optimizer->state(index).contains(state));
            CHECK(pg::same_bits(run.optimizer->state(index).at(state), expected));
            ++compared;
          }
          CHECK((index < order.size() ? run.optimizer->state(index).size() : 0) == expected_states);
        }
      }
      pg::check_param_groups(*run.optimizer, prefix + "param_groups.");
    }
  }
  MESSAGE(compared, " state tensors equal PyTorch's bit for bit");
}

TEST_CASE("schedulers match PyTorch 1.13 bit for bit over 40 steps: rates and state dicts") {
  const ts::StateDict& file = pg::golden();
  for (const auto& [name, build] : pg::schedules()) {
    CAPTURE(name);
    pg::Schedule schedule;
    build(schedule);
    const std::vector<double> expected = file.at("sched." + name + ".lr").to_vector<double>();
    REQUIRE(expected.size() == 2 * (pg::kScheduleSteps + 1));
    int mismatches = 0;
    for (int step = 0; step <= pg::kScheduleSteps; ++step) {
      if (step > 0) schedule.main().step();
      for (size_t g = 0; g < 2; ++g) {
        const double want = expected[static_cast<size_t>(step) * 2 + g];
        mismatches += schedule.main().get_last_lr()[g] != want || schedule.optimizer.lr(g) != want;
      }
    }
    CHECK(mismatches == 0);

    // The state dict: PyTorch's keys in PyTorch's order, and its values.
    const ts::StateDict state = schedule.main().state_dict();
    std::string keys;
    for (const std::string& key : state.keys()) keys += (keys.empty() ? "" : ",") + key;
    CHECK(keys == pg::golden_metadata().at("sched." + name + ".state_keys"));
    for (const auto& [key, value] : state) {
      CAPTURE(key);
      const Tensor& want = file.at("sched." + name + ".state." + key);
      CHECK(pg::same_bits(value.dtype() == ts::DType::i64 ? value : value.to(ts::DType::f64), want));
    }
  }
}

TEST_CASE("a scheduler's state dict resumes the schedule bit for bit in fresh objects") {
  for (const auto& [name, build] : pg::schedules()) {
    CAPTURE(name);
    pg::Schedule original, resumed;
    build(original);
    build(resumed);
    for (int step = 0; step < 13; ++step) original.main().step();
    // As a checkpoint restores them: the optimizer's groups, then the scheduler.
    resumed.optimizer.load_state_dict(original.optimizer.state_dict());
    resumed.main().load_state_dict(original.main().state_dict());
    CHECK(resumed.main().last_epoch() == original.main().last_epoch());
    for (int step = 0; step < 20; ++step) {
      original.main().step();
      resumed.main().step();
      CHECK(resumed.main().get_last_lr() == original.main().get_last_lr());
    }
  }
}
