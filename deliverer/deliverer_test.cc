#include "deliverer/deliverer.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/trace_context.h"
#include "deliverer/delivery_metrics.h"
#include "deliverer/fake_collector.h"
#include "deliverer/http_sender.h"
#include "deliverer/signer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/collector.grpc.pb.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::deliverer {
namespace {

using ::testing::HasSubstr;
using hookrelay::v1::Outcome;
using receiver::ReceivedRequest;
using receiver::Response;
using receiver::WebhookReceiver;

constexpr absl::Duration kWait = absl::Seconds(20);

// The deliverer core on a manual clock, against a fake collector over real gRPC and a real
// receiver over real HTTP on 127.0.0.1.
class DelivererTest : public ::testing::Test {
 protected:
  void Start(receiver::Handler handler, uint32_t credits = 16, long max_host_connections = 64) {
    auto r = WebhookReceiver::Start(WebhookReceiver::Options{}, std::move(handler));
    ASSERT_TRUE(r.ok()) << r.status();
    receiver_ = *std::move(r);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&collector_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    HttpSender::Options sender_options;
    sender_options.allow_private_networks = true;
    sender_options.max_host_connections = max_host_connections;
    auto sender = HttpSender::Create(sender_options);
    ASSERT_TRUE(sender.ok()) << sender.status();
    sender_ = *std::move(sender);
    metrics_ = std::make_unique<DeliveryMetrics>(registry_);
    Deliverer::Options options;
    options.collectors = {absl::StrCat("127.0.0.1:", port_)};
    options.credits = credits;
    options.drain_timeout = absl::Seconds(5);
    options.outcome_linger = outcome_linger_;
    deliverer_ = std::make_unique<Deliverer>(options, *sender_, clock_, metrics_.get());
    ASSERT_TRUE(deliverer_->Start().ok());
  }

  void TearDown() override {
    if (deliverer_) deliverer_->Shutdown();
    sender_.reset();  // Before the deliverer: pending callbacks call into it.
    deliverer_.reset();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  hookrelay::v1::Delivery Job(uint64_t id) {
    hookrelay::v1::Delivery d;
    d.set_lease(1000 + id);
    hookrelay::v1::Job& job = *d.mutable_job();
    job.set_id(id);
    job.set_source_id("web");
    job.set_destination_id("hook");
    job.set_type(hookrelay::v1::TRACK);
    job.set_message_id(absl::StrCat("m-", id));
    job.set_received_at_unix_ms(absl::ToUnixMillis(clock_.Now()));
    job.set_event_json(absl::StrCat(R"({"type":"track","messageId":"m-)", id,
                                    R"(","userId":"u","event":"E","context":{},)",
                                    R"("timestamp":"2023-11-14T22:13:20.000Z"})"));
    hookrelay::v1::Destination& dest = *d.mutable_destination();
    dest.set_id("hook");
    dest.set_enabled(true);
    dest.add_urls()->set_url(receiver_->Url());
    return d;
  }

  // The histogram `name`'s sample count and sum; {-1, -1} when it is not registered.
  std::pair<int64_t, double> Histogram(const std::string& name) {
    for (const prometheus::MetricFamily& family : registry_.Collect()) {
      if (family.name != name || family.metric.empty()) continue;
      return {static_cast<int64_t>(family.metric[0].histogram.sample_count),
              family.metric[0].histogram.sample_sum};
    }
    return {-1, -1};
  }

  // Batched webhooks end to end through the deliverer; `grouped`: the collector takes grouped
  // outcomes.
  void BatchedScenario(bool grouped);

  absl::Duration outcome_linger_ = Deliverer::Options().outcome_linger;
  common::ManualClock clock_;
  prometheus::Registry registry_;
  FakeCollector collector_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WebhookReceiver> receiver_;
  std::unique_ptr<HttpSender> sender_;
  std::unique_ptr<DeliveryMetrics> metrics_;
  std::unique_ptr<Deliverer> deliverer_;
  int port_ = 0;
};

// The Hello grants the configured credits; delivered jobs come back as DELIVERED outcomes with
// their own job id and lease, several per message.
TEST_F(DelivererTest, DeliversAndReportsOutcomesInBatches) {
  Start(nullptr, 16);
  std::vector<hookrelay::v1::Delivery> jobs;
  for (uint64_t id = 1; id <= 8; ++id) jobs.push_back(Job(id));
  ASSERT_TRUE(collector_.Send(jobs));
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(8);
  ASSERT_EQ(outcomes.size(), 8u);
  EXPECT_EQ(collector_.hello_credits(), 16u);
  for (const Outcome& o : outcomes) {
    EXPECT_EQ(o.kind(), Outcome::DELIVERED);
    EXPECT_EQ(o.lease(), 1000 + o.job_id());
  }
  EXPECT_LE(collector_.outcome_messages(), 8);
  EXPECT_TRUE(receiver_->WaitForRequests(8, kWait));
}

// Outcomes wait for company (the linger, here far longer than the test), except an ordered
// job's: its user's next job waits for it, so it is written at once, taking along the outcomes
// that were waiting.
TEST_F(DelivererTest, AnOrderedJobsOutcomeDoesNotWaitForTheLinger) {
  outcome_linger_ = absl::Minutes(10);
  Start(nullptr, 16);
  ASSERT_TRUE(collector_.Send({Job(1)}));
  // Job 1 attempted (its outcome decided right after): it now waits for company.
  const absl::Time deadline = absl::Now() + kWait;
  while (Histogram("hookrelay_delivery_attempt_duration_seconds").first < 1 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(Histogram("hookrelay_delivery_attempt_duration_seconds").first, 1);
  hookrelay::v1::Delivery ordered = Job(2);
  ordered.mutable_job()->set_ordering_key("u");
  ASSERT_TRUE(collector_.Send({ordered}));
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(2);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].job_id(), 1u);
  EXPECT_EQ(outcomes[1].job_id(), 2u);
  EXPECT_EQ(collector_.outcome_messages(), 1);  // one write took both
}

// Waiting outcomes hold credits: a write starts once an eighth of the stream's credits are
// pending (2 of 16 here), whatever the linger.
TEST_F(DelivererTest, OutcomesWaitingForCompanyHoldAtMostAnEighthOfTheCredits) {
  outcome_linger_ = absl::Minutes(10);
  Start(nullptr, 16);
  ASSERT_TRUE(collector_.Send({Job(1), Job(2)}));
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(2);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(collector_.outcome_messages(), 1);
}

// Pickup latency (hookrelay_delivery_pickup_seconds): the collector's receipt (in µs) to the
// deliverer's receipt, on the injected clock, for first attempts only — not for a retry, a test
// event, or a job stored before the field existed.
TEST_F(DelivererTest, PickupLatencyOfFirstAttempts) {
  Start(nullptr, 16);
  const int64_t now_us = absl::ToUnixMicros(clock_.Now());
  std::vector<hookrelay::v1::Delivery> jobs;
  jobs.push_back(Job(1));
  jobs.back().mutable_job()->set_received_at_unix_us(now_us - 2500);  // 2.5 ms ago
  jobs.push_back(Job(2));
  jobs.back().mutable_job()->set_received_at_unix_us(now_us - 500);  // 0.5 ms ago
  jobs.push_back(Job(3));
  jobs.back().mutable_job()->set_received_at_unix_us(now_us - 9'000'000);
  jobs.back().mutable_job()->set_attempts(1);  // a retry: its wait was its schedule
  jobs.push_back(Job(4));
  jobs.back().mutable_job()->set_received_at_unix_us(now_us - 9'000'000);
  jobs.back().mutable_job()->set_test(true);
  jobs.push_back(Job(5));  // no received_at_unix_us: stored before it existed
  jobs.push_back(Job(6));
  jobs.back().mutable_job()->set_received_at_unix_us(now_us - 9'000'000);
  jobs.back().mutable_job()->set_deferrals(2);  // held back by its destination's limits
  ASSERT_TRUE(collector_.Send(jobs));
  ASSERT_EQ(collector_.WaitOutcomes(6).size(), 6u);
  const auto [count, sum] = Histogram("hookrelay_delivery_pickup_seconds");
  EXPECT_EQ(count, 2);
  EXPECT_NEAR(sum, 0.003, 1e-9);  // the manual clock did not move
}

// A 503 is a RETRY whose not_before is computed on the injected clock (the manual clock stands
// in 2023, far from real time): the first retry within the default 1 s initial backoff.
TEST_F(DelivererTest, RetryTimeComesFromTheClock) {
  Start([](const ReceivedRequest&) {
    Response r;
    r.status = 503;
    return r;
  });
  const absl::Time now = clock_.Now();
  ASSERT_TRUE(collector_.Send({Job(1)}));
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(1);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].kind(), Outcome::RETRY);
  const absl::Time not_before = *common::FromProtoTime(outcomes[0].not_before());
  EXPECT_GT(not_before, now);
  EXPECT_LE(not_before, now + absl::Seconds(1));
  EXPECT_EQ(outcomes[0].attempt().urls(0).status(), 503);
  EXPECT_EQ(outcomes[0].attempt().at_unix_ms(), absl::ToUnixMillis(now));
}

// Shutdown tells the collector to stop sending (Credit.drain) and still reports jobs in flight.
TEST_F(DelivererTest, ShutdownDrainsAndReportsJobsInFlight) {
  Start([](const ReceivedRequest&) {
    Response r;
    r.delay = absl::Milliseconds(300);
    return r;
  });
  ASSERT_TRUE(collector_.Send({Job(1), Job(2)}));
  ASSERT_TRUE(receiver_->WaitForRequests(1, kWait));
  deliverer_->Shutdown();
  EXPECT_TRUE(collector_.WaitDrained());
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(2);
  ASSERT_EQ(outcomes.size(), 2u);
  for (const Outcome& o : outcomes) EXPECT_EQ(o.kind(), Outcome::DELIVERED);
}

// Twenty jobs to a receiver that holds each request 300 ms, through one connection slot, with a
// 1 s timeout: the jobs wait for the slot in the deliverer (hookrelay_delivery_queue_seconds
// counts all twenty, about 57 s of waiting in all), not inside libcurl with their timeout
// running, so every one is DELIVERED and each attempt's latency is the receiver's 300 ms.
TEST_F(DelivererTest, JobsWaitingForAConnectionDoNotTimeOut) {
  constexpr int kJobs = 20;
  Start(
      [](const ReceivedRequest&) {
        Response r;
        r.delay = absl::Milliseconds(300);
        return r;
      },
      kJobs, /*max_host_connections=*/1);
  std::vector<hookrelay::v1::Delivery> jobs;
  for (uint64_t id = 1; id <= kJobs; ++id) {
    hookrelay::v1::Delivery job = Job(id);
    job.mutable_destination()->mutable_options()->set_timeout_ms(1000);
    jobs.push_back(std::move(job));
  }
  ASSERT_TRUE(collector_.Send(jobs));
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(kJobs);
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(kJobs));
  for (const Outcome& o : outcomes) {
    EXPECT_EQ(o.kind(), Outcome::DELIVERED) << o.job_id() << ": " << o.reason();
    ASSERT_EQ(o.attempt().urls_size(), 1);
    EXPECT_EQ(o.attempt().urls(0).status(), 200);
    EXPECT_GE(o.attempt().urls(0).latency_ms(), 290);
    EXPECT_LT(o.attempt().urls(0).latency_ms(), 1000);
  }
  const auto [count, sum] = Histogram("hookrelay_delivery_queue_seconds");
  EXPECT_EQ(count, kJobs);
  // Job k waited for k-1 others: 0.3 s x (0 + 1 + ... + 19) = 57 s, less scheduling slack.
  EXPECT_GE(sum, 0.29 * (kJobs - 1) * kJobs / 2);
  const auto [attempts, attempt_seconds] =
      Histogram("hookrelay_delivery_attempt_duration_seconds");
  EXPECT_EQ(attempts, kJobs);
  EXPECT_LT(attempt_seconds, kJobs * 1.0);
}

constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// A job with a trace context sends `traceparent` on every attempt: the same trace id and flags,
// a new parent id each time (a retry included), and its tracestate unchanged; the failed
// attempt's log line names the trace id. A URL's static traceparent gives way to the event's; a
// job without a trace context sends only what the URL says.
TEST_F(DelivererTest, TraceparentGoesOutOnEveryAttemptWithANewParentId) {
  std::vector<std::string> lines;
  absl::Mutex lines_mu;
  common::SetLogSinkForTesting([&](std::string_view line) {
    absl::MutexLock lock(&lines_mu);
    lines.emplace_back(line);
  });
  std::atomic<int> calls{0};
  Start([&](const ReceivedRequest&) {
    Response r;
    r.status = calls.fetch_add(1) == 0 ? 503 : 200;
    return r;
  });
  hookrelay::v1::Delivery traced = Job(1);
  traced.mutable_job()->set_traceparent(kTraceparent);
  traced.mutable_job()->set_tracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
  // A URL's static traceparent gives way to the event's own; without one it is sent as is.
  const std::string kStatic = "00-11111111111111111111111111111111-2222222222222222-00";
  hookrelay::v1::Header* fixed = traced.mutable_destination()->mutable_urls(0)->add_headers();
  fixed->set_name("TraceParent");
  fixed->set_value(kStatic);
  hookrelay::v1::Delivery plain = Job(2);
  *plain.mutable_destination() = traced.destination();
  ASSERT_TRUE(collector_.Send({traced}));
  std::vector<Outcome> outcomes = collector_.WaitOutcomes(1);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].kind(), Outcome::RETRY);
  // The collector hands the job out again, as after its retry time.
  traced.set_lease(2001);
  traced.mutable_job()->set_attempts(1);
  ASSERT_TRUE(collector_.Send({traced, plain}));
  outcomes = collector_.WaitOutcomes(3);
  ASSERT_EQ(outcomes.size(), 3u);
  common::SetLogSinkForTesting(nullptr);

  const std::vector<ReceivedRequest> requests = receiver_->Requests();
  ASSERT_EQ(requests.size(), 3u);
  std::vector<common::TraceParent> sent;
  for (const ReceivedRequest& r : requests) {
    int traceparents = 0;
    for (const auto& [name, value] : r.headers) {
      if (absl::EqualsIgnoreCase(name, "traceparent")) ++traceparents;
    }
    EXPECT_EQ(traceparents, 1) << r.Header("Idempotency-Key");
    if (r.Header("Idempotency-Key") == "m-2") {
      EXPECT_EQ(r.Header("traceparent"), kStatic);
      EXPECT_EQ(r.Header("tracestate"), "");
      continue;
    }
    std::optional<common::TraceParent> p = common::ParseTraceparent(r.Header("traceparent"));
    ASSERT_TRUE(p.has_value()) << r.Header("traceparent");
    EXPECT_EQ(r.Header("tracestate"), "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
    sent.push_back(*std::move(p));
  }
  ASSERT_EQ(sent.size(), 2u);
  for (const common::TraceParent& p : sent) {
    EXPECT_EQ(p.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(p.flags, "01");
    EXPECT_NE(p.parent_id, "00f067aa0ba902b7");
  }
  EXPECT_NE(sent[0].parent_id, sent[1].parent_id);

  absl::MutexLock lock(&lines_mu);
  int failed = 0;
  for (const std::string& line : lines) {
    if (!absl::StrContains(line, "delivery attempt failed")) continue;
    ++failed;
    EXPECT_THAT(line, HasSubstr(R"("trace_id":"4bf92f3577b34da6a3ce929d0e0e4736")"));
  }
  EXPECT_EQ(failed, 1);
}

// A collector that sends each destination once per stream (Hello.destinations_by_reference):
// deliveries that only name their destination use the one sent, a later set replaces it, and a
// delivery naming one never sent is dead-lettered with the reason, not sent.
TEST_F(DelivererTest, DestinationsSentOncePerStream) {
  Start([](const ReceivedRequest&) { return Response{}; });
  ASSERT_TRUE(collector_.WaitHello());
  EXPECT_TRUE(collector_.hello_by_reference());
  auto named = [&](uint64_t id, const std::string& destination) {
    hookrelay::v1::Delivery d = Job(id);
    d.clear_destination();
    d.mutable_job()->set_destination_id(destination);
    return d;
  };
  hookrelay::v1::Destination hook = Job(0).destination();
  hook.set_shared_secret("first");
  ASSERT_TRUE(collector_.Send({named(1, "hook"), named(2, "hook")}, {hook}));
  ASSERT_EQ(collector_.WaitOutcomes(2).size(), 2u);
  hook.set_shared_secret("second");  // a config change: the whole set again
  ASSERT_TRUE(collector_.Send({named(3, "hook"), named(4, "gone")}, {hook}));
  const std::vector<Outcome> outcomes = collector_.WaitOutcomes(4);
  ASSERT_EQ(outcomes.size(), 4u);
  const std::vector<ReceivedRequest> requests = receiver_->Requests();
  ASSERT_EQ(requests.size(), 3u);
  for (const ReceivedRequest& r : requests) {
    const bool later = r.Header("Idempotency-Key") == "m-3";
    EXPECT_EQ(r.Header("X-Signature"), XSignature(later ? "second" : "first", r.body));
  }
  for (const Outcome& o : outcomes) {
    if (o.job_id() != 4) {
      EXPECT_EQ(o.kind(), Outcome::DELIVERED) << o.job_id();
      continue;
    }
    EXPECT_EQ(o.kind(), Outcome::DEAD);
    EXPECT_THAT(o.reason(), HasSubstr("destination gone was not sent on this stream"));
  }
}

// A secret rotation in its overlap: X-Signature stays with the previous secret and
// webhook-signature carries both (the new one first); once the overlap has ended (by the
// deliverer's clock), the new secret alone signs both headers.
TEST_F(DelivererTest, RotatedSecretSignsWithBothUntilTheOverlapEnds) {
  Start([](const ReceivedRequest&) { return Response{}; });
  hookrelay::v1::Delivery during = Job(1);
  hookrelay::v1::Destination& dest = *during.mutable_destination();
  dest.set_shared_secret("new-secret");
  dest.mutable_options()->set_standard_webhooks(true);
  dest.mutable_rotation()->set_previous_secret("old-secret");
  common::ToProtoTime(clock_.Now() + absl::Hours(1), dest.mutable_rotation()->mutable_ends_at());
  ASSERT_TRUE(collector_.Send({during}));
  ASSERT_EQ(collector_.WaitOutcomes(1).size(), 1u);

  clock_.Advance(absl::Hours(1));  // The overlap ends exactly now.
  hookrelay::v1::Delivery after = Job(2);
  *after.mutable_destination() = during.destination();
  ASSERT_TRUE(collector_.Send({after}));
  ASSERT_EQ(collector_.WaitOutcomes(2).size(), 2u);

  const std::vector<ReceivedRequest> requests = receiver_->Requests();
  ASSERT_EQ(requests.size(), 2u);
  for (const ReceivedRequest& r : requests) {
    const bool overlap = r.Header("Idempotency-Key") == "m-1";
    const std::string id = r.Header("webhook-id");
    int64_t ts = 0;
    ASSERT_TRUE(absl::SimpleAtoi(r.Header("webhook-timestamp"), &ts));
    const std::string with_new = StandardWebhookHeaders("new-secret", id, ts, r.body).signature;
    const std::string with_old = StandardWebhookHeaders("old-secret", id, ts, r.body).signature;
    EXPECT_EQ(r.Header("X-Signature"), XSignature(overlap ? "old-secret" : "new-secret", r.body));
    EXPECT_EQ(r.Header("webhook-signature"),
              overlap ? absl::StrCat(with_new, " ", with_old) : with_new);
  }
}

// Batched webhooks (SPEC §5.4): jobs of a batched destination go together as {"batch":[…]} once
// max_events are there or max_wait_ms after the first (by the deliverer's clock), signed once
// over the whole body, with an Idempotency-Key from the members' message ids that a retry of the
// same members repeats; the request's outcome is every member's.
void DelivererTest::BatchedScenario(bool grouped) {
  collector_.set_grouped_outcomes(grouped);
  std::atomic<int> calls{0};
  Start([&](const ReceivedRequest& r) {
    Response answer;
    const int call = calls.fetch_add(1);
    if (call == 1) answer.status = 503;                             // the second batch, once
    if (absl::StrContains(r.body, R"("m-6")")) answer.status = 400;  // the last batch
    return answer;
  });
  auto batched = [&](uint64_t id, int attempts = 0) {
    hookrelay::v1::Delivery d = Job(id);
    d.mutable_job()->set_attempts(attempts);
    d.mutable_destination()->set_shared_secret("batch-secret");
    hookrelay::v1::DeliveryOptions& o = *d.mutable_destination()->mutable_options();
    o.set_standard_webhooks(true);
    o.mutable_batch()->set_max_events(3);
    o.mutable_batch()->set_max_wait_ms(10000);
    return d;
  };
  // Advancing the clock before jobs sent reach the batcher would start their wait after it.
  auto wait_held = [&](int64_t n) {
    const absl::Time deadline = absl::Now() + kWait;
    while (deliverer_->jobs_waiting_for_batch() < n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(deliverer_->jobs_waiting_for_batch(), n);
  };
  // Full: three jobs, one request.
  ASSERT_TRUE(collector_.Send({batched(1), batched(2), batched(3)}));
  std::vector<Outcome> outcomes = collector_.WaitOutcomes(3);
  ASSERT_EQ(outcomes.size(), 3u);
  for (const Outcome& o : outcomes) EXPECT_EQ(o.kind(), Outcome::DELIVERED) << o.job_id();
  std::vector<ReceivedRequest> requests = receiver_->Requests();
  ASSERT_EQ(requests.size(), 1u);
  const ReceivedRequest& first = requests[0];
  EXPECT_TRUE(absl::StartsWith(first.body, R"({"batch":[{)")) << first.body;
  const size_t m1 = first.body.find(R"("messageId":"m-1")");
  const size_t m2 = first.body.find(R"("messageId":"m-2")");
  const size_t m3 = first.body.find(R"("messageId":"m-3")");
  EXPECT_TRUE(m1 < m2 && m2 < m3 && m3 != std::string::npos) << first.body;
  EXPECT_EQ(first.Header("Idempotency-Key"), BatchIdempotencyKey({"m-1", "m-2", "m-3"}));
  EXPECT_EQ(first.Header("webhook-id"), first.Header("Idempotency-Key"));
  EXPECT_EQ(first.Header("X-Signature"), XSignature("batch-secret", first.body));
  int64_t ts = 0;
  ASSERT_TRUE(absl::SimpleAtoi(first.Header("webhook-timestamp"), &ts));
  EXPECT_EQ(first.Header("webhook-signature"),
            StandardWebhookHeaders("batch-secret", first.Header("webhook-id"), ts, first.body)
                .signature);

  // Due: two jobs wait max_wait_ms, then go; the 503 makes both retry.
  ASSERT_TRUE(collector_.Send({batched(4), batched(5)}));
  wait_held(2);
  EXPECT_EQ(receiver_->request_count(), 1);  // Not due yet: the clock has not moved.
  clock_.Advance(absl::Seconds(10));
  outcomes = collector_.WaitOutcomes(5);
  ASSERT_EQ(outcomes.size(), 5u);
  EXPECT_EQ(outcomes[3].kind(), Outcome::RETRY);
  EXPECT_EQ(outcomes[4].kind(), Outcome::RETRY);
  // The retrying members share one retry time and carry their batch back with the attempt.
  for (int i = 3; i < 5; ++i) {
    EXPECT_EQ(outcomes[i].attempt().batch_key(), BatchIdempotencyKey({"m-4", "m-5"}));
    EXPECT_EQ(outcomes[i].attempt().batch_members(), 2);
  }
  EXPECT_EQ(outcomes[3].not_before().seconds(), outcomes[4].not_before().seconds());
  EXPECT_EQ(outcomes[3].not_before().nanos(), outcomes[4].not_before().nanos());
  // Back as the collector hands them out (in another order, beside a fresh job): the same
  // members go again at once, with the same key and body; the fresh job does not join them.
  auto retried = [&](uint64_t id, const Outcome& o) {
    hookrelay::v1::Delivery d = batched(id, 1);
    *d.mutable_job()->add_history() = o.attempt();
    return d;
  };
  ASSERT_TRUE(collector_.Send({retried(5, outcomes[4]), batched(8), retried(4, outcomes[3])}));
  outcomes = collector_.WaitOutcomes(7);  // No clock move: the batch is complete.
  ASSERT_EQ(outcomes.size(), 7u);
  EXPECT_EQ(outcomes[5].kind(), Outcome::DELIVERED);
  EXPECT_EQ(outcomes[6].kind(), Outcome::DELIVERED);
  requests = receiver_->Requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].Header("Idempotency-Key"), BatchIdempotencyKey({"m-4", "m-5"}));
  EXPECT_EQ(requests[2].Header("Idempotency-Key"), requests[1].Header("Idempotency-Key"));
  EXPECT_EQ(requests[2].body, requests[1].body);
  EXPECT_EQ(deliverer_->jobs_waiting_for_batch(), 1);  // job 8
  clock_.Advance(absl::Seconds(10));
  outcomes = collector_.WaitOutcomes(8);
  ASSERT_EQ(outcomes.size(), 8u);
  EXPECT_EQ(outcomes[7].job_id(), 8u);
  requests = receiver_->Requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[3].Header("Idempotency-Key"), BatchIdempotencyKey({"m-8"}));

  // A 4xx: every member is dead, each with the reason.
  ASSERT_TRUE(collector_.Send({batched(6), batched(7)}));
  wait_held(2);
  clock_.Advance(absl::Seconds(10));
  outcomes = collector_.WaitOutcomes(10);
  ASSERT_EQ(outcomes.size(), 10u);
  for (int i = 8; i < 10; ++i) {
    EXPECT_EQ(outcomes[i].kind(), Outcome::DEAD);
    EXPECT_EQ(outcomes[i].attempt().urls(0).status(), 400);
  }
  const std::pair<int64_t, double> sizes = Histogram("hookrelay_delivery_batch_events");
  EXPECT_EQ(sizes.first, 5);      // batch requests
  EXPECT_EQ(sizes.second, 10.0);  // members, over all of them

  // Grouped: one outcome per batch request, naming the other members with their leases.
  const std::vector<Outcome> sent = collector_.sent_outcomes();
  if (!grouped) {
    EXPECT_EQ(sent.size(), 10u);
    for (const Outcome& o : sent) EXPECT_EQ(o.also_job_ids_size(), 0) << o.job_id();
    return;
  }
  ASSERT_EQ(sent.size(), 5u);
  EXPECT_EQ(sent[0].job_id(), 1u);
  EXPECT_EQ(sent[0].lease(), 1001u);
  EXPECT_THAT(sent[0].also_job_ids(), testing::ElementsAre(2, 3));
  EXPECT_THAT(sent[0].also_leases(), testing::ElementsAre(1002, 1003));
  EXPECT_EQ(sent[1].kind(), Outcome::RETRY);
  EXPECT_THAT(sent[1].also_job_ids(), testing::ElementsAre(5));
  EXPECT_EQ(sent[3].job_id(), 8u);
  EXPECT_EQ(sent[3].also_job_ids_size(), 0);
  EXPECT_EQ(sent[4].kind(), Outcome::DEAD);
  EXPECT_THAT(sent[4].also_job_ids(), testing::ElementsAre(7));
}

TEST_F(DelivererTest, BatchedJobsShareOneSignedRequestAndItsOutcome) { BatchedScenario(false); }

// A collector that takes grouped outcomes gets one per batch request: the same jobs settled.
TEST_F(DelivererTest, BatchedJobsShareOneGroupedOutcome) { BatchedScenario(true); }

// A receiver that speaks HTTP/2 (a gRPC server over TLS, which libcurl reaches through
// deliverer/http/curl_sender.h) gets the same traceparent header: the trace id kept, a new parent
// id per request.
TEST(DelivererHttp2Test, TraceparentGoesOutOverHttp2) {
  absl::StatusOr<receiver::SelfSignedCert> cert = receiver::GenerateSelfSignedCert();
  ASSERT_TRUE(cert.ok()) << cert.status();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string ca_file = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/h2_trace_ca.pem");
  std::ofstream(ca_file) << cert->cert_pem;

  // Records each call's metadata and ends it at once: the HTTP status is 200 either way.
  class RecordingService : public grpc::CallbackGenericService {
   public:
    grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
      {
        absl::MutexLock lock(&mu);
        std::string traceparent;
        for (auto [it, end] = ctx->client_metadata().equal_range("traceparent"); it != end; ++it) {
          traceparent.append(it->second.data(), it->second.size());
        }
        seen.push_back(std::move(traceparent));
      }
      // Reads the whole request before answering, so the stream ends cleanly.
      class Reactor : public grpc::ServerGenericBidiReactor {
       public:
        Reactor() { StartRead(&buffer_); }
        void OnReadDone(bool ok) override {
          if (ok) {
            StartRead(&buffer_);
          } else {
            Finish(grpc::Status::OK);
          }
        }
        void OnDone() override { delete this; }

       private:
        grpc::ByteBuffer buffer_;
      };
      return new Reactor;
    }
    absl::Mutex mu;
    std::vector<std::string> seen ABSL_GUARDED_BY(mu);
  } h2;
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({cert->key_pem, cert->cert_pem});
  int h2_port = 0;
  grpc::ServerBuilder h2_builder;
  h2_builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(ssl), &h2_port);
  h2_builder.RegisterCallbackGenericService(&h2);
  std::unique_ptr<grpc::Server> h2_server = h2_builder.BuildAndStart();
  ASSERT_NE(h2_server, nullptr);

  ServedCollector collector;
  auto sender = HttpSender::Create(
      {.allow_private_networks = true, .ca_file = ca_file, .threads = 1});
  ASSERT_TRUE(sender.ok()) << sender.status();
  common::ManualClock clock;
  Deliverer::Options options;
  options.collectors = {collector.endpoint()};
  options.drain_timeout = absl::Seconds(5);
  auto deliverer = std::make_unique<Deliverer>(options, **sender, clock, nullptr);
  ASSERT_TRUE(deliverer->Start().ok());

  std::vector<hookrelay::v1::Delivery> jobs;
  for (uint64_t id = 1; id <= 2; ++id) {
    hookrelay::v1::Delivery& d = jobs.emplace_back();
    d.set_lease(id);
    hookrelay::v1::Job& job = *d.mutable_job();
    job.set_id(id);
    job.set_message_id(absl::StrCat("m-", id));
    job.set_traceparent(kTraceparent);
    job.set_event_json(R"({"type":"track","messageId":"m","userId":"u","event":"E",)"
                       R"("timestamp":"2023-11-14T22:13:20.000Z"})");
    hookrelay::v1::Destination& dest = *d.mutable_destination();
    dest.set_id("hook");
    dest.set_enabled(true);
    hookrelay::v1::WebhookUrl& url = *dest.add_urls();
    url.set_url(absl::StrCat("https://localhost:", h2_port, "/hookrelay.Test/Hook"));
    // What a gRPC server needs to take the request as a call.
    hookrelay::v1::Header* content_type = url.add_headers();
    content_type->set_name("Content-Type");
    content_type->set_value("application/grpc");
    hookrelay::v1::Header* te = url.add_headers();
    te->set_name("TE");
    te->set_value("trailers");
  }
  // One job first, so that the second finds the host known as HTTP/2.
  ASSERT_TRUE(collector.service.Send({jobs[0]}));
  ASSERT_EQ(collector.service.WaitOutcomes(1).size(), 1u);
  ASSERT_TRUE(collector.service.Send({jobs[1]}));
  const std::vector<Outcome> outcomes = collector.service.WaitOutcomes(2);
  ASSERT_EQ(outcomes.size(), 2u);
  for (const Outcome& o : outcomes) {
    ASSERT_EQ(o.attempt().urls_size(), 1);
    EXPECT_EQ(o.attempt().urls(0).status(), 200) << o.attempt().urls(0).error();
  }
  deliverer->Shutdown();
  sender->reset();
  deliverer.reset();
  h2_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));

  absl::MutexLock lock(&h2.mu);
  ASSERT_EQ(h2.seen.size(), 2u);
  std::vector<std::string> parents;
  for (const std::string& value : h2.seen) {
    std::optional<common::TraceParent> p = common::ParseTraceparent(value);
    ASSERT_TRUE(p.has_value()) << value;
    EXPECT_EQ(p->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(p->flags, "01");
    parents.push_back(p->parent_id);
  }
  EXPECT_NE(parents[0], parents[1]);
}

// What a test's DNS answers, changed while the deliverer runs.
class FakeDns {
 public:
  void Set(absl::StatusOr<std::vector<std::string>> answer) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }
  CollectorResolver Resolver() {
    return [this](const std::string& host, const std::string& port)
               -> absl::StatusOr<std::vector<std::string>> {
      absl::MutexLock lock(&mu_);
      ++queries_;
      last_host_ = host;
      return answer_;
    };
  }
  int queries() {
    absl::MutexLock lock(&mu_);
    return queries_;
  }
  std::string last_host() {
    absl::MutexLock lock(&mu_);
    return last_host_;
  }

 private:
  absl::Mutex mu_;
  absl::StatusOr<std::vector<std::string>> answer_ ABSL_GUARDED_BY(mu_) =
      absl::NotFoundError("not set");
  int queries_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_host_ ABSL_GUARDED_BY(mu_);
};

bool WaitFor(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return done();
}

// dns:///name:port follows the name: a stream per address, a new address subscribed to at the
// next resolution, a gone one drained (Credit.drain) and closed, a failed resolution keeping
// what is known.
TEST(DelivererResolverTest, FollowsTheAddressesOfADnsTarget) {
  ServedCollector a;
  ServedCollector b;
  ASSERT_NE(a.server, nullptr);
  ASSERT_NE(b.server, nullptr);
  FakeDns dns;
  dns.Set(std::vector<std::string>{a.endpoint()});

  HttpSender::Options sender_options;
  sender_options.allow_private_networks = true;
  auto sender = HttpSender::Create(sender_options);
  ASSERT_TRUE(sender.ok()) << sender.status();
  common::ManualClock clock;
  Deliverer::Options options;
  options.collectors = {"dns:///hookrelay-collector-headless:50051"};
  options.resolve_interval = absl::Milliseconds(50);
  options.resolver = dns.Resolver();
  options.drain_timeout = absl::Seconds(5);
  auto deliverer = std::make_unique<Deliverer>(options, **sender, clock, nullptr);
  ASSERT_TRUE(deliverer->Start().ok());

  // First resolution happens in Start().
  EXPECT_EQ(deliverer->endpoints(), std::vector<std::string>{a.endpoint()});
  EXPECT_EQ(dns.last_host(), "hookrelay-collector-headless");
  ASSERT_TRUE(a.service.WaitHello());
  ASSERT_TRUE(WaitFor([&] { return deliverer->connected_streams() == 1; }));

  // A second pod appears.
  std::vector<std::string> both{a.endpoint(), b.endpoint()};
  std::sort(both.begin(), both.end());
  dns.Set(both);
  ASSERT_TRUE(b.service.WaitHello());
  EXPECT_EQ(deliverer->endpoints(), both);
  ASSERT_TRUE(WaitFor([&] { return deliverer->connected_streams() == 2; }));

  // DNS fails: nothing is dropped.
  dns.Set(absl::UnavailableError("server failure"));
  const int before = dns.queries();
  ASSERT_TRUE(WaitFor([&] { return dns.queries() >= before + 2; }));
  EXPECT_EQ(deliverer->endpoints(), both);
  EXPECT_EQ(deliverer->connected_streams(), 2);

  // The first pod goes: its stream is drained and closed; the other stays.
  dns.Set(std::vector<std::string>{b.endpoint()});
  EXPECT_TRUE(a.service.WaitDrained());
  EXPECT_TRUE(a.service.WaitStreamEnded());
  EXPECT_EQ(deliverer->endpoints(), std::vector<std::string>{b.endpoint()});
  ASSERT_TRUE(WaitFor([&] { return deliverer->connected_streams() == 1; }));
  EXPECT_TRUE(b.service.stream_open());

  deliverer->Shutdown();
  EXPECT_TRUE(b.service.WaitDrained());
  sender->reset();
  deliverer.reset();
}

// A static address next to a dns target that resolves to the same endpoint gets one stream.
TEST(DelivererResolverTest, StaticAndResolvedEndpointsAreNotDoubled) {
  ServedCollector a;
  ASSERT_NE(a.server, nullptr);
  FakeDns dns;
  dns.Set(std::vector<std::string>{a.endpoint()});
  HttpSender::Options sender_options;
  auto sender = HttpSender::Create(sender_options);
  ASSERT_TRUE(sender.ok()) << sender.status();
  common::ManualClock clock;
  Deliverer::Options options;
  options.collectors = {a.endpoint(), "dns:///collectors:50051"};
  options.resolve_interval = absl::Milliseconds(50);
  options.resolver = dns.Resolver();
  auto deliverer = std::make_unique<Deliverer>(options, **sender, clock, nullptr);
  ASSERT_TRUE(deliverer->Start().ok());
  EXPECT_EQ(deliverer->endpoints(), std::vector<std::string>{a.endpoint()});
  ASSERT_TRUE(WaitFor([&] { return deliverer->connected_streams() == 1; }));
  deliverer->Shutdown();
  sender->reset();
  deliverer.reset();
}

TEST(DelivererResolverTest, MalformedAddressIsRefusedAtStart) {
  HttpSender::Options sender_options;
  auto sender = HttpSender::Create(sender_options);
  ASSERT_TRUE(sender.ok()) << sender.status();
  common::ManualClock clock;
  Deliverer::Options options;
  options.collectors = {"dns:///collectors"};
  Deliverer deliverer(options, **sender, clock, nullptr);
  const absl::Status st = deliverer.Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("has no port"), std::string::npos) << st;
}

}  // namespace
}  // namespace hookrelay::deliverer
