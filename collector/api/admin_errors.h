// Errors of the admin API that name fields: an absl::Status whose payload is a
// google.rpc.BadRequest, turned into gRPC error details (AdminService) or the JSON error body's
// fieldViolations (AdminHttpServer). Thread-safe (pure functions).
#ifndef HOOKRELAY_COLLECTOR_API_ADMIN_ERRORS_H_
#define HOOKRELAY_COLLECTOR_API_ADMIN_ERRORS_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace hookrelay::collector {

struct FieldViolation {
  std::string field;
  std::string description;
};

// A status with `code`, `message` and the violations as payload.
absl::Status WithViolations(absl::StatusCode code, std::string message,
                            const std::vector<FieldViolation>& violations);
// INVALID_ARGUMENT "field: description" with that one violation.
absl::Status InvalidField(std::string field, std::string description);
// The violations carried by `status` (none when it has no payload).
std::vector<FieldViolation> Violations(const absl::Status& status);
// The same code and message; violations as google.rpc.BadRequest in the status details.
grpc::Status ToGrpcWithDetails(const absl::Status& status);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_API_ADMIN_ERRORS_H_
