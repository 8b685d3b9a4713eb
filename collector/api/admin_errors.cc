#include "collector/api/admin_errors.h"

#include "absl/strings/cord.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace hookrelay::collector {
namespace {

constexpr char kBadRequestUrl[] = "type.googleapis.com/google.rpc.BadRequest";

}  // namespace

absl::Status WithViolations(absl::StatusCode code, std::string message,
                            const std::vector<FieldViolation>& violations) {
  absl::Status status(code, message);
  if (!violations.empty()) {
    google::rpc::BadRequest bad_request;
    for (const FieldViolation& v : violations) {
      auto* out = bad_request.add_field_violations();
      out->set_field(v.field);
      out->set_description(v.description);
    }
    status.SetPayload(kBadRequestUrl, absl::Cord(bad_request.SerializeAsString()));
  }
  return status;
}

absl::Status InvalidField(std::string field, std::string description) {
  std::string message = field + ": " + description;
  return WithViolations(absl::StatusCode::kInvalidArgument, std::move(message),
                        {{std::move(field), std::move(description)}});
}

std::vector<FieldViolation> Violations(const absl::Status& status) {
  std::vector<FieldViolation> out;
  auto payload = status.GetPayload(kBadRequestUrl);
  if (!payload.has_value()) return out;
  google::rpc::BadRequest bad_request;
  if (!bad_request.ParseFromString(std::string(*payload))) return out;
  for (const auto& v : bad_request.field_violations()) out.push_back({v.field(), v.description()});
  return out;
}

grpc::Status ToGrpcWithDetails(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  const std::string message(status.message());
  auto payload = status.GetPayload(kBadRequestUrl);
  if (!payload.has_value()) return grpc::Status(code, message);
  google::rpc::BadRequest bad_request;
  if (!bad_request.ParseFromString(std::string(*payload))) return grpc::Status(code, message);
  google::rpc::Status details;
  details.set_code(static_cast<int32_t>(code));
  details.set_message(message);
  details.add_details()->PackFrom(bad_request);
  return grpc::Status(code, message, details.SerializeAsString());
}

}  // namespace hookrelay::collector
