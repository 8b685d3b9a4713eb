// The collector's ingest metrics (SPEC §8 names). Families are built once; label handles for the
// fixed label sets are cached here. Thread-safe.
#ifndef HOOKRELAY_COLLECTOR_INGEST_INGEST_METRICS_H_
#define HOOKRELAY_COLLECTOR_INGEST_INGEST_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {

class IngestMetrics {
 public:
  // Exports every known rejection reason at 0 from the start.
  explicit IngestMetrics(prometheus::Registry& registry);

  // Exports hookrelay_ingest_events_total at 0 for each source × ingest type, so dashboards and
  // rate() see the series before the first event. Call at start and after each config change;
  // series of sources removed since stay (a counter never goes away while the process lives).
  void DeclareSources(const std::vector<std::string>& source_ids);

  // hookrelay_ingest_events_total{source,type}: events stored (duplicates not counted).
  void CountEvents(std::string_view source_id, std::string_view type, int64_t n);
  // hookrelay_ingest_rejected_total{reason}: events or requests refused.
  void CountRejected(std::string_view reason, int64_t n = 1);
  // hookrelay_ingest_filtered_total{destination,reason}: events that made no job for a
  // destination because its filter refused them; reason is type, event or where (the first part
  // of the filter that failed). Stored events only, like hookrelay_ingest_events_total.
  void CountFiltered(std::string_view destination_id, std::string_view reason, int64_t n);
  // Exports hookrelay_ingest_filtered_total at 0 for each reason of each destination given (those
  // with a filter). Call at start and after each config change.
  void DeclareFilteredDestinations(const std::vector<std::string>& destination_ids);
  // hookrelay_ingest_request_duration_seconds{api}: receipt of a request → its answer.
  void ObserveRequest(std::string_view api, double seconds);
  // hookrelay_http_connections: open HTTP connections of the tracking API.
  void HttpConnectionOpened() { http_connections_.Increment(); }
  void HttpConnectionClosed() { http_connections_.Decrement(); }

 private:
  prometheus::Family<prometheus::Counter>& events_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Family<prometheus::Counter>& filtered_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Histogram& http_duration_;
  prometheus::Histogram& grpc_duration_;
  prometheus::Gauge& http_connections_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, prometheus::Counter*> events_by_key_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, prometheus::Counter*> rejected_by_reason_ ABSL_GUARDED_BY(mu_);
  // "destination\treason" → counter.
  absl::flat_hash_map<std::string, prometheus::Counter*> filtered_by_key_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_INGEST_INGEST_METRICS_H_
