// The `looplm` Python module (docs/python.md): the public C++ API (include/looplm/looplm.h) through
// pybind11, and nothing else: no src/ header is included, so Python sees what the CLI sees.
//
// Conventions. Arrays come back as numpy arrays that own the library's result buffer (no copy: a
// capsule keeps it alive). Library calls run on the library's own thread, which blocks SIGINT and
// SIGTERM, as do the compute threads it starts (library_thread.h: why, and how Ctrl-C ends a
// call); the calling thread waits with the GIL released, and a callback takes the GIL for its call.
// One thread runs them all, so calls are serialised: the library's parallel regions use the cores
// already, and this covers every call (training, quantization) whatever its own thread safety, so
// two Python threads run their calls one after the other while other Python code runs. Errors:
// looplm.UsageError (a bad option or value; also a ValueError) and looplm.Error (a bad file, a
// runtime failure; a RuntimeError), with the library's message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "looplm/looplm.h"
#include "looplm/util.h"
#include "library_thread.h"

namespace py = pybind11;
using namespace looplm;

namespace {

PyObject* g_error = nullptr;        // looplm.Error
PyObject* g_usage_error = nullptr;  // looplm.UsageError

using looplm_python::Call;
using looplm_python::library_call;

// A numpy array over `v`'s memory, which it then owns (moved, not copied).
template <class T>
py::array_t<T> owned_array(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
  auto* held = new std::vector<T>(std::move(v));
  py::capsule owner(held, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, held->data(), owner);
}
// A numpy array over part of a shared result (a trace's states or logits), kept alive by it.
template <class T, class Whole>
py::array_t<T> shared_array(const std::shared_ptr<Whole>& whole, const T* data, std::vector<py::ssize_t> shape) {
  auto* held = new std::shared_ptr<Whole>(whole);
  py::capsule owner(held, [](void* p) { delete static_cast<std::shared_ptr<Whole>*>(p); });
  return py::array_t<T>(shape, data, owner);
}

// Text from the library's bytes: a byte model may emit part of a UTF-8 character (U+FFFD for it).
py::str text_of(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t)s.size(), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

std::string utf8_of(const py::handle& text) {
  if (!py::isinstance<py::str>(text)) throw UsageError("expected text (str), got " + std::string(py::str(py::type::of(text))));
  return text.cast<std::string>();
}

// Token ids from any integer sequence (a list, a numpy array), checked against the vocabulary.
std::vector<int32_t> ids_of(const py::handle& seq, int vocab, const char* what) {
  py::array_t<int64_t, py::array::c_style | py::array::forcecast> a;
  try {
    // Integers only: a float would be cut to an id silently (65.9 -> 65), a bool is not an id.
    const py::array any = py::array::ensure(seq);
    if (any && any.size() > 0 && any.dtype().kind() != 'i' && any.dtype().kind() != 'u')
      throw UsageError(std::string(what) + ": token ids must be integers, not " + py::str(any.dtype()).cast<std::string>());
    a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(seq);
  } catch (const py::error_already_set&) {
  }
  if (!a || a.ndim() != 1)
    throw UsageError(std::string(what) + ": expected text or a one-dimensional sequence of token ids");
  std::vector<int32_t> ids((size_t)a.size());
  for (py::ssize_t i = 0; i < a.size(); ++i) {
    const int64_t t = a.data()[i];
    if (t < 0 || t >= vocab)
      throw UsageError(std::string(what) + ": token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                       std::to_string(vocab - 1) + ")");
    ids[i] = (int32_t)t;
  }
  return ids;
}

py::object json_loads(const std::string& text) { return py::module_::import("json").attr("loads")(text); }

// A config from a preset, a JSON file or a dict of keys (each applied as `--set key=value`).
Config config_of(const py::object& config, const std::optional<std::string>& preset) {
  if (py::isinstance<py::str>(config)) {
    if (preset) throw UsageError("give a config file or a preset, not both");
    Config c = Config::from_file(config.cast<std::string>());
    c.validate();
    return c;
  }
  Config c = load_preset(preset.value_or("looped"));
  if (!config.is_none()) {
    if (!py::isinstance<py::dict>(config)) throw UsageError("config: expected a dict of config keys or a JSON file's path");
    py::object dumps = py::module_::import("json").attr("dumps");
    for (auto [k, v] : config.cast<py::dict>()) {
      const std::string key = py::str(k);
      c.set(key, py::isinstance<py::str>(v) ? v.cast<std::string>() : dumps(v).cast<std::string>());
    }
  }
  c.validate();
  return c;
}

// exit_threshold None: not given (NaN), as the CLI's flag left out.
EarlyExit exit_of(const std::string& rule, std::optional<double> threshold) {
  return early_exit(rule, threshold ? *threshold : std::nan(""));
}

py::dict eval_dict(const EvalResult& e, int R) {
  py::dict d;
  d["loss"] = e.loss;
  d["accuracy"] = e.accuracy;
  d["loss_by_depth"] = e.loss_by_depth;
  d["accuracy_by_depth"] = e.accuracy_by_depth;
  d["diagnostics"] = e.diagnostics;
  d["tokens"] = e.tokens;
  d["windows"] = e.windows;
  if (e.examples > 0) d["examples"] = e.examples;
  d["R"] = R;
  d["depth"] = (int)e.loss_by_depth.size();
  d["mean_steps"] = e.mean_steps;
  d["exit_fraction"] = e.exit_fraction;
  if (e.gate_expected_depth > 0) d["gate_expected_depth"] = e.gate_expected_depth;
  if (e.exit_gate) {
    py::dict gate;
    gate["objective"] = e.exit_gate->objective;
    gate["expected_loss"] = e.exit_gate->expected_loss;
    gate["entropy"] = e.exit_gate->entropy;
    gate["mean_exit_step"] = e.exit_gate->mean_exit_step;
    gate["exit_distribution"] = e.exit_gate->exit_distribution;
    d["exit_gate"] = gate;
  }
  if (!e.difficulty_first.empty()) {
    py::dict q;
    q["first_exit"] = e.difficulty_first;
    q["last_exit"] = e.difficulty_last;
    d["loss_by_difficulty"] = q;
  }
  if (e.calibration) {
    py::dict rules;
    for (const auto& rule : e.calibration->rules) {
      py::list pts;
      for (const auto& p : rule.frontier) pts.append(py::make_tuple(p.threshold, p.mean_steps, p.loss));
      rules[rule.name.c_str()] = pts;
    }
    py::dict cal;
    cal["depth"] = e.calibration->depth;
    cal["tokens"] = e.calibration->tokens;
    cal["full_loss"] = e.calibration->full_loss;
    cal["rules"] = rules;
    d["calibration"] = cal;
  }
  if (e.kv_cache_bytes > 0) {
    d["kv_bytes_per_token"] = e.kv_bytes_per_token;
    d["kv_cache_bytes"] = e.kv_cache_bytes;
  }
  return d;
}

py::dict stats_dict(const GenerateStats& s, uint64_t seed) {
  py::dict d;
  d["seed"] = seed;  // the sampling seed used (given, or drawn at random)
  d["prompt_tokens"] = s.prompt_tokens;
  d["prompt_seconds"] = s.prompt_seconds;
  d["new_tokens"] = s.new_tokens;
  d["gen_seconds"] = s.gen_seconds;
  d["mean_steps"] = s.mean_steps;
  d["computed_steps"] = s.computed_steps;  // with per_step: the steps after each exit too (run for the cache)
  d["kv_bytes_per_token"] = s.kv_bytes_per_token;
  d["kv_cache_bytes"] = s.kv_cache_bytes;
  d["draft_tokens"] = s.draft_tokens;
  d["accepted_tokens"] = s.accepted_tokens;
  d["weight_streams"] = s.weight_streams;
  d["speculative"] = s.speculative;  // speculative="auto": what ran, and why
  d["draft_depth"] = s.draft_depth;
  d["speculative_why"] = s.speculative_why;
  return d;
}

// A loaded model. Shared so that arrays and traces never outlive what they point into.
struct PyModel {
  std::shared_ptr<LanguageModel> lm;

  const Config& config() const { return lm->config(); }
  int depth_of(const std::optional<int>& depth) const {
    if (depth && *depth < 0) throw UsageError("depth must be >= 0 (None: the trained R)");
    return depth ? *depth : -1;
  }
  // Token ids of `x`: text through the tokenizer, or ids as given.
  std::vector<int32_t> tokens_of(const py::handle& x, const char* what) const {
    if (py::isinstance<py::str>(x)) {
      const std::string s = x.cast<std::string>();
      return library_call([&] { return lm->encode(s); });
    }
    return ids_of(x, config().vocab_size, what);
  }

  LanguageModel::Trace run_trace(const py::handle& ids, const LanguageModel::TraceOptions& o) const {
    const std::vector<int32_t> t = tokens_of(ids, "trace");
    return library_call([&] { return lm->trace(t, o); });
  }
};

// A decode session (continuous batching) on a model it keeps alive.
struct PySession {
  std::shared_ptr<LanguageModel> lm;
  std::unique_ptr<DecodeSession> session;
};

// Token ids to text as they arrive (Model.text_stream), on a model it keeps alive.
struct PyTextStream {
  std::shared_ptr<LanguageModel> lm;
  TextStream stream;
  bool finished = false;

  void check_open(const char* what) const {
    if (finished) throw UsageError(std::string("text_stream: ") + what + " after finish()");
  }
};

// transformers' apply_chat_template arguments that are not template variables: refused rather
// than passed to the template, where they would change nothing.
const char* const kNotTemplateVariables[] = {"continue_final_message", "chat_template", "return_dict", "return_tensors",
                                             "padding", "truncation", "max_length", "return_assistant_tokens_mask",
                                             "tokenizer_kwargs"};

py::dict trace_dict(LanguageModel::Trace&& t) {
  auto tr = std::make_shared<LanguageModel::Trace>(std::move(t));
  py::dict d;
  d["depth"] = tr->depth;
  d["exits"] = tr->exits;
  if (!tr->states.empty())
    d["states"] = shared_array(tr, tr->states.data(), {tr->depth + 1, tr->tokens, tr->d_model});
  if (!tr->exits.empty())
    d["logits"] = shared_array(tr, tr->logits.data(), {(py::ssize_t)tr->exits.size(), tr->tokens, tr->vocab});
  d["diagnostics"] = tr->diagnostics;
  py::dict per_token;
  for (const auto& [name, v] : tr->token_diagnostics)
    per_token[py::str(name)] = shared_array(tr, v.data(), {tr->depth, tr->tokens});
  d["token_diagnostics"] = per_token;
  return d;
}

}  // namespace

namespace {

// Model: tokens and text (tokenize, detokenize, chat templates, end tokens, text streams).
void bind_model_text(py::class_<PyModel>& c) {
  c.def("tokenize",
           [](const PyModel& s, const py::object& text) {
             const std::string t = utf8_of(text);
             std::vector<int32_t> ids;
             ids = library_call([&] { return s.lm->encode(t); });
             const py::ssize_t n = (py::ssize_t)ids.size();
             return owned_array(std::move(ids), {n});
           },
           py::arg("text"), "Token ids of `text` (numpy int32).")
      .def("detokenize",
           [](const PyModel& s, const py::object& ids, std::optional<bool> clean_up) {
             const std::vector<int32_t> t = ids_of(ids, s.config().vocab_size, "detokenize");
             std::string text;
             text = library_call([&] { return s.lm->decode(t); });
             if (clean_up.value_or(s.config().text.clean_up_tokenization_spaces)) text = clean_up_tokenization(text);
             return text_of(text);
           },
           py::arg("ids"), py::arg("clean_up_tokenization_spaces") = py::none(),
           "The text of token ids as transformers' decode gives it (bytes that are not UTF-8 become U+FFFD), tidied "
           "(' ,' -> ',') when clean_up_tokenization_spaces is true, by default the model's own setting (a converted "
           "model's tokenizer_config.json; False: the exact text).")
      .def("apply_chat_template",
           [](const PyModel& s, const py::object& messages, bool add_generation_prompt, const py::object& tools,
              bool tokenize, const py::kwargs& kwargs) -> py::object {
             if (!py::isinstance<py::list>(messages) && !py::isinstance<py::tuple>(messages))
               throw UsageError("apply_chat_template: messages must be a list of {role, content, ...} dicts");
             py::object dumps = py::module_::import("json").attr("dumps");
             auto json_of = [&](const py::handle& x) { return dumps(x, py::arg("ensure_ascii") = false).cast<std::string>(); };
             ChatOptions o;
             o.add_generation_prompt = add_generation_prompt;
             if (!tools.is_none()) o.tools_json = json_of(tools);
             if (kwargs.size() > 0) {
               for (const char* k : kNotTemplateVariables)
                 if (kwargs.contains(k))
                   throw UsageError(std::string("apply_chat_template: ") + k + " is not supported here" +
                                    (std::string(k) == "chat_template" ? " (Model.use_chat_template chooses the template)" : ""));
               o.extra_json = json_of(kwargs);
             }
             const std::string msgs = json_of(messages);
             std::string text;
             std::vector<int32_t> ids;
             library_call([&] {
               text = s.lm->apply_chat_template(msgs, o);
               // as the server encodes a rendered chat: its special tokens are ids, and it wrote any BOS
               if (tokenize) ids = s.lm->encode_prompt(text, nullptr, false);
             });
             if (!tokenize) return text_of(text);
             const py::ssize_t n = (py::ssize_t)ids.size();
             return owned_array(std::move(ids), {n});
           },
           py::arg("messages"), py::arg("add_generation_prompt") = true, py::arg("tools") = py::none(),
           py::arg("tokenize") = false,
           "A conversation as the prompt text the model was trained on, as transformers' apply_chat_template renders "
           "it: the model's own chat template, the one use_chat_template chose, or ChatML for a model without one. "
           "messages: a list of {role, content, ...} dicts; tools: a list of tool schemas; more keyword arguments "
           "are template variables (e.g. enable_thinking=False). tokenize=True: the token ids instead (numpy int32; "
           "special tokens in the text are special ids, and no second BOS). UsageError with the template's own "
           "message when it refuses the conversation.")
      .def("use_chat_template",
           [](PyModel& s, const std::string& name_or_file) { library_call([&] { s.lm->use_chat_template(name_or_file); }); },
           py::arg("name_or_file"),
           "Render chats with this instead of the model's own template: a built-in's name (chatml, ...) or a file "
           "holding a Jinja template (or a tokenizer_config.json with a chat_template).")
      .def_property_readonly("chat_template",
                             [](const PyModel& s) -> py::object {
                               const std::string& t = s.lm->chat_template();
                               if (t.empty()) return py::none();
                               return text_of(t);
                             },
                             "The model's own chat template (Jinja source), or None for a model without one.")
      .def_property_readonly("chat_template_origin",
                             [](const PyModel& s) { return library_call([&] { return s.lm->chat_template_origin(); }); },
                             "What apply_chat_template renders: \"the model's chat template\", \"builtin:chatml\", "
                             "or the file use_chat_template gave.")
      .def_property_readonly("eos_token_ids", [](const PyModel& s) { return s.lm->special_tokens().eos_ids; },
                             "The model's end tokens: generation ends at any of them (ignore_eos: it does not). "
                             "Empty for byte and char models.")
      .def_property_readonly("bos_token_id",
                             [](const PyModel& s) -> py::object {
                               const int32_t b = s.lm->special_tokens().bos;
                               if (b < 0) return py::none();
                               return py::int_(b);
                             },
                             "The model's begin-of-text token, or None.")
      .def("text_stream",
           [](const PyModel& s, std::optional<std::vector<std::string>> stop, bool at_start) {
             TextStreamOptions o;
             if (stop) o.stop = *stop;
             o.at_start = at_start;
             return PyTextStream{s.lm, s.lm->text_stream(o)};
           },
           py::arg("stop") = py::none(), py::arg("at_start") = false,
           "Text as token ids arrive (e.g. a Session's): push(id) gives the text ready after it, finish() the rest. "
           "Whole UTF-8 characters only; held back while it may begin a stop string, and ended before the first "
           "one. The ids continue a prompt (at_start=True: they open the text).");
}

// Model: one forward pass read out (logits, logits by depth, states, trace).
void bind_model_passes(py::class_<PyModel>& c) {
  c.def("logits",
           [](const PyModel& s, const py::object& ids, std::optional<int> depth) {
             LanguageModel::TraceOptions o;
             o.depth = s.depth_of(depth);
             o.states = false;
             o.exits = {s.config().depth_or_R(o.depth)};
             LanguageModel::Trace t = s.run_trace(ids, o);
             const py::ssize_t T = t.tokens, V = t.vocab;
             return owned_array(std::move(t.logits), {T, V});
           },
           py::arg("ids"), py::arg("depth") = py::none(),
           "Next-token logits [T, vocab] (float32) of one forward pass over `ids` (text or token ids) at `depth` "
           "loop steps (None: the trained R; 0: the head on h_pre).")
      .def("logits_by_depth",
           [](const PyModel& s, const py::object& ids, std::optional<std::vector<int>> depths) {
             LanguageModel::TraceOptions o;
             o.states = false;
             if (depths) {
               if (depths->empty()) throw UsageError("logits_by_depth: depths is empty");
               o.exits = *depths;
             } else {
               for (int r = 1; r <= s.config().R; ++r) o.exits.push_back(r);
             }
             int deepest = 0;
             for (int r : o.exits) {
               if (r < 0) throw UsageError("logits_by_depth: depth " + std::to_string(r) + " is negative");
               deepest = std::max(deepest, r);
             }
             o.depth = deepest;
             LanguageModel::Trace t = s.run_trace(ids, o);
             const py::ssize_t n = (py::ssize_t)t.exits.size(), T = t.tokens, V = t.vocab;
             return owned_array(std::move(t.logits), {n, T, V});
           },
           py::arg("ids"), py::arg("depths") = py::none(),
           "Logits [len(depths), T, vocab] at each of `depths` (None: 1..R) from one forward pass: the logit lens "
           "across loop steps.")
      .def("states",
           [](const PyModel& s, const py::object& ids, std::optional<int> depth) {
             LanguageModel::TraceOptions o;
             o.depth = s.depth_of(depth);
             LanguageModel::Trace t = s.run_trace(ids, o);
             const py::ssize_t D = t.depth + 1, T = t.tokens, d = t.d_model;
             return owned_array(std::move(t.states), {D, T, d});
           },
           py::arg("ids"), py::arg("depth") = py::none(),
           "Exit states [depth + 1, T, d_model]: h_pre, then the readout of the loop state after each step.")
      .def("trace",
           [](const PyModel& s, const py::object& ids, std::optional<int> depth, std::optional<std::vector<int>> exits,
              bool states) {
             LanguageModel::TraceOptions o;
             o.depth = s.depth_of(depth);
             o.states = states;
             if (exits) o.exits = *exits;
             return trace_dict(s.run_trace(ids, o));
           },
           py::arg("ids"), py::arg("depth") = py::none(), py::arg("exits") = py::none(), py::arg("states") = true,
           "One forward pass, every exit: a dict of states [depth + 1, T, d], logits [len(exits), T, vocab] at `exits`, "
           "diagnostics (name -> mean per loop step, as evaluate) and token_diagnostics (name -> [depth, T]).");
}

// Model.generate: text or ids in, text or ids out, every sampling and decoding option the CLI has
// (~130 lines: one binding whose keyword arguments are the CLI's options, each checked as the CLI does).
void bind_model_generate(py::class_<PyModel>& c) {
  c.def("generate",
           [](const PyModel& s, const py::object& prompt, int max_tokens, std::optional<double> temperature, int top_k,
              double top_p, std::optional<uint64_t> seed, std::optional<int> depth, const std::string& exit_rule, std::optional<double> exit_threshold,
              const std::string& kv_policy, const std::string& kv_cache, const py::object& speculative_in, int draft_depth,
              const py::object& on_token, bool return_stats, std::optional<std::vector<std::string>> stop, bool ignore_eos,
              std::optional<std::map<int64_t, double>> logit_bias, const py::object& on_text) -> py::object {
             GenerateOptions g;
             if (stop) g.stop = *stop;
             g.ignore_eos = ignore_eos;
             if (logit_bias)
               for (const auto& [id, b] : *logit_bias) {
                 if (id < 0 || id > INT32_MAX) throw UsageError("generate: logit_bias token " + std::to_string(id) + " is outside the vocabulary");
                 g.logit_bias.push_back({(int32_t)id, (float)b});
               }
             if (max_tokens < 0) throw UsageError("generate: max_tokens must be >= 0");
             g.max_new = max_tokens;
             // speculative=K (drafts) or "auto" (-1: measured and chosen, GenerateOptions::speculative)
             int speculative = 0;
             if (py::isinstance<py::str>(speculative_in) && speculative_in.cast<std::string>() == "auto") speculative = -1;
             else if (py::isinstance<py::int_>(speculative_in) && speculative_in.cast<int64_t>() >= 0 && speculative_in.cast<int64_t>() <= 1 << 20)
               speculative = speculative_in.cast<int>();
             else throw UsageError("generate: speculative is a number of drafts (0: off) or \"auto\"");
             if (speculative < 0 && draft_depth > 0) throw UsageError("generate: speculative=\"auto\" chooses the draft depth (no draft_depth)");
             // speculative decoding defaults to greedy (the CLI's default too)
             g.temperature = temperature ? *temperature : speculative != 0 ? 0.0 : 1.0;
             g.top_k = top_k;
             g.top_p = top_p;
             // No seed: a random one, as the CLI's generate (return_stats gives it: stats["seed"] repeats the sample).
             g.seed = seed ? *seed : (std::random_device{}() | (uint64_t)std::random_device{}() << 32);
             g.depth = s.depth_of(depth);
             g.exit = exit_of(exit_rule, exit_threshold);
             if (g.depth == 0 && g.exit.rule != ExitRule::fixed)
               throw UsageError("generate: exit_rule " + exit_rule + " needs loop steps (depth 0 runs none)");
             g.kv_policy = parse_kv_policy(kv_policy);
             g.kv_cache = kv_cache;
             g.speculative = speculative;
             g.draft_depth = draft_depth;
             if ((speculative > 0) != (draft_depth > 0))
               throw UsageError("generate: speculative=K and draft_depth=r go together");
             GenerateStats st;
             g.stats = &st;
             const bool callback = !on_token.is_none(), text_callback = !on_text.is_none();
             // Ctrl-C ends the call: the library's generate has no stop flag, so the token callback
             // (on the library's thread, once per token) ends it by throwing once asked to. The
             // model keeps nothing of a generation (its KV cache is the call's own).
             Call call;
             // A batch: a list of prompts (text), one sequence each (sequence i samples with seed + i).
             if (py::isinstance<py::list>(prompt) && py::len(prompt) > 0 && py::isinstance<py::str>(prompt[py::int_(0)])) {
               std::vector<std::string> prompts;
               for (auto p : prompt) prompts.push_back(utf8_of(p));
               std::vector<std::string> texts(prompts.size());
               call.run([&] {
                 std::vector<std::vector<int32_t>> ids;
                 for (const auto& text : prompts) {
                   ids.push_back(s.lm->encode_prompt(text));
                   if (ids.back().empty()) throw UsageError("generate: prompt " + std::to_string(ids.size()) + " is empty");
                 }
                 // each sequence's text (TextStream: whole characters, cut at a stop string)
                 std::vector<TextStream> streams;
                 for (size_t i = 0; i < ids.size(); ++i) streams.push_back(s.lm->text_stream({g.stop, false}));
                 const auto outs = s.lm->generate_batch(ids, g, [&](int i, int32_t t) {
                   call.check();
                   const std::string piece = streams[i].push(t);
                   texts[i] += piece;
                   if (!callback && !text_callback) return;
                   py::gil_scoped_acquire gil;
                   if (callback) on_token(i, t);
                   if (text_callback && !piece.empty()) on_text(i, text_of(piece));
                 });
                 for (size_t i = 0; i < outs.size(); ++i) {
                   const std::string rest = streams[i].finish();
                   texts[i] += rest;
                   if (text_callback && !rest.empty()) {
                     py::gil_scoped_acquire gil;
                     on_text((int)i, text_of(rest));
                   }
                 }
               });
               py::list result;
               for (const auto& t : texts) result.append(text_of(t));
               if (return_stats) return py::make_tuple(result, stats_dict(st, g.seed));
               return result;
             }
             const bool as_text = py::isinstance<py::str>(prompt);
             std::vector<int32_t> ids;
             if (as_text) {
               const std::string text = prompt.cast<std::string>();
               ids = library_call([&] { return s.lm->encode_prompt(text); });
             } else {
               ids = ids_of(prompt, s.config().vocab_size, "generate");
             }
             if (ids.empty()) throw UsageError("generate: the prompt is empty");
             std::string text;
             std::vector<int32_t> out = call.run([&] {
               TextStream stream = s.lm->text_stream({g.stop, false});
               std::vector<int32_t> made = s.lm->generate(ids, g, [&](int32_t t) {
                 call.check();
                 const std::string piece = stream.push(t);
                 text += piece;
                 if (!callback && !text_callback) return;
                 py::gil_scoped_acquire gil;
                 if (callback) on_token(t);
                 if (text_callback && !piece.empty()) on_text(text_of(piece));
               });
               const std::string rest = stream.finish();
               text += rest;
               if (text_callback && !rest.empty()) {
                 py::gil_scoped_acquire gil;
                 on_text(text_of(rest));
               }
               return made;
             });
             py::object result;
             if (as_text) {
               result = text_of(text);
             } else {
               const py::ssize_t n = (py::ssize_t)out.size();
               result = owned_array(std::move(out), {n});
             }
             if (return_stats) return py::make_tuple(result, stats_dict(st, g.seed));
             return result;
           },
           py::arg("prompt"), py::arg("max_tokens") = 200, py::arg("temperature") = py::none(), py::arg("top_k") = 0,
           py::arg("top_p") = 1.0, py::arg("seed") = py::none(), py::arg("depth") = py::none(), py::arg("exit_rule") = "fixed",
           py::arg("exit_threshold") = py::none(), py::arg("kv_policy") = "per_step", py::arg("kv_cache") = "fp32",
           py::arg("speculative") = 0, py::arg("draft_depth") = 0, py::arg("on_token") = py::none(),
           py::arg("return_stats") = false, py::arg("stop") = py::none(), py::arg("ignore_eos") = false,
           py::arg("logit_bias") = py::none(), py::arg("on_text") = py::none(),
           "Sample a continuation (the CLI's generate). prompt: text -> the new text; token ids -> the new ids "
           "(numpy int32); a list of texts -> a list of new texts, decoded together (sequence i with seed + i). "
           "on_token(id) (a batch: on_token(i, id)) sees each new token, on_text(text) (on_text(i, text)) each piece "
           "of text as it is ready (whole characters). The model's end tokens end a sample (ignore_eos: they do not); "
           "stop: strings the text ends before; logit_bias: {token id: bias from -100 to 100}. speculative: K drafts "
           "(with draft_depth) or \"auto\". temperature None: 1, or 0 with speculative. seed None: a random one "
           "(return_stats=True: stats[\"seed\"] repeats the sample; a batch's sequence i samples with seed + i).");
}

// Model: evaluation, and the decode session serve runs on.
void bind_model_evaluate(py::class_<PyModel>& c) {
  c.def("evaluate",
           [](const PyModel& s, const py::object& data, std::optional<int> depth, const std::string& exit_rule,
              std::optional<double> exit_threshold, std::optional<bool> incremental, std::optional<std::string> kv_policy,
              std::optional<std::string> kv_cache, int batch, std::optional<int64_t> max_windows, int window,
              bool file, bool calibrate) {
             EvalOptions o;
             o.calibrate = calibrate;
             o.depth = s.depth_of(depth);
             o.exit = exit_of(exit_rule, exit_threshold);
             if (o.depth == 0 && o.exit.rule != ExitRule::fixed)
               throw UsageError("evaluate: exit_rule " + exit_rule + " needs loop steps (depth 0 runs none)");
             // as the CLI: a KV policy or cache type scores through incremental decoding
             o.incremental = incremental.value_or(kv_policy.has_value() || kv_cache.has_value());
             if (kv_policy) o.kv_policy = parse_kv_policy(*kv_policy);
             if (kv_cache) o.kv_cache = *kv_cache;
             o.batch = batch;
             o.max_windows = max_windows.value_or(-1);
             if (window < 0) throw UsageError("evaluate: window must be >= 0 (0: the model's context)");
             o.window = window;
             // Ctrl-C ends the call after the current batch of windows.
             Call call;
             o.progress = [&](int64_t, int64_t) { call.check(); };
             EvalResult e;
             if (file) {
               const std::string path = utf8_of(data);
               e = call.run([&] { return s.lm->evaluate_file(path, o); });
             } else if (data.is_none()) {
               e = call.run([&] { return s.lm->evaluate_validation(o); });
             } else {
               const std::vector<int32_t> t = s.tokens_of(data, "evaluate");
               e = call.run([&] { return s.lm->evaluate(t, o); });
             }
             py::dict d = eval_dict(e, s.config().R);
             d["exit_rule"] = exit_rule;
             d["incremental"] = o.incremental;
             return d;
           },
           py::arg("data") = py::none(), py::arg("depth") = py::none(), py::arg("exit_rule") = "fixed",
           py::arg("exit_threshold") = py::none(), py::arg("incremental") = py::none(), py::arg("kv_policy") = py::none(),
           py::arg("kv_cache") = py::none(), py::arg("batch") = 8, py::arg("max_windows") = py::none(),
           py::arg("window") = 0, py::arg("file") = false, py::arg("calibrate") = false,
           "Held-out loss, accuracy and per-exit diagnostics (the CLI's eval --json) of `data`: text, token ids, a "
           "file's path with file=True, or None for the run's validation data. calibrate=True adds 'calibration': "
           "every early-exit rule's loss-versus-loop-steps frontier {rule: [(threshold, mean_steps, loss), ...]} "
           "and 'full_loss' (the CLI's eval --calibrate).")
      .def("session",
           [](const PyModel& s, int slots, std::optional<int> depth, const std::string& exit_rule, std::optional<double> exit_threshold,
              const std::string& kv_policy, const std::string& kv_cache) {
             SessionOptions o;
             o.slots = slots;
             o.depth = s.depth_of(depth);
             o.exit = exit_of(exit_rule, exit_threshold);
             o.kv_policy = parse_kv_policy(kv_policy);
             o.kv_cache = kv_cache;
             return library_call([&] { return PySession{s.lm, std::make_unique<DecodeSession>(*s.lm, o)}; });
           },
           py::arg("slots") = 8, py::arg("depth") = py::none(), py::arg("exit_rule") = "fixed", py::arg("exit_threshold") = py::none(),
           py::arg("kv_policy") = "per_step", py::arg("kv_cache") = "fp32",
           "A decode session: up to `slots` sequences decoding together, joining and leaving between tokens "
           "(what looplm serve runs on).");
}

// TextStream and Session: incremental text and continuous batching.
void bind_streams(py::module_& m) {
  py::class_<PyTextStream>(m, "TextStream", "Token ids to text as they arrive (Model.text_stream).")
      .def("push",
           [](PyTextStream& t, int64_t id) {
             t.check_open("push");
             const int vocab = t.lm->config().vocab_size;
             if (id < 0 || id >= vocab)
               throw UsageError("text_stream: token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                std::to_string(vocab - 1) + ")");
             return text_of(t.stream.push((int32_t)id));
           },
           py::arg("id"), "The text ready after token `id` (may be empty).")
      .def("finish",
           [](PyTextStream& t) {
             t.check_open("finish");
             t.finished = true;
             return text_of(t.stream.finish());
           },
           "The rest of the text (an unfinished character as detokenize ends it); push no more after it.")
      .def_property_readonly("stopped", [](const PyTextStream& t) { return t.stream.stopped(); },
                             "A stop string came: the text ended before it, and later ids add nothing.")
      .def_property_readonly("text_bytes", [](const PyTextStream& t) { return t.stream.text_bytes(); },
                             "UTF-8 bytes of text decided so far (where the next token's text begins).");

  py::class_<PySession>(m, "Session",
                        "Continuous batching (Model.session): sequences start and stop between tokens; each makes what "
                        "generate() makes for it alone.")
      .def("start",
           [](PySession& s, const py::object& prompt, int max_tokens, double temperature, int top_k, double top_p, uint64_t seed,
              std::optional<int> logprobs) {
             std::vector<int32_t> ids;
             if (py::isinstance<py::str>(prompt)) {
               const std::string text = prompt.cast<std::string>();
               ids = library_call([&] { return s.lm->encode_prompt(text); });
             } else {
               ids = ids_of(prompt, s.lm->config().vocab_size, "start");
             }
             SequenceOptions o;
             o.max_new = max_tokens;
             o.temperature = temperature;
             o.top_k = top_k;
             o.top_p = top_p;
             o.seed = seed;
             o.logprobs = logprobs.value_or(-1);
             return library_call([&] { return s.session->start(ids, o); });
           },
           py::arg("prompt"), py::arg("max_tokens") = 200, py::arg("temperature") = 1.0, py::arg("top_k") = 0,
           py::arg("top_p") = 1.0, py::arg("seed") = 0, py::arg("logprobs") = py::none(),
           "Start a sequence (its prompt runs now): its slot, or -1 when every slot is taken.")
      .def("step",
           [](PySession& s) {
             std::vector<SessionToken> toks;
             toks = library_call([&] { return s.session->step(); });
             py::list out;
             for (const auto& t : toks) {
               py::dict d;
               d["slot"] = t.slot;
               d["id"] = t.id;
               d["steps"] = t.steps;
               d["last"] = t.last;
               d["logprob"] = t.logprob;
               d["top"] = t.top;
               out.append(d);
             }
             return out;
           },
           "Every running sequence one token further: a list of {slot, id, steps (the loop steps behind the token), "
           "last, logprob, top}.")
      .def("cancel", [](PySession& s, int slot) {
             library_call([&] { s.session->cancel(slot); });
           }, py::arg("slot"))
      .def_property_readonly("active", [](const PySession& s) { return s.session->active(); })
      .def_property_readonly("slots", [](const PySession& s) { return s.session->slots(); })
      .def_property_readonly("mean_steps", [](const PySession& s) { return s.session->mean_steps(); })
      .def_property_readonly("kv_bytes_per_token", [](const PySession& s) { return s.session->kv_bytes_per_token(); });
}

// Files in and out: load, from_config, describe, convert, export, the stand-alone tokenizer, quantize
// (~150 lines: a list of short bindings, one per library call).
void bind_files(py::module_& m) {
  m.def("load",
        [](const std::string& path, const std::string& weights, bool allow_nonfinite) {
          LoadOptions o;
          o.weights = weights;
          o.allow_nonfinite = allow_nonfinite;
          return library_call([&] { return PyModel{std::make_shared<LanguageModel>(LanguageModel::load(path, o))}; });
        },
        py::arg("path"), py::arg("weights") = "", py::arg("allow_nonfinite") = false,
        "Load model.safetensors (or its run directory), mapped read-only. weights: the format inference reads "
        "(\"\": the checkpoint's own; fp32, bf16, q8_0, q4_0, q4_k).");
  m.def("from_config",
        [](const py::object& config, std::optional<std::string> preset, uint64_t seed, const std::string& weights) {
          const Config c = config_of(config, preset);
          LoadOptions o;
          o.weights = weights;
          return library_call([&] { return PyModel{std::make_shared<LanguageModel>(LanguageModel::from_config(c, seed, o))}; });
        },
        py::arg("config") = py::none(), py::arg("preset") = py::none(), py::arg("seed") = 0, py::arg("weights") = "",
        "A model with freshly initialised weights: a preset (default looped) changed by `config`'s keys, or a JSON file.");

  m.def("describe",
        [](const py::object& config, std::optional<std::string> preset, bool measure) {
          const Config c = config_of(config, preset);
          ModelDescription d;
          d = library_call([&] { return describe_model(c, measure); });
          auto counts = [](const ParamCounts& n) {
            py::dict p;
            p["total"] = n.total, p["embedding"] = n.embedding, p["non_embedding"] = n.non_embedding();
            p["prelude"] = n.prelude, p["core"] = n.core, p["coda"] = n.coda, p["loop"] = n.loop, p["other"] = n.other;
            return p;
          };
          py::dict r;
          r["params"] = counts(d.params);
          r["unrolled_depth"] = d.unrolled_depth;
          r["infer_flops_per_token"] = d.infer_flops_per_token;
          r["train_flops_per_token"] = d.train_flops_per_token;
          py::dict parts;
          parts["prelude"] = d.flops_prelude, parts["core_per_step"] = d.flops_core_per_step;
          parts["rule_per_step"] = d.flops_rule_per_step, parts["coda"] = d.flops_coda, parts["head"] = d.flops_head;
          r["flops_per_token_parts"] = parts;
          r["kv_cache_bytes_per_token"] = d.kv_cache_bytes_per_token;
          if (measure) {
            r["activation_bytes_per_token"] = d.activation_bytes_per_token;
            r["activation_grad_bytes_per_token"] = d.activation_grad_bytes_per_token;
          }
          r["looped"] = d.looped;
          if (d.looped)
            for (auto [key, dc] : {std::pair{"iso_flop_dense", &d.iso_flop}, std::pair{"iso_param_dense", &d.iso_param}}) {
              py::dict x;
              x["n_core"] = dc->n_core;
              x["params"] = counts(dc->params);
              x["infer_flops_per_token"] = dc->infer_flops_per_token;
              r[key] = x;
            }
          return r;
        },
        py::arg("config") = py::none(), py::arg("preset") = py::none(), py::arg("measure") = true,
        "What a config builds (`looplm info`): parameters by section, FLOPs and memory per token, and for a looped "
        "model its iso-FLOP and iso-param dense controls. measure: one training pass at batch 1 for the activations.");

  m.def("convert",
        [](const std::string& from, const std::string& out) {
          ConvertResult r;
          r = library_call([&] { return convert_model(from, out); });
          py::dict d;
          d["format"] = r.format;
          d["arch"] = r.arch;
          d["weights"] = r.weights;
          d["tensors"] = r.tensors;
          d["files"] = r.files;
          d["config"] = json_loads(r.config.to_json_text());
          d["notes"] = r.notes;
          return d;
        },
        py::arg("source"), py::arg("out"),
        "A GGUF file or a Hugging Face model directory into a new run directory `out` (the CLI's convert).");
  m.def("export",
        [](const std::string& checkpoint, const std::string& out, const std::string& type, const std::string& name) {
          ExportOptions o;
          o.type = type;
          o.name = name;
          ExportResult r;
          r = library_call([&] { return export_model(checkpoint, out, o); });
          py::dict d;
          d["arch"] = r.arch;
          d["type"] = r.type;
          d["tensors"] = r.tensors;
          d["bytes"] = r.bytes;
          d["exact_codes"] = r.exact_codes;
          d["notes"] = r.notes;
          return d;
        },
        py::arg("checkpoint"), py::arg("out"), py::arg("type") = "", py::arg("name") = "looplm",
        "A checkpoint as llama.cpp's GGUF at `out` (the CLI's export): type f32, f16, q8_0, q4_0 or \"\" (its own).");

  py::class_<TextTokenizer>(m, "Tokenizer", "A tokenizer on its own: a tokenizer.json or a checkpoint's (looplm.tokenizer).")
      .def_property_readonly("kind", &TextTokenizer::kind)
      .def_property_readonly("vocab_size", &TextTokenizer::vocab_size)
      .def("encode",
           [](const TextTokenizer& t, const std::string& text, bool add_special) {
             std::vector<int32_t> ids;
             {
               py::gil_scoped_release nogil;  // thread-safe: no library lock
               ids = t.encode(text, add_special);
             }
             const py::ssize_t n = (py::ssize_t)ids.size();
             return owned_array(std::move(ids), {n});
           },
           py::arg("text"), py::arg("add_special") = false)
      .def("decode",
           [](const TextTokenizer& t, const py::object& ids, std::optional<bool> clean_up) {
             const std::vector<int32_t> v = ids_of(ids, t.vocab_size(), "decode");
             const std::string text = t.decode(v);
             return text_of(clean_up.value_or(t.clean_up_tokenization_spaces()) ? clean_up_tokenization(text) : text);
           },
           py::arg("ids"), py::arg("clean_up_tokenization_spaces") = py::none(),
           "The text of ids as transformers' decode gives it: tidied (' ,' -> ',') when clean_up_tokenization_spaces "
           "is true, by default the tokenizer's own setting (its tokenizer_config.json's; False: the exact text).")
      .def_property_readonly("clean_up_tokenization_spaces", &TextTokenizer::clean_up_tokenization_spaces);
  m.def("tokenizer", [](const std::string& path) { return TextTokenizer::open(path); }, py::arg("path"),
        "A Hugging Face tokenizer.json, or the tokenizer a checkpoint carries.");

  m.def("quantize",
        [](const std::string& checkpoint, const std::string& out, const std::string& format, const std::string& method,
           const std::string& calib, int64_t calib_tokens, bool calib_first_step_only) {
          QuantizeOptions o;
          o.format = format;
          o.method = method;
          o.calib = calib;
          o.calib_tokens = calib_tokens;
          o.calib_first_step_only = calib_first_step_only;
          QuantizeResult r;
          r = library_call([&] { return quantize_checkpoint(checkpoint, out, o); });
          py::dict d;
          d["format"] = r.format;
          d["method"] = r.method;
          d["matrices"] = r.matrices;
          d["in_bytes"] = r.in_bytes;
          d["out_bytes"] = r.out_bytes;
          if (r.method == "gptq") {
            d["calib"] = r.calib;
            d["calib_tokens"] = r.calib_tokens;
            d["rtn_error"] = r.rtn_error;
            d["gptq_error"] = r.gptq_error;
          }
          return d;
        },
        py::arg("checkpoint"), py::arg("out"), py::arg("format"), py::arg("method") = "rtn", py::arg("calib") = "",
        py::arg("calib_tokens") = 16384, py::arg("calib_first_step_only") = false,
        "Quantize a fp32 checkpoint into the file `out` (the CLI's quantize): format q8_0, q4_0 or q4_k; method rtn or "
        "gptq (calibration text `calib`, default the checkpoint's data_train).");
}

// train(): the CLI's train, with a per-step callback.
void bind_train(py::module_& m) {
  m.def("train",
        [](const py::object& config, const std::string& out, std::optional<std::string> preset, bool resume, bool overwrite,
           const std::string& init_from, std::optional<int> stop_after, const py::object& callback, const py::object& log,
           bool quiet) {
          // resume with no config: the run's own (as the CLI's train --resume)
          const bool own = resume && config.is_none() && !preset;
          Config c = own ? run_config(out) : config_of(config, preset);
          // Your own text as the CLI's train holds it: data_train without data_val validates on its
          // last val_split (a new run; a resumed one or one from init_from keeps its config).
          std::string data_note;
          const bool continuing = resume && !out.empty() && has_checkpoint(out);
          if (!own && !continuing && init_from.empty() && py::isinstance<py::dict>(config)) {
            const py::dict keys = config.cast<py::dict>();
            c = with_own_data(c, keys.contains("data_train"), keys.contains("data_val"), &data_note);
          }
          TrainOptions o;
          o.out_dir = out;
          o.resume = resume;
          o.overwrite = overwrite;
          o.init_from = init_from;
          o.stop_after = stop_after.value_or(-1);
          o.quiet = quiet;
          py::object write = log.is_none() ? py::module_::import("sys").attr("stderr").attr("write") : log;
          const bool to_stderr = log.is_none();
          o.log = [&](const std::string& line) {
            py::gil_scoped_acquire gil;
            write(text_of(to_stderr ? line + "\n" : line));
          };
          if (!data_note.empty() && !quiet) o.log("note: " + data_note);
          // Ctrl-C (a KeyboardInterrupt, or whatever a signal handler raises) sets TrainOptions::stop:
          // the run ends after the current step with a checkpoint, then the exception is raised. The
          // callback runs on this (the calling) thread after every step, and Python's signal
          // handlers right after it, so a Ctrl-C seen there stops the run at that step. An exception
          // from the callback ends the run the same way and is raised again.
          Call call;
          o.stop = call.stop();
          std::exception_ptr raised;
          if (!callback.is_none())
            o.on_step = [&](const TrainStep& t) {
              bool go = true;
              call.on_caller([&] {
                try {
                  py::dict d;
                  d["step"] = t.step;
                  d["last"] = t.last;
                  d["loss"] = t.loss;
                  d["lr"] = t.lr;
                  d["grad_norm"] = t.grad_norm;
                  d["depth"] = t.depth;
                  d["tokens_per_s"] = t.tokens_per_s;
                  d["tokens_seen"] = t.tokens_seen;
                  d["elapsed_s"] = t.elapsed_s;
                  if (t.validated) {
                    d["val_loss"] = t.val_loss;
                    d["val_loss_by_depth"] = t.val_loss_by_depth;
                  }
                  const py::object r = callback(d);
                  go = r.is_none() || r.cast<bool>();  // False stops the run
                } catch (...) {
                  raised = std::current_exception();
                  go = false;
                }
              });
              return go && !call.stopping();
            };
          TrainResult r = call.run([&] { return train(c, o); });
          if (raised) std::rethrow_exception(raised);
          py::dict d;
          const py::ssize_t n = (py::ssize_t)r.losses.size();
          d["losses"] = owned_array(std::move(r.losses), {n});
          d["val_loss"] = r.val_loss;
          d["steps_done"] = r.steps_done;
          d["interrupted"] = r.interrupted;
          d["complete"] = r.complete;
          d["activation_bytes_peak"] = r.activation_bytes_peak;
          if (r.complete) d["report"] = eval_dict(r.report, c.R);
          d["checkpoint"] = out + "/model.safetensors";
          return d;
        },
        py::arg("config") = py::none(), py::arg("out") = "", py::arg("preset") = py::none(), py::arg("resume") = false,
        py::arg("overwrite") = false, py::arg("init_from") = "", py::arg("stop_after") = py::none(),
        py::arg("callback") = py::none(), py::arg("log") = py::none(), py::arg("quiet") = false,
        "Train into run directory `out` (the CLI's train): config is a dict of keys over a preset (default looped) "
        "or a JSON file. callback(step: dict) after every step; returning False stops the run with a checkpoint "
        "(resume=True continues it). log(line) gets the progress lines (default: stderr).");
}

}  // namespace

PYBIND11_MODULE(looplm, m) {
  m.doc() = "looplm: looped (recurrent-depth) transformer language models (docs/python.md)";
  m.attr("__version__") = kVersion;
  // The library's messages name Python's arguments (resume=True, config['lr'] = ...), not the CLI's flags.
  ArgumentSpelling spelling;
  spelling.resume = "resume=True";
  spelling.overwrite = "overwrite=True";
  spelling.init_from = "init_from";
  spelling.out = "out";
  spelling.value_sep = "=";
  spelling.set_prefix = "config['";
  spelling.set_key_end = "']";
  spelling.set_value_sep = " = ";
  spelling.set_origin = "config";
  set_argument_spelling(spelling);
  m.attr("__build__") = version_text() + "; CPU features used: " + cpu_features_text();

  g_error = PyErr_NewExceptionWithDoc("looplm.Error", "A bad file or a runtime failure, with looplm's message.",
                                      PyExc_RuntimeError, nullptr);
  py::tuple usage_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_usage_error = PyErr_NewExceptionWithDoc("looplm.UsageError", "A bad option or value (the CLI's exit 2).",
                                            usage_bases.ptr(), nullptr);
  m.attr("Error") = py::handle(g_error);
  m.attr("UsageError") = py::handle(g_usage_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UsageError& e) {
      PyErr_SetString(g_usage_error, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });

  m.def("set_threads", [](int n) {
        if (n < 0) throw UsageError("set_threads: n must be >= 0 (0 adapts to the machine)");
        library_call([&] { set_threads(n); });
      },
      py::arg("n"), "Compute threads: n exactly, or 0 (the default) to adapt to the cores this process may use.");
  m.def("presets", &preset_names, "The named configs (configs/*.json) a train() call may start from.");
  m.def("preset", [](const std::string& name) { return json_loads(load_preset(name).to_json_text()); }, py::arg("name"),
        "A named config as a dict.");

  py::class_<PyModel> model(m, "Model", "A checkpoint loaded for evaluation and generation (looplm.load).");
  model.def_property_readonly("config", [](const PyModel& s) { return json_loads(s.config().to_json_text()); },
                             "The model's config as a dict (docs/config.md).")
      .def_property_readonly("n_params", [](const PyModel& s) { return s.lm->n_params(); })
      .def_property_readonly("vocab_size", [](const PyModel& s) { return s.config().vocab_size; })
      .def_property_readonly("d_model", [](const PyModel& s) { return s.config().d_model; })
      .def_property_readonly("context", [](const PyModel& s) { return s.config().context; })
      .def_property_readonly("R", [](const PyModel& s) { return s.config().R; }, "The trained number of loop steps.");
  bind_model_text(model);
  bind_model_passes(model);
  bind_model_generate(model);
  bind_model_evaluate(model);
  bind_streams(m);
  bind_files(m);
  bind_train(m);
}
