// A collector cut off from the JetStream cluster while a user deletion is made on another one
// misses the deletion's records (core NATS). What it settles meanwhile for the jobs it had
// leased (a retry, a dead letter) must not bring the deleted user's events back: it stores no
// new message for them while cut off (the client would buffer it and send it at the reconnect,
// where a collector without the deletion's purge mark could hand it out), and once reconnected
// it reads the records back, sweeps what reached the stream anyway (settled in the moment the
// connection went, before the client knew), and hands out no job until it has. A real 3-node
// cluster whose servers do not advertise each other (no_advertise), so the cut-off collector,
// given one server, can only come back to that one; it is killed and restarted.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collector/store/jetstream/jetstream_job_store.h"
#include "collector/store/store.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/job.pb.h"
#include "tests/nats_cluster.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;

std::unique_ptr<JetStreamJobStore> Open(const std::string& urls) {
  JetStreamJobStore::Options options;
  options.urls = urls;
  absl::StatusOr<std::unique_ptr<JetStreamJobStore>> store = JetStreamJobStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

AppendItem Track(const std::string& user, const std::string& message_id) {
  AppendItem item;
  item.dedup_key = DedupKey("s1", message_id);
  item.user_id = user;
  item.source_id = "s1";
  Job job;
  job.set_source_id("s1");
  job.set_destination_id("d1");
  job.set_type(hookrelay::v1::TRACK);
  job.set_message_id(message_id);
  job.set_user_id(user);
  job.set_event_json(absl::StrCat(R"({"messageId":")", message_id, R"("})"));
  item.jobs.emplace_back(job);
  return item;
}

void Append(JetStreamJobStore& store, std::vector<AppendItem> items) {
  absl::Notification done;
  store.Append(std::move(items), [&](absl::StatusOr<AppendResult> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST(JetStreamCutOffTest, NothingACollectorSettlesWhileCutOffBringsADeletedUserBack) {
  test::NatsClusterOptions cluster_options;
  cluster_options.nodes = 3;
  cluster_options.no_advertise = true;
  absl::StatusOr<std::unique_ptr<test::NatsCluster>> cluster =
      test::NatsCluster::Start(cluster_options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  test::NatsCluster& nats = **cluster;
  // `cut` knows only the first server; `other` the two others.
  std::unique_ptr<JetStreamJobStore> cut = Open(nats.url(0));
  ASSERT_NE(cut, nullptr);
  std::unique_ptr<JetStreamJobStore> other = Open(absl::StrCat(nats.url(1), ",", nats.url(2)));
  ASSERT_NE(other, nullptr);

  Append(*cut, {Track("u1", "u1-a"), Track("u1", "u1-b")});
  std::vector<LeasedJob> leased;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30);
       leased.size() < 2 && absl::Now() < deadline;) {
    absl::StatusOr<std::vector<LeasedJob>> got = cut->Lease(2 - leased.size());
    ASSERT_TRUE(got.ok()) << got.status();
    for (LeasedJob& j : *got) leased.push_back(std::move(j));
  }
  ASSERT_EQ(leased.size(), 2u);

  ASSERT_TRUE(nats.Kill(0).ok());
  // Tried again (under one request id: the same deletion) while the cluster elects new
  // leaders for what the killed server led.
  absl::StatusOr<DeletionOutcome> deleted = absl::UnavailableError("not tried");
  for (absl::Time deadline = absl::Now() + absl::Seconds(60);
       !deleted.ok() && absl::Now() < deadline;) {
    DeletionPlan plan;
    plan.record.set_id("del_cut");
    plan.record.set_user_id("u1");
    plan.record.set_request_id("req-cut");
    plan.record.add_source_ids("s1");
    deleted = other->ApplyDeletion(std::move(plan));
  }
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->record.purged_jobs(), 2u);
  // Meanwhile the cut-off collector settles what it leased: a retry due now and a dead letter.
  // Neither is stored (nor buffered for the reconnect): the job's message stays on the server,
  // where the deletion purged it.
  hookrelay::v1::Attempt attempt;
  attempt.set_at_unix_ms(absl::ToUnixMillis(absl::Now()));
  attempt.add_urls()->set_status(503);
  absl::Status retried = cut->Retry(leased[0].job.id(), leased[0].lease, absl::Now(), attempt);
  EXPECT_TRUE(absl::IsUnavailable(retried)) << retried;
  attempt.mutable_urls(0)->set_status(400);
  absl::Status buried = cut->Bury(leased[1].job.id(), leased[1].lease, "400", attempt);
  EXPECT_TRUE(absl::IsUnavailable(buried)) << buried;

  // A collector started after the deletion has no purge mark of it: it would hand out a retry
  // of a purged job as soon as one reached the stream.
  std::unique_ptr<JetStreamJobStore> late = Open(absl::StrCat(nats.url(1), ",", nats.url(2)));
  ASSERT_NE(late, nullptr);
  // It hands out jobs of the destination already (its consumers found).
  Append(*other, {Track("u4", "u4-warm-up")});
  bool warm = false;
  for (absl::Time deadline = absl::Now() + absl::Seconds(60); !warm && absl::Now() < deadline;) {
    absl::StatusOr<std::vector<LeasedJob>> got = late->Lease(10);
    ASSERT_TRUE(got.ok()) << got.status();
    for (const LeasedJob& j : *got) {
      EXPECT_TRUE(late->Complete(j.job.id(), j.lease).ok());
      warm = warm || j.job.message_id() == "u4-warm-up";
    }
    if (!warm) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(warm) << "the collector started late handed out nothing within 60 s";
  ASSERT_TRUE(nats.Restart(0).ok());
  // A job stored by the cut-off collector after the settlements: its client sends what it
  // buffered in order, so once the barrier is handed out, whatever the settlements had stored
  // was there before it, in the same destination's order.
  // (Refused until its client is back: tried again.)
  absl::Status appended = absl::UnavailableError("not tried");
  for (absl::Time deadline = absl::Now() + absl::Seconds(30);
       !appended.ok() && absl::Now() < deadline;) {
    absl::Notification done;
    cut->Append({Track("u2", "u2-barrier")}, [&](absl::StatusOr<AppendResult> r) {
      appended = r.status();
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    if (!appended.ok()) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(appended.ok()) << appended;
  std::vector<std::string> handed_out;
  bool barrier = false;
  for (absl::Time deadline = absl::Now() + absl::Seconds(60); !barrier && absl::Now() < deadline;) {
    for (JetStreamJobStore* store : {late.get(), cut.get()}) {
      absl::StatusOr<std::vector<LeasedJob>> got = store->Lease(10);
      ASSERT_TRUE(got.ok()) << got.status();
      for (const LeasedJob& j : *got) {
        EXPECT_TRUE(store->Complete(j.job.id(), j.lease).ok());
        if (j.job.message_id() == "u2-barrier") {
          barrier = true;
        } else {
          handed_out.push_back(j.job.message_id());
        }
      }
    }
    if (!barrier) absl::SleepFor(absl::Milliseconds(50));  // Polls the stores' Lease.
  }
  ASSERT_TRUE(barrier) << "the barrier job was not handed out within 60 s";
  EXPECT_TRUE(handed_out.empty()) << "delivered after the deletion: " << handed_out[0];
  EXPECT_EQ(other->Counts().dead, 0) << "a dead letter of a purged job was stored";
}

}  // namespace
}  // namespace hookrelay::collector
