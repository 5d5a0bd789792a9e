// libFuzzer target: GPT-2's tokenizer on any bytes. Encoding must not fail, decode_bytes
// must give the input back exactly, and decode the input with ill-formed UTF-8 replaced.
// Needs the vocabulary: TESSERA_GPT2_DIR, or data/gpt2 (scripts/get-gpt2-tokenizer).
#include <tessera/tessera.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tessera::text::GPT2Tokenizer tokenizer = [] {
    const char* dir = std::getenv("TESSERA_GPT2_DIR");
    try {
      return tessera::text::GPT2Tokenizer(dir != nullptr ? dir : "data/gpt2");
    } catch (const tessera::Error& error) {
      std::fprintf(stderr, "fuzz_gpt2_tokenizer: %s\n", error.what());
      std::exit(1);
    }
  }();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::vector<int64_t> tokens = tokenizer.encode(bytes);
  if (tokenizer.decode_bytes(tokens) != bytes) __builtin_trap();
  if (tokenizer.decode(tokens) != tessera::text::replace_invalid_utf8(bytes)) __builtin_trap();
  return 0;
}
