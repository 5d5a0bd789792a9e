// Memory limits per device, the sizes they are written in, and the refusal's message.
#include "tessera/tensor/memory_limit.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "tessera/tensor/allocator.h"

namespace tessera {

namespace {

// The registered holder reports. Never destroyed: an allocation may be refused while
// static objects are being torn down.
struct HolderRegistry {
  std::mutex mutex;
  std::map<int, MemoryHolderReport> reports;
  int next_handle = 0;
};

HolderRegistry& holder_registry() {
  static auto* registry = new HolderRegistry();
  return *registry;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

constexpr size_t kListedHolders = 6;

}  // namespace

void set_memory_limit(Device device, int64_t bytes) {
  TS_CHECK(bytes > 0, ValueError, "set_memory_limit: the limit for ", device.str(), " must be positive, got ", bytes,
           " bytes; clear_memory_limit(", device.str(), ") removes it");
  allocator_for(device).set_limit(bytes);
}

void clear_memory_limit(Device device) { allocator_for(device).set_limit(Allocator::kNoLimit); }

std::optional<int64_t> memory_limit(Device device) {
  const int64_t limit = allocator_for(device).limit();
  if (limit == Allocator::kNoLimit) return std::nullopt;
  return limit;
}

MemoryLimitGuard::MemoryLimitGuard(Device device, std::optional<int64_t> bytes)
    : device_(device), previous_(memory_limit(device)) {
  if (bytes) {
    set_memory_limit(device, *bytes);
  } else {
    clear_memory_limit(device);
  }
}

MemoryLimitGuard::~MemoryLimitGuard() {
  allocator_for(device_).set_limit(previous_.value_or(Allocator::kNoLimit));
}

int64_t parse_memory_size(std::string_view text, std::string_view what) {
  auto refuse = [&]() -> int64_t {
    throw ValueError(detail::concat(what, ": '", text,
                                    "' is not a memory size; write a number of bytes with an optional unit: B, KiB, "
                                    "MiB, GiB, TiB (powers of 1024) or kB, MB, GB, TB (powers of 1000), e.g. 2.5GiB"));
  };
  // Digits with an optional fraction, read as written: no sign, exponent, hexadecimal
  // ("0x10", which strtod would take as 16) or leading space.
  const size_t digits = std::min(text.find_first_not_of("0123456789."), text.size());
  const std::string_view written = text.substr(0, digits);
  if (written.empty() || written.find('.') != written.rfind('.') || written == ".") return refuse();
  double number = 0;
  const auto [end, status] = std::from_chars(written.data(), written.data() + written.size(), number,
                                             std::chars_format::fixed);
  if (status != std::errc() || end != written.data() + written.size() || !std::isfinite(number) || number <= 0) {
    return refuse();
  }
  std::string_view rest = text.substr(digits);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  static const std::map<std::string, double> units = {
      {"", 1.0},         {"b", 1.0},          {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0},
      {"tib", 1099511627776.0}, {"kb", 1e3},  {"mb", 1e6},     {"gb", 1e9},        {"tb", 1e12}};
  auto unit = units.find(lower(rest));
  if (unit == units.end()) return refuse();
  const double bytes = std::round(number * unit->second);
  if (bytes < 1 || bytes > 9.2e18) return refuse();
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
  const double magnitude = std::abs(static_cast<double>(bytes));
  if (magnitude < 1024) return detail::concat(bytes, " bytes");
  static const char* const names[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (std::abs(value) >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, names[unit]);
  return text;
}

MemoryHolderRegistration::MemoryHolderRegistration(MemoryHolderReport report) {
  HolderRegistry& registry = holder_registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  handle_ = registry.next_handle++;
  registry.reports.emplace(handle_, std::move(report));
}

MemoryHolderRegistration::~MemoryHolderRegistration() {
  HolderRegistry& registry = holder_registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.reports.erase(handle_);
}

namespace detail {

void throw_over_limit(Device device, int64_t request, int64_t limit, int64_t in_use, int64_t held) {
  std::vector<MemoryHolder> holders;
  {
    HolderRegistry& registry = holder_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (auto& [handle, report] : registry.reports) {
      try {
        report(device, holders);
      } catch (...) {  // a report that fails must not replace the refusal itself
      }
    }
  }
  std::stable_sort(holders.begin(), holders.end(),
                   [](const MemoryHolder& a, const MemoryHolder& b) { return a.bytes > b.bytes; });
  std::string message = concat("out of memory on ", device.str(), ": a request of ", format_bytes(request), " (",
                               request, " bytes) would exceed the memory limit of ", format_bytes(limit), " (", limit,
                               " bytes); ", format_bytes(in_use), " (", in_use, " bytes) are in use by tensors");
  if (held > in_use) message += concat(", ", format_bytes(held), " held from the system");
  message += " (the limit: set_memory_limit, TESSERA_MEMORY_LIMIT or --memory-limit)";
  if (!holders.empty()) {
    message += ". Largest holders known: ";
    for (size_t i = 0; i < holders.size() && i < kListedHolders; ++i) {
      message += concat(i > 0 ? "; " : "", holders[i].what, " ", format_bytes(holders[i].bytes));
    }
    if (holders.size() > kListedHolders) message += concat("; and ", holders.size() - kListedHolders, " more");
  }
  throw OutOfMemoryError(message);
}

std::optional<int64_t> memory_limit_from_environment() {
  const char* value = std::getenv("TESSERA_MEMORY_LIMIT");
  if (value == nullptr || *value == '\0') return std::nullopt;
  return parse_memory_size(value, "TESSERA_MEMORY_LIMIT");
}

}  // namespace detail

}  // namespace tessera
