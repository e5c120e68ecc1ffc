// What ends and steers a generation (include/looplm/looplm.h): the model's own end tokens (a
// converted model's Config::text, or a tokenizer's found by name), stop strings, OpenAI's
// logit_bias; the BOS convention of a prompt; transformers' clean-up of decoded text. Random weights
// of a small looped model: what matters is which tokens come, not what they say.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "data/bpe_trainer.h"
#include "io/atomic_file.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "model/model.h"
#include "model/model_io.h"
#include "parity_fixtures.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace looplm {
namespace {

Config small(int context = 64) {
  Config c = load_preset("looped");
  c.d_model = 32;
  c.n_heads = 2;
  c.context = context;
  c.R = 3;
  c.init_std = 0.3;
  return c;
}

GenerateOptions greedy(int n) {
  GenerateOptions g;
  g.max_new = n;
  g.temperature = 0;
  return g;
}

// The first position in `s` whose token has not come before it (an id that can serve as an end
// token that the sample first meets there), at or after `from`.
size_t first_new(const std::vector<int32_t>& s, size_t from) {
  for (size_t k = from; k < s.size(); ++k)
    if (std::find(s.begin(), s.begin() + k, s[k]) == s.begin() + k) return k;
  return s.size();
}

TEST(GenerateText, TheModelsEndTokensEndASample) {
  const std::vector<int32_t> prompt = {72, 101, 108, 108, 111};
  LanguageModel free_run = LanguageModel::from_config(small(), 11);
  const std::vector<int32_t> all = free_run.generate(prompt, greedy(40));
  const size_t k = first_new(all, 3);
  ASSERT_LT(k, all.size()) << "the sample repeats one token";
  Config c = small();
  c.text.eos_token_ids = {all[k]};
  LanguageModel lm = LanguageModel::from_config(c, 11);
  EXPECT_EQ(lm.special_tokens().eos_ids, c.text.eos_token_ids);
  const std::vector<int32_t> want(all.begin(), all.begin() + k);
  GenerateStats st;
  GenerateOptions g = greedy(40);
  g.stats = &st;
  std::vector<int32_t> seen;
  EXPECT_EQ(lm.generate(prompt, g, [&](int32_t t) { seen.push_back(t); }), want);
  EXPECT_EQ(seen, want);  // the end token itself is not given out
  EXPECT_EQ(st.new_tokens, (int)k);
  g.ignore_eos = true;
  EXPECT_EQ(lm.generate(prompt, g), all);
  // in a batch the sequence that meets it ends, the others go on
  g.ignore_eos = false;
  const auto outs = lm.generate_batch({prompt, {65, 66}}, g);
  EXPECT_EQ(outs[0], want);
  EXPECT_EQ(outs[1], lm.generate({65, 66}, g));
  // speculative decoding ends there too (its output is greedy decoding's)
  g.speculative = 3;
  g.draft_depth = 1;
  EXPECT_EQ(lm.generate(prompt, g), want);
}

TEST(GenerateText, StopStringsEndASample) {
  LanguageModel lm = LanguageModel::from_config(small(), 12);
  const std::vector<int32_t> prompt = {84, 104, 101};
  const std::vector<int32_t> all = lm.generate(prompt, greedy(40));
  const std::string text = lm.decode_continuation(prompt, all);
  // a stop string made of tokens 10 and 11: the sample ends with the token that completes it
  std::string stop = lm.decode(std::vector<int32_t>(all.begin() + 10, all.begin() + 12));
  const size_t at = text.find(stop);
  GenerateOptions g = greedy(40);
  g.stop = {stop};
  const std::vector<int32_t> out = lm.generate(prompt, g);
  ASSERT_LE(out.size(), 12u);
  EXPECT_EQ(out, std::vector<int32_t>(all.begin(), all.begin() + out.size()));
  TextStream ts = lm.text_stream({{stop}});
  std::string cut;
  for (int32_t t : out) cut += ts.push(t);
  cut += ts.finish();
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(cut, text.substr(0, at));
  g.speculative = 2;
  g.draft_depth = 1;
  EXPECT_EQ(lm.generate(prompt, g), out);
}

TEST(GenerateText, LogitBiasForcesAndBans) {
  LanguageModel lm = LanguageModel::from_config(small(), 13);
  const std::vector<int32_t> prompt = {65, 66, 67};
  const int32_t first = lm.generate(prompt, greedy(1))[0];
  GenerateOptions g = greedy(5);
  const int32_t forced = first == 200 ? 201 : 200;
  g.logit_bias = {{forced, 100.0f}};
  EXPECT_EQ(lm.generate(prompt, g), std::vector<int32_t>(5, forced));
  g.logit_bias = {{first, -100.0f}};
  EXPECT_NE(lm.generate(prompt, g)[0], first);
  g.speculative = 2;  // the verification's choice is biased too
  g.draft_depth = 1;
  g.logit_bias = {{forced, 100.0f}};
  EXPECT_EQ(lm.generate(prompt, g), std::vector<int32_t>(5, forced));
  // a sampled sequence never takes a banned token
  GenerateOptions s;
  s.max_new = 200;
  s.seed = 3;
  s.temperature = 1.5;
  for (int32_t id = 0; id < 256; id += 2) s.logit_bias.push_back({id, -100.0f});
  for (int32_t t : lm.generate(prompt, s)) EXPECT_EQ(t % 2, 1) << t;
  // a decode session too
  DecodeSession session(lm, SessionOptions{});
  SequenceOptions so;
  so.max_new = 3;
  so.temperature = 0;
  so.logit_bias = {{forced, 100.0f}};
  session.start(prompt, so);
  EXPECT_EQ(session.step()[0].id, forced);
  // bad entries are usage errors naming them
  for (const auto& bad : std::vector<std::pair<int32_t, float>>{{256, 1.0f}, {-1, 1.0f}, {5, NAN}, {5, 101.0f}}) {
    g.logit_bias = {bad};
    EXPECT_THROW(lm.generate(prompt, g), UsageError);
    so.logit_bias = {bad};
    EXPECT_THROW(session.start(prompt, so), UsageError);
  }
}

TEST(GenerateText, APromptStartsWithTheBosTheModelSaysOnce) {
  Config c = small();
  c.text.bos_token_id = 2;
  c.text.add_bos_token = 1;
  LanguageModel lm = LanguageModel::from_config(c, 1);
  EXPECT_EQ(lm.special_tokens().bos, 2);
  EXPECT_TRUE(lm.special_tokens().add_bos);
  EXPECT_EQ(lm.encode_prompt("ab"), (std::vector<int32_t>{2, 97, 98}));
  EXPECT_EQ(lm.encode_prompt("\x02" "ab"), (std::vector<int32_t>{2, 97, 98}));  // not twice
  EXPECT_EQ(lm.encode_prompt("ab", nullptr, false), (std::vector<int32_t>{97, 98}));  // a rendered chat writes its own
  // a model trained here says nothing: no BOS, no end token (byte model)
  LanguageModel plain = LanguageModel::from_config(small(), 1);
  EXPECT_EQ(plain.encode_prompt("ab"), (std::vector<int32_t>{97, 98}));
  EXPECT_TRUE(plain.special_tokens().eos_ids.empty());
  EXPECT_EQ(plain.chat_template_origin(), "builtin:chatml");
}

TEST(GenerateText, ChatRendersTheModelsTemplate) {
  Config c = small();
  c.text.chat_template =
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role here') }}{% endif %}"
      "<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
  LanguageModel lm = LanguageModel::from_config(c, 1);
  EXPECT_EQ(lm.chat_template_origin(), "the model's chat template");
  EXPECT_EQ(lm.apply_chat_template(R"([{"role": "user", "content": "Hi 漢字"}])"), "<user>Hi 漢字<assistant>");
  ChatOptions o;
  o.add_generation_prompt = false;
  EXPECT_EQ(lm.apply_chat_template(R"([{"role": "user", "content": "Hi"}])", o), "<user>Hi");
  try {
    lm.apply_chat_template(R"([{"role": "system", "content": "x"}])");
    ADD_FAILURE() << "the template's raise_exception must refuse the conversation";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "no system role here");
  }
  EXPECT_THROW(lm.apply_chat_template("not json"), UsageError);
  lm.use_chat_template("chatml");
  EXPECT_EQ(lm.apply_chat_template(R"([{"role": "user", "content": "Hi"}])"), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_THROW(lm.use_chat_template("no-such-template"), UsageError);
  // a template this looplm cannot parse: the model loads and generates, chat says why not
  Config broken = small();
  broken.text.chat_template = "{% for m in messages %}{{ m.content }";
  LanguageModel b = LanguageModel::from_config(broken, 1);
  EXPECT_EQ(b.generate({65}, greedy(2)).size(), 2u);
  try {
    b.apply_chat_template(R"([{"role": "user", "content": "Hi"}])");
    ADD_FAILURE() << "an unparsable template must be refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("the model's chat template cannot be rendered"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos) << e.what();
  }
}

// A vocabulary padded past its tokenizer (Qwen2: 151,936 rows for 151,665 tokens): the padding
// ids are never chosen, whatever their logits or a bias say, and a prompt holding one is refused.
TEST(GenerateText, PaddingIdsAreNeverChosen) {
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += "the padded vocabulary never speaks past its tokenizer " + std::to_string(i) + "\n";
  BpeTrainOptions bo;
  bo.vocab_size = 280;
  const TextTokenizer tok = TextTokenizer::from_json(train_byte_level_bpe(corpus, bo).tokenizer_json, "trained");
  Config c = small();
  c.tokenizer = "hf";
  c.tokenizer_json = train_byte_level_bpe(corpus, bo).tokenizer_json;
  c.vocab_size = tok.vocab_size() + 20;  // 20 padding rows
  LanguageModel lm = LanguageModel::from_config(c, 5);
  const int32_t pad = tok.vocab_size() + 3;
  EXPECT_FALSE(lm.has_text(pad));
  EXPECT_TRUE(lm.has_text(5));
  const std::vector<int32_t> prompt = lm.encode("the padded");
  GenerateOptions g;
  g.max_new = 60;
  g.temperature = 1.5;
  g.seed = 9;
  g.ignore_eos = true;
  g.logit_bias = {{pad, 100.0f}};  // a bias does not lift a padding row
  for (int32_t t : lm.generate(prompt, g)) EXPECT_TRUE(lm.has_text(t)) << t;
  g.temperature = 0;
  for (int32_t t : lm.generate(prompt, g)) EXPECT_TRUE(lm.has_text(t)) << t;
  g.speculative = 2;
  g.draft_depth = 1;
  for (int32_t t : lm.generate(prompt, g)) EXPECT_TRUE(lm.has_text(t)) << t;
  DecodeSession session(lm, SessionOptions{});
  SequenceOptions so;
  so.max_new = 20;
  so.temperature = 1.5;
  so.logprobs = 20;
  so.logit_bias = {{pad, 100.0f}};
  session.start(prompt, so);
  for (int k = 0; k < 20; ++k)
    for (const SessionToken& t : session.step()) {
      EXPECT_TRUE(lm.has_text(t.id));
      for (const auto& [id, lp] : t.top) EXPECT_TRUE(lm.has_text(id)) << "listed among the likely: " << id;
    }
  // a prompt holding one: a usage error naming it, in generate and in a session
  std::vector<int32_t> bad = prompt;
  bad.push_back(pad);
  try {
    lm.generate(bad, g);
    ADD_FAILURE() << "a padding id in a prompt must be refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(pad) + " has no text"), std::string::npos) << e.what();
  }
  EXPECT_THROW(session.start(bad, so), UsageError);
}

// Sampling options are checked in the library, once, for every front end.
TEST(GenerateText, SamplingOptionsAreChecked) {
  LanguageModel lm = LanguageModel::from_config(small(), 2);
  DecodeSession session(lm, SessionOptions{});
  for (const auto& [t, k, p] : std::vector<std::tuple<double, int, double>>{
           {NAN, 0, 1.0}, {INFINITY, 0, 1.0}, {-0.5, 0, 1.0}, {1.0, -5, 1.0}, {1.0, 0, 2.0}, {1.0, 0, 0.0}, {1.0, 0, NAN}}) {
    SCOPED_TRACE(std::to_string(t) + " " + std::to_string(k) + " " + std::to_string(p));
    EXPECT_THROW(check_sampling(t, k, p), UsageError);
    GenerateOptions g;
    g.max_new = 2;
    g.temperature = t;
    g.top_k = k;
    g.top_p = p;
    EXPECT_THROW(lm.generate({65}, g), UsageError);
    SequenceOptions so;
    so.temperature = t;
    so.top_k = k;
    so.top_p = p;
    EXPECT_THROW(session.start({65}, so), UsageError);
  }
  EXPECT_NO_THROW(check_sampling(0, 0, 1.0));
}

// A checkpoint whose stored conventions are malformed is refused at load, naming the field.
TEST(GenerateText, MalformedConventionsAreRefusedAtLoad) {
  const test::TempDir d("text_conventions");
  const Model m(small());
  for (const auto& [meta, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"eos_token_ids": ["x"]})", "eos_token_ids"},
           {R"({"eos_token_ids": [99999]})", "eos_token_ids"},
           {R"({"chat_template": 3})", "chat_template"},
           {R"({"add_bos_token": "yes"})", "add_bos_token"},
           {R"({"add_bos_token": true})", "add_bos_token"},
           {R"({"colour": 1})", "colour"},
           {R"([1])", ""}}) {
    SCOPED_TRACE(meta);
    save_model(d / "m.safetensors", m, {{kTextMetadataKey, meta}});
    try {
      LanguageModel::load(d / "m.safetensors");
      ADD_FAILURE() << "loaded";
    } catch (const UsageError&) {
      ADD_FAILURE() << "a damaged file is a runtime error, not a usage error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("looplm.text"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

// tokenize --decode and TextTokenizer::decode_as_transformers follow the tokenizer_config.json
// beside a tokenizer.json; --exact (decode) keeps the text.
TEST(GenerateText, DecodeTidiesAsTheTokenizerConfigSays) {
  const test::TempDir d("clean_up");
  BpeTrainOptions bo;
  bo.vocab_size = 300;
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "March , , it 's what they 're doing . Is n't it ? ";
  io::write_file_atomic(d / "tokenizer.json", train_byte_level_bpe(corpus, bo).tokenizer_json);
  const std::string bin = LOOPLM_BINARY;
  auto decode = [&](const std::string& flags) {
    const auto ids = test::run_shell(bin + " tokenize --tokenizer " + (d / "tokenizer.json") + " -p \"March , , it 's\"");
    EXPECT_EQ(ids.code, 0) << ids.out;
    return test::run_shell(bin + " tokenize --tokenizer " + (d / "tokenizer.json") + " --decode " + flags + " -p '" + ids.out + "'");
  };
  EXPECT_EQ(decode("").out, "March , , it 's");  // no tokenizer_config.json: transformers' default, exact
  io::write_file_atomic(d / "tokenizer_config.json", std::string(R"({"clean_up_tokenization_spaces": true})"));
  EXPECT_EQ(decode("").out, "March,, it's");
  EXPECT_EQ(decode("--exact").out, "March , , it 's");
  const TextTokenizer tok = TextTokenizer::open(d / "tokenizer.json");
  EXPECT_TRUE(tok.clean_up_tokenization_spaces());
  EXPECT_EQ(tok.decode_as_transformers(tok.encode("Is n't it ?")), "Isn't it?");
  io::write_file_atomic(d / "tokenizer_config.json", std::string(R"({"clean_up_tokenization_spaces": "yes"})"));
  const auto bad = test::run_shell(bin + " tokenize --tokenizer " + (d / "tokenizer.json") + " -p x");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("clean_up_tokenization_spaces"), std::string::npos) << bad.out;
}

TEST(GenerateText, CleanUpTokenizationAsTransformers) {
  EXPECT_EQ(clean_up_tokenization("March , , it 's I 'm we 've they 're do n't a . b ? c ! ' ' x"),
            "March,, it's I'm we've they're don't a. b? c!'' x");
  EXPECT_EQ(clean_up_tokenization("nothing to do"), "nothing to do");
  EXPECT_EQ(token_label("abc"), "abc");
  EXPECT_EQ(token_label("\xE4\xB8"), "bytes:\\xe4\\xb8");
  EXPECT_TRUE(valid_utf8("漢字🫠"));
  EXPECT_FALSE(valid_utf8("\xE4\xB8"));
  EXPECT_FALSE(valid_utf8("\xC0\x80"));      // overlong
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));  // a surrogate
}

// `looplm generate` with a real Hugging Face tokenizer (Qwen3's byte-level BPE, the frozen parity
// fixture) on CJK and emoji whose characters split across tokens, the split ids favoured by
// --logit-bias so the samples cut characters often: the one streamed sequence (-p) prints the
// prompt and then the text of its ids in whole characters, and the batched path (--prompts, plain
// and JSONL) prints each completion whole; every text is the decode of the sampled ids.
// A model of random weights with Qwen3's tokenizer (the frozen parity fixture) in `d`, and the ids
// whose own text is part of a character (to favour with --logit-bias, so samples split characters).
struct RealTokenizerModel {
  std::string checkpoint;
  std::vector<int32_t> parts;
  std::string bias;  // " --logit-bias ID=8" for each of them
};
RealTokenizerModel real_tokenizer_model(test::TempDir& d, const std::string& prompt) {
  RealTokenizerModel r;
  const std::string tok_file = d / "tokenizer.json";
  const std::string why = test::unxz(std::string(LOOPLM_SOURCE_DIR) + "/tests/fixtures/tokenizer_parity/qwen3.tokenizer.json.xz", tok_file);
  EXPECT_TRUE(why.empty()) << why;
  const Tokenizer tok = Tokenizer::hf_from_file(tok_file);
  Config c = small(128);
  c.tokenizer = "hf";
  tok.to_config(c);
  c.vocab_size = tok.vocab_size();
  r.checkpoint = d / "model.safetensors";
  {
    Model m(c);
    save_model(r.checkpoint, m);
  }
  LanguageModel lm = LanguageModel::load(r.checkpoint);
  for (int32_t id : lm.encode(prompt + prompt + "🦀🫠🪐𝄞"))
    if (lm.decode({id}).find("\xEF\xBF\xBD") != std::string::npos && std::find(r.parts.begin(), r.parts.end(), id) == r.parts.end())
      r.parts.push_back(id);  // its own text is U+FFFD: part of a character
  for (int32_t id : r.parts) r.bias += " --logit-bias " + std::to_string(id) + "=8";
  return r;
}

TEST(GenerateText, CliTextFromARealTokenizerComesWhole) {
  test::TempDir d("gen_real_tok");
  const std::string prompt = "日本語のテキスト 😀🎉 中文字符 👩‍👩‍👧";
  const RealTokenizerModel rt = real_tokenizer_model(d, prompt);
  LanguageModel lm = LanguageModel::load(rt.checkpoint);
  const std::vector<int32_t>& parts = rt.parts;
  ASSERT_GE(parts.size(), 3u);
  const std::string& bias = rt.bias;
  const std::string gen = std::string(LOOPLM_BINARY) + " generate --checkpoint " + rt.checkpoint +
                          " -n 50 --temperature 1 --seed 4 -t 1" + bias;
  // whole: a JSONL line per sample, its tokens and its completion
  {
    std::ofstream(d / "prompts.jsonl") << nlohmann::json({{"prompt", prompt}}).dump() << "\n"
                                       << nlohmann::json({{"prompt", "中文"}}).dump() << "\n";
  }
  const test::CmdResult js = test::run_shell(gen + " --prompts " + (d / "prompts.jsonl") + " 2>/dev/null");
  ASSERT_EQ(js.code, 0) << js.out;
  std::istringstream lines(js.out);
  std::vector<nlohmann::json> rows;
  for (std::string l; std::getline(lines, l);) rows.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(rows.size(), 2u) << js.out;
  int split = 0;
  for (const auto& r : rows) {
    const std::vector<int32_t> ids = r.at("tokens").get<std::vector<int32_t>>();
    for (int32_t id : ids) split += std::find(parts.begin(), parts.end(), id) != parts.end();
    const std::string completion = r.at("completion");
    EXPECT_EQ(completion, lm.decode_continuation(lm.encode(r.at("prompt").get<std::string>()), ids));
  }
  EXPECT_GE(split, 5) << "the samples split few characters";
  // whole, plain text: the prompt and its completion, samples apart
  {
    std::ofstream(d / "prompts.txt") << prompt << "\n中文\n";
  }
  const test::CmdResult plain = test::run_shell(gen + " --prompts " + (d / "prompts.txt") + " 2>/dev/null");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(plain.out, prompt + rows[0].at("completion").get<std::string>() + "\n---------------\n中文" +
                           rows[1].at("completion").get<std::string>() + "\n");
  // streamed: the one sequence of -p, token by token, is the batch's first sample (same seed)
  const test::CmdResult one = test::run_shell(gen + " -p '" + prompt + "' 2>/dev/null");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(one.out, prompt + rows[0].at("completion").get<std::string>() + "\n");
  EXPECT_TRUE(valid_utf8(one.out));
  // streamed through loop-as-draft: greedy, the same text as plain decoding (drafts of 3 at depth
  // 1, and auto's choice); sampled (speculative sampling), whole characters all the same
  const std::string greedy = std::string(LOOPLM_BINARY) + " generate --checkpoint " + rt.checkpoint +
                             " -n 50 --temperature 0 -t 1" + bias + " -p '" + prompt + "'";
  const test::CmdResult g = test::run_shell(greedy + " 2>/dev/null");
  ASSERT_EQ(g.code, 0) << g.out;
  for (const char* spec : {" --speculative 3 --draft-depth 1", " --speculative auto"}) {
    const test::CmdResult s = test::run_shell(greedy + spec + " 2>/dev/null");
    EXPECT_EQ(s.out, g.out) << spec;
  }
  // greedy from 1000 tokens drafts by default (auto): streamed (-p) and whole (--prompts, JSONL),
  // the text of --speculative 0, the decode of its ids
  {
    const std::string long_greedy = std::string(LOOPLM_BINARY) + " generate --checkpoint " + rt.checkpoint +
                                    " -n 1000 --temperature 0 --ignore-eos -t 1" + bias;
    const test::CmdResult by_default = test::run_shell(long_greedy + " -p '" + prompt + "' 2>&1 >" + (d / "default.txt"));
    ASSERT_EQ(by_default.code, 0) << by_default.out;
    EXPECT_NE(by_default.out.find("speculative auto: "), std::string::npos) << by_default.out;
    const test::CmdResult plain_long = test::run_shell(long_greedy + " --speculative 0 -p '" + prompt + "' 2>/dev/null");
    ASSERT_EQ(plain_long.code, 0) << plain_long.out;
    EXPECT_EQ(test::read_bytes(d / "default.txt"), plain_long.out);
    EXPECT_TRUE(valid_utf8(plain_long.out));
    {
      std::ofstream(d / "one.jsonl") << nlohmann::json({{"prompt", prompt}}).dump() << "\n";
    }
    const test::CmdResult whole = test::run_shell(long_greedy + " --prompts " + (d / "one.jsonl") + " 2>/dev/null");
    ASSERT_EQ(whole.code, 0) << whole.out;
    const nlohmann::json row = nlohmann::json::parse(whole.out);
    const std::vector<int32_t> ids = row.at("tokens").get<std::vector<int32_t>>();
    EXPECT_EQ(ids.size(), 1000u);
    int split_long = 0;
    for (int32_t id : ids) split_long += std::find(parts.begin(), parts.end(), id) != parts.end();
    EXPECT_GE(split_long, 5) << "the greedy text split few characters";
    EXPECT_EQ(row.at("completion").get<std::string>(), lm.decode_continuation(lm.encode(prompt), ids));
    EXPECT_EQ(plain_long.out, prompt + row.at("completion").get<std::string>() + "\n");
  }
  const test::CmdResult sampled = test::run_shell(gen + " --speculative 3 --draft-depth 1 -p '" + prompt + "' 2>/dev/null");
  ASSERT_EQ(sampled.code, 0) << sampled.out;
  EXPECT_EQ(sampled.out.rfind(prompt, 0), 0u) << sampled.out;
  EXPECT_TRUE(valid_utf8(sampled.out)) << sampled.out;
}


// `looplm chat` with the same real tokenizer: each answer on a pipe is streamed token by token in
// whole characters, and is exactly the completion `generate --prompts` (the batched path, whole)
// makes for the conversation rendered in ChatML with the same seed (answer i: seed + i), the
// split ids favoured so the answers cut characters often.
TEST(GenerateText, ChatTextFromARealTokenizerComesWhole) {
  test::TempDir d("chat_real_tok");
  const std::string question = "日本語のテキスト 😀🎉 中文字符 👩‍👩‍👧";
  const RealTokenizerModel rt = real_tokenizer_model(d, question);
  ASSERT_GE(rt.parts.size(), 3u);
  LanguageModel lm = LanguageModel::load(rt.checkpoint);
  {
    std::ofstream(d / "questions.txt") << question << "\n中文\n";
  }
  const test::CmdResult chat = test::run_shell(std::string(LOOPLM_BINARY) + " chat --checkpoint " + rt.checkpoint +
                                               " -n 40 --temperature 1 --seed 7 -t 1" + rt.bias + " < " + (d / "questions.txt") +
                                               " 2>/dev/null");
  ASSERT_EQ(chat.code, 0) << chat.out;
  EXPECT_TRUE(valid_utf8(chat.out));
  // the first answer: the completion of the first question's conversation, seed 7 (one answer per
  // line of input; an answer holds no newline here only if the sample made none, so compare the whole)
  auto conversation = [](const std::vector<std::pair<std::string, std::string>>& turns) {
    std::string t;
    for (const auto& [role, content] : turns) t += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
    return t + "<|im_start|>assistant\n";
  };
  auto completion = [&](const std::string& prompt, uint64_t seed) {
    {
      std::ofstream(d / "p.jsonl") << nlohmann::json({{"prompt", prompt}}).dump() << "\n";
    }
    const test::CmdResult r = test::run_shell(std::string(LOOPLM_BINARY) + " generate --checkpoint " + rt.checkpoint +
                                              " -n 40 --temperature 1 --seed " + std::to_string(seed) + " -t 1 --stop '<|im_end|>'" +
                                              rt.bias + " --prompts " + (d / "p.jsonl") + " 2>/dev/null");
    EXPECT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    int split = 0;
    for (int32_t id : j.at("tokens").get<std::vector<int32_t>>())
      split += std::find(rt.parts.begin(), rt.parts.end(), id) != rt.parts.end();
    EXPECT_GE(split, 3) << "the answer split few characters";
    return j.at("completion").get<std::string>();
  };
  auto trimmed = [](std::string s) {
    s.erase(0, s.find_first_not_of(" \t\n\r"));
    s.erase(s.find_last_not_of(" \t\n\r") + 1);
    return s;
  };
  const std::string a1 = completion(conversation({{"user", question}}), 7);
  const std::string a2 = completion(conversation({{"user", question}, {"assistant", trimmed(a1)}, {"user", "中文"}}), 8);
  EXPECT_EQ(chat.out, a1 + "\n" + a2 + "\n");
}

}  // namespace
}  // namespace looplm
