// libFuzzer target: a sharded checkpoint's metadata.json and its validation (manifest,
// files, ranges, tiling, CRC lists). The harness re-signs JSON objects with a correct
// "metadata_crc32c", so the fuzzer reaches the checks behind the CRC; anything that passes
// them is read back (reading fails on the missing rank files, which must be an error too).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <tessera/tessera.h>

namespace {

const std::string& directory() {
  static const std::string path = [] {
    std::string dir = (std::filesystem::temp_directory_path() / ("tessera-fuzz-metadata-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir);
    return dir;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace json = tessera::io::json;
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    json::Value value = json::parse(text);
    if (value.is_object()) {
      json::Object members = value.as_object();
      if (!members.empty() && members.back().first == "metadata_crc32c") members.pop_back();
      text = tessera::checkpoint::write_with_crc(json::Value(std::move(members)));
    }
  } catch (const tessera::Error&) {
  }
  std::ofstream(directory() + "/metadata.json", std::ios::binary | std::ios::trunc) << text;
  try {
    tessera::checkpoint::ShardedCheckpoint checkpoint(directory());
    for (size_t u = 0; u < checkpoint.manifest().units.size(); ++u) {
      const auto& unit = checkpoint.manifest().units[u];
      if (unit.flat_numel > 0 && unit.flat_numel < (1 << 20)) (void)checkpoint.slice(u, "", 0, unit.flat_numel);
    }
  } catch (const tessera::Error&) {
  }
  return 0;
}
