// Fault tests on the real binaries: kill -9 the deliverer with jobs in flight, kill -9 the
// collector while events stream in and out. Every acknowledged event reaches the receiver
// (at least once), and the collector's job store ends empty.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"
#include "tests/pipeline_test_util.h"
#include "tests/test_engines.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

using receiver::ReceivedRequest;
using receiver::Response;
using receiver::WebhookReceiver;

constexpr absl::Duration kDeliveryWait = absl::Seconds(90);

// hookrelay_jobs{state="..."} from the collector's /metrics, the collector's own part and (on
// JetStream) the cluster's added up; -1 when neither is there.
double JobsGauge(int metrics_port, const std::string& state) {
  double total = -1;
  for (const char* scope : {"collector", "cluster"}) {
    const double v = ScrapeMetric(
        metrics_port, absl::StrCat("hookrelay_jobs{state=\"", state, "\",scope=\"", scope, "\"}"));
    if (v >= 0) total = std::max(total, 0.0) + v;
  }
  return total;
}

bool WaitStoreEmpty(int metrics_port) {
  const absl::Time deadline = absl::Now() + kDeliveryWait;
  while (absl::Now() < deadline) {
    if (JobsGauge(metrics_port, "ready") == 0 && JobsGauge(metrics_port, "leased") == 0 &&
        JobsGauge(metrics_port, "scheduled") == 0 && JobsGauge(metrics_port, "dead") == 0) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(100));  // Polls a child process's /metrics.
  }
  return false;
}

// Posts `batches` batches of 20 tracks; returns the messageIds of every batch answered 200.
std::set<std::string> PostBatches(int http_port, const std::string& prefix, int batches) {
  std::set<std::string> acked;
  for (int b = 0; b < batches; ++b) {
    std::string body = R"({"batch":[)";
    std::vector<std::string> ids;
    for (int i = 0; i < 20; ++i) {
      ids.push_back(absl::StrCat(prefix, "-", b, "-", i));
      absl::StrAppend(&body, i ? "," : "", R"({"type":"track","userId":"u","event":"e","messageId":")",
                      ids.back(), "\"}");
    }
    body += "]}";
    absl::StatusOr<HttpResponse> r = HttpPost(http_port, "/v1/batch", body, kWebKey);
    if (!r.ok() || r->status != 200) break;
    acked.insert(ids.begin(), ids.end());
  }
  return acked;
}

void ExpectCleanExit(ChildProcess& p) {
  ASSERT_TRUE(p.Signal(SIGTERM));
  const int status = p.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// On both job-store engines (tests/test_engines.h).
class DeliveryFaultTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_flags_ = CollectorEngineFlags(*engine);
    WebhookReceiver::Options options;
    options.threads = 2;
    // Slow enough that many jobs are in flight at any moment.
    auto r = WebhookReceiver::Start(options, [this](const ReceivedRequest&) {
      Response slow;
      slow.delay = absl::Milliseconds(answer_delay_ms_.load());
      return slow;
    });
    ASSERT_TRUE(r.ok()) << r.status();
    receiver_ = *std::move(r);
    dir_ = MakeTempDir("fault");
    config_path_ = dir_ + "/config.yaml";
    data_dir_ = dir_ + "/data";
    // A timeout that fits the short leases below (a quarter of the lease to spare).
    ASSERT_TRUE(WriteFile(config_path_, PipelineConfig({receiver_->Url()}, "s",
                                                       "    options:\n      timeout_ms: 2500\n"))
                    .ok());
  }

  // The engine's flags plus `extra`.
  std::vector<std::string> Flags(std::vector<std::string> extra = {}) const {
    std::vector<std::string> flags = engine_flags_;
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  }

  std::vector<std::string> engine_flags_;
  std::atomic<int> answer_delay_ms_{100};
  std::unique_ptr<WebhookReceiver> receiver_;
  std::string dir_, config_path_, data_dir_;
};

// kill -9 of the deliverer while it holds jobs: a new deliverer gets them once the leases
// expire, and every event is delivered.
TEST_P(DeliveryFaultTest, KillDelivererWithJobsInFlight) {
  // Each answer takes a second, so the deliverer's connections (64 at most) fill with unanswered
  // requests at once and the kill always lands with most of the 400 jobs not yet sent.
  answer_delay_ms_ = 1000;
  auto collector = StartCollectorProcess(config_path_, data_dir_, Flags({"--lease_duration=4s"}));
  ASSERT_TRUE(collector.ok()) << collector.status();
  const int grpc_port = (*collector)->IntField("grpc_port");
  auto first = StartDelivererProcess({grpc_port});
  ASSERT_TRUE(first.ok()) << first.status();

  const std::set<std::string> acked = PostBatches((*collector)->IntField("http_port"), "k", 20);
  ASSERT_EQ(acked.size(), 400u);
  ASSERT_TRUE(receiver_->WaitForRequests(40, kDeliveryWait));
  ASSERT_TRUE((*first)->Signal(SIGKILL));
  (*first)->Wait();
  const size_t before = DeliveredIds(*receiver_).size();
  EXPECT_LT(before, acked.size()) << "the kill came too late to leave jobs in flight";

  auto second = StartDelivererProcess({grpc_port});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(WaitDelivered(*receiver_, acked, kDeliveryWait))
      << DeliveredIds(*receiver_).size() << " of " << acked.size();
  EXPECT_TRUE(WaitStoreEmpty((*collector)->IntField("metrics_port")));
  ExpectCleanExit(**second);
  ExpectCleanExit(**collector);
}

// kill -9 of the collector mid-stream: restarted on the same data dir (embedded) or cluster
// (JetStream: the killed one's leases expire first) and gRPC port, it serves every acknowledged
// event again; the deliverer reconnects on its own.
TEST_P(DeliveryFaultTest, KillCollectorLosesNothingAcknowledged) {
  auto collector = StartCollectorProcess(config_path_, data_dir_, Flags({"--lease_duration=5s"}));
  ASSERT_TRUE(collector.ok()) << collector.status();
  const int grpc_port = (*collector)->IntField("grpc_port");
  auto deliverer = StartDelivererProcess({grpc_port});
  ASSERT_TRUE(deliverer.ok()) << deliverer.status();

  std::set<std::string> acked = PostBatches((*collector)->IntField("http_port"), "a", 10);
  ASSERT_EQ(acked.size(), 200u);
  // More events stream in while the collector dies.
  std::set<std::string> during;
  std::thread poster([&] { during = PostBatches((*collector)->IntField("http_port"), "b", 1000); });
  ASSERT_TRUE(receiver_->WaitForRequests(30, kDeliveryWait));
  ASSERT_TRUE((*collector)->Signal(SIGKILL));
  (*collector)->Wait();
  poster.join();
  acked.insert(during.begin(), during.end());

  auto restarted = StartCollectorProcess(
      config_path_, data_dir_,
      Flags({"--lease_duration=5s", absl::StrCat("--grpc_address=127.0.0.1:", grpc_port)}));
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  ASSERT_EQ((*restarted)->IntField("grpc_port"), grpc_port);
  EXPECT_TRUE(WaitDelivered(*receiver_, acked, kDeliveryWait))
      << DeliveredIds(*receiver_).size() << " of " << acked.size();
  EXPECT_TRUE(WaitStoreEmpty((*restarted)->IntField("metrics_port")));
  ExpectCleanExit(**deliverer);
  ExpectCleanExit(**restarted);
}

INSTANTIATE_TEST_SUITE_P(Engines, DeliveryFaultTest, EngineParams(), EngineParamName);

}  // namespace
}  // namespace hookrelay::test
