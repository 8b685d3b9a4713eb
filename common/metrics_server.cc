#include "common/metrics_server.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/json_writer.h"
#include "common/tcp_endpoint.h"
#include "prometheus/text_serializer.h"

namespace hookrelay::common {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

using Collectables = std::vector<std::shared_ptr<prometheus::Collectable>>;

struct State {
  MetricsServer::Options options;
  absl::Mutex mu;
  Collectables collectables ABSL_GUARDED_BY(mu);
};

std::string ProbeBody(const absl::Status& status) {
  std::string body;
  JsonObjectWriter w(&body);
  w.String("status", status.ok() ? "ok" : "unavailable");
  if (!status.ok()) w.String("reason", std::string(status.message()));
  w.Close();
  return body;
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, State& state) : stream_(std::move(socket)), state_(state) {}

  void Read() {
    request_ = {};
    stream_.expires_after(std::chrono::seconds(30));
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->Close();
                       self->Answer();
                     });
  }

 private:
  void Answer() {
    const std::string_view target(request_.target().data(), request_.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    response_ = {};
    response_.version(request_.version());
    response_.keep_alive(request_.keep_alive());
    response_.set(http::field::server, "hookrelay");
    if (request_.method() != http::verb::get && request_.method() != http::verb::head) {
      response_.result(http::status::method_not_allowed);
      response_.set(http::field::allow, "GET, HEAD");
    } else if (path == "/metrics") {
      Collectables collectables;
      {
        absl::MutexLock lock(&state_.mu);
        collectables = state_.collectables;
      }
      std::vector<prometheus::MetricFamily> families;
      for (const auto& collectable : collectables) {
        std::vector<prometheus::MetricFamily> more = collectable->Collect();
        families.insert(families.end(), std::make_move_iterator(more.begin()),
                        std::make_move_iterator(more.end()));
      }
      std::ostringstream text;
      prometheus::TextSerializer().Serialize(text, families);
      response_.result(http::status::ok);
      response_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      response_.body() = std::move(text).str();
    } else if (path == "/healthz" || path == "/readyz") {
      const auto& probe = path == "/healthz" ? state_.options.live : state_.options.ready;
      const absl::Status status = probe ? probe() : absl::OkStatus();
      response_.result(status.ok() ? http::status::ok : http::status::service_unavailable);
      response_.set(http::field::content_type, "application/json");
      response_.body() = ProbeBody(status);
    } else {
      response_.result(http::status::not_found);
      response_.set(http::field::content_type, "text/plain");
      response_.body() = "not found; try /metrics, /healthz or /readyz\n";
    }
    response_.prepare_payload();
    if (request_.method() == http::verb::head) response_.body().clear();
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec || !self->response_.keep_alive()) return self->Close();
                        self->Read();
                      });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  State& state_;
  beast::flat_buffer buffer_;
  http::request<http::empty_body> request_;
  http::response<http::string_body> response_;
};


}  // namespace

struct MetricsServer::Impl {
  explicit Impl(Options options) : acceptor(ioc) { state.options = std::move(options); }

  void Accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (!ec) std::make_shared<Session>(std::move(socket), state)->Read();
      Accept();
    });
  }

  State state;
  net::io_context ioc{1};
  tcp::acceptor acceptor;
  std::thread thread;
  int port = 0;
  bool started = false;
};

MetricsServer::MetricsServer(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {}

MetricsServer::~MetricsServer() { Shutdown(); }

void MetricsServer::Add(std::shared_ptr<prometheus::Collectable> collectable) {
  absl::MutexLock lock(&impl_->state.mu);
  impl_->state.collectables.push_back(std::move(collectable));
}

absl::Status MetricsServer::Start() {
  tcp::endpoint endpoint;
  if (absl::Status s = ParseTcpEndpoint(impl_->state.options.address, "metrics address", &endpoint); !s.ok()) return s;
  beast::error_code ec;
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on metrics address ",
                                               impl_->state.options.address, ": ", ec.message()));
  }
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->Accept();
  impl_->started = true;
  impl_->thread = std::thread([this] { impl_->ioc.run(); });
  return absl::OkStatus();
}

int MetricsServer::port() const { return impl_->port; }

void MetricsServer::Shutdown() {
  if (!impl_->started) return;
  impl_->started = false;
  // Stopping the context abandons open connections; their sessions are freed with it.
  impl_->ioc.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

}  // namespace hookrelay::common
