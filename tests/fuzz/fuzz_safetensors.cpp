// libFuzzer target: the safetensors reader (header length, JSON header, entries, offsets,
// overlaps) and reads of what it accepts. Any input must either load or throw a
// tessera::Error; a crash, sanitizer report, hang or huge allocation is a bug.
#include <tessera/tessera.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tessera::io::SafetensorsFile file(fuzz::as_file(data, size));
    for (const tessera::io::TensorEntry& entry : file.entries()) {
      if (entry.nbytes() <= (1u << 20)) (void)file.read(entry.name);
      if (entry.numel() > 0) (void)file.read_slice(entry.name, entry.numel() - 1, 1);
    }
  } catch (const tessera::Error&) {
  }
  return 0;
}
