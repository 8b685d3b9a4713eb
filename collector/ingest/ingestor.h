// The ingest core shared by the HTTP and gRPC front ends: authenticate the write key, validate
// and normalise every event, route each valid one to its enabled destinations (one job per
// destination), append durably, then answer. Knows nothing of HTTP or gRPC.
#ifndef HOOKRELAY_COLLECTOR_INGEST_INGESTOR_H_
#define HOOKRELAY_COLLECTOR_INGEST_INGESTOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collector/model/event.h"
#include "collector/ingest/ingest_metrics.h"
#include "collector/store/job_queue.h"
#include "collector/routing/destination_filter.h"
#include "collector/routing/routing.h"
#include "common/clock.h"
#include "common/trace_context.h"

namespace hookrelay::collector {

struct Rejection {
  size_t index = 0;
  std::string field;
  std::string reason;
};

struct IngestOutcome {
  // Valid events (newly stored or duplicates of stored ones).
  size_t accepted = 0;
  // Invalid events; nothing of them was stored.
  std::vector<Rejection> rejected;
  // Per request event: its (possibly generated) messageId; empty when rejected.
  std::vector<std::string> message_ids;
};

class Ingestor {
 public:
  struct Options {
    // Events accepted but not yet durable, across all requests; beyond it requests are refused
    // with RESOURCE_EXHAUSTED (HTTP 429) instead of queueing without bound.
    size_t max_pending_events = 250000;
  };
  // Runs once: on a store thread after the append, or inline for an early refusal.
  using Done = absl::AnyInvocable<void(absl::StatusOr<IngestOutcome>) &&>;

  // All references must outlive the Ingestor. `metrics` may be null.
  Ingestor(Options options, const RoutingHolder& routing, JobQueue& store,
           const common::Clock& clock, IngestMetrics* metrics);

  // Errors passed to `done`: UNAUTHENTICATED (unknown or missing write key), RESOURCE_EXHAUSTED
  // (overloaded), UNAVAILABLE (shutting down, or the store cannot write: JobQueue::WriteHealth),
  // or the store's error. Per-event problems are in
  // IngestOutcome::rejected, with status OK.
  // `trace` (the request's W3C trace context, already validated by
  // common::TraceContextFromHeaders) is kept with every job the request makes.
  void Ingest(std::string_view write_key, std::vector<RawEvent> events,
              const common::TraceContext& trace, Done done);
  // Without a trace context.
  void Ingest(std::string_view write_key, std::vector<RawEvent> events, Done done) {
    Ingest(write_key, std::move(events), common::TraceContext{}, std::move(done));
  }

  // Refuses new requests from now on (UNAVAILABLE).
  void BeginShutdown();
  // Blocks until every accepted request has been answered.
  void WaitIdle();

 private:
  // A job a destination's filter held back: the item (its index in the Append) and destination
  // (its index in the route).
  struct Filtered {
    size_t item = 0;
    size_t destination = 0;
    FilterVerdict verdict = FilterVerdict::kPass;
  };

  const Options options_;
  const RoutingHolder& routing_;
  JobQueue& store_;
  const common::Clock& clock_;
  IngestMetrics* const metrics_;

  absl::Mutex mu_;
  size_t pending_events_ ABSL_GUARDED_BY(mu_) = 0;
  size_t pending_requests_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_INGEST_INGESTOR_H_
