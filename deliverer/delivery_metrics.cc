#include "deliverer/delivery_metrics.h"

#include "absl/strings/str_cat.h"
#include "common/pickup.h"
#include "common/strings.h"

namespace hookrelay::deliverer {
namespace {

using common::ToAbsl;

prometheus::Histogram::BucketBoundaries RequestBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

// Waiting for a connection slot: nothing (the usual case) up to several receiver timeouts.
prometheus::Histogram::BucketBoundaries QueueBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
}

// Receipt to delivery spans retries: milliseconds up to the 4-hour window.
prometheus::Histogram::BucketBoundaries EndToEndBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400};
}

std::string_view OutcomeLabel(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::kDelivered:
      return "delivered";
    case DecisionKind::kRetry:
      return "retry";
    case DecisionKind::kDead:
      return "dead";
  }
  return "dead";
}

}  // namespace

DeliveryMetrics::DeliveryMetrics(prometheus::Registry& registry)
    : attempts_(prometheus::BuildCounter()
                    .Name("hookrelay_delivery_attempts_total")
                    .Help("Delivery attempts (all URLs of a destination), by destination and "
                          "outcome: delivered, retry, dead.")
                    .Register(registry)),
      requests_(prometheus::BuildCounter()
                    .Name("hookrelay_delivery_requests_total")
                    .Help("Webhook POSTs to one URL, by destination and result (2xx, 4xx, 5xx, "
                          "timeout, connect_error, tls_error, forbidden_address, ...).")
                    .Register(registry)),
      retries_(prometheus::BuildCounter()
                   .Name("hookrelay_delivery_retries_total")
                   .Help("Delivery attempts that ended in a scheduled retry, by destination.")
                   .Register(registry)),
      attempt_duration_(prometheus::BuildHistogram()
                            .Name("hookrelay_delivery_attempt_duration_seconds")
                            .Help("Duration of one webhook POST from when it got a connection "
                                  "slot (connect included, the wait for the slot excluded).")
                            .Register(registry)
                            .Add({}, RequestBuckets())),
      end_to_end_(prometheus::BuildHistogram()
                      .Name("hookrelay_delivery_end_to_end_seconds")
                      .Help("Collector receipt of an event to its delivery (retries included).")
                      .Register(registry)
                      .Add({}, EndToEndBuckets())),
      pickup_(prometheus::BuildHistogram()
                  .Name("hookrelay_delivery_pickup_seconds")
                  .Help("Collector receipt of an event to the deliverer's receipt of its job, "
                        "first attempts: the durable write plus the dispatch.")
                  .Register(registry)
                  .Add({}, common::PickupBuckets())),
      queue_(prometheus::BuildHistogram()
                 .Name("hookrelay_delivery_queue_seconds")
                 .Help("Time one webhook POST waited in the deliverer for a free connection slot "
                       "to its receiver host (--max_host_connections per sender thread).")
                 .Register(registry)
                 .Add({}, QueueBuckets())),
      batch_events_(prometheus::BuildHistogram()
                        .Name("hookrelay_delivery_batch_events")
                        .Help("Jobs sent together in one webhook request, for destinations with "
                              "options.batch (one observation per batch request).")
                        .Register(registry)
                        .Add({}, prometheus::Histogram::BucketBoundaries{
                                     1, 2, 5, 10, 20, 50, 100, 200, 500, 1000})),
      in_flight_requests_(prometheus::BuildGauge()
                              .Name("hookrelay_delivery_in_flight_requests")
                              .Help("Webhook POSTs sent and not yet answered.")
                              .Register(registry)
                              .Add({})),
      jobs_in_flight_(prometheus::BuildGauge()
                          .Name("hookrelay_delivery_jobs_in_flight")
                          .Help("Jobs received from collectors whose outcome is not yet sent.")
                          .Register(registry)
                          .Add({})) {}

std::string_view DeliveryMetrics::ResultLabel(const UrlResult& r) {
  switch (r.error) {
    case TransportError::kNone:
      break;
    case TransportError::kTimeout:
      return "timeout";
    case TransportError::kConnect:
      return "connect_error";
    case TransportError::kTlsVerification:
      return "tls_error";
    case TransportError::kForbiddenAddress:
      return "forbidden_address";
    case TransportError::kOther:
      return "transport_error";
  }
  if (r.status >= 200 && r.status <= 299) return "2xx";
  if (r.status >= 300 && r.status <= 399) return "3xx";
  if (r.status >= 400 && r.status <= 499) return "4xx";
  if (r.status >= 500 && r.status <= 599) return "5xx";
  return "other_status";
}

prometheus::Counter& DeliveryMetrics::Child(prometheus::Family<prometheus::Counter>& family,
                                            std::string_view label, std::string_view destination,
                                            std::string_view value) {
  absl::MutexLock lock(&mu_);
  auto it = children_.find(ChildKeyView{&family, destination, value});
  if (it != children_.end()) return *it->second;
  std::map<std::string, std::string> labels{{"destination", std::string(destination)}};
  if (!label.empty()) labels.emplace(std::string(label), std::string(value));
  prometheus::Counter* child = &family.Add(labels);
  children_.emplace(ChildKey{&family, std::string(destination), std::string(value)}, child);
  return *child;
}

void DeliveryMetrics::DeclareDestinations(const std::vector<std::string>& ids) {
  for (const std::string& id : ids) {
    for (DecisionKind kind : {DecisionKind::kDelivered, DecisionKind::kRetry, DecisionKind::kDead}) {
      Child(attempts_, "outcome", id, OutcomeLabel(kind));
    }
    Child(retries_, "", id, "");
  }
}

void DeliveryMetrics::CountAttempt(std::string_view destination, DecisionKind outcome,
                                   int64_t n) {
  Child(attempts_, "outcome", destination, OutcomeLabel(outcome))
      .Increment(static_cast<double>(n));
  if (outcome == DecisionKind::kRetry) {
    Child(retries_, "", destination, "").Increment(static_cast<double>(n));
  }
}

void DeliveryMetrics::CountRequest(std::string_view destination, const UrlResult& result,
                                   double seconds) {
  Child(requests_, "result", destination, ResultLabel(result)).Increment();
  attempt_duration_.Observe(seconds);
}

}  // namespace hookrelay::deliverer
