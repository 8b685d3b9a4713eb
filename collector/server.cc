#include "collector/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collector/admin/admin_service.h"
#include "collector/ingest/collector_service.h"
#include "collector/api/admin_auth.h"
#include "collector/admin/admin_core.h"
#include "collector/admin/admin_http.h"
#include "collector/config/config_manager.h"
#include "collector/admin/console_files.h"
#include "collector/dispatch/dispatcher.h"
#include "collector/ingest/http_server.h"
#include "collector/ingest/ingest_metrics.h"
#include "collector/ingest/ingestor.h"
#include "collector/store/factory/job_store_factory.h"
#include "collector/audiences/audience_syncer.h"
#include "collector/routing/routing.h"
#include "common/config.h"
#include "common/log.h"
#include "common/metrics_server.h"
#include "common/process_metrics.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {
namespace {

// hookrelay_jobs{state,scope} and hookrelay_jobs_oldest_ready_age_seconds{scope}, read from
// the store at scrape time (JobCounts::Shared). scope="collector": jobs this collector holds,
// which add up over collectors. scope="cluster": JetStream's shared streams, which every
// collector reports alike: dashboards and alerts take them once (max), never add them up. The
// age is the oldest ready job this collector can see: on JetStream the cluster's (scope
// "cluster"), its own store's otherwise.
class JobCountsCollectable : public prometheus::Collectable {
 public:
  JobCountsCollectable(JobQueue& store, const common::Clock& clock)
      : store_(store), clock_(clock) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const JobCounts counts = store_.Counts();
    const JobCounts::Shared& cluster = counts.cluster;
    prometheus::MetricFamily family;
    family.name = "hookrelay_jobs";
    family.help =
        "Delivery jobs by state; scope=\"collector\": held by this collector (its store, or on "
        "JetStream the jobs it fetched, holds or leased): add up over collectors; "
        "scope=\"cluster\": JetStream's shared streams, the same on every collector: count once";
    family.type = prometheus::MetricType::Gauge;
    auto add = [&family](const char* state, const char* scope, int64_t value) {
      prometheus::ClientMetric metric;
      metric.label.push_back({"state", state});
      metric.label.push_back({"scope", scope});
      metric.gauge.value = static_cast<double>(value);
      family.metric.push_back(std::move(metric));
    };
    add("ready", "collector", counts.ready - cluster.ready);
    add("scheduled", "collector", counts.scheduled - cluster.scheduled);
    add("leased", "collector", cluster.shared ? cluster.leased_here : counts.leased);
    if (cluster.shared) {
      add("ready", "cluster", cluster.ready);
      add("scheduled", "cluster", cluster.scheduled);
      add("dead", "cluster", cluster.dead);
    } else {
      add("dead", "collector", counts.dead);
    }

    // How long the oldest ready job has waited to be handed to a deliverer: the backlog's age.
    prometheus::MetricFamily age;
    age.name = "hookrelay_jobs_oldest_ready_age_seconds";
    age.help = "Seconds since the oldest ready job became due (0 when none is ready); scope as "
               "for hookrelay_jobs";
    age.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric metric;
    metric.label.push_back({"scope", cluster.shared ? "cluster" : "collector"});
    metric.gauge.value =
        counts.oldest_ready_due == absl::InfiniteFuture()
            ? 0.0
            : std::max(0.0, absl::ToDoubleSeconds(clock_.Now() - counts.oldest_ready_due));
    age.metric.push_back(std::move(metric));
    return {std::move(family), std::move(age)};
  }

 private:
  JobQueue& store_;
  const common::Clock& clock_;
};

std::string Summary(const hookrelay::v1::Config& config) {
  int enabled = 0;
  for (const auto& d : config.destinations()) enabled += d.enabled() ? 1 : 0;
  return absl::StrCat(config.sources_size(), " sources, ", config.destinations_size(),
                      " destinations (", enabled, " enabled)");
}

std::vector<std::string> SourceIds(const hookrelay::v1::Config& config) {
  std::vector<std::string> ids;
  for (const auto& source : config.sources()) ids.push_back(source.id());
  return ids;
}

// Destinations with a filter: their hookrelay_ingest_filtered_total series start at 0.
std::vector<std::string> FilteredDestinationIds(const hookrelay::v1::Config& config) {
  std::vector<std::string> ids;
  for (const auto& d : config.destinations()) {
    if (d.filter().types_size() + d.filter().events_size() + d.filter().where_size() > 0) {
      ids.push_back(d.id());
    }
  }
  return ids;
}

}  // namespace

struct Server::Impl {
  explicit Impl(Options o) : options(std::move(o)) {
    if (options.clock == nullptr) options.clock = &common::Clock::Real();
  }

  Options options;
  absl::Mutex reload_mu;
  std::shared_ptr<prometheus::Registry> registry;
  // /metrics, /healthz, /readyz on --metrics_address.
  std::unique_ptr<common::MetricsServer> exposer;
  std::shared_ptr<JobCountsCollectable> job_counts;
  std::unique_ptr<IngestMetrics> metrics;
  std::unique_ptr<RoutingHolder> routing;
  std::unique_ptr<Store> store;
  std::unique_ptr<Ingestor> ingestor;
  std::unique_ptr<Dispatcher> dispatcher;
  std::unique_ptr<CollectorService> service;
  std::unique_ptr<ConfigManager> config;
  std::unique_ptr<AdminAuth> auth;
  std::unique_ptr<AudienceSyncer> audiences;
  std::unique_ptr<AdminCore> admin_core;
  std::unique_ptr<AdminService> admin;
  std::unique_ptr<AdminHttpServer> admin_http;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<HttpServer> http_server;
  int grpc_port = 0;
  int metrics_port = 0;
  bool shut_down = false;

  // gRPC health: SERVING while the store can write and the collector is not draining, for the
  // whole server ("") and per service. Called from the store's threads and from Shutdown.
  void PublishHealth() {
    absl::MutexLock lock(&health_mu);
    if (grpc_health_gone || grpc_server == nullptr) return;
    const bool serving = store_writable && !draining;
    grpc::HealthCheckServiceInterface* health = grpc_server->GetHealthCheckService();
    health->SetServingStatus(serving);
    for (const char* service : kHealthServices) health->SetServingStatus(service, serving);
  }
  static constexpr const char* kHealthServices[] = {"hookrelay.v1.Collector",
                                                    "hookrelay.v1.Admin"};
  absl::Mutex health_mu;
  bool store_writable ABSL_GUARDED_BY(health_mu) = true;
  bool store_gave_up ABSL_GUARDED_BY(health_mu) = false;
  bool draining ABSL_GUARDED_BY(health_mu) = false;
  // Set before grpc_server is destroyed.
  bool grpc_health_gone ABSL_GUARDED_BY(health_mu) = false;
};

Server::Server(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { Shutdown(); }

absl::Status Server::Start() {
  Impl& s = *impl_;
  s.routing = std::make_unique<RoutingHolder>(std::make_shared<const Routing>(hookrelay::v1::Config()));

  s.registry = std::make_shared<prometheus::Registry>();
  common::MetricsServer::Options metrics_options;
  metrics_options.address = s.options.metrics_address;
  // Ready while the collector takes events: not draining, and the store can write.
  metrics_options.ready = [&s]() -> absl::Status {
    absl::MutexLock lock(&s.health_mu);
    if (s.draining) return absl::UnavailableError("collector is shutting down");
    if (!s.store_writable) return absl::UnavailableError("the job store cannot write");
    return absl::OkStatus();
  };
  // Live unless the store cannot recover by itself: then an orchestrator's restart mends it.
  metrics_options.live = [&s]() -> absl::Status {
    absl::MutexLock lock(&s.health_mu);
    if (s.store_gave_up) {
      return absl::UnavailableError(
          "the job store cannot recover by itself (the NATS client stopped reconnecting): "
          "restart the collector");
    }
    return absl::OkStatus();
  };
  s.exposer = std::make_unique<common::MetricsServer>(metrics_options);
  s.exposer->Add(s.registry);
  s.exposer->Add(std::make_shared<common::ProcessMetrics>());
  if (absl::Status st = s.exposer->Start(); !st.ok()) return st;
  s.metrics_port = s.exposer->port();
  s.metrics = std::make_unique<IngestMetrics>(*s.registry);

  JobStoreOptions store_options;
  store_options.engine = s.options.store;
  store_options.data_dir = s.options.data_dir;
  store_options.nats_url = s.options.nats_url;
  store_options.nats_replicas = s.options.nats_replicas;
  store_options.nats_dedup_replicas = s.options.nats_dedup_replicas;
  store_options.nats_deletion_resume_after = s.options.nats_deletion_resume_after;
  store_options.nats_connect = s.options.nats_connect;
  store_options.lease_duration = s.options.lease_duration;
  store_options.commit_linger = s.options.commit_linger;
  store_options.dedup_window = s.options.dedup_window;
  store_options.clock = s.options.clock;
  store_options.registry = s.registry.get();
  store_options.max_schedule_delay = s.options.max_schedule_delay_for_testing;
  store_options.on_write_health = [&s](bool writable) {
    {
      absl::MutexLock lock(&s.health_mu);
      s.store_writable = writable;
    }
    s.PublishHealth();
  };
  store_options.on_gave_up = [&s] {
    absl::MutexLock lock(&s.health_mu);
    s.store_gave_up = true;
  };
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(store_options);
  if (!store.ok()) return store.status();
  s.store = *std::move(store);
  s.job_counts = std::make_shared<JobCountsCollectable>(*s.store, *s.options.clock);
  s.exposer->Add(s.job_counts);
  const JobCounts counts = s.store->Counts();
  common::LogInfo("job store opened", {{"store", DescribeJobStore(store_options)},
                                       {"ready", counts.ready},
                                       {"scheduled", counts.scheduled},
                                       {"dead", counts.dead}});

  // The configuration: the file's objects plus those stored through the admin API. Each new
  // snapshot reaches ingest (routing, metrics) and the Subscribe streams (destination ids).
  s.config = std::make_unique<ConfigManager>(
      *s.store, s.options.config_path,
      [&s](const std::shared_ptr<const ConfigManager::Snapshot>& snapshot) {
        s.metrics->DeclareSources(SourceIds(snapshot->merged));
        s.metrics->DeclareFilteredDestinations(FilteredDestinationIds(snapshot->merged));
        s.routing->Set(std::make_shared<const Routing>(snapshot->merged));
        if (s.audiences) {
          s.audiences->SetConfig(std::make_shared<const hookrelay::v1::Config>(snapshot->merged));
        }
        if (s.dispatcher) s.dispatcher->Notify();
        common::LogInfo("configuration in effect", {{"summary", Summary(snapshot->merged)},
                                                    {"version", snapshot->version}});
      },
      s.store->lease_duration(), s.store->KeepsPerKeyOrder());
  {
    AudienceSyncer::Options audience_options;
    audience_options.clock = s.options.clock;
    audience_options.registry = s.registry.get();
    s.audiences = std::make_unique<AudienceSyncer>(audience_options, *s.store);
  }
  if (absl::Status st = s.config->Start(); !st.ok()) return st;
  // Changes saved through another collector sharing the engine (JetStream) apply here too.
  s.store->WatchConfig([config = s.config.get()](std::string bytes) {
    return config->AdoptStored(bytes).ok();
  });
  s.audiences->Start();
  s.auth = std::make_unique<AdminAuth>(s.options.admin_token);
  s.admin_core = std::make_unique<AdminCore>(*s.store, s.config.get(), *s.options.clock);
  s.admin_core->RegisterMetrics(*s.registry);
  s.admin_core->SetAudienceSyncer(s.audiences.get());

  Dispatcher::Options dispatcher_options;
  dispatcher_options.on_test_outcome = [core = s.admin_core.get()](
                                           const std::string& message_id,
                                           const hookrelay::v1::Outcome& outcome) {
    core->OnTestOutcome(message_id, outcome);
  };
  // A receiver answering 410 Gone: the destination is disabled as an admin would (durable,
  // audited, visible through the API; refused for objects of the --config file).
  dispatcher_options.on_destination_gone = [core = s.admin_core.get()](
                                               const std::string& id, const std::string& reason) {
    hookrelay::v1::UpdateDestinationRequest request;
    request.mutable_destination()->set_id(id);
    request.mutable_destination()->set_enabled(false);
    request.mutable_update_mask()->add_paths("enabled");
    hookrelay::v1::DestinationResource response;
    return core->UpdateDestination(absl::StrCat("hookrelay (", reason, ")"), request, &response);
  };
  s.dispatcher = std::make_unique<Dispatcher>(dispatcher_options, *s.store, *s.routing,
                                              *s.options.clock, s.registry.get());
  s.store->SetReadyCallback([d = s.dispatcher.get()] { d->Notify(); });
  s.dispatcher->Start();
  s.admin_core->SetDispatcher(s.dispatcher.get());
  Ingestor::Options ingestor_options;
  s.ingestor = std::make_unique<Ingestor>(ingestor_options, *s.routing, *s.store,
                                          *s.options.clock, s.metrics.get());
  s.service = std::make_unique<CollectorService>(*s.ingestor, *s.dispatcher, s.metrics.get(),
                                                 s.auth.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(s.options.grpc_address, grpc::InsecureServerCredentials(), &s.grpc_port);
  builder.RegisterService(s.service.get());
  s.admin = std::make_unique<AdminService>(*s.admin_core, *s.auth);
  builder.RegisterService(s.admin.get());
  if (s.options.admin_token.empty()) {
    common::LogWarning("no admin token: the admin API, the console and Subscribe answer only on "
                       "loopback; set --admin_token_file to serve them to other hosts",
                       {{"grpc_address", s.options.grpc_address}});
  }
  // 2,500 events of up to 32 KB each, with room for protobuf framing.
  builder.SetMaxReceiveMessageSize(96 * 1024 * 1024);
  {
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    absl::MutexLock lock(&s.health_mu);  // PublishHealth may run on a store thread already.
    s.grpc_server = std::move(server);
  }
  if (s.grpc_server == nullptr || s.grpc_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on grpc address ", s.options.grpc_address));
  }
  s.PublishHealth();

  HttpServer::Options http_options;
  http_options.address = s.options.http_address;
  http_options.io_threads = s.options.http_threads;
  http_options.health = [store = s.store.get()] { return store->WriteHealth(); };
  s.http_server = std::make_unique<HttpServer>(http_options, *s.ingestor, s.metrics.get());
  if (absl::Status st = s.http_server->Start(); !st.ok()) return st;

  if (!s.options.admin_http_address.empty()) {
    AdminHttpServer::Options admin_http_options;
    admin_http_options.address = s.options.admin_http_address;
    for (const EmbeddedFile& f : ConsoleFiles()) {
      std::string type = "application/octet-stream";
      if (absl::EndsWith(f.name, ".html")) type = "text/html; charset=utf-8";
      if (absl::EndsWith(f.name, ".js")) type = "text/javascript; charset=utf-8";
      if (absl::EndsWith(f.name, ".css")) type = "text/css; charset=utf-8";
      admin_http_options.files[f.name] = {type, f.bytes};
    }
    s.admin_http = std::make_unique<AdminHttpServer>(admin_http_options, *s.admin_core, *s.auth);
    if (absl::Status st = s.admin_http->Start(); !st.ok()) return st;
  }

  common::LogInfo("collector serving",
                  {{"grpc_port", s.grpc_port},
                   {"http_port", s.http_server->port()},
                   {"metrics_port", s.metrics_port},
                   {"admin_http_port", s.admin_http ? s.admin_http->port() : 0},
                   {"grpc_address", s.options.grpc_address},
                   {"http_address", s.options.http_address},
                   {"metrics_address", s.options.metrics_address}});
  return absl::OkStatus();
}

absl::Status Server::Reload() {
  Impl& s = *impl_;
  absl::MutexLock lock(&s.reload_mu);
  if (s.config == nullptr) return absl::FailedPreconditionError("not started");
  if (s.options.config_path.empty()) {
    common::LogInfo("reload: no config file (--config); nothing to read", {});
    return absl::OkStatus();
  }
  if (absl::Status st = s.config->ReloadFile(); !st.ok()) {
    common::LogError("config reload refused; keeping the running config",
                     {{"path", s.options.config_path}, {"error", st.message()}});
    return st;
  }
  common::LogInfo("config reloaded", {{"path", s.options.config_path}});
  return absl::OkStatus();
}

void Server::EnterLameDuck() {
  Impl& s = *impl_;
  {
    absl::MutexLock lock(&s.health_mu);
    if (s.draining) return;
    s.draining = true;
  }
  common::LogInfo("collector not ready (lame duck); still serving until it stops", {});
  s.PublishHealth();
}

void Server::Shutdown() {
  Impl& s = *impl_;
  if (s.shut_down) return;
  s.shut_down = true;
  common::LogInfo("collector draining", {});
  {
    absl::MutexLock lock(&s.health_mu);
    s.draining = true;
  }
  s.PublishHealth();
  if (s.http_server) s.http_server->StopAccepting();
  if (s.admin_http) s.admin_http->Shutdown();
  if (s.ingestor) {
    s.ingestor->BeginShutdown();
    s.ingestor->WaitIdle();
  }
  if (s.audiences) s.audiences->Shutdown();
  // Deliverers get up to 5 s to report the jobs they hold, then their streams end.
  if (s.dispatcher) s.dispatcher->Shutdown();
  if (s.grpc_server) s.grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (s.http_server) s.http_server->Shutdown();
  s.http_server.reset();
  {
    absl::MutexLock lock(&s.health_mu);
    s.grpc_health_gone = true;
  }
  s.grpc_server.reset();
  s.service.reset();
  s.admin.reset();
  s.admin_http.reset();
  if (s.admin_core) s.admin_core->SetDispatcher(nullptr);
  if (s.store) s.store->SetReadyCallback(nullptr);  // No more calls into the dispatcher.
  s.dispatcher.reset();
  s.admin_core.reset();
  if (s.store) s.store->WatchConfig(nullptr);  // No more calls into the config manager.
  s.config.reset();
  s.job_counts.reset();
  // The store first: closing it joins its threads, which may still be returning from an Ingestor
  // callback; only then is the Ingestor unused.
  // Scrapes read the store (hookrelay_jobs): the metrics port closes first.
  if (s.exposer) s.exposer->Shutdown();
  s.store.reset();  // flushes and closes RocksDB
  s.ingestor.reset();
  s.exposer.reset();
  common::LogInfo("collector stopped", {});
}

Store* Server::job_store() { return impl_->store.get(); }

void Server::WakeDispatcher() {
  if (impl_->dispatcher) impl_->dispatcher->Notify();
}

int64_t Server::dispatch_passes() const {
  return impl_->dispatcher ? impl_->dispatcher->passes() : 0;
}

int Server::grpc_port() const { return impl_->grpc_port; }
int Server::http_port() const { return impl_->http_server ? impl_->http_server->port() : 0; }
int Server::metrics_port() const { return impl_->metrics_port; }
int Server::admin_http_port() const {
  return impl_->admin_http ? impl_->admin_http->port() : 0;
}

}  // namespace hookrelay::collector
