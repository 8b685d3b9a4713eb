#include "collector/admin_service.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/strings.h"
#include "common/time_format.h"
#include "google/protobuf/timestamp.pb.h"

namespace hookrelay::collector {
namespace {

using ::hookrelay::v1::DeadLetterFilter;
using ::hookrelay::v1::Job;

// Prefix inside the base64 of a page token: tells our tokens from arbitrary strings, and leaves
// room for another encoding later.
constexpr std::string_view kPageTokenPrefix = "dead-after:";

absl::StatusOr<absl::Time> ToTime(const google::protobuf::Timestamp& ts, std::string_view field) {
  std::optional<absl::Time> t = common::FromProtoTime(ts);
  if (!t.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(common::ToAbsl(field), ": not a valid timestamp (seconds ", ts.seconds(),
                     ", nanos ", ts.nanos(), "); 0001-01-01 .. 9999-12-31 allowed"));
  }
  return *t;
}

bool IsEmptyFilter(const DeadLetterFilter& filter) {
  return filter.destination_id().empty() && !filter.has_from() && !filter.has_to();
}

// The request's filter as a store filter (time range and destination; no paging).
absl::StatusOr<DeadFilter> ToDeadFilter(const DeadLetterFilter& in) {
  DeadFilter out;
  out.destination_id = in.destination_id();
  if (in.has_from()) {
    absl::StatusOr<absl::Time> from = ToTime(in.from(), "filter.from");
    if (!from.ok()) return from.status();
    out.from = *from;
  }
  if (in.has_to()) {
    absl::StatusOr<absl::Time> to = ToTime(in.to(), "filter.to");
    if (!to.ok()) return to.status();
    out.to = *to;
  }
  if (in.has_from() && in.has_to() && out.to <= out.from) {
    return absl::InvalidArgumentError(
        "filter.to: must be after filter.from (the range is [from, to))");
  }
  return out;
}

// For logs: the bound in ISO 8601, or "" when unbounded.
std::string Bound(absl::Time t) {
  return t == absl::InfinitePast() || t == absl::InfiniteFuture() ? std::string()
                                                                   : common::FormatIso8601Millis(t);
}

}  // namespace

namespace internal {

std::string EncodePageToken(uint64_t last_id) {
  return absl::WebSafeBase64Escape(absl::StrCat(common::ToAbsl(kPageTokenPrefix), last_id));
}

absl::StatusOr<uint64_t> DecodePageToken(std::string_view token) {
  std::string decoded;
  uint64_t id = 0;
  if (!absl::WebSafeBase64Unescape(common::ToAbsl(token), &decoded) ||
      !absl::StartsWith(decoded, common::ToAbsl(kPageTokenPrefix)) ||
      !absl::SimpleAtoi(absl::string_view(decoded).substr(kPageTokenPrefix.size()), &id) ||
      EncodePageToken(id) != token) {  // Only the exact spelling we hand out.
    return absl::InvalidArgumentError(
        "page_token: not a token returned by ListDeadLetters; leave it empty for the first page");
  }
  return id;
}

bool ConstantTimeEquals(std::string_view given, std::string_view expected) {
  // The loop always runs over `expected`; `diff` is volatile so that the compiler cannot stop
  // at the first difference.
  volatile unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto g = static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    diff = static_cast<unsigned char>(diff | (g ^ static_cast<unsigned char>(expected[i])));
  }
  return diff == 0;
}

}  // namespace internal

AdminService::AdminService(JobStore& store, std::string admin_token)
    : store_(store), admin_token_(std::move(admin_token)) {}

grpc::Status AdminService::Authenticate(const grpc::CallbackServerContext& context) const {
  if (admin_token_.empty()) return grpc::Status::OK;
  const auto& md = context.client_metadata();
  const auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "admin token required: send metadata authorization: Bearer <token>");
  }
  constexpr std::string_view kBearer = "bearer ";
  const std::string_view value(it->second.data(), it->second.size());
  if (value.size() <= kBearer.size() ||
      !absl::EqualsIgnoreCase(common::ToAbsl(value.substr(0, kBearer.size())),
                              common::ToAbsl(kBearer))) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "admin token required: the authorization metadata is not \"Bearer <token>\"");
  }
  const absl::string_view token = absl::StripAsciiWhitespace(
      common::ToAbsl(value.substr(kBearer.size())));
  if (!internal::ConstantTimeEquals(common::ToStd(token), admin_token_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong admin token");
  }
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* AdminService::ListDeadLetters(
    grpc::CallbackServerContext* context, const hookrelay::v1::ListDeadLettersRequest* request,
    hookrelay::v1::ListDeadLettersResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (grpc::Status auth = Authenticate(*context); !auth.ok()) {
    reactor->Finish(auth);
    return reactor;
  }
  const int32_t page_size = request->page_size() == 0 ? kDefaultPageSize : request->page_size();
  if (page_size < 0 || page_size > kMaxPageSize) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("page_size: ", page_size, page_size < 0 ? " is negative" : " is over the limit",
                     "; at most ", kMaxPageSize, " (0 = ", kDefaultPageSize, ")")));
    return reactor;
  }
  absl::StatusOr<DeadFilter> filter = ToDeadFilter(request->filter());
  if (!filter.ok()) {
    reactor->Finish(common::ToGrpcStatus(filter.status()));
    return reactor;
  }
  if (!request->page_token().empty()) {
    absl::StatusOr<uint64_t> after = internal::DecodePageToken(request->page_token());
    if (!after.ok()) {
      reactor->Finish(common::ToGrpcStatus(after.status()));
      return reactor;
    }
    filter->after_id = *after;
  }
  // One more than a page: whether it exists decides if there is a next page, so that an empty
  // next_page_token reliably means "no more" (no trailing empty page).
  filter->limit = static_cast<size_t>(page_size) + 1;
  // Blocks this callback thread until earlier store writes are committed (see the header).
  absl::StatusOr<std::vector<Job>> jobs = store_.ListDead(*filter);
  if (!jobs.ok()) {
    common::LogWarning("listing dead letters failed", {{"error", jobs.status().message()}});
    reactor->Finish(common::ToGrpcStatus(jobs.status()));
    return reactor;
  }
  if (jobs->size() > static_cast<size_t>(page_size)) {
    jobs->resize(static_cast<size_t>(page_size));
    response->set_next_page_token(internal::EncodePageToken(jobs->back().id()));
  }
  response->mutable_jobs()->Reserve(static_cast<int>(jobs->size()));
  for (Job& job : *jobs) *response->add_jobs() = std::move(job);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ReplayDeadLetters(
    grpc::CallbackServerContext* context, const hookrelay::v1::ReplayDeadLettersRequest* request,
    hookrelay::v1::ReplayDeadLettersResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (grpc::Status auth = Authenticate(*context); !auth.ok()) {
    reactor->Finish(auth);
    return reactor;
  }
  // Replaying everything is easy to ask for by accident (a forgotten flag): it must be explicit,
  // and an explicit "all" next to a filter is ambiguous, so both mistakes are refused.
  const bool empty = IsEmptyFilter(request->filter());
  if (empty && !request->all()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "replaying every dead letter needs all=true"));
    return reactor;
  }
  if (!empty && request->all()) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "all: all=true replays every dead letter and cannot be combined with a filter"));
    return reactor;
  }
  absl::StatusOr<DeadFilter> filter = ToDeadFilter(request->filter());
  if (!filter.ok()) {
    reactor->Finish(common::ToGrpcStatus(filter.status()));
    return reactor;
  }
  // Blocks this callback thread while the store pauses its writes, scans and fsyncs.
  absl::StatusOr<size_t> replayed = store_.Replay(*filter);
  const std::string from = Bound(filter->from);
  const std::string to = Bound(filter->to);
  if (!replayed.ok()) {
    common::LogWarning("replaying dead letters failed",
                       {{"destination_id", filter->destination_id},
                        {"from", from},
                        {"to", to},
                        {"all", request->all()},
                        {"peer", context->peer()},
                        {"error", replayed.status().message()}});
    reactor->Finish(common::ToGrpcStatus(replayed.status()));
    return reactor;
  }
  common::LogInfo("dead letters replayed", {{"destination_id", filter->destination_id},
                                            {"from", from},
                                            {"to", to},
                                            {"all", request->all()},
                                            {"replayed", *replayed},
                                            {"peer", context->peer()}});
  response->set_replayed(*replayed);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace hookrelay::collector
