#include "infer/decoder.h"

#include "core/choices.h"
#include "core/threads.h"
#include "io/json_input.h"

#include <algorithm>
#include <cstring>

#include "looplm/error.h"
#include "looplm/util.h"

namespace looplm {

namespace {

const Choices<op::KvElem, 3> kKvCaches{
    "KV cache",
    {{op::KvElem::f32, "fp32", "keys and values as computed (exact)"},
     {op::KvElem::bf16, "bf16", "keys and values rounded to bf16 (half the bytes each attention pass reads)"},
     {op::KvElem::i8, "int8", "keys and values as int8 codes with an fp32 scale per position and head"}}};

// Exits when tokens exit early (or drafts exit at draft_depth): one coda slot per exit, since the
// coda reads the exit's state.
int coda_slots(const DecoderOptions& o) {
  return (o.exit.rule != ExitRule::fixed || o.draft_depth > 0) && o.depth >= 1 ? o.depth : 1;
}

// Rows row_of(0), .., row_of(count − 1) of x as a new node [count, cols]: the lm_head's (and the
// exit gate's) input for the rows whose logits are read.
template <class RowOf>
Node* gather_rows(Graph& g, const Node* x, int count, RowOf row_of) {
  Node* y = g.node(count, x->cols, false);
  for (int e = 0; e < count; ++e)
    std::memcpy(y->v + (int64_t)e * x->cols, x->v + (int64_t)row_of(e) * x->cols, sizeof(float) * x->cols);
  return y;
}
}  // namespace

op::KvElem kv_element(const std::string& kv_cache) { return kKvCaches.parse(kv_cache); }
std::vector<std::string> available_kv_caches() { return kKvCaches.names(); }

int Decoder::thread_cap(int rows, double token_flops) const {
  static const WeightFormat* const fp32 = find_weight_format("fp32");  // unpacked: the values in place
  const WeightFormat* f = m_.params().packed_format() ? m_.params().packed_format() : fp32;
  return rows * token_flops < f->serial_decode_flops ? 1 : 0;
}

Decoder::Decoder(const Model& m, int sequences, int capacity, const DecoderOptions& o)
    : m_(m),
      o_(o),
      token_flops_(m.flops_per_token(o.depth)),
      draft_flops_(m.flops_per_token(o.draft_depth)),
      cache_(m.config(), sequences, capacity, std::max(o.depth, 1), m.kv_width(), coda_slots(o),
             o.policy, o.kv),
      tracker_(o.exit, std::max(o.depth, 0), 0, m.config().vocab_size, m.config().d_model),
      len_(sequences, 0),
      exits_(std::max(o.depth, 0) + 1, 0) {
  LOOPLM_ASSERT(sequences >= 1 && capacity >= 1 && o.depth >= 0, "Decoder: bad shape");
  if (o.exit.rule == ExitRule::gate && !m.has_exit_gate())
    throw UsageError("--exit-rule gate needs a model with a learned exit gate (loop.exit_gate, as Ouro has); this one has none");
  LOOPLM_ASSERT(o.draft_depth == 0 || (o.draft_depth < o.depth && o.exit.rule == ExitRule::fixed),
                "Decoder: a draft depth needs 1 <= draft_depth < depth and no early exit");
}

RunOptions Decoder::at(const int& seq, int from, int depth) {
  RunOptions o;
  o.depth = depth;
  o.cache = &cache_;
  o.place.pos0 = from;
  o.place.rows = &seq;
  return o;
}

void Decoder::keep(int steps_run, int64_t positions) {
  kept_floats_ += (double)positions * cache_.slots_per_position(steps_run, o_.depth, exiting()) * 2 * m_.kv_width();
  kept_positions_ += positions;
}

void Decoder::run_full(int seq, int from, const int32_t* ids, int n, float* logits, bool all) {
  const int V = m_.config().vocab_size;
  g_.reset();
  Graph::NoGrad ng(g_);
  RunOptions o = at(seq, from, o_.depth);
  const int64_t first = all ? 0 : n - 1;
  const int d = m_.config().d_model;
  // The lm_head runs only on the rows whose logits are read: a prompt's last token (a large
  // vocabulary's head over every prompt row would be a good part of the pass), every fed token
  // when verifying drafts.
  auto last_row = [&](Node* x) { return gather_rows(g_, x, 1, [&](int) { return n - 1; }); };
  auto read_rows = [&](Node* x) { return first == 0 ? x : last_row(x); };
  if (exiting() || o_.draft_depth > 0) {
    // Every exit's coda keys and values the later tokens read (every exit with early exit; the
    // draft's and the last with drafts); the next token comes from the last one's own exit.
    if (exiting()) tracker_.reset(1);  // the last token's
    m_.trunk(g_, ids, 1, n, o, [&](int r, Node* hr) {
      if (r == 0 || (!exiting() && r != o_.draft_depth && r != o_.depth)) return;
      o.coda_step = r - 1;
      Node* final_hidden = m_.final_hidden(g_, hr, 1, n, o);  // every row: the coda's cache at this exit
      if (!exiting()) {
        if (r == o_.depth) std::memcpy(logits, m_.lm_head(g_, read_rows(final_hidden))->v, sizeof(float) * (n - first) * V);
        return;
      }
      if (tracker_.exit_step(0) != 0) return;
      Node* last = last_row(final_hidden);
      Node* z = m_.lm_head(g_, last);
      const float* lambda = o_.exit.rule == ExitRule::gate ? m_.exit_gate(g_, last)->v : nullptr;
      if (!tracker_.step(r, z->v, hr->v + (int64_t)(n - 1) * d, lambda).empty()) std::memcpy(logits, z->v, sizeof(float) * V);
    });
  } else {
    Node* h = m_.trunk(g_, ids, 1, n, o);
    std::memcpy(logits, m_.lm_head(g_, read_rows(m_.final_hidden(g_, h, 1, n, o)))->v, sizeof(float) * (n - first) * V);
  }
  g_.reset();
  len_[seq] = from + n;
  keep(o_.depth, n);
}

void Decoder::prefill(int seq, const int32_t* ids, int n, float* logits) {
  LOOPLM_ASSERT(seq >= 0 && seq < (int)len_.size() && n >= 1 && n <= capacity(), "Decoder::prefill: bad sequence or length");
  run_full(seq, 0, ids, n, logits, false);
}

void Decoder::draft(int seq, int32_t token, float* logits) {
  LOOPLM_ASSERT(o_.draft_depth > 0 && len_[seq] < capacity(), "Decoder::draft: no draft depth, or the cache is full");
  ThreadCap cap(thread_cap(1, draft_flops_));
  const int d = m_.config().d_model, pos = len_[seq];
  g_.reset();
  Graph::NoGrad ng(g_);
  RunOptions o = at(seq, pos, o_.draft_depth);  // the first draft_depth steps: their cache slots are the full model's
  o.coda_step = o_.draft_depth - 1;
  // Model::logits at draft_depth, step by step so that the state after the last step is kept
  Node* h_pre = m_.embed(g_, &token, 1, 1, o);
  Node* state = m_.init_state(g_, h_pre, 1, o);
  for (int r = 1; r <= o_.draft_depth; ++r) state = m_.loop_step(g_, state, h_pre, r, 1, 1, o);
  loop_passes_ += o_.draft_depth;
  Node* z = m_.lm_head(g_, m_.final_hidden(g_, m_.readout(g_, state), 1, 1, o));
  std::memcpy(logits, z->v, sizeof(float) * m_.config().vocab_size);
  if (drafted_ == 0 || pos != draft_from_ + drafted_) {  // the first draft of a round
    draft_from_ = pos;
    drafted_ = 0;
  }
  const int64_t S = state->cols;
  draft_state_.resize((size_t)(drafted_ + 1) * S);
  draft_h_pre_.resize((size_t)(drafted_ + 1) * d);
  std::memcpy(draft_state_.data() + drafted_ * S, state->v, sizeof(float) * S);
  std::memcpy(draft_h_pre_.data() + (int64_t)drafted_ * d, h_pre->v, sizeof(float) * d);
  ++drafted_;
  g_.reset();
  ++len_[seq];
}

void Decoder::verify_drafts(int seq, int from, int n, float* logits) {
  LOOPLM_ASSERT(o_.draft_depth > 0 && seq >= 0 && seq < (int)len_.size() && n >= 1 && from == draft_from_ && n <= drafted_,
                "Decoder::verify_drafts: these positions were not drafted");
  const int d = m_.config().d_model, V = m_.config().vocab_size;
  const int64_t S = (int64_t)draft_state_.size() / drafted_;
  g_.reset();
  Graph::NoGrad ng(g_);
  RunOptions o = at(seq, from, o_.depth);
  o.coda_step = o_.depth - 1;
  // The n drafted positions as one sequence of n tokens (Model::trunk's layout from this step on)
  Node* state = g_.node(n, S, false);
  Node* h_pre = g_.node(n, d, false);
  std::memcpy(state->v, draft_state_.data(), sizeof(float) * n * S);
  std::memcpy(h_pre->v, draft_h_pre_.data(), sizeof(float) * n * d);
  for (int r = o_.draft_depth + 1; r <= o_.depth; ++r) state = m_.loop_step(g_, state, h_pre, r, 1, n, o);
  loop_passes_ += o_.depth - o_.draft_depth;
  Node* z = m_.lm_head(g_, m_.final_hidden(g_, m_.readout(g_, state), 1, n, o));
  std::memcpy(logits, z->v, sizeof(float) * n * V);
  g_.reset();
  len_[seq] = from + n;
  drafted_ = 0;
  keep(o_.depth, n);
}

void Decoder::decode(const int* seqs, const int32_t* tokens, int n, float* logits, int* steps) {
  const Config& c = m_.config();
  const int V = c.vocab_size, d = c.d_model;
  pos_.resize(n);
  for (int i = 0; i < n; ++i) {
    LOOPLM_ASSERT(seqs[i] >= 0 && seqs[i] < (int)len_.size(), "Decoder::decode: no such sequence");
    LOOPLM_ASSERT(len_[seqs[i]] < capacity(), "Decoder::decode: the sequence's cache is full");
    pos_[i] = len_[seqs[i]];
  }
  ThreadCap cap(thread_cap(n, token_flops_));
  g_.reset();
  Graph::NoGrad ng(g_);
  RunOptions o;
  o.depth = o_.depth;
  o.cache = &cache_;
  o.place.pos = pos_.data();
  o.place.rows = seqs;

  if (!exiting()) {  // every token runs the depth: one pass
    Node* z = m_.logits(g_, tokens, n, 1, o);
    std::memcpy(logits, z->v, sizeof(float) * n * V);
    g_.reset();
    for (int i = 0; i < n; ++i) ++len_[seqs[i]];
    if (steps) std::fill(steps, steps + n, o_.depth);
    decoded_ += n;
    loop_passes_ += o_.depth;
    steps_ += (int64_t)n * o_.depth;
    exits_[o_.depth] += n;
    keep(o_.depth, n);
    return;
  }

  // Early exit: the rows still running are gathered into each step's batch; a row's loop state
  // and h_pre live here between steps (one row per token, LoopRule). This loop iterates steps
  // beside Model::trunk on purpose: what a step computes is the model's (embed, init_state,
  // loop_step, readout, head: the loop rule's equations in one place), but here the batch shrinks
  // as tokens exit and the graph is cleared every step, while trunk runs a fixed batch through the
  // training memory plan (gradient-keeping steps, two reused state buffers). Folding this into
  // trunk would put row gathering into every training step.
  Node* hp = m_.embed(g_, tokens, n, 1, o);
  Node* s0 = m_.init_state(g_, hp, 1, o);
  const int64_t S = s0->cols;
  state_.assign(s0->v, s0->v + n * S);
  h_pre_.assign(hp->v, hp->v + (int64_t)n * d);
  z_.assign((size_t)n * V, 0.0f);
  h_.assign((size_t)n * d, 0.0f);
  gate_.assign((size_t)n, 0.0f);
  active_row_.assign((size_t)n, 0);
  const bool every_step_logits = rule_needs_logits(o_.exit.rule);
  ExitTracker& tracker = tracker_;
  tracker.reset(n);
  active_.resize(n);
  for (int i = 0; i < n; ++i) active_[i] = i;
  for (int r = 1; r <= o_.depth && !active_.empty(); ++r) {
    const int na = (int)active_.size();
    act_seq_.resize(na);
    act_pos_.resize(na);
    g_.reset();
    Node* st = g_.node(na, S, false);
    Node* hpa = g_.node(na, d, false);
    for (int a = 0; a < na; ++a) {
      const int i = active_[a];
      act_seq_[a] = seqs[i];
      act_pos_[a] = pos_[i];
      std::memcpy(st->v + a * S, state_.data() + i * S, sizeof(float) * S);
      std::memcpy(hpa->v + (int64_t)a * d, h_pre_.data() + (int64_t)i * d, sizeof(float) * d);
    }
    RunOptions oa = o;
    oa.place.pos = act_pos_.data();
    oa.place.rows = act_seq_.data();
    oa.coda_step = r - 1;
    Node* next = m_.loop_step(g_, st, hpa, r, na, 1, oa);
    ++loop_passes_;
    computed_steps_ += na;
    Node* h = m_.readout(g_, next);
    // The coda runs at every step (its cache slots for this step are what later tokens exiting
    // here attend to); the lm_head only where the rule reads logits (kl, entropy) or, for the
    // gate and latent rules, on the rows that exit (below): a large vocabulary's head is a loop
    // step's worth of weight bytes at small widths, and ~8% of one at Ouro's.
    Node* final_hidden = m_.final_hidden(g_, h, na, 1, oa);
    Node* z = every_step_logits ? m_.lm_head(g_, final_hidden) : nullptr;
    Node* lambda = o_.exit.rule == ExitRule::gate ? m_.exit_gate(g_, final_hidden) : nullptr;
    for (int a = 0; a < na; ++a) {
      const int i = active_[a];
      if (lambda) gate_[i] = lambda->v[a];
      std::memcpy(state_.data() + i * S, next->v + a * S, sizeof(float) * S);
      if (z) std::memcpy(z_.data() + (int64_t)i * V, z->v + (int64_t)a * V, sizeof(float) * V);
      std::memcpy(h_.data() + (int64_t)i * d, h->v + (int64_t)a * d, sizeof(float) * d);
      active_row_[i] = a;
    }
    const std::vector<int64_t>& exiting = tracker.step(r, z ? z_.data() : nullptr, h_.data(), lambda ? gate_.data() : nullptr);
    if (!z && !exiting.empty()) {  // the exiting rows' final hidden states through the lm_head
      const int ne = (int)exiting.size();
      Node* ze = m_.lm_head(g_, gather_rows(g_, final_hidden, ne, [&](int e) { return active_row_[exiting[e]]; }));
      for (int e = 0; e < ne; ++e) std::memcpy(z_.data() + exiting[e] * V, ze->v + (int64_t)e * V, sizeof(float) * V);
    }
    for (int64_t i : exiting) {
      std::memcpy(logits + i * V, z_.data() + i * V, sizeof(float) * V);
      if (steps) steps[i] = r;
      steps_ += r;
      exits_[r] += 1;
      keep(r, 1);
      cache_.token_exited(seqs[i], pos_[i], r, o_.depth);
    }
    if (!cache_.exited_tokens_keep_running())
      active_.erase(std::remove_if(active_.begin(), active_.end(), [&](int i) { return tracker.exit_step(i) != 0; }),
                    active_.end());
  }
  g_.reset();
  for (int i = 0; i < n; ++i) ++len_[seqs[i]];
  decoded_ += n;
}

}  // namespace looplm
