// Text: GPT-2's byte-level BPE tokenizer and its parts.
//
//   #include <tessera/text/text.h>
//   ts::text::GPT2Tokenizer tokenizer("data/gpt2");    // scripts/get-gpt2-tokenizer fetches it
//   std::vector<int64_t> ids = tokenizer.encode("hello world");
#pragma once

#include "tessera/text/byte_level.h"
#include "tessera/text/gpt2_tokenizer.h"
#include "tessera/text/pre_tokenizer.h"
#include "tessera/text/utf8.h"
