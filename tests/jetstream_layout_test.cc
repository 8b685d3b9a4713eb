// The JetStream engine's streams and consumer on a real 3-node cluster: created when missing,
// left alone when they match (idempotent), and a mismatch in a setting that matters is a clear
// start-up error naming the setting.
#include "collector/store/jetstream/jetstream_layout.h"

#include <nats/nats.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/nats_cluster.h"

namespace hookrelay::collector {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class JetStreamLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<test::NatsCluster>> started = test::NatsCluster::Start(3);
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

  // Ensure, retried while the cluster elects its leaders (UNAVAILABLE).
  absl::Status Ensure(const JetStreamLayout& layout) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    absl::Status st = EnsureJetStreamLayout(nc_, layout);
    while (absl::IsUnavailable(st) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(300));
      st = EnsureJetStreamLayout(nc_, layout);
    }
    return st;
  }

  std::string Api(const std::string& subject, const std::string& body = "") {
    natsMsg* reply = nullptr;
    if (natsConnection_RequestString(&reply, nc_, subject.c_str(), body.c_str(), 5000) != NATS_OK) {
      return "";
    }
    std::string out(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
    natsMsg_Destroy(reply);
    return out;
  }

  std::unique_ptr<test::NatsCluster> cluster_;
  std::vector<std::string> urls_;
  natsOptions* opts_ = nullptr;
  natsConnection* nc_ = nullptr;
};

TEST_F(JetStreamLayoutTest, CreatesThenChecks) {
  JetStreamLayout layout;
  ASSERT_TRUE(Ensure(layout).ok()) << Ensure(layout);
  const std::string jobs = Api("$JS.API.STREAM.INFO.HR_JOBS");
  EXPECT_THAT(jobs, HasSubstr(R"("num_replicas":3)"));
  EXPECT_THAT(jobs, HasSubstr(R"("allow_msg_schedules":true)"));
  EXPECT_THAT(jobs, HasSubstr(R"("retention":"workqueue")"));
  EXPECT_THAT(jobs, HasSubstr(R"("allow_direct":true)"));  // Per-user order checks.
  EXPECT_THAT(Api("$JS.API.CONSUMER.INFO.HR_JOBS.dispatch"), HasSubstr(R"("ack_policy":"explicit")"));
  const std::string dead = Api("$JS.API.STREAM.INFO.HR_DEAD");
  EXPECT_THAT(dead, HasSubstr(R"("subjects":["hr.dead.\u003e"])")) << dead;
  const std::string dedup = Api("$JS.API.STREAM.INFO.HR_DEDUP");
  EXPECT_THAT(dedup, HasSubstr(R"("num_replicas":1)")) << dedup;  // --nats_dedup_replicas.
  EXPECT_THAT(dedup, HasSubstr(R"("max_age":86400000000000)")) << dedup;
  EXPECT_THAT(dedup, HasSubstr(R"("max_msgs_per_subject":1)")) << dedup;
  EXPECT_THAT(dedup, HasSubstr(R"("allow_direct":true)")) << dedup;
  // Deletions and audiences (collector/store/jetstream/jetstream_user_data.h).
  for (const char* stream : {"HR_USERS", "HR_PROFILES", "HR_DELETIONS", "HR_AUDIENCES"}) {
    const std::string info = Api(absl::StrCat("$JS.API.STREAM.INFO.", stream));
    EXPECT_THAT(info, HasSubstr(R"("num_replicas":3)")) << info;
    EXPECT_THAT(info, HasSubstr(R"("storage":"file")")) << info;
  }
  EXPECT_THAT(Api("$JS.API.STREAM.INFO.HR_USERS"), HasSubstr(R"("max_msgs_per_subject":1)"));
  const std::string profiles = Api("$JS.API.STREAM.INFO.HR_PROFILES");
  EXPECT_THAT(profiles, HasSubstr(R"("allow_rollup_hdrs":true)")) << profiles;
  EXPECT_THAT(profiles, HasSubstr(R"("max_msgs_per_subject":-1)")) << profiles;

  // Idempotent: a second collector starting finds everything as it should be.
  EXPECT_TRUE(EnsureJetStreamLayout(nc_, layout).ok());

  // Another replication or lease: refused, naming the setting, nothing changed.
  JetStreamLayout r1 = layout;
  r1.replicas = 1;
  absl::Status st = EnsureJetStreamLayout(nc_, r1);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("HR_JOBS"));
  EXPECT_THAT(st.message(), HasSubstr("num_replicas is 3, hookrelay needs 1 (--nats_replicas)"));
  JetStreamLayout lease = layout;
  lease.ack_wait = absl::Seconds(30);
  st = EnsureJetStreamLayout(nc_, lease);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("HR_JOBS/dispatch"));
  EXPECT_THAT(st.message(), HasSubstr("ack_wait is 90000000000, hookrelay needs 30000000000"));
  EXPECT_THAT(Api("$JS.API.STREAM.INFO.HR_JOBS"), HasSubstr(R"("num_replicas":3)"));
  // Another dedup window: the markers' stream says so.
  JetStreamLayout window = layout;
  window.dedup_window = absl::Hours(48);
  st = EnsureJetStreamLayout(nc_, window);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("HR_DEDUP"));
  EXPECT_THAT(st.message(), HasSubstr("(--dedup_window)"));
  // Another replication of the markers alone: HR_DEDUP follows --nats_dedup_replicas (0 = as
  // --nats_replicas; an earlier release made it so by default), the jobs untouched, and back.
  JetStreamLayout dedup_same = layout;
  dedup_same.dedup_replicas = 0;
  st = Ensure(dedup_same);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_THAT(Api("$JS.API.STREAM.INFO.HR_DEDUP"), HasSubstr(R"("num_replicas":3)"));
  EXPECT_TRUE(EnsureJetStreamLayout(nc_, dedup_same).ok());  // Idempotent.
  st = Ensure(layout);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_THAT(Api("$JS.API.STREAM.INFO.HR_DEDUP"), HasSubstr(R"("num_replicas":1)"));
  EXPECT_THAT(Api("$JS.API.STREAM.INFO.HR_JOBS"), HasSubstr(R"("num_replicas":3)"));
}

TEST_F(JetStreamLayoutTest, DedupMarkersOnOneReplicaByDefault) {
  JetStreamLayout layout;
  ASSERT_EQ(layout.dedup_replicas, 1);
  ASSERT_TRUE(Ensure(layout).ok()) << Ensure(layout);
  EXPECT_THAT(Api("$JS.API.STREAM.INFO.HR_DEDUP"), HasSubstr(R"("num_replicas":1)"));
  EXPECT_THAT(Api("$JS.API.STREAM.INFO.HR_JOBS"), HasSubstr(R"("num_replicas":3)"));
  EXPECT_TRUE(EnsureJetStreamLayout(nc_, layout).ok());  // Idempotent.
}

// HR_JOBS as an earlier release made it (no atomic batches, no direct gets), with a limit its
// operator added: both are turned on, the limit and the jobs stay. A setting hookrelay cannot
// turn on by itself (the replication) is still refused.
TEST_F(JetStreamLayoutTest, JobsStreamOfAnEarlierReleaseGetsAtomicBatches) {
  std::string answer;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    answer = Api("$JS.API.STREAM.CREATE.HR_JOBS",
                 R"({"name":"HR_JOBS","subjects":["hr.jobs.ready.>","hr.jobs.sched.>"],)"
                 R"("retention":"workqueue","storage":"file","num_replicas":3,)"
                 R"("allow_msg_schedules":true,"allow_rollup_hdrs":true,"max_bytes":1073741824})");
    if (!absl::StrContains(answer, "\"error\"") && !answer.empty()) break;
    absl::SleepFor(absl::Milliseconds(300));
  } while (absl::Now() < deadline);
  ASSERT_FALSE(absl::StrContains(answer, "\"error\"")) << answer;
  ASSERT_THAT(answer, Not(HasSubstr(R"("allow_atomic":true)")));
  ASSERT_THAT(answer, Not(HasSubstr(R"("allow_direct":true)")));
  std::string stored;
  for (int i = 0; i < 50; ++i) {  // The stream's leader settling.
    stored = Api("hr.jobs.ready.ZA.cw.dQ", "a job");
    if (absl::StrContains(stored, R"("seq":1)")) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_THAT(stored, HasSubstr(R"("seq":1)"));

  JetStreamLayout r1;
  r1.replicas = 1;
  absl::Status st = Ensure(r1);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("num_replicas is 3, hookrelay needs 1"));
  EXPECT_THAT(Api("$JS.API.STREAM.INFO.HR_JOBS"), Not(HasSubstr(R"("allow_atomic":true)")));

  ASSERT_TRUE(Ensure(JetStreamLayout()).ok());
  const std::string jobs = Api("$JS.API.STREAM.INFO.HR_JOBS");
  EXPECT_THAT(jobs, HasSubstr(R"("allow_atomic":true)")) << jobs;
  EXPECT_THAT(jobs, HasSubstr(R"("allow_direct":true)")) << jobs;
  EXPECT_THAT(jobs, HasSubstr(R"("max_bytes":1073741824)")) << jobs;
  EXPECT_THAT(jobs, HasSubstr(R"("messages":1)")) << jobs;
  EXPECT_TRUE(EnsureJetStreamLayout(nc_, JetStreamLayout()).ok());
}

// The direct read of the per-user order checks answers what the leader's read answers: the
// first message on a subject filter from a sequence on, none past the last, and a stream
// without direct gets is an error (nothing answers), never "none".
TEST_F(JetStreamLayoutTest, DirectNextMessageAnswersAsTheLeader) {
  ASSERT_TRUE(Ensure(JetStreamLayout()).ok());
  std::vector<std::string> stored;
  for (const char* subject : {"hr.jobs.ready.ZA.cw.dQ", "hr.jobs.ready.ZB.cw.dQ",
                              "hr.jobs.ready.ZA.cx.dQ", "hr.jobs.ready.ZA.cw.dR"}) {
    stored.push_back(Api(subject, subject));
    ASSERT_THAT(stored.back(), HasSubstr(R"("seq":)")) << stored.back();
  }
  const auto direct = [&](uint64_t from, const char* filter) {
    absl::StatusOr<std::optional<JetStreamMessage>> out = JetStreamDirectNextMessage(
        nc_, kJobsStream, from, filter, absl::Seconds(5));
    // A replica may still be applying the last store: asked again for a while.
    for (int i = 0; i < 50 && out.ok() && !out->has_value() && from <= 4; ++i) {
      absl::SleepFor(absl::Milliseconds(100));
      out = JetStreamDirectNextMessage(nc_, kJobsStream, from, filter, absl::Seconds(5));
    }
    return out;
  };
  const auto leader = [&](uint64_t from, const char* filter) {
    return JetStreamNextMessage(nc_, kJobsStream, from, filter, absl::Seconds(5),
                                absl::Seconds(5));
  };
  for (uint64_t from : {1, 2, 3, 4, 5}) {
    for (const char* filter : {"hr.jobs.ready.ZA.*.dQ", "hr.jobs.ready.*.*.dR"}) {
      SCOPED_TRACE(absl::StrCat(filter, " from ", from));
      absl::StatusOr<std::optional<JetStreamMessage>> d = direct(from, filter);
      absl::StatusOr<std::optional<JetStreamMessage>> l = leader(from, filter);
      ASSERT_TRUE(d.ok()) << d.status();
      ASSERT_TRUE(l.ok()) << l.status();
      ASSERT_EQ(d->has_value(), l->has_value());
      if (!d->has_value()) continue;
      EXPECT_EQ((*d)->seq, (*l)->seq);
      EXPECT_EQ((*d)->data, (*l)->data);
    }
  }
  absl::StatusOr<std::optional<JetStreamMessage>> first = direct(1, "hr.jobs.ready.ZA.*.dQ");
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->data, "hr.jobs.ready.ZA.cw.dQ");
  absl::StatusOr<std::optional<JetStreamMessage>> after = direct(2, "hr.jobs.ready.ZA.*.dQ");
  ASSERT_TRUE(after.ok() && after->has_value());
  EXPECT_EQ((*after)->data, "hr.jobs.ready.ZA.cx.dQ");
  absl::StatusOr<std::optional<JetStreamMessage>> none = direct(5, "hr.jobs.ready.ZA.*.dQ");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  // Several reads sent together: each answered in its place, as when asked alone.
  const std::vector<std::pair<uint64_t, std::string>> reads = {
      {1, "hr.jobs.ready.ZA.*.dQ"}, {5, "hr.jobs.ready.ZA.*.dQ"}, {1, "hr.jobs.ready.*.*.dR"},
      {2, "hr.jobs.ready.ZA.*.dQ"}, {1, "hr.jobs.ready.ZC.*.*"}};
  const std::vector<absl::StatusOr<std::optional<JetStreamMessage>>> together =
      JetStreamDirectNextMessages(nc_, kJobsStream, reads, absl::Seconds(5));
  ASSERT_EQ(together.size(), reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    SCOPED_TRACE(absl::StrCat(reads[i].second, " from ", reads[i].first));
    absl::StatusOr<std::optional<JetStreamMessage>> alone =
        leader(reads[i].first, reads[i].second.c_str());
    ASSERT_TRUE(together[i].ok()) << together[i].status();
    ASSERT_TRUE(alone.ok()) << alone.status();
    ASSERT_EQ(together[i]->has_value(), alone->has_value());
    if (alone->has_value()) {
      EXPECT_EQ((*together[i])->seq, (*alone)->seq);
    }
  }
  EXPECT_EQ((*together[2])->data, "hr.jobs.ready.ZA.cw.dR");
  EXPECT_FALSE(together[4]->has_value());
  // HR_DEAD has no direct gets: an error, not an empty answer.
  absl::StatusOr<std::optional<JetStreamMessage>> refused = JetStreamDirectNextMessage(
      nc_, kDeadStream, 1, "hr.dead.>", absl::Seconds(2));
  EXPECT_FALSE(refused.ok());
}

TEST_F(JetStreamLayoutTest, ForeignStreamOfTheSameNameIsRefused) {
  // Someone's HR_DEAD with other subjects and memory storage.
  std::string answer;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    answer = Api("$JS.API.STREAM.CREATE.HR_DEAD",
                 R"({"name":"HR_DEAD","subjects":["other.>"],"storage":"memory","num_replicas":3})");
    if (!absl::StrContains(answer, "\"error\"") && !answer.empty()) break;
    absl::SleepFor(absl::Milliseconds(300));
  } while (absl::Now() < deadline);
  ASSERT_FALSE(absl::StrContains(answer, "\"error\"")) << answer;
  const absl::Status st = Ensure(JetStreamLayout());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("JetStream stream HR_DEAD exists with other settings"));
  EXPECT_THAT(st.message(), HasSubstr("subjects is other.>, hookrelay needs hr.dead.>"));
  EXPECT_THAT(st.message(), HasSubstr("storage is memory, hookrelay needs file"));
}

TEST_F(JetStreamLayoutTest, ProfilesKeepingOneMessagePerSubjectAreRefused) {
  // A profile stream that would drop all but the last delta of each profile.
  std::string answer;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    answer = Api("$JS.API.STREAM.CREATE.HR_PROFILES",
                 R"({"name":"HR_PROFILES","subjects":["hr.prof.*.*"],"storage":"file",)"
                 R"("num_replicas":3,"max_msgs_per_subject":1,"allow_direct":true,)"
                 R"("allow_rollup_hdrs":true})");
    if (!absl::StrContains(answer, "\"error\"") && !answer.empty()) break;
    absl::SleepFor(absl::Milliseconds(300));
  } while (absl::Now() < deadline);
  ASSERT_FALSE(absl::StrContains(answer, "\"error\"")) << answer;
  const absl::Status st = Ensure(JetStreamLayout());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("JetStream stream HR_PROFILES exists with other settings"));
  EXPECT_THAT(st.message(), HasSubstr("max_msgs_per_subject is 1, hookrelay needs -1"));
}

TEST(JetStreamLayoutOptionsTest, BadOptions) {
  JetStreamLayout layout;
  layout.replicas = 2;
  EXPECT_EQ(EnsureJetStreamLayout(nullptr, layout).code(), absl::StatusCode::kInvalidArgument);
  layout.replicas = 3;
  layout.dedup_replicas = 2;
  const absl::Status dedup = EnsureJetStreamLayout(nullptr, layout);
  EXPECT_EQ(dedup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dedup.message(), HasSubstr("--nats_dedup_replicas is 2"));
  layout.dedup_replicas = 0;
  layout.ack_wait = absl::Milliseconds(10);
  EXPECT_EQ(EnsureJetStreamLayout(nullptr, layout).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hookrelay::collector
