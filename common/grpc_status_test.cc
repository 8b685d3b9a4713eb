#include "common/grpc_status.h"

#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

// OK maps to OK in both directions.
TEST(GrpcStatusTest, OkRoundTrips) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

// Every canonical code keeps its number and its message, both ways.
TEST(GrpcStatusTest, EveryCodeAndMessageRoundTrips) {
  for (int code = 1; code <= 16; ++code) {
    SCOPED_TRACE(code);
    const absl::Status in(static_cast<absl::StatusCode>(code), "message \xE2\x9C\x93 for code");
    const grpc::Status grpc_status = ToGrpcStatus(in);
    EXPECT_EQ(static_cast<int>(grpc_status.error_code()), code);
    EXPECT_EQ(grpc_status.error_message(), "message \xE2\x9C\x93 for code");
    EXPECT_EQ(FromGrpcStatus(grpc_status), in);
  }
}

// Named codes land on their namesakes (spot checks of the 1:1 map).
TEST(GrpcStatusTest, NamedCodesMatch) {
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::UnauthenticatedError("x")).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")),
            absl::UnavailableError("down"));
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "late")),
            absl::DeadlineExceededError("late"));
}

// Codes outside the canonical range become UNKNOWN instead of leaking onto the wire.
TEST(GrpcStatusTest, OutOfRangeCodesBecomeUnknown) {
  const grpc::Status out = ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "odd"));
  EXPECT_EQ(out.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(out.error_message(), "odd");
  EXPECT_EQ(FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(20), "odd")),
            absl::UnknownError("odd"));
}

}  // namespace
}  // namespace hookrelay::common
