// The deliverer core: one Collector.Subscribe stream per collector, each job rendered, signed and
// POSTed to every URL of its destination in parallel, the outcome decided (outcome_policy.h)
// and sent back on the stream the job came from.
//
// Streams: a stream opens with a Hello granting Options::credits; every outcome returns one
// credit, so at most `credits` jobs per collector are held at once. When a stream breaks (the
// collector restarted, the network failed) the jobs it delivered are still attempted, but their
// outcomes are dropped: the collector hands those jobs out again once their leases expire
// (at-least-once). The stream is reopened with jittered exponential backoff
// (Options::reconnect_*), reset after a stream that received anything.
//
// Requests (SPEC §5.1/5.2): POST of the rendered body with `User-Agent: hookrelay/1.0`,
// `Content-Type: application/json`, `Idempotency-Key: <messageId>` (the same on every attempt
// of a job), `X-Signature` when the destination has a shared secret, Standard Webhooks headers
// when the destination asks for them, `traceparent` (and `tracestate`) when the job came with a W3C
// trace context (the same trace id and flags, a new parent id per attempt; common/trace_context.h),
// then the URL's static headers. Timeout per the
// destination's options (5 s default), counted from when the request gets one of the sender's
// connection slots for its host (http_sender.h); the wait for the slot is not the receiver's and
// goes to hookrelay_delivery_queue_seconds instead.
//
// Logs: every failed attempt at warning (destination, job, message id, trace id (empty without a
// trace context), each URL's host and status or error, next attempt or dead), rate-limited to 100 lines/s with a count of lines dropped.
// Never the secret, header values or URL paths.
//
// Shutdown drains: each stream is told to stop sending (Credit.drain), the jobs held finish and
// their outcomes are sent (bounded by Options::drain_timeout), then the streams are half-closed.
#ifndef HOOKRELAY_DELIVERER_DELIVERER_H_
#define HOOKRELAY_DELIVERER_DELIVERER_H_

#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "deliverer/batcher.h"
#include "deliverer/collector_targets.h"
#include "deliverer/delivery_metrics.h"
#include "deliverer/http_sender.h"
#include "hookrelay/v1/collector.pb.h"

namespace hookrelay::deliverer {

class Deliverer {
 public:
  struct Options {
    // Collector gRPC addresses, at least one: `host:port` (one stream) or `dns:///host:port`
    // (one stream per address the name resolves to, re-resolved every resolve_interval; see
    // collector_targets.h).
    std::vector<std::string> collectors;
    absl::Duration resolve_interval = absl::Seconds(30);
    // Resolves dns:/// targets; empty = ResolveWithSystem. Tests inject their own.
    CollectorResolver resolver;
    // Shown in the collectors' logs. Empty = hostname-pid.
    std::string deliverer_id;
    // Jobs held per collector stream at most. The binary derives it from the sender's size
    // (sender_sizing.h).
    uint32_t credits = 256;
    absl::Duration reconnect_initial_backoff = absl::Milliseconds(100);
    absl::Duration reconnect_max_backoff = absl::Seconds(10);
    // Shutdown waits this long for jobs in flight (longer than the largest destination timeout).
    absl::Duration drain_timeout = absl::Seconds(15);
    // Outcomes wait this long for company before they are written (deliverer_call.h), except an
    // ordered job's: the next job of its user waits for it.
    absl::Duration outcome_linger = absl::Milliseconds(5);
    // Sent as `authorization: Bearer <admin_token>` on every Subscribe stream when non-empty
    // (collectors that require the admin token for Subscribe).
    std::string admin_token;
  };

  // References must outlive the Deliverer; `metrics` may be null. Destroy `sender` after
  // Shutdown() and before the Deliverer: requests still pending then complete through callbacks
  // into the Deliverer.
  Deliverer(Options options, HttpSender& sender, const common::Clock& clock,
            DeliveryMetrics* metrics);
  ~Deliverer();

  Deliverer(const Deliverer&) = delete;
  Deliverer& operator=(const Deliverer&) = delete;

  // Opens the streams (in the background; unreachable collectors are retried) after a first
  // resolution of dns:/// targets (a failure is logged and retried, never fatal).
  // InvalidArgument when no collector is given or an address is malformed.
  absl::Status Start();
  // Drains and closes every stream. Idempotent.
  void Shutdown();

  // Streams currently open (Hello sent, not yet ended).
  int connected_streams() const;
  // The endpoints subscribed to (static ones and the current resolution of dns:/// targets),
  // sorted.
  std::vector<std::string> endpoints() const;
  // Jobs received and not yet settled, over all streams.
  int64_t jobs_in_flight() const;
  // Jobs of batched destinations waiting for their batch to go (part of jobs_in_flight).
  int64_t jobs_waiting_for_batch() const { return batcher_->pending(); }

 private:
  class Call;
  class Link;
  struct JobState;
  struct BatchState;
  struct Read;
  struct StreamDestination;
  using Headers = std::vector<std::pair<std::string, std::string>>;
  // One entry per URL of a destination: inline for the usual single URL (no allocation).
  template <typename T>
  using PerUrl = absl::InlinedVector<T, 1>;

  // A job arrived on `call` (on a gRPC thread): render, sign, send. `delivery` points into its
  // stream read (Read), which it keeps alive. `destination`: the one the stream sent for it when
  // the delivery carries none.
  void Handle(std::shared_ptr<const hookrelay::v1::Delivery> delivery,
              std::shared_ptr<const StreamDestination> destination,
              std::shared_ptr<Call> call);
  void OnUrlDone(const std::shared_ptr<JobState>& job, size_t index, HttpResult result);
  // The batch request a job's attempt was part of (nullptr: sent alone).
  struct BatchAttempt {
    std::string key;
    int members = 0;
    absl::Time sent;      // the request's start: every member's attempt time
    absl::Time retry_at;  // every member that retries waits until then
    absl::Span<const UrlResult> results;  // per URL
    absl::Span<const std::string> details;
    google::protobuf::RepeatedPtrField<hookrelay::v1::UrlAttempt> urls;  // the attempt's, made once
  };
  static void AddUrlAttempts(absl::Span<const UrlResult> results,
                             absl::Span<const absl::Duration> durations,
                             absl::Span<const std::string> details,
                             google::protobuf::RepeatedPtrField<hookrelay::v1::UrlAttempt>* out);
  // Decides the job's outcome and sends it back; with `collect`, appends it there instead (a
  // batch's members' outcomes go back together: PostOutcomes), where a member joins the one
  // before it when their decisions match and its collector takes grouped outcomes.
  void FinishJob(const std::shared_ptr<JobState>& job, const BatchAttempt* batch = nullptr,
                 std::vector<std::pair<Call*, hookrelay::v1::Outcome>>* collect = nullptr);
  // Settles a job without any request (e.g. the body cannot be rendered).
  void FailWithoutAttempt(const std::shared_ptr<JobState>& job, std::string reason);
  // Sends `outcome` back on the job's stream (dropped when the stream has ended); inside a sender
  // thread's round the write starts at the round's end (deliverer/round_end.h).
  // `urgent`: written without waiting for company (an ordered job's: its user's next job waits).
  static void PostOutcome(Call& call, hookrelay::v1::Outcome outcome, bool urgent);
  // Each run of outcomes of one stream in one step (one lock, at most one write started).
  static void PostOutcomes(std::vector<std::pair<Call*, hookrelay::v1::Outcome>> outcomes,
                           bool urgent);
  // X-Signature and, with standard_webhooks, the Standard Webhooks headers of `body` (both
  // signatures during a secret rotation's overlap); nothing without a shared secret.
  void AddSignatureHeaders(const hookrelay::v1::Destination& destination,
                           const hookrelay::v1::DeliveryOptions& options,
                           const std::string& webhook_id, const std::string& body,
                           Headers& headers) const;
  // POSTs `body` to every URL of `destination` with `headers` and each URL's own; URL i's
  // answer goes to done_for(i).
  template <typename DoneFor>
  void SendToUrls(const hookrelay::v1::Destination& destination,
                  const hookrelay::v1::DeliveryOptions& options, Headers headers, bool traced,
                  std::shared_ptr<const std::string> body, DoneFor done_for);
  // A batch of a batched destination is due (Batcher's send).
  void SendBatch(std::vector<BatchItem> items);
  void OnBatchUrlDone(const std::shared_ptr<BatchState>& batch, size_t index, HttpResult result);

  // Resolves every dns:/// target and reconciles links_ with the result (new endpoints get a
  // link; gone ones drain and stop). Returns false when a target could not be resolved.
  bool Reconcile();
  // Stops retiring links whose jobs are settled (or all of them with `all`).
  void ReapRetired(bool all);
  void ResolveLoop();

  const Options options_;
  HttpSender& sender_;
  const common::Clock& clock_;
  DeliveryMetrics* const metrics_;
  std::vector<CollectorTarget> targets_;
  std::thread resolver_thread_;
  // Collectors subscribed to (static and resolved endpoints), sent in each stream's Hello.
  std::atomic<int> collector_count_{0};

  mutable absl::Mutex links_mu_;
  // By endpoint. A link moves to retired_ when its endpoint leaves DNS: it drains there.
  std::map<std::string, std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(links_mu_);
  std::vector<std::pair<absl::Time, std::unique_ptr<Link>>> retired_ ABSL_GUARDED_BY(links_mu_);
  // Last good resolution per dynamic target (kept while resolution fails).
  std::map<std::string, std::vector<std::string>> resolved_ ABSL_GUARDED_BY(links_mu_);
  bool stopping_ ABSL_GUARDED_BY(links_mu_) = false;
  bool started_ = false;
  bool shut_down_ = false;
  // Jobs of batched destinations waiting for their batch. Declared last: destroyed first, which
  // sends what waits while the rest is still whole.
  std::unique_ptr<Batcher> batcher_;
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_DELIVERER_H_
