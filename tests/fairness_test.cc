// Per-destination queues, end to end in one process on both engines: a destination whose
// receiver answers in 2 s beside one that answers at once. The fast destination's jobs are not
// held behind the slow one's backlog, and no job of the slow one is leased only to be put back
// (counts, not timings: the slow receiver has answered only a part of its backlog when the fast
// one has everything, and the deferral counters stay at 0).
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/collector_test_util.h"
#include "tests/pipeline_test_util.h"
#include "tests/test_engines.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

using receiver::ReceivedRequest;
using receiver::Response;
using receiver::WebhookReceiver;

constexpr int kBatches = 20;  // of 20 events: 400 per destination
constexpr absl::Duration kSlowAnswer = absl::Seconds(2);

class FairnessTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FairnessTest, FastDestinationIsNotHeldBehindTheSlowOnesBacklog) {
  auto fast = WebhookReceiver::Start({});
  ASSERT_TRUE(fast.ok()) << fast.status();
  WebhookReceiver::Options slow_options;
  slow_options.threads = 2;
  auto slow = WebhookReceiver::Start(slow_options, [](const ReceivedRequest&) {
    Response r;
    r.delay = kSlowAnswer;  // An Asio timer: other connections are not held up.
    return r;
  });
  ASSERT_TRUE(slow.ok()) << slow.status();
  absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
  ASSERT_TRUE(engine.ok()) << engine.status();
  InProcessPipeline::Options options;
  options.engine = *engine;
  options.credits = 200;
  // "hook" is the fast destination; "slow" takes the same source's events.
  const std::string config = PipelineConfig(
      {(*fast)->Url()}, "",
      absl::StrCat("  - id: slow\n    type: webhooks\n    sources: [web]\n    enabled: true\n",
                   "    urls:\n      - url: ", (*slow)->Url(), "\n"));
  InProcessPipeline p("fairness", config, options);
  ASSERT_TRUE(p.Start().ok());

  std::set<std::string> sent;
  for (int b = 0; b < kBatches; ++b) {
    std::string body = R"({"batch":[)";
    for (int i = 0; i < 20; ++i) {
      const std::string id = absl::StrCat("m-", b, "-", i);
      sent.insert(id);
      absl::StrAppend(&body, i ? "," : "",
                      R"({"type":"track","userId":"u","event":"e","messageId":")", id, "\"}");
    }
    body += "]}";
    absl::StatusOr<HttpResponse> r = HttpPost(p.collector().http_port(), "/v1/batch", body, kWebKey);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
  }

  // The fast receiver gets everything while the slow one's backlog is still mostly queued: each
  // of its answers takes 2 s and it holds at most its share of the 200 credits.
  ASSERT_TRUE(WaitDelivered(**fast, sent, kPipelineWait))
      << DeliveredIds(**fast).size() << " of " << sent.size();
  const size_t slow_received = DeliveredIds(**slow).size();
  EXPECT_LT(slow_received, sent.size()) << "the fast destination waited for the slow one";
  const int metrics_port = p.collector().server().metrics_port();
  for (const char* reason : {"concurrency", "rate_limit", "circuit_open"}) {
    EXPECT_EQ(ScrapeMetric(metrics_port, absl::StrCat("hookrelay_dispatch_deferred_total{reason=\"",
                                                      reason, "\"}")),
              0)
        << reason << ": jobs leased only to be put back";
  }
  // And the slow destination gets all of it in its time.
  EXPECT_TRUE(WaitDelivered(**slow, sent, absl::Seconds(60)))
      << DeliveredIds(**slow).size() << " of " << sent.size();
  p.Stop();
}

INSTANTIATE_TEST_SUITE_P(Engines, FairnessTest, EngineParams(), EngineParamName);

}  // namespace
}  // namespace hookrelay::test
