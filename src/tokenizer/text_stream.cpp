#include "tokenizer/text_stream.h"

#include <algorithm>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/hf_unicode.h"

namespace looplm {

namespace {
constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

TextStreamer::TextStreamer(const Tokenizer& tok, Options o) : tok_(tok), o_(std::move(o)) {
  std::erase(o_.stop, std::string());
  if (tok_.hf()) {
    plan_ = &tok_.hf()->stream_plan();
    if (o_.at_start && plan_->piecewise) strip_left_ = plan_->strip_start;
  }
}

std::string TextStreamer::push(int32_t id) {
  if (stopped_) return {};
  if (plan_ && !plan_->piecewise) {
    // The whole text decoded again: a trailing U+FFFD may be a character whose bytes are still
    // coming, and text that changed before what was given out waits until it agrees again.
    ids_.push_back(id);
    const std::string full = tok_.decode(ids_);
    size_t end = full.size();
    while (end >= 3 && full.compare(end - 3, 3, kReplacement) == 0) end -= 3;
    if (end < whole_.size() || full.compare(0, whole_.size(), whole_) != 0) return {};
    std::string chunk = full.substr(whole_.size(), end - whole_.size());
    whole_.assign(full, 0, end);
    return release(std::move(chunk), false);
  }
  std::string bytes;
  bool is_byte = false;
  if (plan_) tok_.hf()->append_piece(id, o_.at_start && first_, bytes, &is_byte);
  else bytes = tok_.decode_one(id);
  first_ = false;
  return release(text_of_bytes(bytes, is_byte, false), false);
}

std::string TextStreamer::finish() {
  if (stopped_) return {};
  if (plan_ && !plan_->piecewise) {
    const std::string full = ids_.empty() ? std::string() : tok_.decode(ids_);
    std::string rest = full.compare(0, whole_.size(), whole_) == 0 ? full.substr(whole_.size()) : std::string();
    whole_ = full;
    return release(std::move(rest), true);
  }
  return release(text_of_bytes({}, false, true), true);
}

// The text `bytes` completes (whole characters), keeping an unfinished character or an open
// ByteFallback run for later; `last` flushes them as decode would end the text.
std::string TextStreamer::text_of_bytes(const std::string& bytes, bool is_byte_token, bool last) {
  std::string out;
  if (plan_ && plan_->byte_fallback) {
    if (is_byte_token) {
      run_ += bytes;
      if (!last) return out;
    }
    if (!run_.empty()) {
      if (hf::invalid_utf8_at(run_) == std::string::npos) out += run_;
      else
        for (size_t i = 0; i < run_.size(); ++i) out += kReplacement;
      run_.clear();
    }
    if (!is_byte_token) out += bytes;  // a token's own string: UTF-8 already
    return out;
  }
  raw_ += bytes;
  const size_t keep = last ? 0 : hf::utf8_pending_tail(raw_);
  const std::string_view ready = std::string_view(raw_).substr(0, raw_.size() - keep);
  // A Hugging Face decoder repairs invalid UTF-8 (ByteLevel: U+FFFD per ill-formed subpart); the
  // byte tokenizer's decode gives the bytes as they are, and so does its stream.
  out = plan_ ? hf::utf8_lossy(ready) : std::string(ready);
  raw_.erase(0, raw_.size() - keep);
  return out;
}

// Whole characters into the text: the start's strip, the stop strings, and the tail held back
// while it may begin one (or, with a strip at the end, may be stripped).
std::string TextStreamer::release(std::string chunk, bool last) {
  if (strip_left_ > 0 && !chunk.empty()) {
    const std::string& s = plan_->strip;
    size_t b = 0;
    while (strip_left_ > 0 && chunk.compare(b, s.size(), s) == 0) b += s.size(), --strip_left_;
    chunk.erase(0, b);
    if (!chunk.empty()) strip_left_ = 0;  // the text has begun
  }
  held_ += chunk;
  size_t cut = std::string::npos;
  for (const std::string& s : o_.stop) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    std::string out = held_.substr(0, cut);
    given_ += out.size();
    held_.clear();
    stopped_ = true;
    return out;
  }
  size_t hold = 0;
  const bool strip_end = plan_ && plan_->piecewise && plan_->strip_stop > 0;
  if (!last) {
    for (const std::string& s : o_.stop)
      for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k)
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    if (strip_end) {  // copies of the strip at the end wait: they go if the text ends there
      const std::string& s = plan_->strip;
      size_t n = 0, e = held_.size();
      while (n < plan_->strip_stop && e >= s.size() && held_.compare(e - s.size(), s.size(), s) == 0) e -= s.size(), ++n;
      hold = std::max(hold, held_.size() - e);
    }
  } else if (strip_end) {
    const std::string& s = plan_->strip;
    for (size_t n = 0; n < plan_->strip_stop && held_.size() >= s.size() &&
                       held_.compare(held_.size() - s.size(), s.size(), s) == 0;
         ++n)
      held_.resize(held_.size() - s.size());
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  given_ += out.size();
  return out;
}

}  // namespace looplm
