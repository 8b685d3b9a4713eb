// The deliverer process: the HTTP sender, the Deliverer subscribed to the collectors, its metrics
// and the metrics/probe port (/metrics, /healthz alive, /readyz a collector stream is open).
// main.cc parses flags into Options and drives Start / Shutdown from signals.
//
// Start and Shutdown are called from one thread; connected_streams, jobs_in_flight and
// metrics_port from any thread once Start has returned.
#ifndef HOOKRELAY_DELIVERER_SERVER_H_
#define HOOKRELAY_DELIVERER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "deliverer/sender_sizing.h"

namespace hookrelay::deliverer {

class Server {
 public:
  struct Options {
    // Collector gRPC addresses, at least one: `host:port` or `dns:///host:port`
    // (collector_targets.h).
    std::vector<std::string> collectors;
    // How often dns:/// collector addresses are resolved again; at least 1s.
    absl::Duration resolve_interval = absl::Seconds(30);
    // host:port of /metrics, /healthz and /readyz; port 0 picks a free port.
    std::string metrics_address = "0.0.0.0:9465";
    // Permits receivers on loopback, private, link-local and metadata addresses.
    bool allow_private_networks = false;
    // Shown in the collectors' logs. Empty = hostname-pid.
    std::string deliverer_id;
    // Sender threads, connection slots per host per thread, and jobs held per collector
    // stream (sender_sizing.h derives them); each at least 1.
    Sizing sizing;
    // Extra PEM CA certificates to trust besides the system store; empty = none.
    std::string ca_file;
    // Sent as `authorization: Bearer <admin_token>` on Subscribe when non-empty.
    std::string admin_token;
    // Shutdown waits this long for jobs in flight.
    absl::Duration drain_timeout = absl::Seconds(15);
  };

  explicit Server(Options options);
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Starts the sender, opens the collector streams (in the background; unreachable collectors
  // are retried) and binds the metrics address. Call once. On an error every part started is
  // stopped again and the failure is logged. Errors: Unavailable when the metrics address cannot
  // be parsed or bound; otherwise (InvalidArgument, Internal) the Options cannot be used, the
  // message naming the option (e.g. "ca_file ...", "--collector: ...").
  absl::Status Start();
  // Graceful: the streams drain (jobs in flight finish and their outcomes are sent, at most
  // drain_timeout), then the metrics port closes and the sender stops. Logs "deliverer stopped"
  // after a successful Start. Idempotent.
  void Shutdown();

  // Collector streams currently open (0 unless started).
  int connected_streams() const;
  // Jobs received and not yet settled (0 unless started).
  int64_t jobs_in_flight() const;
  // The bound metrics port (after a successful Start).
  int metrics_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_SERVER_H_
