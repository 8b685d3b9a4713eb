// The Segment-compatible HTTP tracking API (SPEC §2.1) on Boost.Beast: POST /v1/track, identify,
// page, screen, group, alias, batch; GET /healthz. Keep-alive connections, a fixed pool of I/O
// threads (no thread per connection); a request is answered only once its events are durable.
// The connections are common::HttpListener's; this file says what a request means.
#ifndef HOOKRELAY_COLLECTOR_INGEST_HTTP_SERVER_H_
#define HOOKRELAY_COLLECTOR_INGEST_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "collector/ingest/ingest_metrics.h"
#include "collector/ingest/ingestor.h"

namespace hookrelay::collector {

class HttpServer {
 public:
  struct Options {
    // host:port; port 0 binds a free port (see port()). IPv6 as [::1]:8080.
    std::string address = "0.0.0.0:8080";
    int io_threads = 2;
    // A keep-alive connection idle this long is closed.
    absl::Duration idle_timeout = absl::Seconds(60);
    // Whether the collector can take events (e.g. JobQueue::WriteHealth); /healthz and /readyz
    // answer 503 with its message while it is not OK. Optional; called on I/O threads.
    std::function<absl::Status()> health;
  };

  // `ingestor` must outlive the server; `metrics` may be null.
  HttpServer(Options options, Ingestor& ingestor, IngestMetrics* metrics);
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving. Errors: the address cannot be parsed or bound.
  absl::Status Start();
  // The bound port (after Start).
  int port() const;
  // Stops accepting connections; /healthz answers 503 on connections already open.
  void StopAccepting();
  // Closes every connection and joins the I/O threads. Call after the ingestor is idle.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_INGEST_HTTP_SERVER_H_
