// `looplm serve`: an OpenAI-compatible HTTP server (docs/serve.md) on cpp-httplib (Debian's
// libcpp-httplib-dev: the library llama.cpp's server is built on; one header, a thread per
// connection from a pool, server-sent events through chunked responses). Requests become Jobs for
// the engine (serve_engine.h), which batches them continuously; this file is the HTTP side:
// requests (checked by serve_request.h) into jobs, and OpenAI's response shapes. The HTTP limits
// (body size, encodings, deadlines, connections per client) are serve_http.h's.
#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "serve_engine.h"
#include "serve_http.h"
#include "serve_page.h"
#include "serve_request.h"
#include "signals.h"

namespace looplm::cli {

namespace {
using nlohmann::json;
using serve::Job;

using serve::bad;
using serve::HttpError;
using serve::send_error;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Characters of UTF-8 text (what OpenAI's text_offset counts).
size_t chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

struct Server;

struct Server {
  const LanguageModel& lm;
  serve::Engine& engine;
  std::string model_id;
  serve::ModelView view;  // what the request checks need of the model (serve_request.h)
  std::atomic<int64_t> next_id{1};
  // Requests being answered (a stream counts until its last event is written or its client left):
  // a stopping server waits for them.
  std::atomic<int> inflight{0};
  std::atomic<bool> draining{false};

  // ---------------------------------------------------------------- the request log (stderr)
  // One line per generation request once it is answered (its id, tokens, mean loop steps, finish
  // reasons, milliseconds) and per refused request (status and message): --log-format text | json.
  bool log_json = false;
  std::mutex log_mu{};
  void log_line(const nlohmann::ordered_json& fields) {
    std::string line;
    if (log_json) {
      line = fields.dump(-1, ' ', false, json::error_handler_t::replace);
    } else {  // key=value, a value with a space or a quote in JSON's quotes
      line = "looplm serve:";
      for (const auto& [k, v] : fields.items()) {
        const bool plain = v.is_string() && v.get<std::string>().find_first_of(" \"=") == std::string::npos && !v.get<std::string>().empty();
        line += " " + k + "=" + (plain ? v.get<std::string>() : v.dump(-1, ' ', false, json::error_handler_t::replace));
      }
    }
    std::lock_guard<std::mutex> lk(log_mu);
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
  static double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::round(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() * 10) / 10;
  }
  // A generation request's line: its jobs' tokens and loop steps, their finish reasons.
  void log_jobs(const std::string& id, const std::string& route, const std::vector<std::shared_ptr<Job>>& jobs, int n,
                std::chrono::steady_clock::time_point t0) {
    int64_t prompt = 0, made = 0;
    double steps = 0;
    std::string finish;
    for (size_t k = 0; k < jobs.size(); ++k) {
      std::lock_guard<std::mutex> lk(jobs[k]->mu);
      if (k % n == 0) prompt += (int64_t)jobs[k]->prompt.size();
      made += (int64_t)jobs[k]->tokens.size();
      for (const auto& t : jobs[k]->tokens) steps += t.steps;
      const std::string f = jobs[k]->done ? jobs[k]->finish_reason : "cancelled";
      if (finish.find(f) == std::string::npos) finish += (finish.empty() ? "" : ",") + f;
    }
    log_line({{"id", id}, {"route", route}, {"status", 200}, {"prompt_tokens", prompt}, {"completion_tokens", made},
              {"mean_steps", made ? std::round(steps / made * 1000) / 1000 : 0.0}, {"finish", finish}, {"ms", ms_since(t0)}});
  }

  std::string new_id(const char* prefix) { return std::string(prefix) + std::to_string(next_id++); }
  int64_t created() const { return (int64_t)std::time(nullptr); }

  // Jobs for every (prompt, sample): sample i of a prompt uses seed + i (as generate --num-samples).
  std::vector<std::shared_ptr<Job>> submit(const std::vector<std::vector<int32_t>>& prompts, int n, const serve::RequestOptions& o) {
    std::vector<std::shared_ptr<Job>> jobs;
    for (const auto& p : prompts)
      for (int i = 0; i < n; ++i) {
        auto j = std::make_shared<Job>();
        j->prompt = p;
        j->opt = o.opt;
        j->opt.seed = o.opt.seed + (uint64_t)i;
        j->loop.depth = o.depth;
        j->loop.exit = o.exit;
        j->loop.kv_policy = o.kv_policy;
        j->stop = o.stop;
        j->stop_at_eos = o.stop_at_eos;
        jobs.push_back(j);
      }
    for (auto& j : jobs)
      if (j->opt.max_new == 0) {  // nothing to make (echo with logprobs scores the prompt only)
        j->done = true;
        j->finish_reason = "length";
      }
    for (size_t k = 0; k < jobs.size(); ++k)
      if (jobs[k]->opt.max_new > 0 && !engine.submit(jobs[k])) {
        for (size_t q = 0; q < k; ++q) jobs[q]->cancelled = true;
        engine.wake();
        throw HttpError{429, "the server is busy: its queue is full; try again shortly", "server_busy"};
      }
    return jobs;
  }

  // Waits for every job of a whole (non-streamed) answer. A client that closes its connection
  // meanwhile cancels them, as a streaming one does: their slots are free at the next token
  // boundary (HTTP 499 in the log, nginx's "client closed request"; nobody reads the answer).
  void wait_all(const std::vector<std::shared_ptr<Job>>& jobs) {
    for (const auto& jp : jobs) {
      Job& j = *jp;
      std::unique_lock<std::mutex> lk(j.mu);
      while (!j.done) {
        if (j.cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return j.done; })) break;
        lk.unlock();
        if (serve::HardenedServer::client_gone()) {
          for (const auto& q : jobs) q->cancelled = true;
          engine.wake();
          throw HttpError{499, "the client closed the connection before the answer", "client_closed"};
        }
        lk.lock();
      }
    }
  }

  // A prompt's text as decode writes it (echo), whole UTF-8.
  std::string prompt_text(const std::vector<int32_t>& ids) const {
    TextStream ts = lm.text_stream({{}, true});
    std::string text;
    for (int32_t id : ids) text += ts.push(id);
    return text + ts.finish();
  }

  // A token as OpenAI's logprobs name it: its bytes as text, or "bytes:\\x.." for part of a character.
  std::string label(int32_t id) const { return token_label(lm.token_piece(id)); }

  // OpenAI's logprobs object for the echoed prompt (first entry null; the rest from one full pass
  // at the request's depth) and the kept completion tokens. text_offset: where each token's text
  // begins in the choice's text, in characters.
  json logprobs_of(const Job& j, bool echo, int top, const std::string& prefix_text) const {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    auto add = [&](int32_t id, json lp, json alt, size_t offset) {
      tokens.push_back(label(id));
      lps.push_back(lp);
      tops.push_back(alt);
      offsets.push_back(offset);
    };
    // Characters of `text` before byte b, counted on from the last call (b only grows).
    struct Counter {
      const std::string& text;
      size_t bytes = 0, chars = 0;
      size_t to(size_t b) {
        b = std::min(b, text.size());
        for (; bytes < b; ++bytes) chars += ((unsigned char)text[bytes] & 0xC0) != 0x80;
        return chars;
      }
    };
    if (echo) {
      std::vector<float> z = lm.forward_logits(j.prompt, j.loop.depth);
      const int V = lm.config().vocab_size;
      TextStream prompt_text = lm.text_stream({{}, true});  // the prompt's text as decode writes it (prefix_text)
      Counter counted{prefix_text};
      for (size_t t = 0; t < j.prompt.size(); ++t) {
        const size_t offset = counted.to(prompt_text.text_bytes());
        prompt_text.push(j.prompt[t]);
        if (t == 0) {
          add(j.prompt[0], json(), json(), offset);
          continue;
        }
        const float* row = z.data() + (t - 1) * V;
        double mx = row[0], sum = 0;
        for (int v = 1; v < V; ++v) mx = std::max(mx, (double)row[v]);
        for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
        const double lse = mx + std::log(sum);
        json alt = json::object();
        if (top > 0) {
          std::vector<int32_t> ids(V);
          for (int v = 0; v < V; ++v) ids[v] = v;
          std::partial_sort(ids.begin(), ids.begin() + std::min(top, V), ids.end(),
                            [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
          for (int k = 0; k < std::min(top, V); ++k) alt[label(ids[k])] = row[ids[k]] - lse;
        }
        add(j.prompt[t], row[j.prompt[t]] - lse, alt, offset);
      }
    }
    const size_t base = chars(prefix_text);
    Counter counted{j.text};
    for (size_t k = 0; k < j.kept; ++k) {
      const auto& t = j.tokens[k];
      json alt = json::object();
      for (const auto& [id, lp] : t.top) alt[label(id)] = lp;
      add(t.id, t.logprob, alt, base + counted.to(j.text_start[k]));
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  static json steps_of(const Job& j, size_t from, size_t to) {
    json s = json::array();
    for (size_t k = from; k < to && k < j.tokens.size(); ++k) s.push_back(j.tokens[k].steps);
    return s;
  }
  static double mean_steps(const Job& j, size_t kept) {
    double s = 0;
    for (size_t k = 0; k < kept; ++k) s += j.tokens[k].steps;
    return kept ? s / kept : 0;
  }

  // The looped summary of finished jobs: loop steps per token and the KV policy's bytes per position.
  static json loop_summary(const std::vector<std::shared_ptr<Job>>& jobs, int depth) {
    double steps = 0, kv = 0;
    size_t tokens = 0;
    for (const auto& j : jobs) {
      std::lock_guard<std::mutex> lk(j->mu);
      for (const auto& t : j->tokens) steps += t.steps;
      tokens += j->tokens.size();
      kv = std::max(kv, j->kv_bytes_per_token);
    }
    return {{"depth", depth}, {"mean_steps", tokens ? steps / tokens : 0.0}, {"kv_bytes_per_token", kv}};
  }

  json usage(const std::vector<std::shared_ptr<Job>>& jobs, int n) const {
    int64_t p = 0, c = 0;
    for (size_t k = 0; k < jobs.size(); ++k) {
      if (k % n == 0) p += (int64_t)jobs[k]->prompt.size();  // a prompt counts once for its n samples
      c += (int64_t)jobs[k]->tokens.size();
    }
    return {{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
  }

  // Streams server-sent events until every job is done, then `data: [DONE]`: one chunk per token
  // whose text is ready (`chunk(job index, piece, first token, end token, finished)`; a token whose
  // bytes are held back, an unfinished character or a possible stop string, travels with the next
  // one), and `last()` (the usage) at the end. A client that goes away cancels the jobs: their
  // slots are free at the next token boundary.
  void stream(httplib::Response& res, std::vector<std::shared_ptr<Job>> jobs,
              std::function<json(size_t, const std::string&, size_t, size_t, bool)> chunk, std::function<json()> last,
              std::function<void()> ended) {
    struct State {
      std::vector<size_t> sent_text, sent_tokens;
      std::vector<bool> closed;
      bool finished = false;
    };
    auto st = std::make_shared<State>();
    ++inflight;  // until the releaser runs
    std::atomic<int>* count = &inflight;
    st->sent_text.assign(jobs.size(), 0);
    st->sent_tokens.assign(jobs.size(), 0);
    st->closed.assign(jobs.size(), false);
    serve::Engine* eng = &engine;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [jobs, st, chunk, last](size_t, httplib::DataSink& sink) {
          auto send = [&](const json& j) {
            const std::string payload = "data: " + dump(j) + "\n\n";
            return sink.write(payload.data(), payload.size());
          };
          for (;;) {
            bool all_closed = true, wrote = false;
            for (size_t k = 0; k < jobs.size(); ++k) {
              if (st->closed[k]) continue;
              Job& j = *jobs[k];
              std::string text, error;
              std::vector<size_t> ends;
              bool done = false;
              {
                std::unique_lock<std::mutex> lk(j.mu);
                if (!j.done && j.text_end.size() == st->sent_tokens[k])
                  j.cv.wait_for(lk, std::chrono::milliseconds(jobs.size() > 1 ? 5 : 50));
                text = j.text;
                ends.assign(j.text_end.begin() + (std::ptrdiff_t)std::min(st->sent_tokens[k], j.text_end.size()), j.text_end.end());
                done = j.done;
                if (done && j.finish_reason == "error") error = j.error;
              }
              if (!error.empty() && !send({{"error", {{"message", error}, {"type", "server_error"}}}})) return false;
              // a chunk per token whose piece is ready
              size_t from = st->sent_tokens[k];
              for (size_t q = 0; q < ends.size(); ++q) {
                const size_t end = std::min(ends[q], text.size());
                const bool final_piece = done && q + 1 == ends.size();
                if (end <= st->sent_text[k] && !final_piece) continue;  // held back: goes with the next token
                const size_t to = st->sent_tokens[k] + q + 1;
                const std::string piece = text.substr(st->sent_text[k], final_piece ? std::string::npos : end - st->sent_text[k]);
                if (!send(chunk(k, piece, from, to, final_piece))) return false;
                st->sent_text[k] += piece.size();
                from = to;
                wrote = true;
              }
              st->sent_tokens[k] += ends.size();
              if (done && ends.empty()) {  // finished with no new token (cancelled, an error, or nothing made)
                if (!send(chunk(k, text.substr(std::min(st->sent_text[k], text.size())), from, from, true))) return false;
                st->sent_text[k] = text.size();
                wrote = true;
              }
              if (done) st->closed[k] = true;
              all_closed = all_closed && st->closed[k];
            }
            if (all_closed) {
              if (last) {
                const json l = last();
                if (!l.is_null() && !send(l)) return false;
              }
              const std::string end = "data: [DONE]\n\n";
              sink.write(end.data(), end.size());
              st->finished = true;
              sink.done();
              return true;
            }
            if (wrote) return true;  // let the library flush; it calls again
          }
        },
        [jobs, st, eng, count, ended](bool) {
          if (!st->finished) {
            for (auto& j : jobs) j->cancelled = true;  // the client went away
            eng->wake();
          }
          ended();
          --*count;
        });
  }

  // ---------------------------------------------------------------- POST /v1/completions
  void completions(const httplib::Request& req, httplib::Response& res) {
    const auto t0 = std::chrono::steady_clock::now();
    const serve::CompletionRequest r = serve::completion_request(view, req.body);
    const bool echo = r.echo, streaming = r.stream;
    const int64_t logprobs = r.logprobs;
    const int n = r.n;
    const auto& prompts = r.prompts;
    serve::RequestOptions base = r.o;
    if (echo)  // the prompt's text (and with logprobs its tokens' labels): ids the tokenizer cannot write are the request's fault
      for (const auto& p : prompts) prompt_text(p);
    auto jobs = submit(prompts, n, base);
    const std::string id = new_id("cmpl-");
    const int64_t t = created();
    const std::string depth = std::to_string(lm.config().depth_or_R(base.depth));
    if (streaming) {
      std::vector<std::string> prompt_texts;
      for (const auto& p : prompts) prompt_texts.push_back(prompt_text(p));
      stream(
          res, jobs,
          [=, this](size_t k, const std::string& text, size_t from, size_t to, bool done) {
            const Job& j = *jobs[k];
            json c = {{"index", k}, {"text", (echo && from == 0 ? prompt_texts[k / n] : "") + text},
                      {"logprobs", json()}, {"finish_reason", done ? json(j.finish_reason) : json()},
                      {"looplm", {{"steps", steps_of(j, from, to)}}}};
            const size_t shown = done ? std::min(to, j.kept) : to;  // not an end token, nor past a stop string
            if (logprobs >= 0 && shown > from) {
              c["logprobs"] = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
              for (size_t q = from; q < shown; ++q) {
                json alt = json::object();
                for (const auto& [tid, lp] : j.tokens[q].top) alt[label(tid)] = lp;
                c["logprobs"]["tokens"].push_back(label(j.tokens[q].id));
                c["logprobs"]["token_logprobs"].push_back(j.tokens[q].logprob);
                c["logprobs"]["top_logprobs"].push_back(alt);
              }
            }
            json out = {{"id", id}, {"object", "text_completion"}, {"created", t}, {"model", model_id}, {"choices", {c}}};
            return out;
          },
          [=, this]() {
            return json{{"id", id}, {"object", "text_completion"}, {"created", t}, {"model", model_id},
                        {"choices", json::array()}, {"usage", usage(jobs, n)}, {"looplm", loop_summary(jobs, std::stoi(depth))}};
          },
          [=, this]() { const_cast<Server*>(this)->log_jobs(id, "/v1/completions", jobs, n, t0); });
      return;
    }
    json choices = json::array();
    double steps = 0, kv_bytes = 0;
    int64_t counted = 0;
    wait_all(jobs);
    for (size_t k = 0; k < jobs.size(); ++k) {
      Job& j = *jobs[k];
      if (j.finish_reason == "error") throw HttpError{500, j.error, "server_error"};
      const size_t kept = j.kept;
      const std::string prefix = echo ? prompt_text(j.prompt) : "";
      json c = {{"index", k}, {"text", prefix + j.text}, {"finish_reason", j.finish_reason},
                {"logprobs", logprobs >= 0 ? logprobs_of(j, echo, (int)logprobs, prefix) : json()},
                {"looplm", {{"steps", steps_of(j, 0, kept)}, {"mean_steps", mean_steps(j, kept)}}}};
      choices.push_back(c);
      for (size_t q = 0; q < kept; ++q) steps += j.tokens[q].steps;
      counted += (int64_t)kept;
      kv_bytes = std::max(kv_bytes, j.kv_bytes_per_token);
    }
    json out = {{"id", id}, {"object", "text_completion"}, {"created", t}, {"model", model_id}, {"choices", choices},
                {"usage", usage(jobs, n)},
                {"looplm", {{"depth", std::stoi(depth)}, {"mean_steps", counted ? steps / counted : 0.0}, {"kv_bytes_per_token", kv_bytes}}}};
    res.set_content(dump(out), "application/json");
    log_jobs(id, "/v1/completions", jobs, n, t0);
  }

  // ---------------------------------------------------------------- chat
  // POST /apply-template (llama-server's route): {messages} -> {prompt}, the text chat would run.
  void apply_template(const httplib::Request& req, httplib::Response& res) {
    const json body = serve::parse_body(req.body);
    res.set_content(dump({{"prompt", serve::chat_prompt(view, req.body, body)}}), "application/json");
  }

  // ---------------------------------------------------------------- POST /v1/chat/completions
  void chat(const httplib::Request& req, httplib::Response& res) {
    const auto t0 = std::chrono::steady_clock::now();
    const serve::ChatRequest r = serve::chat_request(view, req.body);
    const int n = r.n;
    const serve::RequestOptions& base = r.o;
    const std::vector<int32_t>& prompt = r.prompt;
    auto jobs = submit({prompt}, n, base);
    const std::string id = new_id("chatcmpl-");
    const int64_t t = created();
    if (r.stream) {
      auto first = std::make_shared<std::vector<bool>>(jobs.size(), true);
      stream(
          res, jobs,
          [=, this](size_t k, const std::string& delta, size_t from, size_t to, bool done) {
            const Job& j = *jobs[k];
            json d = json::object();
            if ((*first)[k]) d["role"] = "assistant";
            (*first)[k] = false;
            if (!delta.empty()) d["content"] = delta;
            json c = {{"index", k}, {"delta", d}, {"finish_reason", done ? json(j.finish_reason) : json()},
                      {"looplm", {{"steps", steps_of(j, from, to)}}}};
            return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", t}, {"model", model_id}, {"choices", {c}}};
          },
          [=, this]() {
            return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", t}, {"model", model_id},
                        {"choices", json::array()}, {"usage", usage(jobs, n)}};
          },
          [=, this]() { const_cast<Server*>(this)->log_jobs(id, "/v1/chat/completions", jobs, n, t0); });
      return;
    }
    wait_all(jobs);
    json choices = json::array();
    for (size_t k = 0; k < jobs.size(); ++k) {
      Job& j = *jobs[k];
      if (j.finish_reason == "error") throw HttpError{500, j.error, "server_error"};
      const size_t kept = j.kept;
      choices.push_back({{"index", k}, {"message", {{"role", "assistant"}, {"content", j.text}}}, {"finish_reason", j.finish_reason},
                         {"logprobs", json()}, {"looplm", {{"steps", steps_of(j, 0, kept)}, {"mean_steps", mean_steps(j, kept)}}}});
    }
    res.set_content(dump({{"id", id}, {"object", "chat.completion"}, {"created", t}, {"model", model_id},
                          {"choices", choices}, {"usage", usage(jobs, n)}}),
                    "application/json");
    log_jobs(id, "/v1/chat/completions", jobs, n, t0);
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = serve::parse_body(req.body);
    const char* key = body.contains("prompt") ? "prompt" : "content";
    if (!body.contains(key) || !body[key].is_string()) throw bad("give the text as 'prompt' (or 'content')", "prompt");
    const std::vector<int32_t> ids = lm.encode(body[key].get<std::string>());
    json out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine.context()}};
    if (body.contains("with_pieces") && !body["with_pieces"].is_null() && !body["with_pieces"].is_boolean())
      throw bad("'with_pieces' must be true or false", "with_pieces");
    if (body.value("with_pieces", json(false)).is_boolean() && body.value("with_pieces", json(false)).get<bool>()) {
      json pieces = json::array();
      for (int32_t id : ids) pieces.push_back({{"id", id}, {"piece", label(id)}});
      out["tokens"] = pieces;
    }
    res.set_content(dump(out), "application/json");
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = serve::parse_body(req.body);
    if (!body.contains("tokens") || !body["tokens"].is_array()) throw bad("give the ids as 'tokens'", "tokens");
    std::vector<int32_t> ids;
    const int V = lm.config().vocab_size;
    for (const json& x : body["tokens"]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= V)
        throw bad("'tokens' holds ids 0.." + std::to_string(V - 1), "tokens");
      ids.push_back((int32_t)x.get<int64_t>());
    }
    std::string text;
    try {
      text = lm.decode(ids);
    } catch (const Error& e) {  // an id the tokenizer has no text for (a model's vocabulary padded past its tokenizer's)
      throw bad(e.what(), "tokens");
    }
    res.set_content(dump({{"prompt", text}, {"content", text}}), "application/json");
  }

  void tokenizer_info(httplib::Response& res) {
    const auto sp = lm.special_tokens();
    const Config& c = lm.config();
    auto or_null = [](const std::string& s) { return s.empty() ? json() : json(s); };
    auto id_or_null = [](int32_t id) { return id < 0 ? json() : json(id); };
    res.set_content(dump({{"eos_token", or_null(sp.eos_text)}, {"eos_token_id", id_or_null(sp.eos)},
                          {"eos_token_ids", sp.eos_ids}, {"bos_token", or_null(sp.bos_text)},
                          {"bos_token_id", id_or_null(sp.bos)}, {"add_bos_token", sp.add_bos},
                          {"pad_token", json()}, {"chat_template", or_null(lm.chat_template())}, {"chat_template_used", lm.chat_template_origin()},
                          {"tokenizer_class", c.tokenizer},
                          {"vocab_size", c.vocab_size}, {"model_max_length", engine.context()}}),
                    "application/json");
  }

  void metrics(httplib::Response& res) {
    const serve::EngineMetrics m = engine.metrics();
    char buf[2048];
    std::snprintf(buf, sizeof buf,
                  "# HELP looplm_requests_total Sequences submitted (a request with n prompts x samples counts each).\n"
                  "# TYPE looplm_requests_total counter\nlooplm_requests_total %lld\n"
                  "# HELP looplm_prompt_tokens_total Prompt tokens run.\n# TYPE looplm_prompt_tokens_total counter\nlooplm_prompt_tokens_total %lld\n"
                  "# HELP looplm_completion_tokens_total Tokens generated.\n# TYPE looplm_completion_tokens_total counter\nlooplm_completion_tokens_total %lld\n"
                  "# HELP looplm_loop_steps_total Loop steps run for the generated tokens.\n# TYPE looplm_loop_steps_total counter\nlooplm_loop_steps_total %lld\n"
                  "# HELP looplm_loop_steps_per_token Mean loop steps per generated token.\n# TYPE looplm_loop_steps_per_token gauge\nlooplm_loop_steps_per_token %.4f\n"
                  "# HELP looplm_requests_cancelled_total Sequences ended because their client went away.\n# TYPE looplm_requests_cancelled_total counter\nlooplm_requests_cancelled_total %lld\n"
                  "# HELP looplm_requests_running Sequences decoding now.\n# TYPE looplm_requests_running gauge\nlooplm_requests_running %d\n"
                  "# HELP looplm_requests_waiting Sequences waiting for a slot.\n# TYPE looplm_requests_waiting gauge\nlooplm_requests_waiting %d\n",
                  (long long)m.requests, (long long)m.prompt_tokens, (long long)m.completion_tokens, (long long)m.loop_steps,
                  m.completion_tokens ? (double)m.loop_steps / (double)m.completion_tokens : 0.0, (long long)m.cancelled,
                  m.running, m.waiting);
    res.set_content(buf, "text/plain; version=0.0.4");
  }
};

// Runs a handler, turning a request error into its status and an OpenAI-style error body.
template <class F>
auto guarded(Server& s, F f) {
  return [&s, f](const httplib::Request& req, httplib::Response& res) {
    struct Count {
      std::atomic<int>& n;
      explicit Count(std::atomic<int>& c) : n(c) { ++n; }
      ~Count() { --n; }
    } count(s.inflight);
    const auto t0 = std::chrono::steady_clock::now();
    auto refuse = [&](const HttpError& e) {
      send_error(res, e);
      s.log_line({{"route", req.path}, {"status", e.status}, {"error", e.message}, {"ms", Server::ms_since(t0)}});
    };
    try {
      f(req, res);
    } catch (const HttpError& e) {
      refuse(e);
      if (e.status == 429) res.set_header("Retry-After", "1");
    } catch (const Error& e) {
      // The library's error for what it was given: here, the request (a text or ids the tokenizer
      // cannot take, a template's refusal). The model and its files were checked at start.
      refuse(bad(e.what()));
    } catch (const nlohmann::json::exception& e) {  // a value of a type the code did not expect: the body's
      refuse(bad("the request has a value of the wrong type (" + brief(plain_message(e), 200) + ")"));
    } catch (const std::exception& e) {
      refuse(HttpError{500, e.what(), "server_error"});
    }
  };
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serve a checkpoint over HTTP: OpenAI-compatible completions and chat, continuous batching, a web page.",
               "looplm serve"};
  std::string ckpt, host = "127.0.0.1", api_key, name;
  int port = 8080, parallel = 4, queue = 64, context = 0;
  serve::HttpLimits limits;
  LoadOptions lo;
  std::string kv_cache = "fp32";
  app.add_option("--checkpoint", ckpt, "model.safetensors (or its run directory)")->required()->type_name("FILE");
  app.add_option("--host", host, "address to listen on (default 127.0.0.1: this machine only)");
  app.add_option("--port", port, "port (default 8080; 0: any free one, printed)")->check(CLI::Range(0, 65535));
  app.add_option("--parallel", parallel, "sequences decoded together (default 4)")->check(CLI::Range(1, 256));
  app.add_option("--context", context,
                 "positions each sequence may use (default: the model's context): a model trained to a long context "
                 "(Ouro: 32,768) needs less to fit --parallel sequences' KV caches in memory")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--queue", queue, "requests that may wait for a slot beyond those; more get HTTP 429 (default 64)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--api-key", api_key, "require 'Authorization: Bearer KEY' on every route but /health and /");
  app.add_option("--model-name", name, "the model's id in /v1/models and responses (default: the checkpoint's directory name)");
  app.add_option("--max-body", limits.max_body,
                 "largest request body in bytes, counted as it arrives (chunked too); larger ones get HTTP 413 (default 1 MiB)")
      ->check(CLI::Range((size_t)1, (size_t)1 << 32));
  app.add_option("--request-timeout", limits.request_timeout_s,
                 "seconds a request's line, headers and body may take to arrive, however slowly; then HTTP 408 (default 30)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--max-conns-per-client", limits.max_conns_per_client,
                 "open connections one client address may hold; more get HTTP 429 at once (default 32)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--weights", lo.weights, "weight format inference reads: " + joined(available_weight_formats()) + " (default the checkpoint's own)")
      ->check(weights_check());
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "one line per request on stderr: text (key=value) or json (default text)")
      ->check(CLI::IsMember({"text", "json"}));
  std::string chat_template;
  app.add_option("--chat-template", chat_template,
                 "what chat renders instead of the model's own template: a built-in (" + joined(chat_template_names()) +
                     ") or a FILE (Jinja text, or a tokenizer_config.json)")
      ->type_name("NAME|FILE");
  app.add_option("--kv-cache", kv_cache, "KV cache precision: " + joined(available_kv_caches()) + " (fp32 is exact)")->check(CLI::IsMember(available_kv_caches()));
  ThreadsArg threads;
  threads.add(app);
  if (!parse(app, argc, argv, "serve")) return 0;
  set_threads(threads.n);
  GracefulStop graceful;  // SIGTERM / Ctrl-C: stop taking requests, finish those in flight, exit 0

  LanguageModel lm = LanguageModel::load(ckpt, lo);
  if (!chat_template.empty()) lm.use_chat_template(chat_template);
  if (name.empty()) {
    std::filesystem::path p = std::filesystem::absolute(ckpt).lexically_normal();
    if (p.filename() == "model.safetensors" || p.has_extension()) p = p.parent_path();
    name = p.filename().string().empty() ? "looplm" : p.filename().string();
  }
  serve::Engine engine(lm, serve::EngineOptions{parallel, queue, kv_cache, context});
  Server s{lm, engine, name, {}};
  s.log_json = log_format == "json";

  s.view.id = name;
  s.view.vocab_size = lm.config().vocab_size;
  s.view.R = lm.config().R;
  s.view.context = engine.context();
  s.view.max_sequences = parallel + queue;
  s.view.exit_gate = lm.has_exit_gate();
  s.view.builtin_chatml = lm.chat_template_origin() == "builtin:chatml";
  for (int32_t id = 0; id < lm.config().vocab_size; ++id)
    if (!lm.has_text(id)) s.view.no_text.resize(lm.config().vocab_size, false), s.view.no_text[id] = true;
  s.view.encode_prompt = [&lm](const std::string& text, bool add_bos) { return lm.encode_prompt(text, nullptr, add_bos); };
  s.view.apply_chat_template = [&lm](const std::string& messages, const ChatOptions& o) { return lm.apply_chat_template(messages, o); };

  // The thread budget (docs/serve.md, "Limits"): a connection holds one of these threads while it
  // is open (a request arriving, decoding, streaming, or idle up to the keep-alive time).
  serve::HardenedServer http(limits);
  const size_t threads_budget = (size_t)std::max(8, parallel + std::min(queue, 64) + 4);
  http.new_task_queue = [threads_budget] { return new httplib::ThreadPool(threads_budget); };
  // Streamed tokens are small writes: no Nagle delay. The listening socket's backlog: the library
  // listens with 5, so a burst of new connections (16 clients at once) had some wait out a SYN
  // retransmit (1 s); the socket is kept here and listens again with a real backlog below.
  http.set_tcp_nodelay(true);
  int listen_fd = -1;
  http.set_socket_options([&listen_fd](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = fd;
  });
  http.set_keep_alive_max_count(1000);
  http.set_read_timeout(std::min(30, limits.request_timeout_s), 0);
  http.set_write_timeout(30, 0);
  http.set_pre_routing([&](const httplib::Request& req, httplib::Response& res) {
    if (s.draining) {
      serve::HardenedServer::close_after();
      send_error(res, HttpError{503, "the server is stopping", "server_stopping"});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (api_key.empty() || req.path == "/health" || req.path == "/" || req.path == "/index.html") return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + api_key) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, HttpError{401, "a valid API key is needed: 'Authorization: Bearer KEY'", "invalid_api_key"});
    serve::HardenedServer::close_after();  // (a body it sent is not read)
    return httplib::Server::HandlerResponse::Handled;
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{\"status\":\"ok\"}", "application/json"); });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(serve::kPage, "text/html; charset=utf-8"); });
  http.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    const Config& c = lm.config();
    nlohmann::json m = {{"id", s.model_id}, {"object", "model"}, {"created", s.created()}, {"owned_by", "looplm"},
                        {"looplm", {{"R", c.R}, {"context", c.context}, {"vocab_size", c.vocab_size}, {"n_params", lm.n_params()},
                                    {"exit_gate", lm.has_exit_gate()}}}};
    res.set_content(dump({{"object", "list"}, {"data", {m}}}), "application/json");
  });
  http.post_with_body("/v1/completions", guarded(s, [&](const httplib::Request& q, httplib::Response& r) { s.completions(q, r); }));
  http.post_with_body("/v1/chat/completions", guarded(s, [&](const httplib::Request& q, httplib::Response& r) { s.chat(q, r); }));
  http.post_with_body("/apply-template", guarded(s, [&](const httplib::Request& q, httplib::Response& r) { s.apply_template(q, r); }));
  http.post_with_body("/tokenize", guarded(s, [&](const httplib::Request& q, httplib::Response& r) { s.tokenize(q, r); }));
  http.post_with_body("/detokenize", guarded(s, [&](const httplib::Request& q, httplib::Response& r) { s.detokenize(q, r); }));
  http.Get("/tokenizer_info", [&](const httplib::Request&, httplib::Response& r) { s.tokenizer_info(r); });
  http.Get("/metrics", [&](const httplib::Request&, httplib::Response& r) { s.metrics(r); });

  const int bound = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound < 0) throw Error("cannot listen on " + host + ":" + std::to_string(port) + " (in use, or not an address of this machine)");
  if (listen_fd >= 0) ::listen(listen_fd, 1024);
  std::fprintf(stderr, "looplm serve: %s (%s, R = %d, context %d) on http://%s:%d/ with %d parallel sequences, %zu connection threads\n",
               name.c_str(), ckpt.c_str(), lm.config().R, engine.context(), host.c_str(), bound, parallel, threads_budget);
  std::fflush(stderr);
  std::atomic<bool> listening{true};
  std::thread watcher([&] {
    while (listening) {
      if (graceful.flag()->load()) {
        // New requests get 503; those in flight (streams too) finish; then the listener closes.
        std::fprintf(stderr, "looplm serve: stopping: no new requests; finishing those in flight\n");
        s.draining = true;
        while (s.inflight > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        http.stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const bool ok = http.listen_after_bind();
  listening = false;
  watcher.join();
  if (!ok && !graceful.flag()->load()) throw Error("the server stopped listening unexpectedly");
  std::fprintf(stderr, "looplm serve: stopped\n");
  return 0;
}

}  // namespace looplm::cli
