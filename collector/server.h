// The collector process: config, job store, ingest core, HTTP and gRPC front ends, metrics.
// main.cc parses flags into Options and drives Start / Reload / Shutdown from signals.
#ifndef HOOKRELAY_COLLECTOR_SERVER_H_
#define HOOKRELAY_COLLECTOR_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collector/store/jetstream/nats_connect.h"
#include "collector/store/store.h"
#include "common/clock.h"

namespace hookrelay::collector {

class Server {
 public:
  struct Options {
    // YAML config (sources, destinations): a declarative bootstrap, read-only through the admin
    // API. Empty = none: the collector starts with what the admin API stored (SPEC §9).
    std::string config_path;
    std::string data_dir = "./data";
    // "embedded" (RocksDB under data_dir) or "jetstream" (a NATS JetStream cluster at nats_url
    // shared by any number of collectors; docs/DESIGN.md, "The JetStream engine").
    std::string store = "embedded";
    std::string nats_url;
    int nats_replicas = 3;
    int nats_dedup_replicas = 1;  // HR_DEDUP's copies; 0: as nats_replicas.
    // --nats_deletion_resume_after (JetStreamLayout::deletion_resume_after).
    absl::Duration nats_deletion_resume_after = absl::Seconds(30);
    // jetstream: NATS credentials and TLS, secrets as files (--nats_creds_file, ...).
    NatsConnectOptions nats_connect;
    std::string grpc_address = "0.0.0.0:50051";
    std::string http_address = "0.0.0.0:8080";
    std::string metrics_address = "0.0.0.0:9464";
    // The admin API as JSON over HTTP and the console; "" = not served.
    std::string admin_http_address = "127.0.0.1:8081";
    int http_threads = 2;
    absl::Duration dedup_window = absl::Hours(24);
    // How long a deliverer holds a job before it is handed out again (Dispatcher::Options).
    absl::Duration lease_duration = absl::Seconds(90);
    // embedded store: how long a small group commit waits for company. Off here, as in the
    // store's own options; the collector binary's --commit_linger turns it on (1 ms).
    absl::Duration commit_linger = absl::ZeroDuration();
    // Tests with a manual clock on the JetStream engine (JobStoreOptions::max_schedule_delay).
    absl::Duration max_schedule_delay_for_testing = absl::InfiniteDuration();
    // When non-empty, Admin calls, the admin HTTP API and Subscribe must carry
    // `authorization: Bearer <admin_token>`; when empty they answer only on loopback.
    std::string admin_token;
    // Not owned; must outlive the server. Defaults to the real clock.
    common::Clock* clock = nullptr;
  };

  explicit Server(Options options);
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Opens the store, loads the config (stored + file), binds every address. Logs the bound
  // addresses.
  absl::Status Start();
  // Re-reads the config file; on any error the running config stays and the error is returned
  // (and logged).
  absl::Status Reload();
  // Lame duck, the first step of a graceful stop: readiness (/readyz, gRPC health) turns
  // NOT_SERVING while everything keeps working, so load balancers (Kubernetes endpoints) stop
  // sending new traffic before the listeners close. Idempotent.
  void EnterLameDuck();
  // Graceful: health NOT_SERVING, stop accepting, answer in-flight requests, close the store.
  void Shutdown();

  // The job store (after Start, until Shutdown): for tests and tools in the same process.
  Store* job_store();
  // Dispatch passes so far (Dispatcher::passes), for tests that move a manual clock.
  // Wakes the dispatcher for a pass now (tests: a pass that surely began after a clock move).
  void WakeDispatcher();
  int64_t dispatch_passes() const;

  int grpc_port() const;
  int http_port() const;
  int metrics_port() const;
  int admin_http_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_SERVER_H_
