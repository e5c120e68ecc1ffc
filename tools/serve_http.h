// `looplm serve`'s HTTP limits (docs/serve.md, "Limits"), on cpp-httplib 0.11.4 (Debian's).
//
// The library reads a connection's requests itself, and three of its ways are unsafe in front of
// an untrusted client: a body's size limit (set_payload_max_length) holds only for a plain
// Content-Length body (a chunked body is read whole, a gzip one inflated without bound); the read
// timeout restarts with every byte received, so a client sending one byte a second holds a thread
// for ever; and each request of a connection is read through a new socket stream with its own
// read-ahead buffer, so requests pipelined behind the first are lost with it. HardenedServer
// keeps the library's parser, routing and response writing and replaces the one thing that owns
// a connection, its private virtual process_and_close_socket:
//
//  * one Stream per connection (ConnStream), its buffer kept from request to request: pipelined
//    requests are answered in order;
//  * a deadline per request (--request-timeout): the request line, the headers and the body
//    must all arrive within it, however slowly the bytes come (408, or the connection closed);
//  * at most --max-conns-per-client connections per client address (more get 429 at once);
//  * the request line and headers bounded (64 KiB: 431), and a chunked body's framing (8 times
//    --max-body and 64 KiB more: room for one-byte chunks);
//  * before the body is read (check_head), what cannot be right is refused and the connection
//    closed: a Content-Encoding other than identity (415: nothing is ever decompressed), a
//    Transfer-Encoding other than chunked (501), both framings at once, a Content-Length that is
//    not a number (400) or is over --max-body (413, at once: the body is not read to skip it), a
//    POST without a length (411), a body on a route that takes none;
//  * each body route reads through a content reader that counts the bytes as they are decoded
//    (with_body): past --max-body, 413.
// Why here and not in the handlers: a handler runs once the library has read the whole body, and
// the library's own reader (Server::read_content) has no limit for chunked bodies; the content
// reader is the library's one hook that sees the body as it arrives, and the socket is the one
// place that sees the time each byte takes and the bytes read ahead of the current request.
#pragma once
#include <httplib.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "serve_request.h"

namespace looplm::serve {

struct HttpLimits {
  size_t max_body = 1 << 20;       // decoded body bytes
  int request_timeout_s = 30;      // the request line, headers and body together
  int max_conns_per_client = 32;   // open connections per client address
  size_t max_head = 64 << 10;      // the request line and headers
  int keep_alive_s = 5;            // an idle connection waits this long for its next request
};

// The error as an OpenAI-style body: {"error": {"message", "type", "param", "code"}}.
void send_error(httplib::Response& res, const HttpError& e);

class HardenedServer : public httplib::Server {
 public:
  explicit HardenedServer(const HttpLimits& limits);

  // A POST route whose body is read within the limits (a content-reader handler): `handler` sees
  // it in req.body.
  void post_with_body(const std::string& path, Handler handler);
  // The pre-routing handler: check_head's refusals first, then `next`.
  void set_pre_routing(HandlerWithResponse next);

  // This thread's connection (a handler's): its client closed it (it reads as ended).
  static bool client_gone();
  // This thread's connection closes once the answer is written ("Connection: close").
  static void close_after();

  const HttpLimits& limits() const { return limits_; }
  int open_connections() const { return open_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  // What the request line and headers already show to be wrong (before any of the body is read).
  bool check_head(const httplib::Request& req, HttpError& err) const;
  HttpLimits limits_;
  std::set<std::string> body_routes_;
  std::mutex clients_mu_;
  std::map<std::string, int> clients_;  // open connections per client address
  std::atomic<int> open_{0};
};

}  // namespace looplm::serve
