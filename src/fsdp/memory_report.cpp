// Per-rank memory and communication figures of a sharded model, and its unit layout.
#include <sstream>

#include "tessera/fsdp/state.h"

namespace tessera::fsdp {

MemoryReport memory_report(nn::Module& root) {
  detail::FsdpState& state = detail::state_of(root);
  MemoryReport report;
  report.rank = state.group().rank();
  report.world_size = state.group().size();
  report.units = static_cast<int>(state.units().size());
  report.offloaded = state.options().offload_policy.has_value();
  for (auto& unit : state.units()) {
    const FlatLayout& layout = unit->layout();
    int64_t element_bytes = static_cast<int64_t>(element_size(layout.dtype()));
    report.parameter_shard_bytes += unit->shard().numel() * element_bytes;
    if (unit->shard().grad().defined()) report.gradient_shard_bytes += unit->shard().grad().numel() * element_bytes;
    ElementRange range = layout.shard_range(unit->sharded() ? report.rank : 0);
    int64_t used = std::max<int64_t>(0, std::min(range.end, layout.flat_numel()) - range.begin);
    report.padding_elements += range.size() - used;
    report.largest_unit_bytes = std::max(report.largest_unit_bytes, layout.padded_numel() * element_bytes);
    report.post_forward_shard_bytes += unit->post_forward_shard_bytes();
  }
  const detail::Counters& c = state.counters();
  report.unsharded_parameter_bytes = c.parameter_bytes;
  report.peak_unsharded_parameter_bytes = c.peak_parameter_bytes;
  report.unsharded_gradient_bytes = c.gradient_bytes;
  report.peak_unsharded_gradient_bytes = c.peak_gradient_bytes;
  report.peak_unsharded_bytes = c.peak_total_bytes;
  report.all_gathered_bytes = c.all_gathered_bytes;
  report.reduce_scattered_bytes = c.reduce_scattered_bytes;
  report.all_gathers = c.all_gathers;
  report.reduce_scatters = c.reduce_scatters;
  report.all_reduced_bytes = c.all_reduced_bytes;
  report.all_reduces = c.all_reduces;
  if (dist::ProcessGroup* replicas = state.replica_group()) {
    report.replicas = replicas->size();
    report.replica = replicas->rank();
  }
  report.replica_all_reduced_bytes = c.replica_all_reduced_bytes;
  report.replica_all_reduces = c.replica_all_reduces;
  if (const dist::ProcessGroup* post_forward = state.post_forward_group()) report.post_forward_group_size = post_forward->size();
  report.post_forward_all_gathered_bytes = c.post_forward_all_gathered_bytes;
  report.post_forward_all_gathers = c.post_forward_all_gathers;
  return report;
}

std::vector<UnitInfo> units(nn::Module& root) {
  std::vector<UnitInfo> out;
  detail::FsdpState& state = detail::state_of(root);
  for (auto& unit : state.units()) {
    ElementRange range = unit->layout().shard_range(unit->sharded() ? state.group().rank() : 0);
    out.push_back({unit->name(), unit->layout(), range, unit->shard()});
  }
  return out;
}

void reset_peak_unsharded(nn::Module& root) {
  detail::state_of(root).counters().reset_peaks();
}

std::string MemoryReport::str() const {
  auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  std::ostringstream out;
  out.precision(3);
  out << std::fixed;
  out << "FSDP rank " << rank << "/" << world_size;
  if (replicas > 1) out << " of replica " << replica << "/" << replicas;
  out << ": " << units << " units; shards " << mib(parameter_shard_bytes)
      << " MiB params + " << mib(gradient_shard_bytes) << " MiB grads (" << padding_elements
      << " padding elements)" << (offloaded ? " offloaded to the host" : "") << "; unsharded peak "
      << mib(peak_unsharded_parameter_bytes) << " MiB params + "
      << mib(peak_unsharded_gradient_bytes) << " MiB grads (largest unit " << mib(largest_unit_bytes) << " MiB); ";
  // Each collective under its own name: units kept whole all-reduce their gradients
  // (NO_SHARD's), sharded units all-gather and reduce-scatter.
  const int64_t scattered_bytes = reduce_scattered_bytes - all_reduced_bytes;
  const int64_t scatters = reduce_scatters - all_reduces;
  const bool sharded_units = all_gathers > 0 || scatters > 0 || all_reduces == 0;
  if (sharded_units) {
    out << "all-gathered " << mib(all_gathered_bytes) << " MiB in " << all_gathers << ", reduce-scattered "
        << mib(scattered_bytes) << " MiB in " << scatters;
    if (post_forward_group_size > 1) {
      out << " (of the all-gathers, " << post_forward_all_gathers << " of " << mib(post_forward_all_gathered_bytes)
          << " MiB within " << post_forward_group_size << "-rank post-forward groups)";
    }
  }
  if (all_reduces > 0) {
    out << (sharded_units ? ", " : "") << "all-reduced " << mib(all_reduced_bytes) << " MiB in " << all_reduces;
  }
  if (world_size == 1) out << (sharded_units ? " (one rank: nothing sent)" : " (one rank: NO_SHARD, nothing sent)");
  if (replicas > 1) {
    out << "; across " << replicas << " replicas: all-reduced " << mib(replica_all_reduced_bytes) << " MiB in "
        << replica_all_reduces;
  }
  return out.str();
}

}  // namespace tessera::fsdp
