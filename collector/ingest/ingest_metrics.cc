#include "collector/ingest/ingest_metrics.h"

#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace hookrelay::collector {
namespace {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5};
}

// Every reason the collector counts: the fixed ones and invalid_<field> for each field an event
// can be refused for (collector/model/event.cc, http_event_parser.cc, proto_event_parser.cc).
constexpr const char* kReasons[] = {
    "unauthenticated", "overload", "store_unavailable", "too_large", "invalid_json",
    "invalid_request", "unsupported_media_type", "bad_http", "invalid_type", "invalid_messageId",
    "invalid_userId", "invalid_anonymousId", "invalid_groupId", "invalid_previousId",
    "invalid_event", "invalid_name", "invalid_category", "invalid_timestamp", "invalid_sentAt",
    "invalid_properties", "invalid_traits", "invalid_context", "invalid_integrations"};
constexpr const char* kIngestTypes[] = {"track", "identify", "page", "screen", "group", "alias"};
// The parts of a destination filter an event can fail (collector/routing/destination_filter.h).
constexpr const char* kFilterReasons[] = {"type", "event", "where"};

}  // namespace

IngestMetrics::IngestMetrics(prometheus::Registry& registry)
    : events_(prometheus::BuildCounter()
                  .Name("hookrelay_ingest_events_total")
                  .Help("Events accepted and stored, by source and type (duplicates excluded).")
                  .Register(registry)),
      rejected_(prometheus::BuildCounter()
                    .Name("hookrelay_ingest_rejected_total")
                    .Help("Events or requests refused at ingest, by reason.")
                    .Register(registry)),
      filtered_(prometheus::BuildCounter()
                    .Name("hookrelay_ingest_filtered_total")
                    .Help("Events that made no job for a destination because its filter refused "
                          "them, by destination and the part of the filter that failed.")
                    .Register(registry)),
      request_duration_(prometheus::BuildHistogram()
                            .Name("hookrelay_ingest_request_duration_seconds")
                            .Help("Ingest request receipt to answer (durable), by API.")
                            .Register(registry)),
      http_duration_(request_duration_.Add({{"api", "http"}}, LatencyBuckets())),
      grpc_duration_(request_duration_.Add({{"api", "grpc"}}, LatencyBuckets())),
      http_connections_(prometheus::BuildGauge()
                            .Name("hookrelay_http_connections")
                            .Help("Open connections of the HTTP tracking API.")
                            .Register(registry)
                            .Add({})) {
  absl::MutexLock lock(&mu_);
  for (const char* reason : kReasons) {
    rejected_by_reason_.try_emplace(reason, &rejected_.Add({{"reason", reason}}));
  }
}

void IngestMetrics::DeclareSources(const std::vector<std::string>& source_ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& source : source_ids) {
    for (const char* type : kIngestTypes) {
      auto [it, inserted] = events_by_key_.try_emplace(absl::StrCat(source, "\t", type), nullptr);
      if (inserted) it->second = &events_.Add({{"source", source}, {"type", type}});
    }
  }
}

void IngestMetrics::CountEvents(std::string_view source_id, std::string_view type, int64_t n) {
  const std::string key = absl::StrCat(common::ToAbsl(source_id), "\t", common::ToAbsl(type));
  prometheus::Counter* counter;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = events_by_key_.try_emplace(key, nullptr);
    if (inserted) {
      it->second = &events_.Add({{"source", std::string(source_id)}, {"type", std::string(type)}});
    }
    counter = it->second;
  }
  counter->Increment(static_cast<double>(n));
}

void IngestMetrics::CountRejected(std::string_view reason, int64_t n) {
  prometheus::Counter* counter;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = rejected_by_reason_.try_emplace(std::string(reason), nullptr);
    if (inserted) it->second = &rejected_.Add({{"reason", std::string(reason)}});
    counter = it->second;
  }
  counter->Increment(static_cast<double>(n));
}

void IngestMetrics::DeclareFilteredDestinations(const std::vector<std::string>& destination_ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& destination : destination_ids) {
    for (const char* reason : kFilterReasons) {
      auto [it, inserted] =
          filtered_by_key_.try_emplace(absl::StrCat(destination, "\t", reason), nullptr);
      if (inserted) it->second = &filtered_.Add({{"destination", destination}, {"reason", reason}});
    }
  }
}

void IngestMetrics::CountFiltered(std::string_view destination_id, std::string_view reason,
                                  int64_t n) {
  const std::string key =
      absl::StrCat(common::ToAbsl(destination_id), "\t", common::ToAbsl(reason));
  prometheus::Counter* counter;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = filtered_by_key_.try_emplace(key, nullptr);
    if (inserted) {
      it->second = &filtered_.Add(
          {{"destination", std::string(destination_id)}, {"reason", std::string(reason)}});
    }
    counter = it->second;
  }
  counter->Increment(static_cast<double>(n));
}

void IngestMetrics::ObserveRequest(std::string_view api, double seconds) {
  (api == "grpc" ? grpc_duration_ : http_duration_).Observe(seconds);
}

}  // namespace hookrelay::collector
