// The JetStream engine's candidate for de-duplication over 24 h (docs/DESIGN.md): an event's
// jobs and a de-duplication marker in one atomic batch (ADR-50, server 2.12+). The marker
// (`hr.jobs.dedup.<hash of the dedup key>`) carries Nats-Expected-Last-Subject-Sequence: 0 and a
// per-message TTL (ADR-43), so a second batch for the same event is refused whole — its jobs are
// not stored — however long after the first, until the marker expires; the dispatch consumer's
// filter never sees markers. Checked on an R3 work-queue stream of the pinned server.
#include <nats/nats.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/nats_cluster.h"

namespace hookrelay::test {
namespace {

class AtomicDedupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<NatsCluster>> started = NatsCluster::Start(3);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
    urls_ = absl::StrSplit(cluster_->urls(), ',');
    std::vector<const char*> servers;
    for (const std::string& u : urls_) servers.push_back(u.c_str());
    ASSERT_EQ(natsOptions_Create(&opts_), NATS_OK);
    ASSERT_EQ(natsOptions_SetServers(opts_, servers.data(), static_cast<int>(servers.size())),
              NATS_OK);
    ASSERT_EQ(natsConnection_Connect(&nc_, opts_), NATS_OK);
  }
  void TearDown() override {
    if (nc_ != nullptr) natsConnection_Destroy(nc_);
    if (opts_ != nullptr) natsOptions_Destroy(opts_);
  }

  std::string Request(const std::string& subject, const std::string& body) {
    natsMsg* reply = nullptr;
    if (natsConnection_RequestString(&reply, nc_, subject.c_str(), body.c_str(), 5000) != NATS_OK) {
      return "";
    }
    std::string out(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
    natsMsg_Destroy(reply);
    return out;
  }

  // Publishes marker + jobs as one atomic batch; returns the commit's answer (a pub ack or an
  // error object).
  std::string PublishEvent(const std::string& batch_id, const std::string& dedup_hash, int jobs) {
    std::vector<std::pair<std::string, std::string>> messages;  // subject, body
    messages.emplace_back(absl::StrCat("hr.jobs.dedup.", dedup_hash), "");
    for (int i = 0; i < jobs; ++i) messages.emplace_back("hr.jobs.ready", absl::StrCat("job-", i));
    std::string answer;
    for (size_t i = 0; i < messages.size(); ++i) {
      natsMsg* msg = nullptr;
      const auto& [subject, body] = messages[i];
      EXPECT_EQ(natsMsg_Create(&msg, subject.c_str(), nullptr, body.data(),
                               static_cast<int>(body.size())),
                NATS_OK);
      natsMsgHeader_Set(msg, "Nats-Batch-Id", batch_id.c_str());
      natsMsgHeader_Set(msg, "Nats-Batch-Sequence", absl::StrCat(i + 1).c_str());
      if (i == 0) {
        natsMsgHeader_Set(msg, "Nats-Expected-Last-Subject-Sequence", "0");
        natsMsgHeader_Set(msg, "Nats-TTL", "24h");
      }
      if (i + 1 == messages.size()) {
        natsMsgHeader_Set(msg, "Nats-Batch-Commit", "1");
        natsMsg* reply = nullptr;
        const natsStatus s = natsConnection_RequestMsg(&reply, nc_, msg, 5000);
        answer = s == NATS_OK ? std::string(natsMsg_GetData(reply), natsMsg_GetDataLength(reply))
                              : natsStatus_GetText(s);
        if (reply != nullptr) natsMsg_Destroy(reply);
      } else {
        EXPECT_EQ(natsConnection_PublishMsg(nc_, msg), NATS_OK);
      }
      natsMsg_Destroy(msg);
    }
    return answer;
  }

  // The consumer's pending count once it equals `want` (the info may lag a commit, and a loaded
  // machine can time a request out), else the last value read.
  uint64_t ReadyJobs(uint64_t want) {
    uint64_t last = UINT64_MAX;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    do {
      const std::string info = Request("$JS.API.CONSUMER.INFO.HR_JOBS.dispatch", "");
      const size_t at = info.find("\"num_pending\":");
      if (at != std::string::npos) last = std::stoull(info.substr(at + 14));
      if (last == want) return last;
      absl::SleepFor(absl::Milliseconds(100));
    } while (absl::Now() < deadline);
    return last;
  }

  std::unique_ptr<NatsCluster> cluster_;
  std::vector<std::string> urls_;
  natsOptions* opts_ = nullptr;
  natsConnection* nc_ = nullptr;
};

TEST_F(AtomicDedupTest, SecondBatchOfAnEventIsRefusedWhole) {
  const std::string config =
      R"({"name":"HR_JOBS","subjects":["hr.jobs.ready","hr.jobs.sched.*","hr.jobs.dedup.*"],)"
      R"("retention":"workqueue","storage":"file","num_replicas":3,"allow_msg_schedules":true,)"
      R"("allow_msg_ttl":true,"allow_atomic":true,"allow_rollup_hdrs":true})";
  std::string created;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    created = Request("$JS.API.STREAM.CREATE.HR_JOBS", config);
    if (!created.empty() && !absl::StrContains(created, "\"error\"")) break;
    absl::SleepFor(absl::Milliseconds(300));
  } while (absl::Now() < deadline);
  ASSERT_TRUE(absl::StrContains(created, R"("allow_atomic":true)")) << created;
  const std::string consumer = Request(
      "$JS.API.CONSUMER.CREATE.HR_JOBS.dispatch",
      R"({"stream_name":"HR_JOBS","config":{"durable_name":"dispatch","filter_subject":"hr.jobs.ready","ack_policy":"explicit"}})");
  ASSERT_FALSE(absl::StrContains(consumer, "\"error\"")) << consumer;

  std::string first = PublishEvent("batch-1", "0123456789abcdef0123456789abcdef", 2);
  for (int i = 0; i < 50 && absl::StrContains(first, "\"error\""); ++i) {  // Leader settling.
    absl::SleepFor(absl::Milliseconds(200));
    first = PublishEvent(absl::StrCat("batch-1-", i), "0123456789abcdef0123456789abcdef", 2);
  }
  ASSERT_TRUE(absl::StrContains(first, R"("count":3)")) << first;
  EXPECT_EQ(ReadyJobs(2), 2u);

  // The same event again (a client's retry, minutes or hours later): refused whole.
  const std::string again = PublishEvent("batch-2", "0123456789abcdef0123456789abcdef", 2);
  EXPECT_TRUE(absl::StrContains(again, "\"error\"")) << again;
  EXPECT_TRUE(absl::StrContains(again, "10071") || absl::StrContains(again, "wrong last sequence"))
      << again;
  EXPECT_EQ(ReadyJobs(2), 2u) << "the duplicate's jobs were stored";

  // Another event: stored.
  const std::string other = PublishEvent("batch-3", "fedcba9876543210fedcba9876543210", 1);
  EXPECT_TRUE(absl::StrContains(other, R"("count":2)")) << other;
  EXPECT_EQ(ReadyJobs(3), 3u);
}

}  // namespace
}  // namespace hookrelay::test
