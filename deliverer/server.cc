#include "deliverer/server.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/metrics_server.h"
#include "common/process_metrics.h"
#include "deliverer/deliverer.h"
#include "deliverer/delivery_metrics.h"
#include "deliverer/http_sender.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace hookrelay::deliverer {
namespace {

using common::LogError;

// hookrelay_deliverer_collectors_connected, read from the deliverer at scrape time.
class ConnectedCollectable : public prometheus::Collectable {
 public:
  explicit ConnectedCollectable(const hookrelay::deliverer::Deliverer& deliverer)
      : deliverer_(deliverer) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily family;
    family.name = "hookrelay_deliverer_collectors_connected";
    family.help = "Collector streams currently open.";
    family.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric metric;
    metric.gauge.value = deliverer_.connected_streams();
    family.metric.push_back(std::move(metric));
    return {std::move(family)};
  }

 private:
  const hookrelay::deliverer::Deliverer& deliverer_;
};

// What the parts below do not check themselves.
absl::Status Validate(const Server::Options& options) {
  if (options.resolve_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("resolve_interval must be at least 1s, got ",
                     absl::FormatDuration(options.resolve_interval)));
  }
  if (options.sizing.credits < 1) {
    return absl::InvalidArgumentError("sizing.credits must be at least 1, got 0");
  }
  return absl::OkStatus();
}

}  // namespace

// Members in construction order; destroyed in reverse, so the metrics server (whose collectables
// read the deliverer) goes before the deliverer, and the deliverer before its metrics.
struct Server::Impl {
  explicit Impl(Options o) : options(std::move(o)) {}

  // Stops every part started, in the order the deliverer needs: the streams drain, scrapes end
  // (they read the deliverer), then the sender is destroyed before the Deliverer (requests still
  // pending complete through callbacks into it). Idempotent.
  void Stop() {
    if (deliverer) deliverer->Shutdown();
    if (metrics_server) metrics_server->Shutdown();
    sender.reset();
  }

  const Options options;
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<DeliveryMetrics> metrics;
  std::unique_ptr<HttpSender> sender;
  std::unique_ptr<Deliverer> deliverer;
  std::unique_ptr<common::MetricsServer> metrics_server;
  bool running = false;
};

Server::Server(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { Shutdown(); }

absl::Status Server::Start() {
  Impl& s = *impl_;
  if (absl::Status st = Validate(s.options); !st.ok()) {
    LogError("deliverer failed to start", {{"error", st.message()}});
    return st;
  }
  s.registry = std::make_shared<prometheus::Registry>();
  s.metrics = std::make_unique<DeliveryMetrics>(*s.registry);

  HttpSender::Options sender_options;
  sender_options.allow_private_networks = s.options.allow_private_networks;
  sender_options.ca_file = s.options.ca_file;
  sender_options.threads = s.options.sizing.sender_threads;
  sender_options.max_host_connections = s.options.sizing.max_host_connections;
  absl::StatusOr<std::unique_ptr<HttpSender>> sender = HttpSender::Create(sender_options);
  if (!sender.ok()) {
    LogError("cannot start the HTTP sender", {{"error", sender.status().message()}});
    return sender.status();
  }
  s.sender = *std::move(sender);

  Deliverer::Options deliverer_options;
  deliverer_options.collectors = s.options.collectors;
  deliverer_options.resolve_interval = s.options.resolve_interval;
  deliverer_options.deliverer_id = s.options.deliverer_id;
  deliverer_options.credits = s.options.sizing.credits;
  deliverer_options.drain_timeout = s.options.drain_timeout;
  deliverer_options.admin_token = s.options.admin_token;
  s.deliverer = std::make_unique<Deliverer>(deliverer_options, *s.sender,
                                            common::Clock::Real(), s.metrics.get());
  if (absl::Status st = s.deliverer->Start(); !st.ok()) {
    LogError("deliverer failed to start", {{"error", st.message()}});
    s.Stop();
    return st;
  }

  // /metrics, /healthz (alive) and /readyz (a collector stream is open).
  common::MetricsServer::Options metrics_options;
  metrics_options.address = s.options.metrics_address;
  Deliverer& deliverer = *s.deliverer;
  metrics_options.ready = [&deliverer]() -> absl::Status {
    if (deliverer.connected_streams() > 0) return absl::OkStatus();
    return absl::UnavailableError("no collector stream open");
  };
  s.metrics_server = std::make_unique<common::MetricsServer>(metrics_options);
  s.metrics_server->Add(s.registry);
  s.metrics_server->Add(std::make_shared<common::ProcessMetrics>());
  s.metrics_server->Add(std::make_shared<ConnectedCollectable>(deliverer));
  if (absl::Status st = s.metrics_server->Start(); !st.ok()) {
    LogError("cannot listen on the metrics address", {{"error", st.message()}});
    s.Stop();
    // Unavailable whatever the cause (an unparsable address too): main exits 1 for it, 2 for
    // the errors above.
    return absl::UnavailableError(st.message());
  }
  s.running = true;
  return absl::OkStatus();
}

void Server::Shutdown() {
  Impl& s = *impl_;
  s.Stop();
  if (!s.running) return;
  s.running = false;
  common::LogInfo("deliverer stopped", {});
}

int Server::connected_streams() const {
  return impl_->deliverer ? impl_->deliverer->connected_streams() : 0;
}

int64_t Server::jobs_in_flight() const {
  return impl_->deliverer ? impl_->deliverer->jobs_in_flight() : 0;
}

int Server::metrics_port() const {
  return impl_->metrics_server ? impl_->metrics_server->port() : 0;
}

}  // namespace hookrelay::deliverer
