// `looplm serve`: an OpenAI-compatible HTTP server (docs/serve.md) on cpp-httplib (Debian's
// libcpp-httplib-dev: the library llama.cpp's server is built on; one header, a thread per
// connection from a pool, server-sent events through chunked responses). The server by role, as
// llama.cpp's: serve_request.h checks a request, serve_openai.h turns it into jobs and jobs into
// OpenAI's shapes, serve_engine.h runs the jobs (continuous batching), serve_http.h holds the HTTP
// limits (body size, encodings, deadlines, connections per client); the first three are the
// library target looplm_serve, which the tests link. This file is the routes: a request to the
// engine and back, streamed as server-sent events or whole, and the request log.
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
#include "serve_openai.h"
#include "serve_page.h"
#include "serve_request.h"
#include "signals.h"

namespace looplm::cli {

namespace {
using nlohmann::json;
using serve::Job;
namespace openai = serve::openai;

using serve::bad;
using serve::HttpError;
using serve::send_error;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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

  // The request's jobs (openai::jobs_for) into the engine; HTTP 429 when its queue is full.
  openai::Jobs submit(const std::vector<std::vector<int32_t>>& prompts, int n, const serve::RequestOptions& o, int score_prompt = -1) {
    openai::Jobs jobs = openai::jobs_for(prompts, n, o, score_prompt);
    for (size_t k = 0; k < jobs.size(); ++k)
      if (!jobs[k]->done && !engine.submit(jobs[k])) {
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
              // The chunks are built under the job's lock (they read its tokens, which the engine
              // appends to meanwhile) and sent after it, so a slow client never holds the engine up.
              std::vector<json> out;
              bool done = false;
              {
                std::unique_lock<std::mutex> lk(j.mu);
                if (!j.done && j.text_end.size() == st->sent_tokens[k])
                  j.cv.wait_for(lk, std::chrono::milliseconds(jobs.size() > 1 ? 5 : 50));
                const std::string& text = j.text;
                const size_t sent = std::min(st->sent_tokens[k], j.text_end.size()), n_new = j.text_end.size() - sent;
                done = j.done;
                if (done && j.finish_reason == "error") out.push_back({{"error", {{"message", j.error}, {"type", "server_error"}}}});
                // a chunk per token whose piece is ready
                size_t from = st->sent_tokens[k];
                for (size_t q = 0; q < n_new; ++q) {
                  const size_t end = std::min(j.text_end[sent + q], text.size());
                  const bool final_piece = done && q + 1 == n_new;
                  if (end <= st->sent_text[k] && !final_piece) continue;  // held back: goes with the next token
                  const size_t to = st->sent_tokens[k] + q + 1;
                  const size_t at = std::min(st->sent_text[k], text.size());
                  const std::string piece = text.substr(at, final_piece ? std::string::npos : end - at);
                  out.push_back(chunk(k, piece, from, to, final_piece));
                  st->sent_text[k] = at + piece.size();
                  from = to;
                }
                st->sent_tokens[k] += n_new;
                if (done && n_new == 0) {  // finished with no new token (cancelled, an error, or nothing made)
                  out.push_back(chunk(k, text.substr(std::min(st->sent_text[k], text.size())), from, from, true));
                  st->sent_text[k] = text.size();
                }
              }
              for (const json& c : out)
                if (!send(c)) return false;
              wrote = wrote || !out.empty();
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
    // The prompts' text (echo): ids the tokenizer cannot write are the request's fault (HTTP 400).
    std::vector<std::string> prompt_texts;
    if (r.echo)
      for (const auto& p : r.prompts) prompt_texts.push_back(openai::prompt_text(lm, p));
    auto jobs = submit(r.prompts, r.n, r.o, r.echo ? r.logprobs : -1);
    const openai::Head h{new_id("cmpl-"), created(), model_id};
    if (r.stream) {
      stream(
          res, jobs,
          [=, this](size_t k, const std::string& text, size_t from, size_t to, bool done) {
            const std::string echoed = r.echo && from == 0 ? prompt_texts[k / r.n] : "";
            return openai::completion_chunk(h, lm, *jobs[k], k, echoed + text, from, to, done, r.logprobs);
          },
          [=, this]() { return openai::completion_last(h, lm, jobs, r); },
          [=, this]() { const_cast<Server*>(this)->log_jobs(h.id, "/v1/completions", jobs, r.n, t0); });
      return;
    }
    wait_all(jobs);
    res.set_content(dump(openai::completion(h, lm, jobs, r)), "application/json");
    log_jobs(h.id, "/v1/completions", jobs, r.n, t0);
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
    auto jobs = submit({r.prompt}, r.n, r.o);
    const openai::Head h{new_id("chatcmpl-"), created(), model_id};
    if (r.stream) {
      auto first = std::make_shared<std::vector<bool>>(jobs.size(), true);
      stream(
          res, jobs,
          [=](size_t k, const std::string& delta, size_t from, size_t to, bool done) {
            const bool is_first = (*first)[k];
            (*first)[k] = false;
            return openai::chat_chunk(h, *jobs[k], k, delta, from, to, done, is_first);
          },
          [=]() { return openai::chat_last(h, jobs, r.n); },
          [=, this]() { const_cast<Server*>(this)->log_jobs(h.id, "/v1/chat/completions", jobs, r.n, t0); });
      return;
    }
    wait_all(jobs);
    res.set_content(dump(openai::chat(h, jobs, r.n)), "application/json");
    log_jobs(h.id, "/v1/chat/completions", jobs, r.n, t0);
  }

  // ---------------------------------------------------------------- llama-server's routes
  void tokenize(const httplib::Request& req, httplib::Response& res) {
    res.set_content(dump(openai::tokenize(lm, req.body, engine.context())), "application/json");
  }
  void detokenize(const httplib::Request& req, httplib::Response& res) {
    res.set_content(dump(openai::detokenize(lm, req.body)), "application/json");
  }
  void tokenizer_info(httplib::Response& res) { res.set_content(dump(openai::tokenizer_info(lm, engine.context())), "application/json"); }
  void metrics(httplib::Response& res) { res.set_content(openai::metrics_text(engine.metrics()), "text/plain; version=0.0.4"); }
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

// What the request checks need of the model (serve_request.h).
serve::ModelView view_of(const LanguageModel& lm, const std::string& name, int context, int max_sequences) {
  serve::ModelView v;
  v.id = name;
  v.vocab_size = lm.config().vocab_size;
  v.R = lm.config().R;
  v.context = context;
  v.max_sequences = max_sequences;
  v.exit_gate = lm.has_exit_gate();
  v.builtin_chatml = lm.chat_template_origin() == "builtin:chatml";
  for (int32_t id = 0; id < lm.config().vocab_size; ++id)
    if (!lm.has_text(id)) v.no_text.resize(lm.config().vocab_size, false), v.no_text[id] = true;
  v.encode_prompt = [&lm](const std::string& text, bool add_bos) { return lm.encode_prompt(text, nullptr, add_bos); };
  v.apply_chat_template = [&lm](const std::string& messages, const ChatOptions& o) { return lm.apply_chat_template(messages, o); };
  return v;
}

// The routes: a stopping server's 503, the API key, then OpenAI's and llama-server's routes.
void add_routes(serve::HardenedServer& http, Server& s, const std::string& api_key) {
  http.set_pre_routing([&s, &api_key](const httplib::Request& req, httplib::Response& res) {
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
  http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(serve::openai::models(s.lm, s.model_id, s.created(), s.engine.context())), "application/json");
  });
  http.post_with_body("/v1/completions", guarded(s, [&s](const httplib::Request& q, httplib::Response& r) { s.completions(q, r); }));
  http.post_with_body("/v1/chat/completions", guarded(s, [&s](const httplib::Request& q, httplib::Response& r) { s.chat(q, r); }));
  http.post_with_body("/apply-template", guarded(s, [&s](const httplib::Request& q, httplib::Response& r) { s.apply_template(q, r); }));
  http.post_with_body("/tokenize", guarded(s, [&s](const httplib::Request& q, httplib::Response& r) { s.tokenize(q, r); }));
  http.post_with_body("/detokenize", guarded(s, [&s](const httplib::Request& q, httplib::Response& r) { s.detokenize(q, r); }));
  http.Get("/tokenizer_info", [&s](const httplib::Request&, httplib::Response& r) { s.tokenizer_info(r); });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& r) { s.metrics(r); });
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
  GracefulStop graceful("");  // SIGTERM / Ctrl-C: stop taking requests, finish those in flight, exit 0 (the watcher below says so)

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

  s.view = view_of(lm, name, engine.context(), parallel + queue);

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
  add_routes(http, s, api_key);

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
