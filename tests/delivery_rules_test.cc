// SPEC §5.3 end to end, under a manual clock: an event goes in over HTTP, the in-process
// deliverer POSTs it to a real receiver on 127.0.0.1, the outcome goes back to the collector's
// store, and the test moves time to each retry. Hours of retrying run in well under a second.
// Every test runs on both job-store engines.
#include <atomic>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collector/store/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/job.pb.h"
#include "tests/collector_test_util.h"
#include "tests/pipeline_test_util.h"
#include "tests/test_engines.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

using collector::DeadFilter;
using collector::JobCounts;
using receiver::ReceivedRequest;
using receiver::Response;
using receiver::WebhookReceiver;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kTrackBody[] =
    R"({"userId":"u-1","event":"Order Completed","properties":{"total":10},"messageId":"m-1"})";

std::unique_ptr<WebhookReceiver> StartReceiver(receiver::Handler handler,
                                               WebhookReceiver::Options options = {}) {
  absl::StatusOr<std::unique_ptr<WebhookReceiver>> r =
      WebhookReceiver::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

// Answers `statuses` in order, then 200 forever.
receiver::Handler Sequence(std::vector<Response> responses) {
  auto next = std::make_shared<std::atomic<size_t>>(0);
  return [responses = std::move(responses), next](const ReceivedRequest&) {
    const size_t i = next->fetch_add(1);
    return i < responses.size() ? responses[i] : Response{};
  };
}

Response Status(int status) {
  Response r;
  r.status = status;
  return r;
}

bool SendTrack(InProcessPipeline& p) {
  absl::StatusOr<HttpResponse> r = HttpPost(p.collector().http_port(), "/v1/track", kTrackBody,
                                            kWebKey);
  return r.ok() && r->status == 200;
}

std::string HostPort(const WebhookReceiver& r) { return absl::StrCat("127.0.0.1:", r.port()); }

std::vector<hookrelay::v1::Job> Dead(InProcessPipeline& p) {
  absl::StatusOr<std::vector<hookrelay::v1::Job>> dead = p.store().ListDead(DeadFilter{});
  EXPECT_TRUE(dead.ok()) << dead.status();
  return dead.ok() ? *dead : std::vector<hookrelay::v1::Job>{};
}

bool ScheduledOrDead(const JobCounts& c) {
  return c.ready == 0 && c.leased == 0 && c.scheduled + c.dead == 1;
}
// On the JetStream engine the counts come from two server calls (consumer and stream info) and a
// retry's scheduled message moves between streams when it fires: one reading may be off by one
// while that happens. Checks of an exact count wait for it instead of reading once.
bool OneScheduled(const JobCounts& c) {
  return c.ready == 0 && c.leased == 0 && c.scheduled == 1 && c.dead == 0;
}
bool Empty(const JobCounts& c) {
  return c.ready == 0 && c.leased == 0 && c.scheduled == 0 && c.dead == 0;
}

// Each test runs on both engines (tests/test_engines.h).
class DeliveryRulesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }
  InProcessPipeline::Options Opts(InProcessPipeline::Options options = {}) const {
    options.engine = engine_;
    return options;
  }
  EngineSetup engine_;
};

// 5xx for the whole window: retried with growing delays until 4 h after the first attempt,
// then dead-lettered with its attempt history.
TEST_P(DeliveryRulesTest, ServerErrorsForFourHoursDeadLetter) {
  auto receiver = StartReceiver([](const ReceivedRequest&) { return Status(503); });
  ASSERT_NE(receiver, nullptr);
  InProcessPipeline p("rules_5xx", PipelineConfig({receiver->Url()}, "s3cr3t"), Opts());
  ASSERT_TRUE(p.Start().ok());
  const absl::Time start = p.clock().Now();
  ASSERT_TRUE(SendTrack(p));

  int attempts = 0;
  absl::Duration first_delay, last_delay;
  absl::Time previous = start;
  for (; attempts < 200; ++attempts) {
    ASSERT_TRUE(receiver->WaitForRequests(attempts + 1, kPipelineWait)) << attempts;
    ASSERT_TRUE(p.WaitForCounts(ScheduledOrDead)) << attempts;
    if (p.store().Counts().dead == 1) break;
    const absl::Time due = p.store().NextDue();
    const absl::Duration delay = due - p.clock().Now();
    if (attempts == 0) first_delay = delay;
    last_delay = delay;
    previous = due;
    ASSERT_TRUE(p.AdvanceToNextDue());
  }
  ++attempts;  // the loop broke after the last attempt
  EXPECT_GE(first_delay, absl::Milliseconds(500));
  EXPECT_LE(first_delay, absl::Seconds(1));
  EXPECT_LE(last_delay, absl::Minutes(10));
  // 1 s doubling to the 10 min cap, then 5-10 min apart for the rest of the 4 hours.
  EXPECT_GE(attempts, 25);
  EXPECT_LE(attempts, 70);
  EXPECT_EQ(receiver->request_count(), attempts);

  const std::vector<hookrelay::v1::Job> dead = Dead(p);
  ASSERT_EQ(dead.size(), 1u);
  const hookrelay::v1::Job& job = dead[0];
  EXPECT_EQ(job.attempts(), attempts);
  EXPECT_EQ(job.message_id(), "m-1");
  EXPECT_THAT(job.dead_reason(), StartsWith("retry window of 4h0m0s exhausted"));
  EXPECT_THAT(job.dead_reason(), HasSubstr("503 from " + HostPort(*receiver)));
  ASSERT_EQ(job.history_size(), 10);  // bounded, newest last
  for (const auto& attempt : job.history()) {
    ASSERT_EQ(attempt.urls_size(), 1);
    EXPECT_EQ(attempt.urls(0).status(), 503);
    EXPECT_EQ(attempt.urls(0).url(), receiver->Url());
  }
  // The last attempt happens when the window closes, 4 h after the first.
  EXPECT_EQ(absl::FromUnixMillis(job.history(9).at_unix_ms()) -
                absl::FromUnixMillis(job.first_attempt_unix_ms()),
            absl::Hours(4));
  // Every request carried the same body and signature.
  const std::vector<ReceivedRequest> requests = receiver->Requests();
  for (const ReceivedRequest& r : requests) {
    EXPECT_EQ(r.body, requests[0].body);
    EXPECT_EQ(r.Header("X-Signature"), HmacSha1HexForTest("s3cr3t", r.body));
  }
  EXPECT_EQ(MetricValue(p.deliverer_registry(), "hookrelay_delivery_attempts_total",
                        {{"destination", "hook"}, {"outcome", "dead"}}),
            1);
  EXPECT_EQ(MetricValue(p.deliverer_registry(), "hookrelay_delivery_retries_total",
                        {{"destination", "hook"}}),
            attempts - 1);
}

// 500, 500, 200: delivered on the third attempt, each with the same body and messageId.
TEST_P(DeliveryRulesTest, DeliveredOnThirdAttempt) {
  auto receiver = StartReceiver(Sequence({Status(500), Status(500)}));
  ASSERT_NE(receiver, nullptr);
  InProcessPipeline p("rules_third", PipelineConfig({receiver->Url()}, "s3cr3t"), Opts());
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(SendTrack(p));
  for (int i = 1; i <= 2; ++i) {
    ASSERT_TRUE(receiver->WaitForRequests(i, kPipelineWait));
    ASSERT_TRUE(p.WaitForCounts(ScheduledOrDead));
    ASSERT_TRUE(p.AdvanceToNextDue());
  }
  ASSERT_TRUE(receiver->WaitForRequests(3, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts(Empty));
  const std::vector<ReceivedRequest> requests = receiver->Requests();
  ASSERT_EQ(requests.size(), 3u);
  for (const ReceivedRequest& r : requests) {
    EXPECT_EQ(r.body, requests[0].body);
    EXPECT_EQ(JsonStr(r.body, "/messageId"), "m-1");
    EXPECT_EQ(r.Header("Idempotency-Key"), "m-1");
    EXPECT_EQ(r.Header("X-Signature"), HmacSha1HexForTest("s3cr3t", r.body));
  }
  auto& reg = p.deliverer_registry();
  EXPECT_EQ(MetricValue(reg, "hookrelay_delivery_attempts_total",
                        {{"destination", "hook"}, {"outcome", "retry"}}),
            2);
  EXPECT_EQ(MetricValue(reg, "hookrelay_delivery_attempts_total",
                        {{"destination", "hook"}, {"outcome", "delivered"}}),
            1);
  EXPECT_EQ(MetricValue(reg, "hookrelay_delivery_requests_total",
                        {{"destination", "hook"}, {"result", "5xx"}}),
            2);
  EXPECT_EQ(MetricValue(reg, "hookrelay_delivery_end_to_end_seconds", {}), 1);
  EXPECT_EQ(MetricValue(reg, "hookrelay_delivery_attempt_duration_seconds", {}), 3);
  // Nothing more happens later.
  ASSERT_TRUE(p.AdvanceAndWaitForDispatch(absl::Hours(5)));
  EXPECT_EQ(receiver->request_count(), 3);
}

// A 4xx other than 429 is permanent: dead at once, never retried.
TEST_P(DeliveryRulesTest, BadRequestIsDeadAtOnce) {
  auto receiver = StartReceiver([](const ReceivedRequest&) { return Status(400); });
  ASSERT_NE(receiver, nullptr);
  InProcessPipeline p("rules_400", PipelineConfig({receiver->Url()}, ""), Opts());
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(SendTrack(p));
  ASSERT_TRUE(receiver->WaitForRequests(1, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts([](const JobCounts& c) { return c.dead == 1; }));
  const std::vector<hookrelay::v1::Job> dead = Dead(p);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].dead_reason(),
            "every URL failed permanently: 400 from " + HostPort(*receiver));
  ASSERT_EQ(dead[0].history_size(), 1);
  EXPECT_EQ(dead[0].history(0).urls(0).status(), 400);
  // No X-Signature without a secret.
  EXPECT_EQ(receiver->Requests()[0].Header("X-Signature"), "");
  ASSERT_TRUE(p.AdvanceAndWaitForDispatch(absl::Hours(5)));
  EXPECT_EQ(receiver->request_count(), 1);
}

// 429 with Retry-After: 120 → not retried before 120 s, then delivered.
TEST_P(DeliveryRulesTest, TooManyRequestsHonoursRetryAfter) {
  Response busy = Status(429);
  busy.headers.push_back({"Retry-After", "120"});
  auto receiver = StartReceiver(Sequence({busy}));
  ASSERT_NE(receiver, nullptr);
  InProcessPipeline p("rules_429", PipelineConfig({receiver->Url()}, ""), Opts());
  ASSERT_TRUE(p.Start().ok());
  const absl::Time sent = p.clock().Now();
  ASSERT_TRUE(SendTrack(p));
  ASSERT_TRUE(receiver->WaitForRequests(1, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts(OneScheduled));
  EXPECT_GE(p.store().NextDue() - sent, absl::Seconds(120));
  EXPECT_LE(p.store().NextDue() - sent, absl::Seconds(121));
  ASSERT_TRUE(p.AdvanceAndWaitForDispatch(absl::Seconds(119)));
  EXPECT_EQ(receiver->request_count(), 1);
  ASSERT_TRUE(p.AdvanceToNextDue());
  ASSERT_TRUE(receiver->WaitForRequests(2, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts(Empty));
}

// No answer within the default 5 s: a timeout, retried (real time: curl's timer).
TEST_P(DeliveryRulesTest, TimeoutAfterFiveSecondsIsRetried) {
  Response slow;
  slow.delay = absl::Seconds(8);
  auto receiver = StartReceiver(Sequence({slow}));
  ASSERT_NE(receiver, nullptr);
  InProcessPipeline p("rules_timeout", PipelineConfig({receiver->Url()}, ""), Opts());
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(SendTrack(p));
  ASSERT_TRUE(receiver->WaitForRequests(1, kPipelineWait));
  const absl::Time asked = absl::Now();
  ASSERT_TRUE(p.WaitForCounts(ScheduledOrDead));
  const absl::Duration waited = absl::Now() - asked;
  EXPECT_GE(waited, absl::Milliseconds(4800));
  EXPECT_LT(waited, absl::Seconds(7));
  EXPECT_TRUE(p.WaitForCounts(OneScheduled));
  EXPECT_EQ(MetricValue(p.deliverer_registry(), "hookrelay_delivery_requests_total",
                        {{"destination", "hook"}, {"result", "timeout"}}),
            1);
  ASSERT_TRUE(p.AdvanceToNextDue());
  ASSERT_TRUE(receiver->WaitForRequests(2, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts(Empty));
}

// Two URLs, one failing and one succeeding: delivered; the failed URL is not retried.
TEST_P(DeliveryRulesTest, OneOfTwoUrlsSucceeds) {
  auto failing = StartReceiver([](const ReceivedRequest&) { return Status(500); });
  auto working = StartReceiver(nullptr);
  ASSERT_NE(failing, nullptr);
  ASSERT_NE(working, nullptr);
  InProcessPipeline p("rules_two", PipelineConfig({failing->Url(), working->Url("/b")}, "k"),
                      Opts());
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(SendTrack(p));
  ASSERT_TRUE(failing->WaitForRequests(1, kPipelineWait));
  ASSERT_TRUE(working->WaitForRequests(1, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts(Empty));
  EXPECT_EQ(failing->Requests()[0].body, working->Requests()[0].body);
  EXPECT_EQ(working->Requests()[0].target, "/b");
  ASSERT_TRUE(p.AdvanceAndWaitForDispatch(absl::Hours(5)));
  EXPECT_EQ(failing->request_count(), 1);
  EXPECT_EQ(working->request_count(), 1);
}

// A self-signed HTTPS receiver gets no request: a TLS error, logged, counted, dead at once.
// The same receiver trusted through --ca_file gets the event.
TEST_P(DeliveryRulesTest, SelfSignedCertificateIsRefused) {
  absl::StatusOr<receiver::SelfSignedCert> cert = receiver::GenerateSelfSignedCert();
  ASSERT_TRUE(cert.ok()) << cert.status();
  WebhookReceiver::Options tls;
  tls.tls = *cert;
  auto receiver = StartReceiver(nullptr, tls);
  ASSERT_NE(receiver, nullptr);
  ASSERT_THAT(receiver->Url(), StartsWith("https://"));
  {
    InProcessPipeline p("rules_tls", PipelineConfig({receiver->Url()}, "s"), Opts());
    ASSERT_TRUE(p.Start().ok());
    ASSERT_TRUE(SendTrack(p));
    ASSERT_TRUE(p.WaitForCounts([](const JobCounts& c) { return c.dead == 1; }));
    const std::vector<hookrelay::v1::Job> dead = Dead(p);
    ASSERT_EQ(dead.size(), 1u);
    EXPECT_THAT(dead[0].dead_reason(), HasSubstr("TLS verification failure from"));
    EXPECT_THAT(dead[0].history(0).urls(0).error(), HasSubstr("TLS verification failure"));
    EXPECT_EQ(MetricValue(p.deliverer_registry(), "hookrelay_delivery_requests_total",
                          {{"destination", "hook"}, {"result", "tls_error"}}),
              1);
    EXPECT_EQ(receiver->request_count(), 0);
    EXPECT_GE(receiver->connection_count(), 1);  // the handshake was attempted
  }
  ASSERT_TRUE(PrepareEngine(GetParam()).ok());  // The shared engine forgets that dead letter.
  const std::string ca_path = MakeTempDir("rules_tls_ca") + "/ca.pem";
  ASSERT_TRUE(WriteFile(ca_path, cert->cert_pem).ok());
  InProcessPipeline::Options trusted;
  trusted.ca_file = ca_path;
  InProcessPipeline p("rules_tls_trusted", PipelineConfig({receiver->Url()}, "s"), Opts(trusted));
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(SendTrack(p));
  ASSERT_TRUE(receiver->WaitForRequests(1, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts(Empty));
  EXPECT_EQ(receiver->Requests()[0].Header("X-Signature"),
            HmacSha1HexForTest("s", receiver->Requests()[0].body));
}

// Without --allow_private_networks a receiver on loopback is refused before connecting.
TEST_P(DeliveryRulesTest, PrivateNetworkReceiverIsRefused) {
  auto receiver = StartReceiver(nullptr);
  ASSERT_NE(receiver, nullptr);
  InProcessPipeline::Options strict;
  strict.allow_private_networks = false;
  InProcessPipeline p("rules_private", PipelineConfig({receiver->Url()}, ""), Opts(strict));
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(SendTrack(p));
  ASSERT_TRUE(p.WaitForCounts([](const JobCounts& c) { return c.dead == 1; }));
  EXPECT_THAT(Dead(p)[0].dead_reason(), HasSubstr("private network address refused"));
  EXPECT_EQ(receiver->connection_count(), 0);
}

// A destination disabled while its job waits for a retry: the job is dead-lettered, not sent;
// replay after re-enabling delivers it.
TEST_P(DeliveryRulesTest, DisabledDestinationStopsDeliveryAndReplayResumes) {
  auto receiver = StartReceiver(Sequence({Status(503)}));
  ASSERT_NE(receiver, nullptr);
  const std::string enabled = PipelineConfig({receiver->Url()}, "");
  InProcessPipeline p("rules_disable", enabled, Opts());
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(SendTrack(p));
  ASSERT_TRUE(receiver->WaitForRequests(1, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts(ScheduledOrDead));

  std::string disabled = enabled;
  disabled.replace(disabled.find("enabled: true"), 13, "enabled: false");
  ASSERT_TRUE(WriteFile(p.collector().config_path(), disabled).ok());
  ASSERT_TRUE(p.collector().server().Reload().ok());
  ASSERT_TRUE(p.AdvanceToNextDue());
  ASSERT_TRUE(p.WaitForCounts([](const JobCounts& c) { return c.dead == 1; }));
  EXPECT_EQ(Dead(p)[0].dead_reason(), "destination hook disabled");
  EXPECT_EQ(receiver->request_count(), 1);

  ASSERT_TRUE(WriteFile(p.collector().config_path(), enabled).ok());
  ASSERT_TRUE(p.collector().server().Reload().ok());
  absl::StatusOr<size_t> replayed = p.store().Replay(DeadFilter{});
  ASSERT_TRUE(replayed.ok());
  EXPECT_EQ(*replayed, 1u);
  // The replayed job is due now; the dispatcher finds it on its next poll, in the clock's time.
  ASSERT_TRUE(p.AdvanceAndWaitForDispatch(absl::Milliseconds(100)));
  ASSERT_TRUE(receiver->WaitForRequests(2, kPipelineWait));
  ASSERT_TRUE(p.WaitForCounts(Empty));
}

INSTANTIATE_TEST_SUITE_P(Engines, DeliveryRulesTest, EngineParams(), EngineParamName);

}  // namespace
}  // namespace hookrelay::test
