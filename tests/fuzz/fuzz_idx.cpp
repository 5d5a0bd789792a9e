// libFuzzer target: the IDX reader (raw and gzip-compressed; header fields checked against
// the length of what follows). Any input must load or throw a tessera::Error.
#include <tessera/tessera.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)tessera::data::read_idx(fuzz::as_file(data, size));
  } catch (const tessera::Error&) {
  }
  return 0;
}
