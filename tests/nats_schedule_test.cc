// The JetStream feature the engine's retries are designed on (docs/DESIGN.md, "JetStream engine"):
// message schedules (ADR-51, nats-server 2.12+). A retry hours away is a schedule definition
// ("Nats-Schedule: @at <time>", one per job, on its own subject) in the jobs stream: it holds
// nothing in the dispatch consumer's ack-pending window, and the server itself publishes the job
// to the ready subject at the due time. Checked here on a 3-node cluster with an R3 work-queue
// stream: the job is not delivered before its time, is delivered once after it, survives the
// loss of a node meanwhile, and the consumer's pending count stays 0 while it waits.
//
// cnats 3.4 (Debian) predates the stream option: the stream is created through the JSON API.
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

TEST(NatsScheduleTest, ScheduledJobArrivesAtItsTimeAndNotBefore) {
  absl::StatusOr<std::unique_ptr<NatsCluster>> started = NatsCluster::Start(3);
  ASSERT_TRUE(started.ok()) << started.status();
  NatsCluster& cluster = **started;
  std::vector<std::string> urls = absl::StrSplit(cluster.urls(), ',');
  std::vector<const char*> servers;
  for (const std::string& u : urls) servers.push_back(u.c_str());
  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  ASSERT_EQ(natsOptions_Create(&opts), NATS_OK);
  ASSERT_EQ(natsOptions_SetServers(opts, servers.data(), static_cast<int>(servers.size())), NATS_OK);
  ASSERT_EQ(natsOptions_SetMaxReconnect(opts, -1), NATS_OK);
  ASSERT_EQ(natsConnection_Connect(&nc, opts), NATS_OK);
  ASSERT_EQ(natsConnection_JetStream(&js, nc, nullptr), NATS_OK);

  // The stream: ready jobs and schedule definitions, R3, work queue, schedules allowed.
  const std::string config = R"({"name":"HR_JOBS","subjects":["hr.jobs.ready","hr.jobs.sched.*"],)"
                             R"("retention":"workqueue","storage":"file","num_replicas":3,)"
                             R"("allow_msg_schedules":true,"allow_rollup_hdrs":true})";
  std::string answer;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (;;) {
    natsMsg* reply = nullptr;
    const natsStatus s =
        natsConnection_RequestString(&reply, nc, "$JS.API.STREAM.CREATE.HR_JOBS", config.c_str(), 5000);
    answer = s == NATS_OK ? std::string(natsMsg_GetData(reply), natsMsg_GetDataLength(reply))
                          : natsStatus_GetText(s);
    if (reply != nullptr) natsMsg_Destroy(reply);
    if (s == NATS_OK && !absl::StrContains(answer, "\"error\"")) break;
    ASSERT_LT(absl::Now(), deadline) << "stream not created: " << answer;
    absl::SleepFor(absl::Milliseconds(300));
  }
  ASSERT_TRUE(absl::StrContains(answer, "\"allow_msg_schedules\":true")) << answer;

  // The dispatch consumer: a durable pull on the ready subject.
  natsSubscription* sub = nullptr;
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Config.AckPolicy = js_AckExplicit;
  so.Config.AckWait = absl::ToInt64Nanoseconds(absl::Seconds(30));
  jsErrCode code = static_cast<jsErrCode>(0);
  ASSERT_EQ(js_PullSubscribe(&sub, js, "hr.jobs.ready", "dispatch", nullptr, &so, &code), NATS_OK)
      << nats_GetLastError(nullptr);

  // A job due in 3 s (whole seconds, as the engine will round a due time up), scheduled on its own
  // subject (one schedule per subject; the job id makes it one).
  const absl::Time due = absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()) + 3);
  natsMsg* msg = nullptr;
  const std::string body = R"({"job":42})";
  ASSERT_EQ(natsMsg_Create(&msg, "hr.jobs.sched.42", nullptr, body.data(),
                           static_cast<int>(body.size())),
            NATS_OK);
  const std::string at = absl::StrCat("@at ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", due, absl::UTCTimeZone()));
  ASSERT_EQ(natsMsgHeader_Set(msg, "Nats-Schedule", at.c_str()), NATS_OK);
  ASSERT_EQ(natsMsgHeader_Set(msg, "Nats-Schedule-Target", "hr.jobs.ready"), NATS_OK);
  ASSERT_EQ(natsMsgHeader_Set(msg, "Nats-Msg-Id", "retry-42-1"), NATS_OK);
  jsPubAck* ack = nullptr;
  ASSERT_EQ(js_PublishMsg(&ack, js, msg, nullptr, &code), NATS_OK) << nats_GetLastError(nullptr);
  jsPubAck_Destroy(ack);
  natsMsg_Destroy(msg);

  // Not before its time (fetches in the meantime find nothing), even with a follower lost.
  ASSERT_TRUE(cluster.Kill(2).ok());
  natsMsgList list{};
  const natsStatus early = natsSubscription_Fetch(&list, sub, 1, 1000, &code);
  EXPECT_NE(early, NATS_OK) << "delivered before its time";
  natsMsgList_Destroy(&list);
  ASSERT_TRUE(cluster.Restart(2).ok());

  // At its time: delivered once, to the ready subject.
  natsMsg* got = nullptr;
  const absl::Time wait_until = due + absl::Seconds(15);
  while (got == nullptr && absl::Now() < wait_until) {
    natsMsgList batch{};
    if (natsSubscription_Fetch(&batch, sub, 1, 1000, &code) == NATS_OK && batch.Count > 0) {
      got = batch.Msgs[0];
      batch.Msgs[0] = nullptr;
    }
    natsMsgList_Destroy(&batch);
  }
  ASSERT_NE(got, nullptr) << "the scheduled job never arrived";
  const absl::Time arrived = absl::Now();
  EXPECT_GE(arrived, due - absl::Milliseconds(50));
  EXPECT_EQ(std::string(natsMsg_GetSubject(got)), "hr.jobs.ready");
  EXPECT_EQ(std::string(natsMsg_GetData(got), natsMsg_GetDataLength(got)), body);
  EXPECT_EQ(natsMsg_Ack(got, nullptr), NATS_OK);
  natsMsg_Destroy(got);
  natsMsgList again{};
  EXPECT_NE(natsSubscription_Fetch(&again, sub, 1, 2000, &code), NATS_OK) << "delivered twice";
  natsMsgList_Destroy(&again);

  // Nothing is left behind: the fired one-shot definition is removed, the acked job too.
  uint64_t left = 1;
  const absl::Time settle = absl::Now() + absl::Seconds(10);
  while (left != 0 && absl::Now() < settle) {
    jsStreamInfo* si = nullptr;
    if (js_GetStreamInfo(&si, js, "HR_JOBS", nullptr, &code) == NATS_OK) {
      left = si->State.Msgs;
      jsStreamInfo_Destroy(si);
    }
    if (left != 0) absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(left, 0u) << "messages left in the stream after the job was acknowledged";

  natsSubscription_Destroy(sub);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  natsOptions_Destroy(opts);
}

}  // namespace
}  // namespace hookrelay::test
