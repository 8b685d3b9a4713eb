#include "common/http_listener.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

HttpResponse Text(http::status status, std::string body, const HttpRequest& request) {
  HttpResponse response(status, request.version());
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  return response;
}

// A blocking HTTP/1.1 client on one keep-alive connection.
class Client {
 public:
  explicit Client(int port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  }

  // The response, or a status with result() == 0 when the connection closed instead.
  http::response<http::string_body> Send(http::verb method, const std::string& target,
                                         std::string body = "") {
    http::request<http::string_body> request(method, target, 11);
    request.set(http::field::host, "127.0.0.1");
    request.body() = std::move(body);
    request.prepare_payload();
    beast::error_code ec;
    http::write(socket_, request, ec);
    http::response<http::string_body> response;
    if (!ec) {
      http::response_parser<http::string_body> parser;
      parser.skip(method == http::verb::head);
      http::read(socket_, buffer_, parser, ec);
      if (!ec) response = parser.release();
    }
    if (ec) response.result(0);
    return response;
  }

  // True when the server closed the connection (a read sees end of stream).
  bool Closed() {
    char byte;
    beast::error_code ec;
    socket_.read_some(net::buffer(&byte, 1), ec);
    return ec == net::error::eof || ec == net::error::connection_reset;
  }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

// Requests of one connection are answered in order over keep-alive; HEAD gets no body; the
// handler sees the peer's loopback address.
TEST(HttpListenerTest, AnswersRequestsInOrderOnOneConnection) {
  std::atomic<bool> peer_loopback{false};
  HttpListener::Options options;
  options.address = "127.0.0.1:0";
  HttpListener::Handlers handlers;
  handlers.request = [&](HttpRequest request, const tcp::endpoint& peer, HttpResponder responder) {
    peer_loopback = peer.address().is_loopback();
    std::string target(request.target());
    std::move(responder).Respond(Text(http::status::ok, "path " + target, request));
  };
  HttpListener listener(options, handlers);
  ASSERT_TRUE(listener.Start().ok());
  ASSERT_GT(listener.port(), 0);

  Client client(listener.port());
  for (const std::string path : {"/a", "/b", "/c"}) {
    auto response = client.Send(http::verb::get, path);
    EXPECT_EQ(response.result_int(), 200);
    EXPECT_EQ(response.body(), "path " + path);
  }
  auto head = client.Send(http::verb::head, "/abc");
  EXPECT_EQ(head.result_int(), 200);
  EXPECT_EQ(head[http::field::content_length], "9");  // "path /abc", not sent
  EXPECT_TRUE(head.body().empty());
  EXPECT_TRUE(peer_loopback);
}

// An answer given later from another thread is written on the request's connection.
TEST(HttpListenerTest, AnswersFromAnotherThread) {
  std::vector<std::thread> workers;
  absl::Mutex mu;
  HttpListener::Options options;
  options.address = "127.0.0.1:0";
  options.threads = 2;
  HttpListener::Handlers handlers;
  handlers.request = [&](HttpRequest request, const tcp::endpoint&, HttpResponder responder) {
    absl::MutexLock lock(&mu);
    workers.emplace_back([request = std::move(request), responder = std::move(responder)]() mutable {
      std::move(responder).Respond(Text(http::status::accepted, request.body(), request));
    });
  };
  HttpListener listener(options, handlers);
  ASSERT_TRUE(listener.Start().ok());
  Client client(listener.port());
  for (int i = 0; i < 20; ++i) {
    auto response = client.Send(http::verb::post, "/", "body " + std::to_string(i));
    EXPECT_EQ(response.result_int(), 202);
    EXPECT_EQ(response.body(), "body " + std::to_string(i));
  }
  listener.Shutdown();
  absl::MutexLock lock(&mu);
  for (std::thread& t : workers) t.join();
}

// A body over the limit gets the read_error handler's answer, and the connection is closed
// after it; a handler that drops its responder closes the connection.
TEST(HttpListenerTest, BodyOverTheLimitAndDroppedRespondersCloseTheConnection) {
  HttpListener::Options options;
  options.address = "127.0.0.1:0";
  options.body_limit = 100;
  HttpListener::Handlers handlers;
  handlers.request = [&](HttpRequest request, const tcp::endpoint&, HttpResponder responder) {
    if (request.target() == "/drop") return;  // the responder goes without an answer
    std::move(responder).Respond(Text(http::status::ok, "ok", request));
  };
  handlers.read_error = [](beast::error_code ec) -> std::optional<HttpResponse> {
    if (ec != http::error::body_limit) return std::nullopt;
    HttpResponse response(http::status::payload_too_large, 11);
    response.keep_alive(true);  // the listener closes anyway
    response.body() = "too large";
    return response;
  };
  HttpListener listener(options, handlers);
  ASSERT_TRUE(listener.Start().ok());

  Client big(listener.port());
  EXPECT_EQ(big.Send(http::verb::post, "/", "x").result_int(), 200);
  auto response = big.Send(http::verb::post, "/", std::string(101, 'x'));
  EXPECT_EQ(response.result_int(), 413);
  EXPECT_EQ(response.body(), "too large");
  EXPECT_FALSE(response.keep_alive());
  EXPECT_TRUE(big.Closed());

  Client dropped(listener.port());
  EXPECT_EQ(dropped.Send(http::verb::get, "/drop").result_int(), 0);
}

// Shutdown waits (up to drain_timeout) for an answer still being prepared, and that answer is
// written; connections are counted open and closed.
TEST(HttpListenerTest, ShutdownDrainsAnswersInFlight) {
  std::atomic<int> connections{0};
  absl::Notification handed, shutting_down;
  std::unique_ptr<HttpResponder> pending;
  HttpListener::Options options;
  options.address = "127.0.0.1:0";
  options.drain_timeout = absl::Seconds(30);
  HttpListener::Handlers handlers;
  handlers.request = [&](HttpRequest request, const tcp::endpoint&, HttpResponder responder) {
    pending = std::make_unique<HttpResponder>(std::move(responder));
    handed.Notify();
  };
  handlers.connections = [&](int delta) { connections += delta; };
  HttpListener listener(options, handlers);
  ASSERT_TRUE(listener.Start().ok());

  http::response<http::string_body> response;
  std::thread client([&] {
    Client c(listener.port());
    response = c.Send(http::verb::get, "/slow");
  });
  handed.WaitForNotification();
  EXPECT_EQ(connections.load(), 1);
  std::thread answer([&] {
    shutting_down.WaitForNotification();
    HttpResponse r(http::status::ok, 11);
    r.body() = "late";
    std::move(*pending).Respond(std::move(r));
  });
  std::thread stopper([&] {
    shutting_down.Notify();
    listener.Shutdown();
  });
  client.join();
  stopper.join();
  answer.join();
  EXPECT_EQ(response.result_int(), 200);
  EXPECT_EQ(response.body(), "late");
  EXPECT_FALSE(listener.accepting());
  pending.reset();
}

// Addresses that cannot be used are refused by Start, naming the address.
TEST(HttpListenerTest, BadAddressesAreNamedInTheError) {
  HttpListener::Handlers handlers;
  handlers.request = [](HttpRequest, const tcp::endpoint&, HttpResponder) {};
  for (const auto& [address, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"nonsense", "expected host:port"},
           {"127.0.0.1:99999", "port must be a number from 0 to 65535"},
           {"example.com:80", "test address \"example.com:80\""}}) {
    HttpListener::Options options;
    options.address = address;
    options.address_name = "test address";
    HttpListener listener(options, handlers);
    absl::Status status = listener.Start();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_NE(std::string(status.message()).find(message), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace hookrelay::common
