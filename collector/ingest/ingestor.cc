#include "collector/ingest/ingestor.h"

#include <memory>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/config_validate.h"

namespace hookrelay::collector {

Ingestor::Ingestor(Options options, const RoutingHolder& routing, JobQueue& store,
                   const common::Clock& clock, IngestMetrics* metrics)
    : options_(options), routing_(routing), store_(store), clock_(clock), metrics_(metrics) {}

void Ingestor::Ingest(std::string_view write_key, std::vector<RawEvent> events,
                      const common::TraceContext& trace, Done done) {
  std::shared_ptr<const Routing> routing = routing_.Get();
  const SourceRoute* route = write_key.empty() ? nullptr : routing->FindByWriteKey(write_key);
  if (route == nullptr) {
    if (metrics_) metrics_->CountRejected("unauthenticated");
    std::move(done)(absl::UnauthenticatedError(
        write_key.empty() ? "missing write key" : "unknown write key"));
    return;
  }
  const size_t n = events.size();
  // A store that cannot write (a full disk) refuses at once, before any work: the caller retries.
  if (absl::Status health = store_.WriteHealth(); !health.ok()) {
    if (metrics_) metrics_->CountRejected("store_unavailable", static_cast<int64_t>(n));
    std::move(done)(std::move(health));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      std::move(done)(absl::UnavailableError("collector is shutting down"));
      return;
    }
    if (pending_events_ + n > options_.max_pending_events && pending_events_ > 0) {
      if (metrics_) metrics_->CountRejected("overload", static_cast<int64_t>(n));
      std::move(done)(absl::ResourceExhaustedError(
          absl::StrCat("overloaded: ", pending_events_, " events waiting to be stored, limit ",
                       options_.max_pending_events, "; retry later")));
      return;
    }
    pending_events_ += n;
    ++pending_requests_;
  }

  const absl::Time now = clock_.Now();
  const int64_t now_ms = absl::ToUnixMillis(now);
  const int64_t now_us = absl::ToUnixMicros(now);
  const std::string& source_id = route->source->id();
  auto outcome = std::make_unique<IngestOutcome>();
  outcome->message_ids.resize(n);
  std::vector<AppendItem> items;
  items.reserve(n);
  // Types of the appended items, for the per-type counters once they are durable.
  std::vector<hookrelay::v1::EventType> types;
  types.reserve(n);
  const AudienceInputs& audience_inputs = routing->audience_inputs();
  const size_t fanout = route->destinations.size();
  // Per destination of the current event: what its filter said (SPEC §5.4).
  std::vector<FilterVerdict> verdicts(route->filtered ? fanout : 0, FilterVerdict::kPass);
  // (item, destination, reason) of every job a filter held back, counted once the item is stored.
  std::vector<Filtered> filtered;
  for (size_t i = 0; i < n; ++i) {
    // What the event changes in the user's profile (SPEC §6.2), taken before Normalize consumes
    // the raw event; only events some audience reads cost anything here.
    hookrelay::v1::ProfileDelta delta;
    const bool profiled = !events[i].user_id.empty() &&
                          audience_inputs.DeltaFor(source_id, events[i].type, events[i].event,
                                                   events[i].traits, now, &delta);
    // Filters read the raw event, before Normalize consumes it; an invalid event's verdicts are
    // simply unused.
    const bool filtering = route->filtered && WebhooksEnabled(events[i].flags);
    if (filtering) {
      const RawEvent& raw = events[i];
      const FilterEvent view{raw.type,     raw.event,        raw.name,       raw.category,
                             raw.user_id,  raw.anonymous_id, raw.group_id,   raw.previous_id,
                             raw.properties, raw.traits,     raw.context};
      FilterInput input(view);
      route->filter_set->Evaluate(input, verdicts.data());
    }
    auto result = Normalize(std::move(events[i]), now);
    if (auto* error = std::get_if<FieldError>(&result)) {
      if (metrics_) metrics_->CountRejected(absl::StrCat("invalid_", error->field));
      outcome->rejected.push_back(Rejection{i, std::move(error->field), std::move(error->reason)});
      continue;
    }
    NormalizedEvent& ev = std::get<NormalizedEvent>(result);
    ++outcome->accepted;
    AppendItem& item = items.emplace_back();
    item.dedup_key = DedupKey(source_id, ev.message_id);
    // The ids move out of `ev` once its jobs are written (they are read through `fields`).
    auto keep_ids = [&] {
      outcome->message_ids[i] = std::move(ev.message_id);
      if (!ev.user_id.empty()) item.user_id = std::move(ev.user_id);
    };
    if (!ev.user_id.empty()) {
      item.source_id = source_id;
      if (profiled) {
        delta.SerializeToString(&item.profile_delta);
        item.log_profile_change = !audience_inputs.empty();
      }
    }
    types.push_back(ev.type);
    if (!WebhooksEnabled(ev.flags)) {
      keep_ids();
      continue;
    }
    size_t passing = fanout;
    if (filtering) {
      passing = 0;
      for (size_t d = 0; d < fanout; ++d) {
        if (verdicts[d] == FilterVerdict::kPass) {
          ++passing;
        } else {
          filtered.push_back({items.size() - 1, d, verdicts[d]});
        }
      }
    }
    item.jobs.reserve(passing);
    NewJob::Fields fields;
    fields.source_id = source_id;
    fields.type = ev.type;
    fields.message_id = ev.message_id;
    fields.user_id = ev.user_id;
    fields.event_json = ev.json;
    fields.received_at_unix_ms = now_ms;
    fields.received_at_unix_us = now_us;
    fields.traceparent = trace.traceparent;
    if (!trace.traceparent.empty()) fields.tracestate = trace.tracestate;
    for (size_t d = 0; d < fanout; ++d) {
      if (filtering && verdicts[d] != FilterVerdict::kPass) continue;
      fields.destination_id = route->destinations[d]->id();
      // Per-user order (SPEC §5.4): userId, else anonymousId; an event with neither is not
      // ordered.
      fields.ordering_key =
          route->destinations[d]->options().ordering() == common::kOrderingPerUser
              ? std::string_view(!ev.user_id.empty() ? ev.user_id : ev.anonymous_id)
              : std::string_view();
      item.jobs.emplace_back(fields);  // The job's bytes, written once.
    }
    keep_ids();
  }

  auto finish = [this, n](Done done, absl::StatusOr<IngestOutcome> result) {
    std::move(done)(std::move(result));
    absl::MutexLock lock(&mu_);
    pending_events_ -= n;
    --pending_requests_;
  };

  if (items.empty()) {
    finish(std::move(done), std::move(*outcome));
    return;
  }
  store_.Append(
      std::move(items),
      [this, finish, done = std::move(done), outcome = std::move(outcome), types = std::move(types),
       filtered = std::move(filtered), routing = std::move(routing), route,
       source_id = std::string(source_id)](absl::StatusOr<AppendResult> appended) mutable {
        if (!appended.ok()) {
          if (metrics_) {
            metrics_->CountRejected("store_unavailable", static_cast<int64_t>(types.size()));
          }
          finish(std::move(done), std::move(appended).status());
          return;
        }
        if (metrics_) {
          // Count stored events by type; runs of equal types (the common case) in one call.
          size_t i = 0;
          while (i < types.size()) {
            size_t j = i;
            int64_t stored = 0;
            while (j < types.size() && types[j] == types[i]) stored += appended->stored[j++] ? 1 : 0;
            if (stored > 0) metrics_->CountEvents(source_id, EventTypeName(types[i]), stored);
            i = j;
          }
          // `route` lives as long as `routing`, the snapshot this request was routed with.
          // Summed per (destination, reason) first: one counter update each, not one per job.
          if (!filtered.empty()) {
            constexpr size_t kReasons = 4;  // FilterVerdict values; kPass never counted
            std::vector<int64_t> counts(route->destinations.size() * kReasons, 0);
            for (const Filtered& f : filtered) {
              if (f.item < appended->stored.size() && appended->stored[f.item]) {
                ++counts[f.destination * kReasons + static_cast<size_t>(f.verdict)];
              }
            }
            for (size_t k = 0; k < counts.size(); ++k) {
              if (counts[k] == 0) continue;
              metrics_->CountFiltered(route->destinations[k / kReasons]->id(),
                                      FilterVerdictName(static_cast<FilterVerdict>(k % kReasons)),
                                      counts[k]);
            }
          }
        }
        finish(std::move(done), std::move(*outcome));
      });
}

void Ingestor::BeginShutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
}

void Ingestor::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](size_t* pending) { return *pending == 0; }, &pending_requests_));
}

}  // namespace hookrelay::collector
