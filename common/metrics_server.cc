#include "common/metrics_server.h"

#include <boost/beast/http.hpp>

#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/http_listener.h"
#include "common/json_writer.h"
#include "prometheus/text_serializer.h"

namespace hookrelay::common {
namespace {

namespace http = boost::beast::http;

using Collectables = std::vector<std::shared_ptr<prometheus::Collectable>>;

std::string ProbeBody(const absl::Status& status) {
  std::string body;
  JsonObjectWriter w(&body);
  w.String("status", status.ok() ? "ok" : "unavailable");
  if (!status.ok()) w.String("reason", std::string(status.message()));
  w.Close();
  return body;
}

}  // namespace

struct MetricsServer::Impl {
  explicit Impl(Options o) : options(std::move(o)) {}

  HttpResponse Answer(const HttpRequest& request) {
    const std::string_view target(request.target().data(), request.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    HttpResponse response;
    response.version(request.version());
    response.keep_alive(request.keep_alive());
    response.set(http::field::server, "hookrelay");
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      response.result(http::status::method_not_allowed);
      response.set(http::field::allow, "GET, HEAD");
    } else if (path == "/metrics") {
      Collectables snapshot;
      {
        absl::MutexLock lock(&mu);
        snapshot = collectables;
      }
      std::vector<prometheus::MetricFamily> families;
      for (const auto& collectable : snapshot) {
        std::vector<prometheus::MetricFamily> more = collectable->Collect();
        families.insert(families.end(), std::make_move_iterator(more.begin()),
                        std::make_move_iterator(more.end()));
      }
      std::ostringstream text;
      prometheus::TextSerializer().Serialize(text, families);
      response.result(http::status::ok);
      response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      response.body() = std::move(text).str();
    } else if (path == "/healthz" || path == "/readyz") {
      const auto& probe = path == "/healthz" ? options.live : options.ready;
      const absl::Status status = probe ? probe() : absl::OkStatus();
      response.result(status.ok() ? http::status::ok : http::status::service_unavailable);
      response.set(http::field::content_type, "application/json");
      response.body() = ProbeBody(status);
    } else {
      response.result(http::status::not_found);
      response.set(http::field::content_type, "text/plain");
      response.body() = "not found; try /metrics, /healthz or /readyz\n";
    }
    return response;
  }

  const Options options;
  absl::Mutex mu;
  Collectables collectables ABSL_GUARDED_BY(mu);
  // Last: its connections call Answer until it is shut down.
  std::unique_ptr<HttpListener> listener;
};

MetricsServer::MetricsServer(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {
  HttpListener::Options listener;
  listener.address = impl_->options.address;
  listener.address_name = "metrics address";
  listener.threads = 1;
  HttpListener::Handlers handlers;
  handlers.request = [impl = impl_.get()](HttpRequest request, const auto&, HttpResponder responder) {
    std::move(responder).Respond(impl->Answer(request));
  };
  impl_->listener = std::make_unique<HttpListener>(std::move(listener), std::move(handlers));
}

MetricsServer::~MetricsServer() { Shutdown(); }

void MetricsServer::Add(std::shared_ptr<prometheus::Collectable> collectable) {
  absl::MutexLock lock(&impl_->mu);
  impl_->collectables.push_back(std::move(collectable));
}

absl::Status MetricsServer::Start() { return impl_->listener->Start(); }

int MetricsServer::port() const { return impl_->listener->port(); }

void MetricsServer::Shutdown() { impl_->listener->Shutdown(); }

}  // namespace hookrelay::common
