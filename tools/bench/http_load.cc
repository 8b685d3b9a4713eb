#include "tools/bench/http_load.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace hookrelay::bench {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr auto kReconnectDelay = std::chrono::milliseconds(50);

// Counts the entries of the "rejected" array of a 200 answer (each has one "index" key).
uint64_t CountRejected(std::string_view body) {
  if (body.find("\"rejected\"") == std::string_view::npos) return 0;
  uint64_t n = 0;
  for (size_t at = body.find("\"index\""); at != std::string_view::npos;
       at = body.find("\"index\"", at + 1)) {
    ++n;
  }
  return n;
}

// State shared by the connections of one thread.
struct Worker {
  Worker(const RunPlan& p, const tcp::endpoint& e, Schedule s, const std::string& request,
         size_t body_offset)
      : plan(p), endpoint(e), schedule(s), request_template(request), body_offset(body_offset),
        drain_timer(ioc) {}

  const RunPlan& plan;
  const tcp::endpoint endpoint;
  net::io_context ioc;
  Schedule schedule;
  const std::string& request_template;
  const size_t body_offset;
  LoadStats stats;
  int active = 0;
  net::steady_timer drain_timer;
};

// One keep-alive connection: connect, then send / read answer / send the next, until the
// schedule runs out. Reconnects after errors. All methods run on the worker's single thread.
class Connection {
 public:
  explicit Connection(Worker& w)
      : w_(w), socket_(w.ioc), timer_(w.ioc), request_(w.request_template) {}

  void Start() {
    ++w_.active;
    Connect();
  }

  // Aborts whatever is in flight (at the end of the drain period).
  void Abort() {
    beast::error_code ignored;
    socket_.close(ignored);
    timer_.cancel();
  }

 private:
  void Connect() {
    socket_.async_connect(w_.endpoint, [this](beast::error_code ec) {
      if (ec) {
        Fail(absl::StrCat("connect: ", ec.message()));
        return;
      }
      socket_.set_option(tcp::no_delay(true), ec);
      Next();
    });
  }

  void Next() {
    const Clock::time_point now = Clock::now();
    const std::optional<Clock::time_point> slot = w_.schedule.Next(now);
    if (!slot) {
      Done();
      return;
    }
    slot_ = *slot;
    if (slot_ > now) {
      timer_.expires_at(slot_);
      timer_.async_wait([this](beast::error_code ec) {
        if (ec) {
          Done();
          return;
        }
        Send();
      });
      return;
    }
    Send();
  }

  void Send() {
    const uint64_t seq = w_.plan.next_request_seq->fetch_add(1, std::memory_order_relaxed);
    w_.plan.batch->Stamp(seq, request_.data() + w_.body_offset);
    sent_ = Clock::now();
    if (w_.schedule.open_loop() && sent_ - slot_ > std::chrono::milliseconds(1) &&
        w_.plan.InWindow(sent_)) {
      ++w_.stats.late_sends;
    }
    net::async_write(socket_, net::buffer(request_), [this](beast::error_code ec, size_t) {
      if (ec) {
        Fail(absl::StrCat("io: ", ec.message()));
        return;
      }
      parser_.emplace();
      parser_->body_limit(1 << 20);
      http::async_read(socket_, buffer_, *parser_,
                       [this](beast::error_code ec, size_t) { OnResponse(ec); });
    });
  }

  void OnResponse(beast::error_code ec) {
    if (ec) {
      Fail(absl::StrCat("io: ", ec.message()));
      return;
    }
    const Clock::time_point now = Clock::now();
    const auto& res = parser_->get();
    if (w_.plan.InWindow(now)) {
      LoadStats& s = w_.stats;
      ++s.requests;
      if (res.result() == http::status::ok) {
        const uint64_t rejected = CountRejected(res.body());
        const uint64_t events = w_.plan.batch->events();
        ++s.ok_requests;
        s.rejected_events += rejected;
        s.durable_events += events - std::min(rejected, events);
        s.RecordAck(w_.schedule.open_loop() ? slot_ : sent_, now, w_.plan.keep_samples);
      } else {
        ++s.failures[absl::StrCat("http ", res.result_int())];
      }
    }
    if (!res.keep_alive()) {
      Reconnect();
      return;
    }
    Next();
  }

  void Fail(const std::string& cause) {
    const Clock::time_point now = Clock::now();
    if (w_.plan.InWindow(now)) {
      ++w_.stats.requests;
      ++w_.stats.failures[cause];
    }
    if (now >= w_.plan.end) {
      Done();
      return;
    }
    beast::error_code ignored;
    socket_.close(ignored);
    timer_.expires_after(kReconnectDelay);
    timer_.async_wait([this](beast::error_code ec) {
      if (ec) {
        Done();
        return;
      }
      Connect();
    });
  }

  void Reconnect() {
    beast::error_code ignored;
    socket_.close(ignored);
    buffer_.clear();
    Connect();
  }

  void Done() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (--w_.active == 0) w_.drain_timer.cancel();
  }

  Worker& w_;
  tcp::socket socket_;
  net::steady_timer timer_;
  std::string request_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  Clock::time_point slot_;
  Clock::time_point sent_;
};

}  // namespace

std::string BuildHttpRequest(const LoadOptions& options, const BatchTemplate& batch,
                             size_t* body_offset) {
  std::string request = absl::StrCat(
      "POST /v1/batch HTTP/1.1\r\n"
      "Host: ",
      options.target,
      "\r\n"
      "User-Agent: hookrelay-ingest-load\r\n"
      "Content-Type: application/json\r\n"
      "Authorization: Basic ",
      absl::Base64Escape(absl::StrCat(options.write_key, ":")),
      "\r\n"
      "Content-Length: ",
      batch.bytes().size(), "\r\n\r\n");
  *body_offset = request.size();
  request.append(batch.bytes());
  return request;
}

absl::StatusOr<LoadStats> RunHttpLoad(const LoadOptions& options, const RunPlan& plan) {
  const size_t colon = options.target.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--target ", options.target, ": want host:port"));
  }
  tcp::endpoint endpoint;
  {
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    auto results = resolver.resolve(options.target.substr(0, colon), options.target.substr(colon + 1),
                                    ec);
    if (ec || results.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--target ", options.target, ": ", ec ? ec.message() : "no address"));
    }
    endpoint = results.begin()->endpoint();
  }
  size_t body_offset = 0;
  const std::string request = BuildHttpRequest(options, *plan.batch, &body_offset);

  const int threads = LoadThreads(options);
  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < threads; ++t) {
    workers.push_back(std::make_unique<Worker>(plan, endpoint, ThreadSchedule(options, plan, t),
                                               request, body_offset));
  }
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&options, &plan, &w = *workers[t], t, threads] {
      const int n = options.connections / threads + (t < options.connections % threads ? 1 : 0);
      std::vector<std::unique_ptr<Connection>> connections;
      for (int i = 0; i < n; ++i) connections.push_back(std::make_unique<Connection>(w));
      for (auto& c : connections) c->Start();
      w.drain_timer.expires_at(plan.end + plan.drain);
      w.drain_timer.async_wait([&](beast::error_code ec) {
        if (ec) return;  // every connection finished in time
        for (auto& c : connections) c->Abort();
      });
      w.ioc.run();
    });
  }
  for (auto& t : running) t.join();
  LoadStats total;
  for (auto& w : workers) total.Merge(w->stats);
  return total;
}

}  // namespace hookrelay::bench
