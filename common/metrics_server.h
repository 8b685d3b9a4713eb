// The metrics and probe port of a hookrelay process: GET /metrics (Prometheus text format, from
// the registered collectables), /healthz (the process is alive and serving) and /readyz (it should
// get traffic), on Boost.Beast. Replaces prometheus-cpp's civetweb Exposer, which can serve no
// status but 200 (so no readiness) and takes ~2 s to stop.
//
// One I/O thread; each connection answers one request at a time, keep-alive, closed after 30 s of
// silence. Thread-safe: Add may be called at any time (also while serving); Start and Shutdown
// from one thread.
#ifndef HOOKRELAY_COMMON_METRICS_SERVER_H_
#define HOOKRELAY_COMMON_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "prometheus/collectable.h"

namespace hookrelay::common {

class MetricsServer {
 public:
  struct Options {
    // host:port; port 0 binds a free port (see port()). IPv6 as [::1]:9464.
    std::string address = "0.0.0.0:9464";
    // /healthz: 200 while OK, else 503 with the message. Null = always OK. Called on the I/O
    // thread; must be cheap and must not block.
    std::function<absl::Status()> live;
    // /readyz: the same for readiness (e.g. connected to a collector, store writable).
    std::function<absl::Status()> ready;
  };

  explicit MetricsServer(Options options);
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Collected at every scrape, in the order added. Kept alive by the server.
  void Add(std::shared_ptr<prometheus::Collectable> collectable);

  // Binds and serves. Errors: the address cannot be parsed or bound (the message names it).
  absl::Status Start();
  // The bound port (after Start).
  int port() const;
  // Closes the listener and every connection, joins the thread. Idempotent; fast.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_METRICS_SERVER_H_
