#include "collector/ingest/collector_service.h"

#include <google/protobuf/arena.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/dispatch/subscribe_stream.h"
#include "collector/ingest/proto_event_parser.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/trace_context.h"

namespace hookrelay::collector {
namespace {

// A parsed request of 100 events of ~300 bytes takes about 100 KB of arena (the ingest
// benchmark's); larger ones continue in heap blocks of up to 1 MB.
constexpr size_t kArenaFirstBlockBytes = 256 << 10;
constexpr size_t kArenaMaxBlockBytes = 1 << 20;

}  // namespace

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

common::TraceContext TraceContextFromMetadata(const grpc::CallbackServerContext& context) {
  const auto& md = context.client_metadata();
  const auto parents = md.equal_range(std::string(common::kTraceparentHeader));
  // Two traceparents are ambiguous: none is kept (as on the HTTP API).
  if (parents.first == parents.second || std::next(parents.first) != parents.second) return {};
  std::string tracestate;
  for (auto [it, end] = md.equal_range(std::string(common::kTracestateHeader)); it != end; ++it) {
    if (!tracestate.empty()) tracestate.push_back(',');
    tracestate.append(it->second.data(), it->second.size());
  }
  const grpc::string_ref parent = parents.first->second;
  return common::TraceContextFromHeaders(std::string_view(parent.data(), parent.size()),
                                         tracestate);
}

grpc::Status BadRequestStatus(grpc::StatusCode code, const std::string& message,
                              const std::vector<FieldViolation>& violations) {
  return ToGrpcWithDetails(
      WithViolations(static_cast<absl::StatusCode>(code), message, violations));
}

grpc::ServerBidiReactor<hookrelay::v1::SubscribeRequest, hookrelay::v1::SubscribeResponse>*
CollectorService::Subscribe(grpc::CallbackServerContext* context) {
  if (subscribe_auth_ == nullptr) return NewSubscribeStream(dispatcher_, context);
  const auto& metadata = context->client_metadata();
  const auto it = metadata.find("authorization");
  const absl::string_view authorization =
      it == metadata.end() ? absl::string_view()
                           : absl::string_view(it->second.data(), it->second.size());
  absl::StatusOr<std::string> who = subscribe_auth_->Check(authorization, context->peer());
  if (!who.ok()) {
    static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 3);
    common::LogRateLimited(*limiter, common::LogLevel::kWarning, "Subscribe refused",
                           {{"peer", context->peer()}, {"error", who.status().message()}});
    return NewSubscribeStream(dispatcher_, context, who.status());
  }
  return NewSubscribeStream(dispatcher_, context);
}

grpc::ServerUnaryReactor* CollectorService::Ingest(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request_bytes,
                                                   grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time started = absl::Now();
  // The request is read as hookrelay.internal.IngestRequestWire first (its events' Structs as
  // bytes, written out as JSON in one pass: RawEventFromWire). Should any Struct be more than
  // plain, it is read again as hookrelay.v1.IngestRequest (protobuf's maps, then JSON), whose
  // parse also decides what is malformed. Both live on an arena that starts in this thread's
  // own block, reused by every call: most requests need no heap block at all.
  thread_local char first_block[kArenaFirstBlockBytes];
  google::protobuf::ArenaOptions arena_options;
  arena_options.initial_block = first_block;
  arena_options.initial_block_size = sizeof(first_block);
  arena_options.max_block_size = kArenaMaxBlockBytes;
  google::protobuf::Arena arena(arena_options);
  auto parse = [request_bytes](google::protobuf::Message& message) {
    // The reader only reads; it takes a non-const pointer for its own bookkeeping.
    grpc::ByteBuffer copy(*request_bytes);
    grpc::ProtoBufferReader reader(&copy);
    return message.ParseFromZeroCopyStream(&reader);
  };
  std::vector<RawEvent> events;
  int n = 0;
  auto& wire = *google::protobuf::Arena::CreateMessage<hookrelay::internal::IngestRequestWire>(
      &arena);
  bool plain = parse(wire);
  if (plain) {
    n = wire.events_size();
    if (static_cast<size_t>(n) <= kMaxBatchEvents) {
      events.reserve(n);
      for (int i = 0; i < n && plain; ++i) {
        std::optional<RawEvent> raw = RawEventFromWire(wire.events(i));
        plain = raw.has_value();
        if (plain) events.push_back(*std::move(raw));
      }
    }
  }
  if (!plain) {
    events.clear();
    auto& request =
        *google::protobuf::Arena::CreateMessage<hookrelay::v1::IngestRequest>(&arena);
    if (!parse(request)) {
      if (metrics_) metrics_->CountRejected("invalid_request");
      reactor->Finish(BadRequestStatus(
          grpc::StatusCode::INVALID_ARGUMENT,
          "the request is not a valid hookrelay.v1.IngestRequest (protobuf parse error)",
          {{"", "not a valid hookrelay.v1.IngestRequest"}}));
      return reactor;
    }
    n = request.events_size();
    if (static_cast<size_t>(n) <= kMaxBatchEvents) {
      events.reserve(n);
      for (int i = 0; i < n; ++i) events.push_back(RawEventFromProto(request.events(i)));
    }
  }
  if (static_cast<size_t>(n) > kMaxBatchEvents) {
    if (metrics_) metrics_->CountRejected("too_large");
    const std::string message =
        absl::StrCat("events: ", n, " events, at most ", kMaxBatchEvents, " allowed");
    reactor->Finish(
        BadRequestStatus(grpc::StatusCode::RESOURCE_EXHAUSTED, message, {{"events", message}}));
    return reactor;
  }
  for (int i = 0; i < n; ++i) {
    const RawEvent& raw = events[i];
    if (raw.json_bytes > kMaxEventBytes) {
      if (metrics_) metrics_->CountRejected("too_large");
      const std::string description = absl::StrCat("event is ", raw.json_bytes,
                                                    " bytes as JSON, at most ", kMaxEventBytes,
                                                    " allowed");
      const std::string field = absl::StrCat("events[", i, "]");
      reactor->Finish(BadRequestStatus(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                       absl::StrCat(field, ": ", description),
                                       {{field, description}}));
      return reactor;
    }
  }
  ingestor_.Ingest(
      WriteKeyFromMetadata(*context), std::move(events), TraceContextFromMetadata(*context),
      [this, reactor, response_bytes, n, started](absl::StatusOr<IngestOutcome> r) {
        if (metrics_) metrics_->ObserveRequest("grpc", absl::ToDoubleSeconds(absl::Now() - started));
        if (!r.ok()) {
          reactor->Finish(common::ToGrpcStatus(r.status()));
          return;
        }
        if (n > 0 && r->accepted == 0) {
          // Every event is invalid: nothing was stored. The text names the first few problems;
          // the BadRequest details list every one.
          std::string message = "every event is invalid:";
          std::vector<FieldViolation> violations;
          violations.reserve(r->rejected.size());
          for (size_t i = 0; i < r->rejected.size(); ++i) {
            const Rejection& rej = r->rejected[i];
            std::string field = absl::StrCat("events[", rej.index, "].", rej.field);
            if (i < 5) absl::StrAppend(&message, i ? ";" : "", " ", field, ": ", rej.reason);
            violations.push_back({std::move(field), rej.reason});
          }
          if (r->rejected.size() > 5) absl::StrAppend(&message, "; ...");
          reactor->Finish(
              BadRequestStatus(grpc::StatusCode::INVALID_ARGUMENT, message, violations));
          return;
        }
        hookrelay::v1::IngestResponse response;
        response.set_accepted(static_cast<int32_t>(r->accepted));
        for (Rejection& rej : r->rejected) {
          hookrelay::v1::Rejection* out = response.add_rejected();
          out->set_index(static_cast<int32_t>(rej.index));
          out->set_field(std::move(rej.field));
          out->set_reason(std::move(rej.reason));
        }
        for (std::string& id : r->message_ids) response.add_message_ids(std::move(id));
        bool own_buffer = false;
        const grpc::Status serialized = grpc::SerializationTraits<hookrelay::v1::IngestResponse>::Serialize(
            response, response_bytes, &own_buffer);
        reactor->Finish(serialized);
      });
  return reactor;
}

}  // namespace hookrelay::collector
