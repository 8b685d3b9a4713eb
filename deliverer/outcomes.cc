// Answers to outcomes: a job's (or a batch's) answers from its URLs become the attempt and the
// outcome sent back on the job's stream (SPEC §5.2, §5.4).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/redact.h"
#include "common/strings.h"
#include "common/time_format.h"
#include "common/trace_context.h"
#include "deliverer/deliverer.h"
#include "deliverer/deliverer_call.h"
#include "deliverer/deliverer_state.h"

namespace hookrelay::deliverer {

using hookrelay::v1::Outcome;

namespace {

Outcome::Kind ToOutcomeKind(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::kDelivered:
      return Outcome::DELIVERED;
    case DecisionKind::kRetry:
      return Outcome::RETRY;
    case DecisionKind::kDead:
      return Outcome::DEAD;
  }
  return Outcome::DEAD;
}

}  // namespace

void Deliverer::OnBatchUrlDone(const std::shared_ptr<BatchState>& batch, size_t index,
                               HttpResult result) {
  if (metrics_) {
    metrics_->RequestFinished();
    metrics_->ObserveQueue(absl::ToDoubleSeconds(result.queued));
    metrics_->CountRequest(batch->members.front()->destination().id(), result.result,
                           absl::ToDoubleSeconds(result.duration));
  }
  batch->durations[index] = result.duration;
  batch->results[index] = std::move(result.result);
  batch->details[index] = std::move(result.error_detail);
  if (batch->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The request's outcome is every member's attempt; each decides on its own attempts and
  // retry window (a member near the end of its window may go dead while others retry). Those
  // that retry share one retry time, so that they come back together and go as the same batch.
  BatchAttempt attempt;
  attempt.key = batch->key;
  attempt.sent = batch->sent;
  attempt.results = batch->results;
  attempt.details = batch->details;
  AddUrlAttempts(batch->results, batch->durations, batch->details, &attempt.urls);
  attempt.members = static_cast<int>(batch->members.size());
  // The latest of the members' own retry times: none goes back sooner than its backoff says.
  const absl::Time now = clock_.Now();
  attempt.retry_at = absl::InfinitePast();
  // A 2xx from any URL delivers every member alike: the retry time matters only otherwise.
  bool delivered = false;
  for (const UrlResult& r : batch->results) {
    delivered = delivered || (r.error == TransportError::kNone && r.status >= 200 && r.status < 300);
  }
  for (const std::shared_ptr<JobState>& member : batch->members) {
    if (delivered) break;
    const Decision d = DecideOutcome(batch->results, member->delivery->job(), member->options(),
                                     now, ThreadBitGen());
    if (d.kind == DecisionKind::kRetry) attempt.retry_at = std::max(attempt.retry_at, d.not_before);
  }
  std::vector<std::pair<Call*, Outcome>> outcomes;
  outcomes.reserve(batch->members.size());
  bool ordered = false;
  for (const std::shared_ptr<JobState>& member : batch->members) {
    FinishJob(member, &attempt, &outcomes);
    ordered = ordered || !member->delivery->job().ordering_key().empty();
  }
  if (metrics_) {
    // Per outcome kind, in one step each (batch members are never test jobs).
    int64_t counts[3] = {0, 0, 0};
    for (const auto& [call, outcome] : outcomes) {
      counts[outcome.kind() == Outcome::DELIVERED ? 0 : outcome.kind() == Outcome::RETRY ? 1 : 2] +=
          1 + outcome.also_job_ids_size();
    }
    const std::string& id = batch->members.front()->destination().id();
    if (counts[0] > 0) metrics_->CountAttempt(id, DecisionKind::kDelivered, counts[0]);
    if (counts[1] > 0) metrics_->CountAttempt(id, DecisionKind::kRetry, counts[1]);
    if (counts[2] > 0) metrics_->CountAttempt(id, DecisionKind::kDead, counts[2]);
    metrics_->JobFinished(static_cast<int64_t>(batch->members.size()));
  }
  // The members (and their streams) are held by `batch`.
  PostOutcomes(std::move(outcomes), ordered);
}

void Deliverer::OnUrlDone(const std::shared_ptr<JobState>& job, size_t index, HttpResult result) {
  if (metrics_) {
    metrics_->RequestFinished();
    if (!job->delivery->job().test()) {
      metrics_->ObserveQueue(absl::ToDoubleSeconds(result.queued));
      metrics_->CountRequest(job->destination().id(), result.result,
                             absl::ToDoubleSeconds(result.duration));
    }
  }
  job->durations[index] = result.duration;
  job->results[index] = std::move(result.result);
  job->details[index] = std::move(result.error_detail);
  if (job->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) FinishJob(job);
}

void Deliverer::AddUrlAttempts(absl::Span<const UrlResult> results,
                               absl::Span<const absl::Duration> durations,
                               absl::Span<const std::string> details,
                               google::protobuf::RepeatedPtrField<hookrelay::v1::UrlAttempt>* out) {
  for (size_t i = 0; i < results.size(); ++i) {
    const UrlResult& r = results[i];
    hookrelay::v1::UrlAttempt* u = out->Add();
    // Attempts are shown to people (dead letters, the CLI): no credentials from the URL.
    u->set_url(common::RedactUrl(r.url));
    u->set_latency_ms(absl::ToInt64Milliseconds(durations[i]));
    if (r.error == TransportError::kNone) {
      u->set_status(r.status);
    } else {
      const std::string_view text = TransportErrorText(r.error);
      u->set_error(details[i].empty() ? std::string(text)
                                      : absl::StrCat(common::ToAbsl(text), ": ", details[i]));
    }
  }
}

void Deliverer::FinishJob(const std::shared_ptr<JobState>& job, const BatchAttempt* batch,
                          std::vector<std::pair<Call*, Outcome>>* collect) {
  const absl::Time now = clock_.Now();
  const hookrelay::v1::Job& j = job->delivery->job();
  const hookrelay::v1::Destination& destination = job->destination();
  // A batch member's answers are the batch's, kept once in the batch.
  const absl::Span<const UrlResult> results =
      batch != nullptr ? batch->results : absl::MakeConstSpan(job->results);
  const absl::Span<const std::string> details =
      batch != nullptr ? batch->details : absl::MakeConstSpan(job->details);
  Decision decision = DecideOutcome(results, j, job->options(), now, ThreadBitGen());
  if (batch != nullptr && decision.kind == DecisionKind::kRetry &&
      batch->retry_at != absl::InfinitePast()) {
    decision.not_before = batch->retry_at;  // the batch's members come back together
  }

  if (metrics_ && !j.test()) {
    // A batch's members are counted together by OnBatchUrlDone.
    if (collect == nullptr) metrics_->CountAttempt(destination.id(), decision.kind);
    if (decision.kind == DecisionKind::kDelivered && j.received_at_unix_ms() > 0) {
      metrics_->ObserveEndToEnd(
          absl::ToDoubleSeconds(now - absl::FromUnixMillis(j.received_at_unix_ms())));
    }
  }
  if (decision.kind != DecisionKind::kDelivered) {
    static common::LogRateLimiter* const limiter = new common::LogRateLimiter(100, 200);
    std::string next;
    if (decision.kind == DecisionKind::kRetry) common::AppendIso8601Millis(&next, decision.not_before);
    common::LogRateLimited(
        *limiter, common::LogLevel::kWarning, "delivery attempt failed",
        {{"destination", destination.id()},
         {"job_id", j.id()},
         {"message_id", j.message_id()},
         {"trace_id", common::TraceIdOf(j.traceparent())},
         {"attempt", j.attempts() + 1},
         {"result", decision.reason},
         {"error", details.empty() ? std::string() : details.front()},
         {"outcome", decision.kind == DecisionKind::kRetry ? "retry" : "dead"},
         {"next_attempt", next}});
  }
  if (metrics_ && collect == nullptr) metrics_->JobFinished();
  const Outcome::Kind kind = ToOutcomeKind(decision.kind);
  if (collect != nullptr && batch != nullptr && !collect->empty() &&
      job->call->grouped_outcomes()) {
    // The member before it came to the same decision: one outcome settles both.
    auto& [call, last] = collect->back();
    google::protobuf::Timestamp not_before;
    if (kind == Outcome::RETRY) common::ToProtoTime(decision.not_before, &not_before);
    if (call == job->call.get() && last.kind() == kind &&
        (kind != Outcome::RETRY || (last.not_before().seconds() == not_before.seconds() &&
                                    last.not_before().nanos() == not_before.nanos())) &&
        (kind != Outcome::DEAD || last.reason() == decision.reason)) {
      last.add_also_job_ids(j.id());
      last.add_also_leases(job->delivery->lease());
      return;
    }
  }

  Outcome outcome;
  outcome.set_job_id(j.id());
  outcome.set_lease(job->delivery->lease());
  outcome.set_kind(kind);
  hookrelay::v1::Attempt* attempt = outcome.mutable_attempt();
  if (batch != nullptr) {
    attempt->set_at_unix_ms(absl::ToUnixMillis(batch->sent));
    attempt->set_batch_key(batch->key);
    attempt->set_batch_members(batch->members);
    *attempt->mutable_urls() = batch->urls;  // made once per batch
  } else {
    attempt->set_at_unix_ms(absl::ToUnixMillis(job->started));
    AddUrlAttempts(job->results, job->durations, job->details, attempt->mutable_urls());
  }
  if (decision.kind == DecisionKind::kRetry) {
    common::ToProtoTime(decision.not_before, outcome.mutable_not_before());
  } else if (decision.kind == DecisionKind::kDead) {
    outcome.set_reason(decision.reason);
  }
  if (collect != nullptr) {
    collect->emplace_back(job->call.get(), std::move(outcome));
  } else {
    PostOutcome(*job->call, std::move(outcome), !j.ordering_key().empty());
  }
}

void Deliverer::PostOutcome(Call& call, Outcome outcome, bool urgent) {
  call.AddOutcome(std::move(outcome), urgent);
}

void Deliverer::PostOutcomes(std::vector<std::pair<Call*, Outcome>> outcomes, bool urgent) {
  for (size_t from = 0; from < outcomes.size();) {
    Call* call = outcomes[from].first;
    size_t end = from + 1;
    while (end < outcomes.size() && outcomes[end].first == call) ++end;
    call->AddOutcomes(outcomes.begin() + static_cast<ptrdiff_t>(from),
                      outcomes.begin() + static_cast<ptrdiff_t>(end), urgent);
    from = end;
  }
}

void Deliverer::FailWithoutAttempt(const std::shared_ptr<JobState>& job, std::string reason) {
  const hookrelay::v1::Job& j = job->delivery->job();
  common::LogError("job cannot be delivered",
                   {{"destination", j.destination_id()},
                    {"job_id", j.id()},
                    {"message_id", j.message_id()},
                    {"trace_id", common::TraceIdOf(j.traceparent())},
                    {"reason", reason}});
  Outcome outcome;
  outcome.set_job_id(j.id());
  outcome.set_lease(job->delivery->lease());
  outcome.set_kind(Outcome::DEAD);
  outcome.set_reason(std::move(reason));
  outcome.mutable_attempt()->set_at_unix_ms(absl::ToUnixMillis(job->started));
  if (metrics_) {
    metrics_->CountAttempt(j.destination_id(), DecisionKind::kDead);
    metrics_->JobFinished();
  }
  PostOutcome(*job->call, std::move(outcome), !j.ordering_key().empty());
}

}  // namespace hookrelay::deliverer
