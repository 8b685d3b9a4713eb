// The admin API as JSON over HTTP (docs/ADMIN_API.md) and the web console, on
// --admin_http_address: the same operations as the gRPC Admin service (AdminCore), the same
// authentication (AdminAuth: `Authorization: Bearer <token>`, or loopback only without a token),
// bodies in protobuf's canonical JSON mapping, errors as
// {"error":{"code","message","fieldViolations":[{"field","description"}]}}.
//
// Requests with a body must be `Content-Type: application/json`, and a request whose Origin is
// not this server is refused: a web page elsewhere cannot drive the API through the browser of
// someone on the machine (the loopback-only mode has no token to protect it).
//
// Four I/O threads; operations may block one of them (a synced store write, up to 10 s for a
// destination test). Each connection answers one request at a time, keep-alive, closed after
// 30 s of silence; bodies up to 1 MiB. Thread-safe; Start and Shutdown from one thread.
#ifndef HOOKRELAY_COLLECTOR_ADMIN_ADMIN_HTTP_H_
#define HOOKRELAY_COLLECTOR_ADMIN_ADMIN_HTTP_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "collector/api/admin_auth.h"
#include "collector/admin/admin_core.h"

namespace hookrelay::collector {

class AdminHttpServer {
 public:
  struct StaticFile {
    std::string content_type;
    std::string body;
  };
  struct Options {
    // host:port; port 0 binds a free port (see port()).
    std::string address = "127.0.0.1:8081";
    // Served for GET on their path ("/" → "/index.html"); the console.
    std::map<std::string, StaticFile> files;
    int threads = 4;
  };

  // `core` and `auth` must outlive the server.
  AdminHttpServer(Options options, AdminCore& core, const AdminAuth& auth);
  ~AdminHttpServer();

  AdminHttpServer(const AdminHttpServer&) = delete;
  AdminHttpServer& operator=(const AdminHttpServer&) = delete;

  absl::Status Start();
  int port() const;
  // Closes the listener and every connection; joins the threads. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The HTTP status for a gRPC / absl code (docs/ADMIN_API.md).
int HttpStatusFor(absl::StatusCode code);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_ADMIN_ADMIN_HTTP_H_
