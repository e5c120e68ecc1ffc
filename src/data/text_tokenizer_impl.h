// What a TextTokenizer (include/looplm/looplm.h) holds: the library's tokenizer.
#pragma once
#include "data/tokenizer.h"
#include "looplm/looplm.h"

namespace looplm {

struct TextTokenizer::Impl {
  Tokenizer tok;
};

}  // namespace looplm
