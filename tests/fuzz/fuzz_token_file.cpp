// libFuzzer target: llm.c token files (header checked against the file's length, tokens
// mapped) through the TokenDataset, every window read. Any input must load or throw a
// tessera::Error.
#include <tessera/tessera.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tessera::data::TokenDataset dataset(fuzz::as_file(data, size), {.seq_len = 3, .vocab_size = 50257});
    std::vector<int64_t> all(static_cast<size_t>(dataset.size()));
    for (int64_t i = 0; i < dataset.size(); ++i) all[static_cast<size_t>(i)] = i;
    (void)dataset.get_batch(all);
  } catch (const tessera::Error&) {
  }
  return 0;
}
