#include "tessera/checkpoint/finite.h"

#include "tessera/tensor/finite_scan.h"
#include "tessera/tensor/native.h"

namespace tessera::checkpoint::detail {

namespace {

std::string value_text(double value) { return value != value ? "nan" : (value > 0 ? "inf" : "-inf"); }

}  // namespace

int64_t first_non_finite(const Tensor& values) {
  if (values.numel() == 0) return -1;
  return native::first_non_finite(values.data_ptr(), values.numel(), values.dtype());
}

std::string non_finite_message(const UnitRecord& unit, int64_t flat_index, double value, int rank) {
  std::string what = tessera::detail::concat("the gap at flat element ", flat_index, " of unit '", unit.name, "'");
  for (const fsdp::FlatEntry& entry : unit.parameters) {
    if (flat_index >= entry.offset && flat_index < entry.offset + entry.numel) {
      what = tessera::detail::concat("parameter '", entry.name, "' (unit '", unit.name, "') holds ", value_text(value),
                                     " at element ", flat_index - entry.offset, " of its ", entry.numel);
      break;
    }
  }
  return tessera::detail::concat("rank ", rank, ": ", what,
                                 ": refusing to save non-finite state (the run diverged?); "
                                 "CheckpointManagerOptions::allow_non_finite saves it anyway");
}

std::string non_finite_buffer_message(const std::string& name, int64_t index, double value) {
  return tessera::detail::concat("rank 0: buffer '", name, "' holds ", value_text(value), " at element ", index,
                                 ": refusing to save non-finite state (the run diverged?); "
                                 "CheckpointManagerOptions::allow_non_finite saves it anyway");
}

std::optional<std::string> find_non_finite(const ModelSource& source, int rank) {
  const Manifest& manifest = source.manifest();
  // The index of the first non-finite element of `values` (read on the host), or -1.
  auto first_bad = [](Tensor& values) {
    if (!values.device().is_cpu()) values = native::to_device(values, Device::cpu());
    values = native::contiguous(values);
    return first_non_finite(values);
  };
  auto element = [](const Tensor& values, int64_t index) {
    return native::narrow(values, 0, index, 1).to(DType::f64).item<double>();
  };
  for (size_t u = 0; u < manifest.units.size(); ++u) {
    const UnitRecord& unit = manifest.units[u];
    const fsdp::ElementRange range = source.written(u);
    Tensor parameter = source.shard_slice(u, "", range.begin, range.size());
    if (const int64_t bad = first_bad(parameter); bad >= 0) {
      return non_finite_message(unit, range.begin + bad, element(parameter, bad), rank);
    }
  }
  if (rank != 0) return std::nullopt;
  for (const BufferRecord& buffer : manifest.buffers) {
    Tensor values = native::view(source.buffer(buffer.name), {-1});
    if (const int64_t bad = first_bad(values); bad >= 0) {
      return non_finite_buffer_message(buffer.name, bad, element(values, bad));
    }
  }
  return std::nullopt;
}

}  // namespace tessera::checkpoint::detail
