// `looplm chat`: a conversation with a model in the terminal, in its own chat template (docs/cli.md,
// "chat"). Each line you type is a user message; the answer streams as it is made, in whole
// characters. /reset forgets the conversation, /exit or Ctrl-D ends it; Ctrl-C stops an answer
// (what was said so far stays in the history). The history is kept within the context: the oldest
// exchanges are dropped when the next answer would not fit.
//
// On a pipe (standard input not a terminal) nothing but the answers is printed: one answer per
// line of input, each ending with a newline, so `looplm chat < questions.txt` is a script.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "signals.h"

namespace looplm::cli {

namespace {

struct AnswerStopped {};  // thrown from generate's callback to end an answer Ctrl-C stopped

struct Turn {
  std::string role, content;
};

// The conversation as the model's prompt ids: the system message (if any), the turns, and the
// template's opening of the assistant's answer.
std::vector<int32_t> render(const LanguageModel& lm, const std::string& system, const std::vector<Turn>& turns,
                            const ChatOptions& co) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  for (const Turn& t : turns) messages.push_back({{"role", t.role}, {"content", t.content}});
  const std::string text =
      lm.apply_chat_template(messages.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace), co);
  return lm.encode_prompt(text, nullptr, false);  // the template wrote any BOS
}

// The conversation's prompt within the context: the oldest exchanges dropped (`dropped` counts
// them) until it leaves room for an answer of max_new tokens, or a quarter of the context when
// that is less; the last message stays, whatever its length.
std::vector<int32_t> within_context(const LanguageModel& lm, const std::string& system, std::vector<Turn>& turns,
                                    const ChatOptions& co, int max_new, size_t& dropped) {
  const int ctx = lm.config().context;
  const int room = std::min(max_new, std::max(1, ctx / 4));
  std::vector<int32_t> prompt = render(lm, system, turns, co);
  while ((int)prompt.size() + room > ctx && turns.size() > 1) {
    turns.erase(turns.begin(), turns.begin() + std::min<size_t>(2, turns.size() - 1));
    dropped += 1;
    prompt = render(lm, system, turns, co);
  }
  return prompt;
}

// --chat-template-kwargs: a JSON object of template variables ("" for none).
std::string template_variables(const std::string& text) {
  if (text.empty()) return "";
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw UsageError("chat: --chat-template-kwargs must be a JSON object (e.g. '{\"enable_thinking\": false}'), not '" +
                     brief(text) + "'");
  return j.dump();
}

// Reads one message: a line, or several joined where a line ends with a backslash. False at the
// end of input.
bool read_message(bool interactive, std::string& message) {
  message.clear();
  std::string line;
  bool first = true;
  for (;;) {
    if (interactive) {
      std::fputs(first ? "> " : ". ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) return !first;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    first = false;
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line + "\n";
      continue;
    }
    message += line;
    return true;
  }
}

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\n\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\n\r");
  return s.substr(a, b - a + 1);
}

// Generates the answer to `prompt`, printing its text as it comes (whole characters) and keeping it
// in `answer`. False when Ctrl-C stopped it (what was said so far is kept).
bool answer_streamed(const LanguageModel& lm, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                     std::string& answer) {
  TextStream text = lm.text_stream({o.stop, false});
  auto emit = [&](const std::string& s) {
    answer += s;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  GracefulStop stop("");  // Ctrl-C during an answer ends the answer (a second one, the program)
  try {
    lm.generate(prompt, o, [&](int32_t t) {
      if (stop.flag()->load()) throw AnswerStopped{};
      emit(text.push(t));
    });
    emit(text.finish());
  } catch (const AnswerStopped&) {
    return false;
  }
  return true;
}

// After an answer in a terminal: its tokens, rate and, with an exit rule, the loop steps it saved.
void print_timing(const GenerateStats& st, const GenerateOptions& o, double secs) {
  std::fprintf(stderr, "[%d tokens, %.1f tokens/s", st.new_tokens, st.new_tokens / std::max(st.gen_seconds, 1e-9));
  if (o.exit.rule != ExitRule::fixed)
    std::fprintf(stderr, ", %.2f loop steps per token to its exit, %.2f computed", st.mean_steps, st.computed_steps);
  std::fprintf(stderr, ", %.1f s]\n", secs);
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  CLI::App app{"Talk with a model in the terminal, in its chat template (one line, one message; /reset, /exit).",
               "looplm chat"};
  std::string ckpt, system, chat_template, template_kwargs;
  bool quiet = false;
  GenerateOptions g;
  g.max_new = 512;
  LoadOptions lo;
  app.add_option("--checkpoint", ckpt, "model.safetensors (or its run directory)")->required()->type_name("FILE");
  app.add_option("--system", system, "a system message opening the conversation (kept through /reset)")->type_name("TEXT");
  app.add_option("-n,--max-new,--max-tokens", g.max_new, "tokens an answer may take at most (default 512; less when the context is shorter)")
      ->check(at_least(1));
  app.add_option("--temperature", g.temperature, "0 = greedy (default 1.0)")->check(at_least(0));
  app.add_option("--top-k", g.top_k, "keep the k most likely tokens (0 = off)")->check(at_least(0));
  app.add_option("--top-p", g.top_p, "nucleus sampling mass (1 = off)")->check(within(0, 1, true, "greater than 0 and at most 1"));
  auto* seed_opt = app.add_option("--seed", g.seed,
                                  "sampling seed: answer i samples with seed + i (default: a random one, printed)");
  app.add_option("--depth", g.depth, "loop steps (default: the trained R; 0: none)")->check(at_least(0));
  ExitArgs ex;
  ex.add(app, " (default per_step)");
  app.add_option("--weights", lo.weights,
                 "weight format read per token: " + joined(available_weight_formats()) + " (default: the checkpoint's own)")
      ->check(weights_check());
  app.add_option("--kv-cache", g.kv_cache, "KV cache precision: " + joined(available_kv_caches()) + " (default fp32: exact)")
      ->check(CLI::IsMember(available_kv_caches()))
      ->type_name("TYPE");
  app.add_option("--chat-template", chat_template,
                 "render this instead of the model's own template: a built-in (" + joined(chat_template_names()) +
                     ") or a FILE (Jinja text, or a tokenizer_config.json)")
      ->type_name("NAME|FILE");
  app.add_option("--chat-template-kwargs", template_kwargs,
                 "a JSON object of more template variables, e.g. '{\"enable_thinking\": false}'")
      ->type_name("JSON");
  app.add_option("--stop", g.stop, "end an answer's text before TEXT (repeatable)")->type_name("TEXT");
  std::vector<std::string> biases;
  app.add_option("--logit-bias", biases, "ID=BIAS: add BIAS (-100 to 100) to token ID's logit (repeatable)")->type_name("ID=BIAS");
  app.add_flag("--quiet", quiet, "no banner, notes or per-answer timing (a pipe never gets the banner or timing)");
  ThreadsArg threads;
  threads.add(app);
  if (!parse(app, argc, argv, "chat")) return 0;
  set_threads(threads.n);
  for (const std::string& b : biases) g.logit_bias.push_back(parse_logit_bias(b, "chat"));
  g.exit = ex.exit();
  g.kv_policy = ex.kv_policy();
  if (g.depth == 0 && g.exit.rule != ExitRule::fixed)
    throw UsageError("chat: --exit-rule " + ex.rule + " needs loop steps (--depth 0 runs none)");
  ChatOptions co;
  co.extra_json = template_variables(template_kwargs);
  const bool interactive = isatty(STDIN_FILENO) == 1;
  const bool talk = interactive && !quiet;  // banner, timing

  LanguageModel lm = LanguageModel::load(ckpt, lo);
  if (!chat_template.empty()) lm.use_chat_template(chat_template);
  const std::string origin = lm.chat_template_origin();
  if (origin == "builtin:chatml") {
    g.stop.push_back("<|im_end|>");  // the built-in ChatML's end of a turn is text here (no special token for it)
    if (chat_template.empty() && !quiet)
      std::fprintf(stderr, "note: this model has no chat template: the conversation is written in ChatML "
                           "(<|im_start|>role ... <|im_end|>), which a model trained on plain text has not seen; "
                           "--chat-template NAME|FILE gives another\n");
  }
  if (!quiet) note_depth_beyond(g.depth, lm.config().R, "");
  if (seed_opt->count() == 0) draw_seed(g, quiet, "this conversation");
  const uint64_t seed0 = g.seed;
  const int ctx = lm.config().context;
  if (talk)
    std::fprintf(stderr, "looplm chat: %s, %s, context %d tokens. /reset forgets the conversation, /exit or Ctrl-D ends it, "
                         "Ctrl-C stops an answer; a line ending with \\ continues on the next\n",
                 ckpt.c_str(), origin == "builtin:chatml" ? "ChatML" : origin.c_str(), ctx);

  std::vector<Turn> turns;
  std::string message;
  for (int answer_no = 0; read_message(interactive, message);) {
    const std::string command = trimmed(message);
    if (command == "/exit" || command == "/quit") break;
    if (command == "/reset") {
      turns.clear();
      if (talk) std::fputs("(the conversation is forgotten)\n", stderr);
      continue;
    }
    if (command.empty() && interactive) continue;
    turns.push_back({"user", message});
    size_t dropped = 0;
    std::vector<int32_t> prompt;
    try {
      prompt = within_context(lm, system, turns, co, g.max_new, dropped);
    } catch (const UsageError& e) {  // the template refused the conversation (roles it does not take, ...)
      std::fprintf(stderr, "error: %s\n", e.what());
      turns.pop_back();
      if (!interactive) std::fputs("\n", stdout);
      continue;
    }
    if (dropped > 0 && !quiet)
      std::fprintf(stderr, "(the oldest %zu exchange%s no longer fit the context of %d tokens: forgotten)\n", dropped,
                   dropped == 1 ? "" : "s", ctx);
    if ((int)prompt.size() >= ctx) {
      std::fprintf(stderr, "error: this message takes %zu tokens in the template, and the context holds %d: say it shorter\n",
                   prompt.size(), ctx);
      turns.pop_back();
      if (!interactive) std::fputs("\n", stdout);  // one line of output per line of input
      continue;
    }
    GenerateOptions o = g;
    o.max_new = std::min(g.max_new, ctx - (int)prompt.size());
    o.seed = seed0 + answer_no++;
    GenerateStats st;
    o.stats = &st;
    std::string answer;
    const auto t0 = std::chrono::steady_clock::now();
    const bool stopped = !answer_streamed(lm, prompt, o, answer);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (stopped && !quiet) std::fputs("(stopped)\n", stderr);
    turns.push_back({"assistant", trimmed(answer)});
    if (talk && !stopped) print_timing(st, o, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (interactive) std::fputs("\n", stdout);
  return 0;
}

}  // namespace looplm::cli
