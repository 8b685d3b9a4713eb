// Per-user order (SPEC §5.4, options.ordering: per_user) on the real binaries: kill -9 of the
// collector, then of the deliverer, while users' events stream through a receiver that fails some
// first attempts. Every acknowledged event arrives, and each user's requests arrive in the order
// the collector accepted them: a request carries either the user's last delivered event again (a
// redelivery after a crash) or the next one, never a later one and never an earlier one.
// On both engines (the JetStream one on a loopback 3-node cluster; a killed collector's leases
// end with the servers' ack wait, 5 s here).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
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
constexpr int kUsers = 40;
constexpr int kEventsPerUser = 30;

// The string value of "key":"…" in a compact JSON body, "" when absent.
std::string JsonString(const std::string& body, const std::string& key) {
  const std::string open = absl::StrCat("\"", key, "\":\"");
  const size_t at = body.find(open);
  if (at == std::string::npos) return "";
  const size_t from = at + open.size();
  const size_t to = body.find('"', from);
  return to == std::string::npos ? "" : body.substr(from, to - from);
}

// The integer value of "key":N, -1 when absent.
int JsonInt(const std::string& body, const std::string& key) {
  const std::string open = absl::StrCat("\"", key, "\":");
  const size_t at = body.find(open);
  if (at == std::string::npos) return -1;
  size_t to = at + open.size();
  while (to < body.size() && absl::ascii_isdigit(body[to])) ++to;
  int n = -1;
  if (!absl::SimpleAtoi(body.substr(at + open.size(), to - at - open.size()), &n)) return -1;
  return n;
}

class OrderingFaultTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_flags_ = CollectorEngineFlags(*engine);
    WebhookReceiver::Options options;
    options.threads = 4;
    auto r = WebhookReceiver::Start(options, [this](const ReceivedRequest& req) {
      return Answer(req);
    });
    ASSERT_TRUE(r.ok()) << r.status();
    receiver_ = *std::move(r);
    dir_ = MakeTempDir("ordering");
    config_path_ = dir_ + "/config.yaml";
    data_dir_ = dir_ + "/data";
    ASSERT_TRUE(WriteFile(config_path_,
                          PipelineConfig({receiver_->Url()}, "s",
                                         "    options:\n      timeout_ms: 2500\n"
                                         "      initial_backoff_ms: 50\n"
                                         "      max_backoff_ms: 200\n"
                                         "      ordering: per_user\n"))
                    .ok());
  }

  // Every user's requests in arrival order; a fifth of the events fail their first attempt
  // (503), so retries hold their users back.
  Response Answer(const ReceivedRequest& req) {
    const std::string user = JsonString(req.body, "userId");
    const int seq = JsonInt(req.body, "seq");
    Response response;
    response.delay = absl::Milliseconds(5);
    absl::MutexLock lock(&mu_);
    const std::string message = JsonString(req.body, "messageId");
    const bool fail = absl::HashOf(message) % 5 == 0 && attempts_[message]++ == 0;
    response.status = fail ? 503 : 200;
    arrivals_[user].push_back({seq, !fail});
    return response;
  }

  // Posts every user's events, one batch per round (round r holds every user's event r), so
  // each user's events are accepted in seq order. The messageIds answered 200.
  std::set<std::string> PostRounds(int http_port, int from_round, int to_round) {
    std::set<std::string> acked;
    for (int round = from_round; round < to_round; ++round) {
      std::string body = R"({"batch":[)";
      std::vector<std::string> ids;
      for (int u = 0; u < kUsers; ++u) {
        ids.push_back(absl::StrCat("u", u, "-", round));
        absl::StrAppend(&body, u ? "," : "", R"({"type":"track","userId":"u)", u,
                        R"(","event":"e","properties":{"seq":)", round, R"(},"messageId":")",
                        ids.back(), "\"}");
      }
      body += "]}";
      absl::StatusOr<HttpResponse> r = HttpPost(http_port, "/v1/batch", body, kWebKey);
      if (!r.ok() || r->status != 200) break;
      acked.insert(ids.begin(), ids.end());
    }
    return acked;
  }

  struct Arrival {
    int seq;
    bool delivered;
  };
  std::vector<std::string> engine_flags_;
  std::unique_ptr<WebhookReceiver> receiver_;
  std::string dir_, config_path_, data_dir_;
  absl::Mutex mu_;
  std::map<std::string, int> attempts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<Arrival>> arrivals_ ABSL_GUARDED_BY(mu_);
};

TEST_P(OrderingFaultTest, EachUsersEventsArriveInOrderThroughKills) {
  const std::vector<std::string> flags = {engine_flags_.begin(), engine_flags_.end()};
  std::vector<std::string> collector_flags = flags;
  collector_flags.push_back("--lease_duration=5s");
  auto collector = StartCollectorProcess(config_path_, data_dir_, collector_flags);
  ASSERT_TRUE(collector.ok()) << collector.status();
  const int grpc_port = (*collector)->IntField("grpc_port");
  auto deliverer = StartDelivererProcess({grpc_port});
  ASSERT_TRUE(deliverer.ok()) << deliverer.status();

  std::set<std::string> acked = PostRounds((*collector)->IntField("http_port"), 0, 10);
  ASSERT_EQ(acked.size(), static_cast<size_t>(10 * kUsers));
  ASSERT_TRUE(receiver_->WaitForRequests(60, kDeliveryWait));
  ASSERT_TRUE((*collector)->Signal(SIGKILL));
  (*collector)->Wait();

  collector_flags.push_back(absl::StrCat("--grpc_address=127.0.0.1:", grpc_port));
  auto restarted = StartCollectorProcess(config_path_, data_dir_, collector_flags);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  const std::set<std::string> more =
      PostRounds((*restarted)->IntField("http_port"), 10, kEventsPerUser);
  acked.insert(more.begin(), more.end());
  ASSERT_EQ(acked.size(), static_cast<size_t>(kEventsPerUser * kUsers));
  ASSERT_TRUE(receiver_->WaitForRequests(receiver_->request_count() + 60, kDeliveryWait));
  ASSERT_TRUE((*deliverer)->Signal(SIGKILL));
  (*deliverer)->Wait();
  auto second = StartDelivererProcess({grpc_port});
  ASSERT_TRUE(second.ok()) << second.status();

  // Every event answered 200 (a request answered 503 is not delivered).
  auto all_delivered = [this] {
    absl::MutexLock lock(&mu_);
    size_t users_done = 0;
    for (const auto& [user, arrivals] : arrivals_) {
      int last = -1;
      for (const Arrival& a : arrivals) {
        if (a.delivered) last = std::max(last, a.seq);
      }
      if (last == kEventsPerUser - 1) ++users_done;
    }
    return users_done == static_cast<size_t>(kUsers);
  };
  const absl::Time deadline = absl::Now() + kDeliveryWait;
  while (!all_delivered() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // Polls a real receiver.
  }
  EXPECT_TRUE(WaitDelivered(*receiver_, acked, absl::Seconds(1)))
      << DeliveredIds(*receiver_).size() << " of " << acked.size();

  absl::MutexLock lock(&mu_);
  ASSERT_EQ(arrivals_.size(), static_cast<size_t>(kUsers));
  size_t retried = 0;
  for (const auto& [user, arrivals] : arrivals_) {
    // The highest seq answered 200 so far: the next request carries it again or the one after.
    int delivered = -1;
    for (const Arrival& a : arrivals) {
      EXPECT_TRUE(a.seq == delivered || a.seq == delivered + 1)
          << user << ": seq " << a.seq << " arrived after seq " << delivered << " was delivered";
      if (a.delivered) delivered = std::max(delivered, a.seq);
      if (!a.delivered) ++retried;
    }
    EXPECT_EQ(delivered, kEventsPerUser - 1) << user;
  }
  EXPECT_GT(retried, 0u) << "no first attempt failed: the test did not hold any user back";
  ASSERT_TRUE((*second)->Signal(SIGTERM));
  (*second)->Wait();
  ASSERT_TRUE((*restarted)->Signal(SIGTERM));
  (*restarted)->Wait();
}

INSTANTIATE_TEST_SUITE_P(Engines, OrderingFaultTest, EngineParams(), EngineParamName);

}  // namespace
}  // namespace hookrelay::test
