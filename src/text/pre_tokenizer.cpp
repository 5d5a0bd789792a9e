// PCRE2 runs the pattern over each well-formed stretch of the text, one match after the
// other; the stretch was validated once here, so PCRE2 is told not to validate it again
// (it would otherwise re-check from the start offset on every call: quadratic time).
#include "tessera/text/pre_tokenizer.h"

#include "tessera/config.h"
#include "tessera/tensor/error.h"
#include "tessera/text/utf8.h"

#if TESSERA_HAS_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace tessera::text {

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
                                      R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

#if TESSERA_HAS_PCRE2

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR text[256];
  return pcre2_get_error_message(code, text, sizeof text) < 0 ? "unknown PCRE2 error"
                                                              : reinterpret_cast<const char*>(text);
}

struct MatchData {
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (data == nullptr) throw Error("PreTokenizer: PCRE2 could not allocate its match data");
  }
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* data;
};

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;

  Compiled() {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2SplitPattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                         &error, &error_offset, nullptr);
    if (code == nullptr) {
      throw Error(detail::concat("PreTokenizer: PCRE2 rejects the pattern at offset ", error_offset, ": ",
                                 pcre2_message(error)));
    }
    // Without JIT (a platform PCRE2 has none for) the interpreter gives the same matches, slower.
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Compiled() { pcre2_code_free(code); }
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;

  // Splits a stretch of well-formed UTF-8.
  void split_valid(std::string_view text, MatchData& match,
                   const std::function<void(std::string_view)>& on_piece) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset < text.size()) {
      const int rc = jit ? pcre2_jit_match(code, subject, text.size(), offset, 0, match.data, nullptr)
                         : pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, match.data, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw Error(detail::concat("PreTokenizer: PCRE2 failed at byte ", offset, ": ", pcre2_message(rc)));
      const PCRE2_SIZE* bounds = pcre2_get_ovector_pointer(match.data);
      // Every character is a letter, a digit, whitespace or none of these, so each match
      // starts where the last one ended and is not empty; were it not so, the bytes
      // skipped would still be kept as a piece.
      if (bounds[0] > offset) on_piece(text.substr(offset, bounds[0] - offset));
      if (bounds[1] == bounds[0]) {
        offset = bounds[0];
        break;
      }
      on_piece(text.substr(bounds[0], bounds[1] - bounds[0]));
      offset = bounds[1];
    }
    if (offset < text.size()) on_piece(text.substr(offset));
  }
};

PreTokenizer::PreTokenizer() : compiled_(std::make_shared<const Compiled>()) {}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& on_piece) const {
  MatchData match(compiled_->code);
  size_t offset = 0;
  while (offset < text.size()) {
    const size_t valid = valid_utf8_prefix(text.substr(offset));
    if (valid > 0) compiled_->split_valid(text.substr(offset, valid), match, on_piece);
    offset += valid;
    if (offset == text.size()) break;
    const size_t invalid = decode_utf8(text.substr(offset)).length;
    on_piece(text.substr(offset, invalid));
    offset += invalid;
  }
}

#else

struct PreTokenizer::Compiled {};

PreTokenizer::PreTokenizer() {
  throw NotCompiledError(
      "text::PreTokenizer: Tessera was built without PCRE2, which runs GPT-2's pre-tokenizer pattern "
      "(install Debian's libpcre2-dev and reconfigure)");
}

void PreTokenizer::split(std::string_view, const std::function<void(std::string_view)>&) const {}

#endif

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string> PreTokenizer::pieces(std::string_view text) const {
  std::vector<std::string> result;
  split(text, [&](std::string_view piece) { result.emplace_back(piece); });
  return result;
}

}  // namespace tessera::text
