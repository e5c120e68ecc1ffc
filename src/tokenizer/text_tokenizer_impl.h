// What a TextTokenizer (include/looplm/looplm.h) holds: the library's tokenizer.
#pragma once
#include "tokenizer/tokenizer.h"
#include "looplm/looplm.h"

namespace looplm {

struct TextTokenizer::Impl {
  Tokenizer tok;
  bool clean_up = false;  // clean_up_tokenization_spaces (TextTokenizer::open reads it)
};

// A public TextStream over `tok` (which must outlive it): tokenizer/text_stream.h does the work.
TextStream make_text_stream(const Tokenizer& tok, const TextStreamOptions& o);

}  // namespace looplm
