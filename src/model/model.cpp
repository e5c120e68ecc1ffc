#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/components.h"

namespace looplm {

void Model::build(ParamStore& ps) {
  const Config& c = cfg_;
  const Registries& reg = registries();
  const BlockFactory& make_block = reg.blocks.get(c.block, "block").make;
  const int64_t V = c.vocab_size, d = c.d_model;
  tok_emb_ = ps.add("tok_emb.weight", {V, d}, matrix_init(c));
  if (c.pos == "learned") pos_emb_ = ps.add("pos_emb.weight", {(int64_t)c.context, d}, matrix_init(c));
  for (int i = 0; i < c.n_prelude; ++i) prelude_.push_back(make_block(ps, "prelude." + std::to_string(i), c));
  for (int i = 0; i < c.n_core; ++i) core_.push_back(make_block(ps, "core." + std::to_string(i), c));
  for (int i = 0; i < c.n_coda; ++i) coda_.push_back(make_block(ps, "coda." + std::to_string(i), c));
  rule_ = reg.loop_rules.get(c.loop_rule, "loop_rule").make(ps, c);
  // The exit gate (any rule): w ~ N(0, init_std), b = 0, so λ starts near 1/2 at every exit.
  if (c.exit_gate) {
    gate_w_ = ps.add("loop.exit_gate.weight", {1, d}, Init::normal(c.init_std));
    gate_b_ = ps.add("loop.exit_gate.bias", {1}, Init::zeros());
  }
  norm_f_ = std::make_unique<Norm>(ps, "norm_f", c);
  if (!c.tie_embeddings) {
    lm_head_w_ = ps.add("lm_head.weight", {V, d}, matrix_init(c));
    if (c.bias) lm_head_b_ = ps.add("lm_head.bias", {V}, Init::zeros());
  }
}

std::vector<ParamInfo> Model::layout(const Config& c) {
  c.validate();
  Model m(c, ParamStorage{}, /*layout_only=*/0);
  return m.ps_.infos();
}

Model::Model(const Config& c, ParamStorage storage, int) : cfg_(c) { build(ps_); }

Model::Model(const Config& c, ParamStorage storage) : cfg_(c) {
  cfg_.validate();
  build(ps_);
  if (storage.external) ps_.attach(storage.external, std::move(storage.owner));
  else ps_.allocate(storage.grads);

  E_ = ps_.view(tok_emb_);
  P_ = pos_emb_ >= 0 ? ps_.view(pos_emb_) : nullptr;
  for (auto* sec : {&prelude_, &core_, &coda_})
    for (auto& b : *sec) b->bind(ps_);
  rule_->bind(ps_);
  if (gate_w_ >= 0) gate_W_ = ps_.view(gate_w_), gate_B_ = ps_.view(gate_b_);
  norm_f_->bind(ps_);
  Wlm_ = ps_.matrix(lm_head_w_ >= 0 ? lm_head_w_ : tok_emb_);
  if (lm_head_w_ < 0) Wlm_->read_as_values = true;  // tied: the embedding lookups read its rows
  blm_ = lm_head_b_ >= 0 ? ps_.view(lm_head_b_) : nullptr;
  if (cfg_.pos == "rope") rope_ = std::make_unique<RopeTable>(cfg_.context, cfg_.head_dim(), cfg_.rope_base);
}

// A run of blocks (prelude, one application of the core, coda). Without gradients each block's
// activations are given back as soon as it is done: its output is copied into one of two buffers
// made for the run, and the arena is rewound to where the block began. So a forward pass without
// gradients holds one block's activations at a time, whatever the depth.
Node* Model::run_blocks(Graph& g, const std::vector<std::unique_ptr<Block>>& blocks, int first_index, int step,
                        Node* x, int B, int T, const RunOptions& o) const {
  Node* buf[2] = {nullptr, nullptr};
  int next = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int index = first_index + (int)i;
    const BlockCtx bc = ctx(B, T, o, index, step > 0 ? step - 1 : 0);
    Graph::At at(g, index, step);
    if (g.grad_enabled()) {
      x = blocks[i]->forward(g, x, bc);
      continue;
    }
    if (!buf[0]) {
      buf[0] = g.node(x->rows, x->cols, false);
      buf[1] = g.node(x->rows, x->cols, false);
    }
    const Graph::Mark m = g.mark();
    Node* y = blocks[i]->forward(g, x, bc);
    Node* kept = buf[next];
    next ^= 1;
    std::memcpy(kept->v, y->v, sizeof(float) * y->numel());
    g.rewind(m);
    x = kept;
  }
  return x;
}

BlockCtx Model::ctx(int B, int T, const RunOptions& o, int block, int step) const {
  BlockCtx c;
  c.B = B;
  c.T = T;
  if (rope_) c.rope = rope_->angles();
  c.place = o.place;
  if (o.cache) c.cache = o.cache->slot(block, block >= cfg_.n_prelude + cfg_.n_core ? o.coda_step : step);
  return c;
}

namespace {
LoopCtx loop_ctx(const Config& c, const RunOptions& o) {
  LoopCtx lc;
  lc.training = o.training;
  lc.seed = c.seed;
  lc.step = o.step;
  lc.micro = o.micro;
  return lc;
}
}  // namespace

Node* Model::embed(Graph& g, const int32_t* tokens, int B, int T, const RunOptions& o) const {
  Node* x = op::embedding(g, tokens, B * T, E_, P_, T, o.place);
  // emb_scale · x as (s − 1)·x + x: the axpby op, whose backward sums both paths into x
  if (cfg_.emb_scale != 1.0) x = op::axpby(g, (float)(cfg_.emb_scale - 1.0), x, x);
  return run_blocks(g, prelude_, 0, 0, x, B, T, o);
}

Node* Model::init_state(Graph& g, Node* h_pre, int T, const RunOptions& o) const {
  LoopCtx lc = loop_ctx(cfg_, o);
  lc.T = T;
  lc.place = o.place;
  return rule_->init_state(g, h_pre, lc);
}

Node* Model::loop_step(Graph& g, Node* state, Node* h_pre, int r, int B, int T, const RunOptions& o) const {
  CoreFn core = [&, r](Graph& gg, Node* x) { return run_blocks(gg, core_, cfg_.n_prelude, r, x, B, T, o); };
  Graph::At at(g, -1, r);
  return rule_->step(g, state, h_pre, r, core, loop_ctx(cfg_, o));
}

Node* Model::trunk(Graph& g, const int32_t* tokens, int B, int T, const RunOptions& o,
                   const std::function<void(int, Node*)>& on_exit) const {
  const int depth = cfg_.depth_or_R(o.depth);
  const bool no_grad = !g.grad_enabled();
  const int keep = (no_grad || o.grad_steps < 0) ? depth : std::min(o.grad_steps, depth);

  Node* h_pre = embed(g, tokens, B, T, o);
  Node* state = init_state(g, h_pre, T, o);

  // The exit of step r: readout, the "state" tap, the caller's callback.
  auto exit = [&](int r, Node* s) {
    if (!on_exit && !g.observing()) return;
    Graph::At at(g, -1, r);
    Node* h = rule_->readout(g, s);
    g.tap("state", h);
    if (on_exit) on_exit(r, h);
  };
  {
    const Graph::Mark m = g.mark();
    exit(0, state);
    if (no_grad) g.rewind(m);
  }

  // A step without gradients keeps only its output state: it is copied into one of two buffers
  // made before the first such step, and everything else the step (and its exit) allocated is
  // given back. So depth costs no memory where nothing is kept for backward.
  Node* buf[2] = {nullptr, nullptr};
  int next_buf = 0;
  for (int r = 1; r <= depth; ++r) {
    if (!no_grad && r > depth - keep) {  // keeps gradients
      state = loop_step(g, state, h_pre, r, B, T, o);
      exit(r, state);
      continue;
    }
    if (!buf[0]) {
      buf[0] = g.node(state->rows, state->cols, false);
      buf[1] = g.node(state->rows, state->cols, false);
    }
    Graph::NoGrad ng(g);
    const Graph::Mark m = g.mark();
    Node* out = loop_step(g, state, h_pre, r, B, T, o);
    LOOPLM_ASSERT(out->rows == buf[0]->rows && out->cols == buf[0]->cols, "a loop rule changed its state's shape");
    Node* kept = buf[next_buf];
    next_buf ^= 1;
    std::memcpy(kept->v, out->v, sizeof(float) * out->numel());
    exit(r, kept);
    g.rewind(m);
    state = kept;
  }
  Graph::At at(g, -1, depth);
  return rule_->readout(g, state);
}

Node* Model::head(Graph& g, Node* h, int B, int T, const RunOptions& o, Node** final_hidden) const {
  Node* x = this->final_hidden(g, h, B, T, o);
  if (final_hidden) *final_hidden = x;
  return lm_head(g, x);
}

Node* Model::final_hidden(Graph& g, Node* h, int B, int T, const RunOptions& o) const {
  h = run_blocks(g, coda_, cfg_.n_prelude + cfg_.n_core, 0, h, B, T, o);
  Graph::At at(g, -1, 0);
  return (*norm_f_)(g, h);
}

Node* Model::lm_head(Graph& g, Node* x) const {
  Graph::At at(g, -1, 0);
  g.tap("lm_head.in", x);
  return linear(g, x, *Wlm_, blm_);
}

Node* Model::head_loss(Graph& g, Node* x, const int32_t* targets) const {
  Graph::At at(g, -1, 0);
  return op::head_token_loss(g, x, Wlm_->node, blm_, targets);
}

Node* Model::exit_gate_logit(Graph& g, Node* final_hidden) const {
  if (gate_w_ < 0) return nullptr;
  Graph::At at(g, -1, 0);
  return op::linear(g, final_hidden, gate_W_, gate_B_);
}

Node* Model::exit_gate(Graph& g, Node* final_hidden) const {
  Node* z = exit_gate_logit(g, final_hidden);
  return z ? op::sigmoid(g, z) : nullptr;
}

Model::FlopParts Model::flop_parts() const {
  FlopParts f;
  const int T = cfg_.context;
  for (auto& b : prelude_) f.prelude += b->flops_per_token(T);
  for (auto& b : core_) f.core += b->flops_per_token(T);
  for (auto& b : coda_) f.coda += b->flops_per_token(T);
  f.rule = rule_->flops_per_token();
  f.head = head_flops_per_token();
  return f;
}

int64_t Model::kv_width() const {
  int64_t w = 0;
  for (auto* sec : {&prelude_, &core_, &coda_})
    for (auto& b : *sec) w = std::max(w, b->kv_width(cfg_));
  return w;
}

bool Model::diagnoses_input() const {
  for (auto* sec : {&prelude_, &core_, &coda_})
    for (auto& b : *sec)
      if (b->diagnoses_input()) return true;
  return false;
}

double Model::flops_per_token(int depth) const {
  const FlopParts f = flop_parts();
  return f.prelude + depth * (f.core + f.rule) + f.coda + f.head;
}

std::unique_ptr<Model> Model::skeleton(const Config& c) {
  c.validate();
  return std::unique_ptr<Model>(new Model(c, ParamStorage{}, /*layout_only=*/0));
}

}  // namespace looplm
