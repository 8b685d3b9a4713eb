// gRPC adapter for hookrelay.v1.Admin (proto/hookrelay/v1/admin.proto): authenticates the
// operator, validates and converts requests into JobStore calls, converts the answers and
// statuses back. No business logic here; the job store does the work.
//
// Authentication: with a non-empty admin token, every call must carry the metadata entry
// `authorization: Bearer <token>` ("Bearer" in any case); the token is compared in constant time
// and a missing or different one is UNAUTHENTICATED. With an empty token there is NO
// authentication: anyone who reaches the port can list events and replay dead letters, so the
// port must then only be reachable by operators (loopback, a private network). The token travels
// in the clear unless the port is behind TLS.
//
// Threading: ListDeadLetters and ReplayDeadLetters run on gRPC's callback thread and block it
// while the store works: JobStore::ListDead and Replay first wait for every store write queued
// before them (one group commit, milliseconds), and Replay writes with fsync. That is acceptable
// for rare operator calls; nothing on the ingest or delivery path runs here. Thread-safe: calls
// may run concurrently.
//
// Registration: construct it before the server and register it like any callback service,
//   AdminService admin(store, admin_token);
//   builder.RegisterService(&admin);
// The store must outlive the service, and the service must outlive the grpc::Server.
#ifndef HOOKRELAY_COLLECTOR_ADMIN_SERVICE_H_
#define HOOKRELAY_COLLECTOR_ADMIN_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "collector/job_store.h"
#include "hookrelay/v1/admin.grpc.pb.h"

namespace hookrelay::collector {

class AdminService final : public hookrelay::v1::Admin::CallbackService {
 public:
  // ListDeadLettersRequest.page_size: the default (when 0) and the largest accepted.
  static constexpr int32_t kDefaultPageSize = 100;
  static constexpr int32_t kMaxPageSize = 1000;

  // `store` must outlive the service. `admin_token` empty = no authentication (see above).
  AdminService(JobStore& store, std::string admin_token);

  AdminService(const AdminService&) = delete;
  AdminService& operator=(const AdminService&) = delete;

  grpc::ServerUnaryReactor* ListDeadLetters(
      grpc::CallbackServerContext* context,
      const hookrelay::v1::ListDeadLettersRequest* request,
      hookrelay::v1::ListDeadLettersResponse* response) override;

  grpc::ServerUnaryReactor* ReplayDeadLetters(
      grpc::CallbackServerContext* context,
      const hookrelay::v1::ReplayDeadLettersRequest* request,
      hookrelay::v1::ReplayDeadLettersResponse* response) override;

 private:
  // OK, or UNAUTHENTICATED when a token is configured and the call does not carry it.
  grpc::Status Authenticate(const grpc::CallbackServerContext& context) const;

  JobStore& store_;
  const std::string admin_token_;
};

namespace internal {

// The page token after job `last_id`, and back. Decoding fails (INVALID_ARGUMENT) for a string
// EncodePageToken did not make.
std::string EncodePageToken(uint64_t last_id);
absl::StatusOr<uint64_t> DecodePageToken(std::string_view token);

// Compares in time that depends only on `expected.size()`, not on where the inputs differ.
bool ConstantTimeEquals(std::string_view given, std::string_view expected);

}  // namespace internal

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_ADMIN_SERVICE_H_
