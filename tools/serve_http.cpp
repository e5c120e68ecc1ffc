// `looplm serve`'s HTTP limits (serve_http.h says what and why).
#include "serve_http.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "looplm/util.h"

namespace looplm::serve {

namespace {
using Clock = std::chrono::steady_clock;

// One connection's state, from accept to close.
struct Conn {
  int fd = -1;
  std::string addr;
  int port = 0;
  // read-ahead: bytes received and not yet parsed (a pipelined request's stay for the next one)
  std::vector<char> buf = std::vector<char>(16 * 1024);
  size_t off = 0, len = 0;
  // the request being read
  Clock::time_point deadline{};
  size_t head_bytes = 0, body_bytes = 0;  // raw bytes of its request line and headers, of its body
  size_t written = 0;                     // bytes of its answer written
  bool in_body = false;                   // its headers are parsed (the pre-routing handler ran)
  bool timed_out = false, head_too_big = false, body_too_big = false;
  bool close = false;  // close once the answer is written
  void start_request(Clock::time_point d) {
    deadline = d;
    head_bytes = body_bytes = written = 0;
    in_body = timed_out = head_too_big = body_too_big = false;
  }
};
thread_local Conn* current = nullptr;

std::string lower_trimmed(std::string s) {
  while (!s.empty() && std::isspace((unsigned char)s.back())) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace((unsigned char)s[b])) ++b;
  s.erase(0, b);
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

// poll() for `events` up to `ms` (in slices, giving up when the server stops): > 0 ready, 0 not.
int wait_for(int fd, short events, int64_t ms, const std::atomic<socket_t>* svr) {
  for (;;) {
    if (svr && *svr == INVALID_SOCKET) return 0;
    const int slice = (int)std::min<int64_t>(std::max<int64_t>(ms, 0), 100);
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, slice);
    if (r < 0 && errno == EINTR) continue;
    if (r != 0) return r;
    ms -= slice;
    if (ms <= 0) return 0;
  }
}

// A connection as the library's Stream: reads through the connection's buffer, within the
// request's deadline and its byte bounds; writes within the write timeout.
class ConnStream : public httplib::Stream {
 public:
  ConnStream(Conn& c, const HttpLimits& l, const std::atomic<socket_t>& svr, time_t read_s, time_t write_s)
      : c_(c), l_(l), svr_(svr), read_ms_((int64_t)read_s * 1000), write_ms_((int64_t)write_s * 1000) {}
  using httplib::Stream::write;

  bool is_readable() const override { return c_.off < c_.len || wait_for(c_.fd, POLLIN, read_ms_, &svr_) > 0; }
  // Writable, and its client has not closed it (how the library notices a streaming client leave).
  bool is_writable() const override {
    return wait_for(c_.fd, POLLOUT, write_ms_, &svr_) > 0 && !HardenedServer::client_gone();
  }
  ssize_t read(char* ptr, size_t size) override {
    if (c_.off == c_.len) {
      const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(c_.deadline - Clock::now()).count();
      if (left <= 0) return timed_out();
      if (wait_for(c_.fd, POLLIN, std::min(left, read_ms_), &svr_) <= 0)
        return Clock::now() >= c_.deadline ? timed_out() : -1;
      ssize_t n;
      do n = ::recv(c_.fd, c_.buf.data(), c_.buf.size(), 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      c_.off = 0;
      c_.len = (size_t)n;
    }
    const size_t n = std::min(size, c_.len - c_.off);
    // the bounds on raw bytes: the head's, and a body's framing (a chunked body's decoded bytes
    // are counted by with_body's reader; this bounds what its chunk lines may add: a body of
    // --max-body bytes sent one byte a chunk, "1\r\nX\r\n", is 6 times its size)
    if (!c_.in_body && (c_.head_bytes += n) > l_.max_head) {
      c_.head_too_big = c_.close = true;
      return -1;
    }
    if (c_.in_body && (c_.body_bytes += n) > 8 * l_.max_body + (64 << 10)) {
      c_.body_too_big = c_.close = true;
      return -1;
    }
    std::memcpy(ptr, c_.buf.data() + c_.off, n);
    c_.off += n;
    return (ssize_t)n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (wait_for(c_.fd, POLLOUT, write_ms_, &svr_) <= 0) return -1;
    ssize_t n;
    do n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n > 0) c_.written += (size_t)n;
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.addr;
    port = c_.port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    if (getsockname(c_.fd, (sockaddr*)&a, &len) == 0 &&
        getnameinfo((sockaddr*)&a, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }
  socket_t socket() const override { return c_.fd; }

 private:
  ssize_t timed_out() {
    c_.timed_out = c_.close = true;
    return -1;
  }
  Conn& c_;
  const HttpLimits& l_;
  const std::atomic<socket_t>& svr_;
  int64_t read_ms_, write_ms_;
};

// Closes a connection whose client may still be sending (a refused body): the answer first,
// then what still arrives is read and dropped for a moment, so that the client reads the answer
// rather than a reset.
void linger_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  char sink[16 * 1024];
  const auto until = Clock::now() + std::chrono::milliseconds(500);
  size_t drained = 0;
  while (Clock::now() < until && drained < (8u << 20)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n <= 0) break;
    drained += (size_t)n;
  }
  ::close(fd);
}

std::string error_body(const HttpError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}, {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
                        {"code", nlohmann::json()}};
  return nlohmann::json{{"error", err}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
// An answer written straight to the socket (no request was parsed to answer through the library).
void raw_answer(int fd, int status, const char* reason, const HttpError& e, const char* extra = "") {
  const std::string body = error_body(e);
  const std::string all = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n" + extra + "Connection: close\r\n\r\n" + body;
  (void)!::send(fd, all.data(), all.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}
}  // namespace

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

bool HardenedServer::client_gone() {
  if (!current) return false;
  char c;
  const ssize_t n = ::recv(current->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void HardenedServer::close_after() {
  if (current) current->close = true;
}

HardenedServer::HardenedServer(const HttpLimits& limits) : limits_(limits) {
  set_payload_max_length(limits_.max_body);
  set_keep_alive_timeout(limits_.keep_alive_s);
  // Expect: 100-continue: what check_head refuses is answered before the client sends the body.
  set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    HttpError e(0, "");
    if (!check_head(req, e)) return 100;
    close_after();
    send_error(res, e);
    return e.status;
  });
  // A connection that closes says so (the library would offer keep-alive).
  set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    if (!current || !current->close) return;
    res.headers.erase("Keep-Alive");
    res.headers.erase("Connection");
    res.set_header("Connection", "close");
  });
  // The library's own refusals (a malformed request line or header, an unknown route) as errors
  // in OpenAI's shape; a request cut by its deadline or its head's bound says which.
  set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (current && current->timed_out) {
      close_after();
      send_error(res, HttpError{408, "the request did not arrive within the server's time (--request-timeout " +
                                         std::to_string(limits_.request_timeout_s) + " s)", "invalid_request_error"});
    } else if (current && current->head_too_big) {
      send_error(res, HttpError{431, "the request line and headers are larger than the server takes (" +
                                         std::to_string(limits_.max_head) + " bytes)", "invalid_request_error"});
    } else if (res.status == 413) {
      send_error(res, HttpError{413, "the request body is larger than the server takes (--max-body " + std::to_string(limits_.max_body) + " bytes)"});
    } else if (res.status == 404) {
      send_error(res, HttpError{404, "no such route (see docs/serve.md)", "not_found"});
    } else {
      send_error(res, HttpError{res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error"});
    }
  });
}

bool HardenedServer::check_head(const httplib::Request& req, HttpError& err) const {
  auto refuse = [&](int status, const std::string& msg) {
    err = HttpError(status, msg);
    return true;
  };
  const std::string te = req.has_header("Transfer-Encoding") ? lower_trimmed(req.get_header_value("Transfer-Encoding")) : "";
  const bool chunked = te == "chunked";
  if (req.get_header_value_count("Transfer-Encoding") > 1 || (!te.empty() && !chunked))
    return refuse(501, "Transfer-Encoding '" + brief(req.get_header_value("Transfer-Encoding")) + "' is not taken: send the body as it is, or chunked");
  // Content-Length: one value, decimal digits only (the library would read "-1" as 2^64 - 1, "abc" as 0)
  uint64_t length = 0;
  const bool has_length = req.has_header("Content-Length");
  if (has_length) {
    const size_t n = req.get_header_value_count("Content-Length");
    const std::string v = lower_trimmed(req.get_header_value("Content-Length"));
    for (size_t i = 1; i < n; ++i)
      if (lower_trimmed(req.get_header_value("Content-Length", i)) != v) return refuse(400, "the request has Content-Lengths that differ");
    if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) {
      if (!v.empty() && v.size() <= 200 && v.find_first_not_of("0123456789") == std::string::npos)  // a number, just a huge one
        return refuse(413, "the request body is larger than the server takes (--max-body " + std::to_string(limits_.max_body) + " bytes)");
      return refuse(400, "Content-Length '" + brief(req.get_header_value("Content-Length")) + "' is not a byte count");
    }
    length = std::stoull(v);
    if (chunked) return refuse(400, "the request has both Content-Length and Transfer-Encoding");
  }
  if (length > limits_.max_body)
    return refuse(413, "the request body is larger than the server takes (--max-body " + std::to_string(limits_.max_body) + " bytes)");
  const bool body = chunked || length > 0;
  if (req.method != "POST") {
    if (body) return refuse(400, "a " + brief(req.method) + " request takes no body");
    return false;
  }
  if (!body_routes_.count(req.path)) return refuse(404, "no such route (see docs/serve.md)");
  if (!chunked && !has_length) return refuse(411, "a request body needs a Content-Length (or Transfer-Encoding: chunked)");
  if (req.has_header("Content-Encoding")) {
    const std::string ce = lower_trimmed(req.get_header_value("Content-Encoding"));
    if (req.get_header_value_count("Content-Encoding") > 1 || (ce != "identity" && !ce.empty()))
      return refuse(415, "Content-Encoding '" + brief(req.get_header_value("Content-Encoding")) +
                             "' is not taken: send the body uncompressed (identity)");
  }
  if (req.is_multipart_form_data()) return refuse(415, "a multipart body is not taken: send JSON with 'Content-Type: application/json'");
  return false;
}

void HardenedServer::set_pre_routing(HandlerWithResponse next) {
  set_pre_routing_handler([this, next](const httplib::Request& req, httplib::Response& res) {
    if (current) current->in_body = true;  // the head is read: what follows is the body
    HttpError e(0, "");
    if (check_head(req, e)) {
      close_after();  // its body (if any) stays unread: the connection cannot go on
      send_error(res, e);
      return HandlerResponse::Handled;
    }
    return next ? next(req, res) : HandlerResponse::Unhandled;
  });
}

void HardenedServer::post_with_body(const std::string& path, Handler handler) {
  body_routes_.insert(path);
  Post(path, [this, handler](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string body;
    bool too_big = false;
    const bool ok = reader([&](const char* d, size_t n) {
      if (body.size() + n > limits_.max_body) {
        too_big = true;
        return false;
      }
      body.append(d, n);
      return true;
    });
    if (!ok || too_big) {
      close_after();
      if (too_big || (current && current->body_too_big))
        send_error(res, HttpError{413, "the request body is larger than the server takes (--max-body " + std::to_string(limits_.max_body) + " bytes)"});
      else if (current && current->timed_out)
        send_error(res, HttpError{408, "the request did not arrive within the server's time (--request-timeout " +
                                           std::to_string(limits_.request_timeout_s) + " s)"});
      else
        send_error(res, HttpError{400, "the request body ended early or its chunks are malformed"});
      return;
    }
    // (the library's Request is the one its connection loop owns, not a constant: the body read
    // here is where the handler looks for it)
    const_cast<httplib::Request&>(req).body = std::move(body);
    handler(req, res);
  });
}

bool HardenedServer::process_and_close_socket(socket_t sock) {
  Conn c;
  c.fd = sock;
  {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    if (getpeername(sock, (sockaddr*)&a, &len) == 0 &&
        getnameinfo((sockaddr*)&a, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      c.addr = host;
      c.port = std::atoi(serv);
    }
  }
  bool over = false;
  {
    std::lock_guard<std::mutex> lk(clients_mu_);
    over = ++clients_[c.addr] > limits_.max_conns_per_client;
  }
  ++open_;
  struct Release {
    HardenedServer& s;
    const std::string& addr;
    ~Release() {
      std::lock_guard<std::mutex> lk(s.clients_mu_);
      if (--s.clients_[addr] <= 0) s.clients_.erase(addr);
      --s.open_;
    }
  } release{*this, c.addr};
  if (over) {  // answered before its request is read: one write, then closed
    raw_answer(sock, 429, "Too Many Requests",
               HttpError{429, "too many connections from " + c.addr + " (--max-conns-per-client " + std::to_string(limits_.max_conns_per_client) + ")",
                         "server_busy"},
               "Retry-After: 1\r\n");
    ::shutdown(sock, SHUT_WR);
    char sink[4096];
    while (::recv(sock, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    ::close(sock);
    return false;
  }
  current = &c;
  ConnStream strm(c, limits_, svr_sock_, read_timeout_sec_, write_timeout_sec_);
  bool ret = false;
  for (size_t count = keep_alive_max_count_; count > 0 && svr_sock_ != INVALID_SOCKET; --count) {
    // the next request: already read ahead (pipelined), or its first byte within the keep-alive time
    if (c.off == c.len && wait_for(sock, POLLIN, (int64_t)keep_alive_timeout_sec_ * 1000, &svr_sock_) <= 0) break;
    c.start_request(Clock::now() + std::chrono::seconds(limits_.request_timeout_s));
    bool closed = false;
    ret = process_request(strm, count == 1 || c.close, closed, nullptr);
    // cut in its request line (the library answers nothing then): say why
    if (!ret && c.written == 0 && c.timed_out)
      raw_answer(sock, 408, "Request Timeout", HttpError{408, "the request did not arrive within the server's time (--request-timeout " +
                                                                  std::to_string(limits_.request_timeout_s) + " s)"});
    else if (!ret && c.written == 0 && c.head_too_big)
      raw_answer(sock, 431, "Request Header Fields Too Large",
                 HttpError{431, "the request line and headers are larger than the server takes (" + std::to_string(limits_.max_head) + " bytes)"});
    if (!ret || closed || c.close) break;
  }
  current = nullptr;
  if (c.close) {
    linger_close(sock);
  } else {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }
  return ret;
}

}  // namespace looplm::serve
