// Conversion between absl::Status and grpc::Status at the gRPC edge (services and stubs); the
// core classes speak absl::Status only. The canonical codes are the same in both libraries and
// map 1:1; the message is kept. absl payloads and gRPC error details are not carried over.
// Thread-safe (pure functions).
#ifndef HOOKRELAY_COMMON_GRPC_STATUS_H_
#define HOOKRELAY_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace hookrelay::common {

// OK → grpc::Status::OK; otherwise the same code with the same message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// OK → absl::OkStatus(); otherwise the same code with the same message. A code outside the
// canonical range becomes UNKNOWN.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_GRPC_STATUS_H_
