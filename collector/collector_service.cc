#include "collector/collector_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/proto_event_parser.h"
#include "common/grpc_status.h"
#include "common/strings.h"

namespace hookrelay::collector {

std::string WriteKeyFromMetadata(const grpc::CallbackServerContext& context) {
  const auto& md = context.client_metadata();
  if (auto it = md.find("x-write-key"); it != md.end()) {
    return std::string(it->second.data(), it->second.size());
  }
  if (auto it = md.find("authorization"); it != md.end()) {
    std::string_view value(it->second.data(), it->second.size());
    if (value.size() > 6 && absl::EqualsIgnoreCase(common::ToAbsl(value.substr(0, 6)), "basic ")) {
      std::string decoded;
      if (!absl::Base64Unescape(absl::StripAsciiWhitespace(common::ToAbsl(value.substr(6))), &decoded)) return {};
      return decoded.substr(0, decoded.find(':'));
    }
  }
  return {};
}

grpc::ServerUnaryReactor* CollectorService::Ingest(grpc::CallbackServerContext* context,
                                                   const hookrelay::v1::IngestRequest* request,
                                                   hookrelay::v1::IngestResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time started = absl::Now();
  const int n = request->events_size();
  if (static_cast<size_t>(n) > kMaxBatchEvents) {
    if (metrics_) metrics_->CountRejected("too_large");
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 absl::StrCat("events: ", n, " events, at most ", kMaxBatchEvents,
                                              " allowed")));
    return reactor;
  }
  std::vector<RawEvent> events;
  events.reserve(n);
  for (int i = 0; i < n; ++i) {
    RawEvent& raw = events.emplace_back(RawEventFromProto(request->events(i)));
    if (raw.json_bytes > kMaxEventBytes) {
      if (metrics_) metrics_->CountRejected("too_large");
      reactor->Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("events[", i, "]: event is ", raw.json_bytes, " bytes as JSON, at most ",
                       kMaxEventBytes, " allowed")));
      return reactor;
    }
  }
  ingestor_.Ingest(
      WriteKeyFromMetadata(*context), std::move(events),
      [this, reactor, response, n, started](absl::StatusOr<IngestOutcome> r) {
        if (metrics_) metrics_->ObserveRequest("grpc", absl::ToDoubleSeconds(absl::Now() - started));
        if (!r.ok()) {
          reactor->Finish(common::ToGrpcStatus(r.status()));
          return;
        }
        if (n > 0 && r->accepted == 0) {
          // Every event is invalid: nothing was stored. Name the first few problems.
          std::string message = "every event is invalid:";
          for (size_t i = 0; i < r->rejected.size() && i < 5; ++i) {
            absl::StrAppend(&message, i ? ";" : "", " events[", r->rejected[i].index, "].",
                            r->rejected[i].field, ": ", r->rejected[i].reason);
          }
          if (r->rejected.size() > 5) absl::StrAppend(&message, "; ...");
          reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message));
          return;
        }
        response->set_accepted(static_cast<int32_t>(r->accepted));
        for (Rejection& rej : r->rejected) {
          hookrelay::v1::Rejection* out = response->add_rejected();
          out->set_index(static_cast<int32_t>(rej.index));
          out->set_field(std::move(rej.field));
          out->set_reason(std::move(rej.reason));
        }
        for (std::string& id : r->message_ids) response->add_message_ids(std::move(id));
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

}  // namespace hookrelay::collector
