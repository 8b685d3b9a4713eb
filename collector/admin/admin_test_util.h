// Test-only: a real RocksDbJobStore in a fresh temporary directory on a manual clock, with a
// ConfigManager starting empty (no --config file), served by an AdminService on an in-process gRPC server bound to 127.0.0.1:0, plus a helper that makes
// dead letters the way deliverers do (Append → Lease → Bury). Shared by the AdminService tests
// and the hookrelayctl tests.
//
// Thread-compatible: set up and inspect from the test thread; the gRPC server's own threads only
// go through the service.
#ifndef HOOKRELAY_COLLECTOR_ADMIN_ADMIN_TEST_UTIL_H_
#define HOOKRELAY_COLLECTOR_ADMIN_ADMIN_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/admin/admin_http.h"
#include "collector/admin/admin_service.h"
#include "collector/audiences/audience_syncer.h"
#include "collector/config/config_manager.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"
#include "common/clock.h"
#include "hookrelay/v1/admin.grpc.pb.h"

namespace hookrelay::collector {

class AdminTestServer {
 public:
  // Opens the store under $TEST_TMPDIR and starts the server. `admin_token` as for AdminService.
  static absl::StatusOr<std::unique_ptr<AdminTestServer>> Start(std::string admin_token);

  AdminTestServer(const AdminTestServer&) = delete;
  AdminTestServer& operator=(const AdminTestServer&) = delete;
  // Stops the server, closes the store and removes its directory.
  ~AdminTestServer();

  // For each destination in order: appends one job, leases it and buries it at the clock's
  // current time, then advances the clock by `step`. Returns the job ids in the same order.
  // REQUIRES: no other job is ready (the lease must pick exactly these).
  absl::StatusOr<std::vector<uint64_t>> MakeDeadLetters(const std::vector<std::string>& destinations,
                                                        absl::Duration step = absl::ZeroDuration());

  // The dead_reason MakeDeadLetters gives a job of `destination`.
  static std::string DeadReason(const std::string& destination);

  // The server's gRPC health service (grpc.health.v1.Health): `service` serving or not.
  void SetServing(const std::string& service, bool serving);

  std::string address() const;  // "127.0.0.1:<port>"
  // The admin JSON API over HTTP on the same core: "http://127.0.0.1:<port>".
  std::string http_url() const;
  std::unique_ptr<hookrelay::v1::Admin::Stub> NewStub() const;
  RocksDbJobStore& store() { return *store_; }
  common::ManualClock& clock() { return clock_; }

 private:
  AdminTestServer() = default;

  common::ManualClock clock_;
  std::string dir_;
  std::unique_ptr<RocksDbJobStore> store_;
  std::unique_ptr<AudienceSyncer> audiences_;
  std::unique_ptr<ConfigManager> config_;
  std::unique_ptr<AdminAuth> auth_;
  std::unique_ptr<AdminCore> core_;
  std::unique_ptr<AdminService> service_;
  std::unique_ptr<AdminHttpServer> http_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int next_message_ = 0;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_ADMIN_ADMIN_TEST_UTIL_H_
