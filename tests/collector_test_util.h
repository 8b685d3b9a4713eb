// Helpers shared by the collector's end-to-end tests: temp directories, a small blocking HTTP/1.1
// client on raw sockets (so tests can also send malformed bytes), gzip, JSON look-ups, an
// in-process collector with a manual clock, and reading back every stored job.
//
// Everything here is test-only and thread-compatible: one HttpConnection per thread.
#ifndef HOOKRELAY_TESTS_COLLECTOR_TEST_UTIL_H_
#define HOOKRELAY_TESTS_COLLECTOR_TEST_UTIL_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/server.h"
#include "common/clock.h"
#include "hookrelay/v1/job.pb.h"

struct __natsConnection;
typedef struct __natsConnection natsConnection;

namespace hookrelay::test {

// How long one blocking network step may take before the helper gives up with an error.
inline constexpr absl::Duration kIoTimeout = absl::Seconds(20);

// The write keys of TestConfigYaml().
inline constexpr char kWebKey[] = "wk_test_web";
inline constexpr char kFanKey[] = "wk_test_fan";
inline constexpr char kQuietKey[] = "wk_test_quiet";

// Three sources and three destinations:
//   web   (kWebKey)   → hook-web                 (hook-off is attached but disabled): 1 job/event
//   fan   (kFanKey)   → hook-web, hook-fan       : 2 jobs/event
//   quiet (kQuietKey) → only the disabled hook-off: no job
std::string TestConfigYaml();

// The manual clock's time in the in-process tests, and its ISO 8601 form.
inline constexpr int64_t kNowUnixSeconds = 1700000000;
inline constexpr char kNowIso[] = "2023-11-14T22:13:20.000Z";

// A fresh directory under $TEST_TMPDIR (or /tmp). Crashes the test binary when it cannot be made.
std::string MakeTempDir(std::string_view name);
absl::Status WriteFile(const std::string& path, std::string_view contents);

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  int status = 0;
  // Names as received.
  HttpHeaders headers;
  std::string body;

  // The first header named `name` (case-insensitive), or "".
  std::string Header(std::string_view name) const;
};

// One client connection to 127.0.0.1:port. Every step waits at most kIoTimeout.
class HttpConnection {
 public:
  static absl::StatusOr<std::unique_ptr<HttpConnection>> Connect(int port);
  ~HttpConnection();

  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Writes all of `bytes`. Errors: the peer closed or reset the connection, or a timeout.
  absl::Status SendAll(std::string_view bytes);
  // Half-closes: the server sees end of stream; responses can still be read.
  void ShutdownWrite();
  // Reads one response (Content-Length framed, or up to end of stream when it has none). The
  // response to a HEAD request has no body: pass `head` = true.
  absl::StatusOr<HttpResponse> ReadResponse(bool head = false);
  // True when the server has closed the connection (end of stream, nothing more to read).
  // Waits up to kIoTimeout for that to happen.
  bool WaitPeerClosed();

  // Sends a request with Host and Content-Length added and reads the response. Even when the
  // server stops reading part-way (e.g. 413) the response it sent is returned.
  absl::StatusOr<HttpResponse> Request(std::string_view method, std::string_view target,
                                       std::string_view body, const HttpHeaders& headers);
  // POST with Content-Type: application/json, and Basic auth when `write_key` is non-empty.
  absl::StatusOr<HttpResponse> Post(std::string_view target, std::string_view body,
                                    std::string_view write_key = {}, HttpHeaders extra = {});

 private:
  explicit HttpConnection(int fd) : fd_(fd) {}
  // Appends what arrives to buffer_. Returns false on end of stream; errors on reset/timeout.
  absl::StatusOr<bool> ReadMore(absl::Time deadline);

  int fd_;
  std::string buffer_;
};

// One request on a new connection.
absl::StatusOr<HttpResponse> HttpPost(int port, std::string_view target, std::string_view body,
                                      std::string_view write_key = {}, HttpHeaders extra = {});

// "Basic base64(key:)".
std::string BasicAuth(std::string_view write_key);
// gzip-framed deflate of `data`.
std::string Gzip(std::string_view data);

// JSON look-ups by JSON pointer ("/context/ip", "/rejected/0/field"; "" is the whole document).
// JsonAt: the value as compact JSON, "<missing>" or "<invalid json>". JsonStr: a string value
// without quotes, or one of those markers, or "<not a string>".
std::string JsonAt(std::string_view json, std::string_view pointer);
std::string JsonStr(std::string_view json, std::string_view pointer);
// True when `json` is a JSON object with "success": false and a string "error" (the collector's
// error body).
bool IsJsonError(std::string_view json);

// The job-store engine a test collector runs on (tests/test_engines.h prepares one).
struct EngineSetup {
  std::string engine = "embedded";  // or "jetstream"
  std::string nats_url;             // jetstream: the cluster
};

// Opens the job store in `data_dir` (which no process may hold open) and leases every ready job,
// in store order.
absl::StatusOr<std::vector<hookrelay::v1::Job>> LeaseAllJobs(const std::string& data_dir);

// Every job the engine holds, in store order, read without taking any from a collector: the
// embedded engine's data_dir (LeaseAllJobs), or the JetStream cluster's job stream.
absl::StatusOr<std::vector<hookrelay::v1::Job>> ReadAllJobs(const EngineSetup& engine,
                                                          const std::string& data_dir);

// A connection to the NATS servers at `urls` (comma-separated); the caller destroys it.
absl::StatusOr<natsConnection*> ConnectNats(const std::string& urls);

// A collector::Server on 127.0.0.1 with port 0 everywhere, a temp data dir, TestConfigYaml()
// written next to it, and a manual clock at kNowUnixSeconds.

class InProcessCollector {
 public:
  explicit InProcessCollector(std::string_view name, std::string config_yaml = TestConfigYaml(),
                              EngineSetup engine = {});
  ~InProcessCollector();

  absl::Status Start();
  // Server::Shutdown (idempotent).
  void Stop();
  // Stops the server, then ReadAllJobs of its engine.
  absl::StatusOr<std::vector<hookrelay::v1::Job>> StopAndLeaseAll();

  int http_port() const { return server_->http_port(); }
  int grpc_port() const { return server_->grpc_port(); }
  common::ManualClock& clock() { return clock_; }
  collector::Server& server() { return *server_; }
  const std::string& config_path() const { return config_path_; }
  const std::string& data_dir() const { return data_dir_; }

 private:
  common::ManualClock clock_;
  const EngineSetup engine_;
  std::string dir_;
  std::string config_path_;
  std::string data_dir_;
  std::unique_ptr<collector::Server> server_;
};

}  // namespace hookrelay::test

#endif  // HOOKRELAY_TESTS_COLLECTOR_TEST_UTIL_H_
