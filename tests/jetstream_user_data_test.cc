// Deletions, the per-user index and audiences on the JetStream engine (SPEC §6), on a real 3-node
// cluster at 3 replicas, beyond the store contract (tests/store_conformance_test.cc) and the
// audience syncs (tests/audience_syncer_test.cc) checked on both engines: the sources-seen index
// and deletions across collectors, interrupted deletions, one audience sync at a time across
// collectors, the background roll-up of profiles no audience reads, and what user data adds to
// an append.
#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "collector/audiences/audience_eval.h"
#include "collector/audiences/audience_syncer.h"
#include "collector/store/jetstream/jetstream_job_store.h"
#include "collector/store/jetstream/jetstream_layout.h"
#include "collector/store/jetstream/jetstream_subjects.h"
#include "collector/store/store.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/config.pb.h"
#include "tests/test_engines.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Config;
using hookrelay::v1::Job;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kConfig[] = R"({
  "sources": [{"id":"web","kind":"WEB","write_keys":["wk1"]},
              {"id":"ios","kind":"MOBILE","write_keys":["wk2"]},
              {"id":"srv","kind":"SERVER","write_keys":["wk3"]}],
  "destinations": [
    {"id":"hook","type":"webhooks","sources":["web"],"enabled":true,"urls":[{"url":"https://a.example/x"}]},
    {"id":"hook-ios","type":"webhooks","sources":["ios"],"enabled":true,"urls":[{"url":"https://b.example/x"}]},
    {"id":"hook-off","type":"webhooks","sources":["web","ios"],"enabled":false,"urls":[{"url":"https://c.example/x"}]},
    {"id":"hook-srv","type":"webhooks","sources":["srv"],"enabled":true,"urls":[{"url":"https://d.example/x"}]}],
  "audiences": [{"id":"aud_power","name":"Power Users!","sources":["web","ios"],
    "rule":{"match":"any","conditions":[
      {"trait":"plan","op":"eq","value":"pro"},
      {"event":"Order Completed","count_gte":3,"within":"30d"}]}}]
})";

class JetStreamUserDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<test::EngineSetup> engine = test::PrepareEngine("jetstream");
    ASSERT_TRUE(engine.ok()) << engine.status();
    urls_ = engine->nats_url;
    config_ = std::make_shared<Config>();
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(kConfig, config_.get()).ok());
    store_ = Open();
    ASSERT_NE(store_, nullptr);
    AudienceSyncer::Options syncer_options;
    syncer_options.clock = &clock_;
    syncer_options.chunk = 2;  // Several chunks even with a few users.
    syncer_ = std::make_unique<AudienceSyncer>(syncer_options, *store_);
    syncer_->SetConfig(config_);
  }
  void TearDown() override {
    syncer_.reset();
    store_.reset();
  }

  std::unique_ptr<JetStreamJobStore> Open(
      absl::Duration deletion_resume_after = absl::Seconds(30),
      std::function<bool(std::string_view)> stop_deletion_after = nullptr) {
    JetStreamJobStore::Options options;
    options.urls = urls_;
    options.clock = &clock_;
    options.layout.deletion_resume_after = deletion_resume_after;
    options.stop_deletion_after = std::move(stop_deletion_after);
    absl::StatusOr<std::unique_ptr<JetStreamJobStore>> store = JetStreamJobStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // An event as ingest records it: a job to `destination` (none when empty), the index fields
  // and the profile delta.
  AppendItem Item(const std::string& source, const std::string& user,
                  hookrelay::v1::EventType type, const std::string& event,
                  const std::string& traits, const std::string& destination) {
    const AudienceInputs inputs(*config_);
    AppendItem item;
    const std::string message = absl::StrCat("m", ++messages_);
    item.dedup_key = DedupKey(source, message);
    item.user_id = user;
    item.source_id = source;
    hookrelay::v1::ProfileDelta delta;
    if (inputs.DeltaFor(source, type, event, traits, clock_.Now(), &delta)) {
      delta.SerializeToString(&item.profile_delta);
      item.log_profile_change = true;
    }
    if (!destination.empty()) {
      Job job;
      job.set_source_id(source);
      job.set_destination_id(destination);
      job.set_type(type);
      job.set_message_id(message);
      job.set_user_id(user);
      job.set_event_json(absl::StrCat(R"({"messageId":")", message, R"("})"));
      item.jobs.emplace_back(job);
    }
    return item;
  }
  void Append(std::vector<AppendItem> items) {
    absl::Notification done;
    store_->Append(std::move(items), [&](absl::StatusOr<AppendResult> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  void Identify(const std::string& source, const std::string& user, const std::string& traits) {
    Append({Item(source, user, hookrelay::v1::IDENTIFY, "", traits, "")});
  }

  // Leases until `n` jobs came or `wait` passed.
  std::vector<LeasedJob> LeaseN(size_t n, absl::Duration wait = absl::Seconds(10)) {
    std::vector<LeasedJob> out;
    const absl::Time deadline = absl::Now() + wait;
    while (out.size() < n && absl::Now() < deadline) {
      absl::StatusOr<std::vector<LeasedJob>> got = store_->Lease(n - out.size());
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) break;
      for (LeasedJob& j : *got) out.push_back(std::move(j));
    }
    return out;
  }

  // The jobs leased before a barrier job appended now (the consumer hands jobs out in stream
  // order, so every job stored before the barrier comes first): "nothing more" is shown by the
  // barrier arriving with nothing ahead of it, never by a wait. Settles what it leased.
  // Each destination has its own consumer: the barrier goes to `destination`.
  std::vector<LeasedJob> LeasedBeforeBarrier(const std::string& destination = "d1") {
    const std::string barrier = absl::StrCat("barrier-", ++messages_);
    AppendItem item = Item("s1", "barrier-user", hookrelay::v1::TRACK, "e", "", destination);
    item.dedup_key = DedupKey("s1", barrier);
    Job job = item.jobs[0].ToJob(0, 0);
    job.set_message_id(barrier);
    item.jobs[0] = job;
    Append({std::move(item)});
    std::vector<LeasedJob> before;
    bool seen = false;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!seen && absl::Now() < deadline) {
      for (LeasedJob& j : LeaseN(1, absl::Seconds(1))) {
        EXPECT_TRUE(store_->Complete(j.job.id(), j.lease).ok());
        if (j.job.message_id() == barrier) {
          seen = true;
        } else {
          before.push_back(std::move(j));
        }
      }
    }
    EXPECT_TRUE(seen) << "the barrier job was not leased within 30 s";
    return before;
  }

  static DeletionPlan MakeDeletion(const std::string& id, const std::string& user,
                                   std::vector<std::string> sources,
                                   const std::string& request_id = "") {
    DeletionPlan plan;
    plan.record.set_id(id);
    plan.record.set_user_id(user);
    plan.record.set_request_id(request_id);
    for (const std::string& s : sources) {
      plan.record.add_source_ids(s);
      Job& job = plan.notifications.emplace_back();
      job.set_source_id(s);
      job.set_destination_id("d1");
      job.set_type(hookrelay::v1::DELETE);
      job.set_message_id(absl::StrCat(id, "/", s));
      job.set_user_id(user);
    }
    return plan;
  }

  common::ManualClock clock_{absl::FromUnixSeconds(20834LL * 86400)};
  std::string urls_;
  std::shared_ptr<Config> config_;
  std::unique_ptr<JetStreamJobStore> store_;
  std::unique_ptr<AudienceSyncer> syncer_;
  int messages_ = 0;
};

hookrelay::v1::Attempt MakeAttempt() {
  hookrelay::v1::Attempt attempt;
  attempt.set_at_unix_ms(absl::ToUnixMillis(absl::Now()));
  attempt.add_urls()->set_status(500);
  return attempt;
}

// The per-user index across collectors (the index itself: tests/store_conformance_test.cc): a
// deletion made through one collector reaches another's cache of indexed pairs, so that
// collector indexes the user's next event again.
TEST_F(JetStreamUserDataTest, SourcesSeenAcrossCollectors) {
  using hookrelay::v1::TRACK;
  std::unique_ptr<JetStreamJobStore> other = Open();
  ASSERT_NE(other, nullptr);
  auto append_other = [&](AppendItem item) {
    absl::Notification done;
    other->Append({std::move(item)}, [&](absl::StatusOr<AppendResult> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  };
  append_other(Item("web", "u1", TRACK, "e", "", ""));  // The other collector caches (u1, web).
  Append({Item("ios", "u1", TRACK, "e", "", "")});
  EXPECT_THAT(store_->SourcesSeen("u1").value_or(std::vector<std::string>{}),
              ElementsAre("ios", "web"));
  ASSERT_TRUE(store_->ApplyDeletion(MakeDeletion("del_2", "u1", {"web", "ios"})).ok());
  EXPECT_THAT(store_->SourcesSeen("u1").value_or(std::vector<std::string>{"x"}), IsEmpty());
  // Once the record reached the other collector, its next event of u1 is indexed again (until
  // then the other collector skips the pair it cached: what this test would catch if the record
  // never arrived).
  std::vector<std::string> seen;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (seen.empty() && absl::Now() < deadline) {
    append_other(Item("web", "u1", TRACK, "e", "", ""));
    seen = store_->SourcesSeen("u1").value_or(std::vector<std::string>{});
    if (seen.empty()) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(seen, ElementsAre("web"));
}

// A job leased by one collector while another deletes its user finishes its attempt there and
// is dropped (the deletion's record reaches every collector).
TEST_F(JetStreamUserDataTest, JobLeasedByAnotherCollectorIsDroppedAfterADeletion) {
  using hookrelay::v1::TRACK;
  Append({Item("s1", "u1", TRACK, "e", "", "d1"), Item("s1", "u1", TRACK, "e", "", "d1")});
  std::unique_ptr<JetStreamJobStore> other = Open();
  ASSERT_NE(other, nullptr);
  std::vector<LeasedJob> leased = LeaseN(2);
  ASSERT_EQ(leased.size(), 2u);
  absl::StatusOr<DeletionOutcome> outcome =
      other->ApplyDeletion(MakeDeletion("del_1", "u1", {"s1"}));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.purged_jobs(), 2u);
  absl::SleepFor(absl::Milliseconds(200));  // The record reaches this collector.
  EXPECT_EQ(store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now(), MakeAttempt()).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Bury(leased[1].job.id(), leased[1].lease, "400", MakeAttempt()).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Counts().dead, 0);
  std::vector<LeasedJob> rest = LeaseN(1);  // The notification only.
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].job.type(), hookrelay::v1::DELETE);
  EXPECT_THAT(LeasedBeforeBarrier(), IsEmpty());
}

// A deletion interrupted after claiming its request id (the collector died) is finished by the
// request's next attempt, under the first id.
TEST_F(JetStreamUserDataTest, InterruptedDeletionIsFinishedByItsRetry) {
  using hookrelay::v1::TRACK;
  Append({Item("s1", "u1", TRACK, "e", "", "d1")});
  // What the interrupted attempt left: its claim of req-9, nothing else.
  natsConnection* nc = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&nc, urls_.c_str()), NATS_OK);
  DeletionPlan interrupted = MakeDeletion("del_old", "u1", {"s1"}, "req-9");
  const std::string claim = interrupted.record.SerializeAsString();
  natsMsg* reply = nullptr;
  const std::string subject = absl::StrCat("hr.del.req.", JetStreamToken("req-9"));
  ASSERT_EQ(natsConnection_Request(&reply, nc, subject.c_str(), claim.data(),
                                   static_cast<int>(claim.size()), 5000),
            NATS_OK);
  natsMsg_Destroy(reply);
  natsConnection_Destroy(nc);
  EXPECT_FALSE(store_->GetDeletion("del_old").value_or(hookrelay::v1::Deletion()).has_value());

  absl::StatusOr<DeletionOutcome> retried =
      store_->ApplyDeletion(MakeDeletion("del_new", "u1", {"s1"}, "req-9"));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_TRUE(retried->created);
  EXPECT_EQ(retried->record.id(), "del_old");
  EXPECT_EQ(retried->record.purged_jobs(), 1u);
  EXPECT_TRUE(store_->GetDeletion("del_old").value_or(std::nullopt).has_value());
  EXPECT_FALSE(store_->GetDeletion("del_new").value_or(std::nullopt).has_value());
  std::vector<LeasedJob> notification = LeaseN(1);
  ASSERT_EQ(notification.size(), 1u);
  EXPECT_EQ(notification[0].job.message_id(), "del_old/s1");
  // And once more: done, nothing twice.
  absl::StatusOr<DeletionOutcome> again =
      store_->ApplyDeletion(MakeDeletion("del_3", "u1", {"s1"}, "req-9"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created);
  EXPECT_THAT(LeasedBeforeBarrier(), IsEmpty());
}

// A deletion stopped right after each of its steps, as a crash of its collector would stop it,
// is finished by another collector by itself, with nothing lost or done twice: the counts of
// what it purged (a crash in the middle of a source's purges, of a membership's removal), the
// member counted out once, one notification per (source, destination) — also when it resumes
// after the stream's duplicate window (shortened to 1 s here; 2 minutes in production), which
// message ids alone would not cover.
TEST_F(JetStreamUserDataTest, DeletionStoppedAfterAnyStepIsFinishedOnceByAnother) {
  using hookrelay::v1::TRACK;
  const std::vector<std::string> steps = {"planned",    "fenced",      "recorded",    "counted",
                                          "purging",    "purged",      "membership",
                                          "memberships", "notifying",  "notified",
                                          "swept",      "completed"};
  // The survivor resumes deletions whose progress has not moved for 2 s.
  std::unique_ptr<JetStreamJobStore> survivor = Open(absl::Seconds(2));
  ASSERT_NE(survivor, nullptr);
  JetStreamLayout short_window;
  short_window.duplicate_window = absl::Seconds(1);
  {
    natsConnection* nc = nullptr;
    ASSERT_EQ(natsConnection_ConnectTo(&nc, urls_.c_str()), NATS_OK);
    const std::string config = internal::JobsStreamConfig(short_window);
    natsMsg* reply = nullptr;
    ASSERT_EQ(natsConnection_RequestString(&reply, nc, "$JS.API.STREAM.UPDATE.HR_JOBS",
                                           config.c_str(), 5000),
              NATS_OK);
    const std::string answer(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
    natsMsg_Destroy(reply);
    natsConnection_Destroy(nc);
    ASSERT_THAT(answer, ::testing::HasSubstr(R"("duplicate_window":1000000000)"));
  }
  for (const std::string& step : steps) {
    const std::string user = absl::StrCat("u-", step);
    Identify("web", user, R"({"plan":"pro"})");
    Append({Item("web", user, TRACK, "e", "", "hook"), Item("web", user, TRACK, "e", "", "hook"),
            Item("ios", user, TRACK, "e", "", "hook-ios")});
  }
  absl::StatusOr<hookrelay::v1::AudienceState> synced = syncer_->SyncNow("aud_power");
  ASSERT_TRUE(synced.ok()) << synced.status();
  uint64_t members = synced->members();
  ASSERT_EQ(members, steps.size());

  for (const std::string& step : steps) {
    SCOPED_TRACE(step);
    const std::string user = absl::StrCat("u-", step);
    const std::string id = absl::StrCat("del_", step);
    {
      std::atomic<bool> stopped{false};
      std::unique_ptr<JetStreamJobStore> doomed =
          Open(absl::Hours(1), [&](std::string_view at) {
            return at == step && !stopped.exchange(true);
          });
      ASSERT_NE(doomed, nullptr);
      DeletionPlan plan = MakeDeletion(id, user, {"web", "ios"});
      plan.audience_ids = {"aud_power"};
      absl::StatusOr<DeletionOutcome> outcome = doomed->ApplyDeletion(std::move(plan));
      ASSERT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable) << outcome.status();
      ASSERT_TRUE(stopped.load());
    }  // Gone, as a killed process would be.
    std::optional<hookrelay::v1::Deletion> done;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      absl::StatusOr<std::optional<hookrelay::v1::Deletion>> got = store_->GetDeletion(id);
      ASSERT_TRUE(got.ok()) << got.status();
      if (got->has_value()) done = *got;
      absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> state =
          store_->GetAudienceState("aud_power");
      ASSERT_TRUE(state.ok()) << state.status();
      if (done.has_value() && (*state)->members() == members - 1) break;
      absl::SleepFor(absl::Milliseconds(100));  // Waits for the other collector's resume loop.
    }
    ASSERT_TRUE(done.has_value()) << "not finished within 30 s";
    // Its 3 track events and the audience's identify call to each destination of its sources.
    EXPECT_EQ(done->purged_jobs(), 5u);
    EXPECT_TRUE(done->purged_profile());
    EXPECT_EQ(done->notifications(), 2u);
    absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> state =
        store_->GetAudienceState("aud_power");
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ((*state)->members(), members - 1) << "the member is counted out exactly once";
    members = (*state)->members();
    if (step == "completed") {
      // Resumed from the last step: the progress and the notifications' marker removed too.
      natsConnection* nc = nullptr;
      ASSERT_EQ(natsConnection_ConnectTo(&nc, urls_.c_str()), NATS_OK);
      std::string left;
      for (int i = 0; i < 100; ++i) {
        natsMsg* reply = nullptr;
        ASSERT_EQ(natsConnection_RequestString(&reply, nc, "$JS.API.STREAM.INFO.HR_DELETIONS",
                                               R"({"subjects_filter":"hr.del.plan.>"})", 5000),
                  NATS_OK);
        left.assign(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
        natsMsg_Destroy(reply);
        if (left.find("\"hr.del.plan.") == std::string::npos) break;
        absl::SleepFor(absl::Milliseconds(100));
      }
      EXPECT_EQ(left.find("\"hr.del.plan."), std::string::npos) << left;
      natsMsg* reply = nullptr;
      ASSERT_EQ(natsConnection_RequestString(&reply, nc, "$JS.API.STREAM.INFO.HR_JOBS",
                                             R"({"subjects_filter":"hr.jobs.sched.>"})", 5000),
                NATS_OK);
      const std::string jobs(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
      natsMsg_Destroy(reply);
      natsConnection_Destroy(nc);
      EXPECT_EQ(jobs.find("\"hr.jobs.sched.~.~."), std::string::npos) << jobs;
    }
  }
  // Every deleted user's events are gone; each deletion sent one notification per source.
  std::map<std::string, int> notified;
  for (const LeasedJob& j : LeasedBeforeBarrier()) {
    EXPECT_EQ(j.job.type(), hookrelay::v1::DELETE) << j.job.user_id() << " " << j.job.message_id();
    ++notified[j.job.message_id()];
  }
  for (const std::string& step : steps) {
    for (const char* source : {"web", "ios"}) {
      EXPECT_EQ(notified[absl::StrCat("del_", step, "/", source)], 1) << step << " " << source;
    }
  }
}

// What another collector stored for the user after the purges, before the deletion's record
// reached it (a retry due now and a dead letter of jobs it had leased, a membership its sync
// committed having read the profile just before the purge), is swept before the deletion is
// recorded COMPLETED and counted; the user's new event, accepted after the deletion began,
// stays. The other collector's writes are made here as it would have made them.
TEST_F(JetStreamUserDataTest, WhatOthersStoredAfterThePurgesIsSweptBeforeCompletion) {
  using hookrelay::v1::TRACK;
  Identify("web", "u1", R"({"plan":"pro"})");
  Append({Item("web", "u1", TRACK, "e", "", "d1"), Item("web", "u1", TRACK, "e", "", "d1")});
  absl::StatusOr<hookrelay::v1::AudienceState> synced = syncer_->SyncNow("aud_power");
  ASSERT_TRUE(synced.ok()) << synced.status();
  ASSERT_EQ(synced->members(), 1u);
  // The audience's identify calls (to hook, hook-ios) and the two tracks.
  std::vector<LeasedJob> leased = LeaseN(4);
  ASSERT_EQ(leased.size(), 4u);
  std::vector<Job> tracks;
  for (const LeasedJob& j : leased) {
    if (j.job.destination_id() == "d1") tracks.push_back(j.job);
  }
  ASSERT_EQ(tracks.size(), 2u);
  {
    std::atomic<bool> stopped{false};
    std::unique_ptr<JetStreamJobStore> doomed = Open(absl::Hours(1), [&](std::string_view at) {
      return at == "notified" && !stopped.exchange(true);
    });
    ASSERT_NE(doomed, nullptr);
    DeletionPlan plan = MakeDeletion("del_swept", "u1", {"web"});
    plan.audience_ids = {"aud_power"};
    ASSERT_EQ(doomed->ApplyDeletion(std::move(plan)).status().code(),
              absl::StatusCode::kUnavailable);
  }
  absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> state =
      store_->GetAudienceState("aud_power");
  ASSERT_TRUE(state.ok() && state->has_value());
  ASSERT_EQ((*state)->members(), 0u);

  natsConnection* nc = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&nc, urls_.c_str()), NATS_OK);
  auto publish = [&](const std::string& subject, const std::string& body) {
    natsMsg* reply = nullptr;
    ASSERT_EQ(natsConnection_Request(&reply, nc, subject.c_str(), body.data(),
                                     static_cast<int>(body.size()), 5000),
              NATS_OK);
    const std::string ack(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
    natsMsg_Destroy(reply);
    ASSERT_THAT(ack, ::testing::HasSubstr(R"("seq":)")) << subject << ": " << ack;
  };
  Job retried = tracks[0];  // Its id: the leased sequence, below the deletion's.
  publish(ReadySubject(retried), retried.SerializeAsString());
  Job dead = tracks[1];
  dead.set_dead_reason("400");
  publish(absl::StrCat("hr.dead.", JetStreamToken("d1"), ".", JetStreamToken("web"), ".",
                       JetStreamToken("u1")),
          dead.SerializeAsString());
  publish(MemberSubject("aud_power", "u1"), "");
  natsConnection_Destroy(nc);
  for (const LeasedJob& j : leased) (void)store_->Complete(j.job.id(), j.lease);
  // The user's next event, after the deletion began: kept.
  AppendItem next = Item("web", "u1", TRACK, "e", "", "d1");
  const std::string next_id = next.jobs[0].ToJob(0, 0).message_id();
  Append({std::move(next)});

  std::unique_ptr<JetStreamJobStore> survivor = Open(absl::Seconds(1));
  ASSERT_NE(survivor, nullptr);
  std::optional<hookrelay::v1::Deletion> done;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!done.has_value() && absl::Now() < deadline) {
    absl::StatusOr<std::optional<hookrelay::v1::Deletion>> got = store_->GetDeletion("del_swept");
    ASSERT_TRUE(got.ok()) << got.status();
    done = *got;
    absl::SleepFor(absl::Milliseconds(100));  // Waits for the survivor's resume loop.
  }
  ASSERT_TRUE(done.has_value()) << "not finished within 30 s";
  // Purged: the 2 tracks and the identify call of source web (leased, not yet settled); swept:
  // the retry.
  EXPECT_EQ(done->purged_jobs(), 4u);
  EXPECT_EQ(done->purged_dead_letters(), 1u);
  EXPECT_EQ(store_->Counts().dead, 0);
  state = store_->GetAudienceState("aud_power");
  ASSERT_TRUE(state.ok() && state->has_value());
  EXPECT_EQ((*state)->members(), 0u);
  ASSERT_EQ(natsConnection_ConnectTo(&nc, urls_.c_str()), NATS_OK);
  natsMsg* reply = nullptr;
  ASSERT_EQ(natsConnection_RequestString(&reply, nc, "$JS.API.STREAM.INFO.HR_AUDIENCES",
                                         R"({"subjects_filter":"hr.aud.m.>"})", 5000),
            NATS_OK);
  const std::string memberships(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
  natsMsg_Destroy(reply);
  natsConnection_Destroy(nc);
  EXPECT_EQ(memberships.find(MemberSubject("aud_power", "u1")), std::string::npos) << memberships;
  std::vector<std::string> left;
  for (const LeasedJob& j : LeasedBeforeBarrier()) left.push_back(j.job.message_id());
  EXPECT_THAT(left, ::testing::UnorderedElementsAre(next_id, "del_swept/web"));
}

// An audience sync on another collector that checked a user's profile just before a deletion
// purged it stores no identify job for that user after the deletion began: the deletion
// publishes on the audience's fence once the profiles are gone, and the sync's jobs go in
// atomic batches that expect the fence as it was before the sync checked its users. The sync
// is refused whole (it stores nothing, releases its lock) and the next one computes the
// audience without the deleted user.
TEST_F(JetStreamUserDataTest, IdentifyOfASyncThatCheckedTheProfileBeforeADeletionIsNotStored) {
  Identify("web", "u1", R"({"plan":"pro"})");
  Identify("web", "u2", R"({"plan":"pro"})");
  absl::StatusOr<DeletionOutcome> deleted = absl::UnknownError("not run");
  std::atomic<bool> ran{false};
  // The deletion runs on this collector while the other one's sync sits between checking its
  // users' profiles (both present) and storing its jobs.
  std::unique_ptr<JetStreamJobStore> syncing =
      Open(absl::Seconds(30), [&](std::string_view at) {
        if (at == "sync-checked" && !ran.exchange(true)) {
          DeletionPlan plan = MakeDeletion("del_fence", "u1", {"web", "ios"});
          plan.audience_ids = {"aud_power"};
          deleted = store_->ApplyDeletion(std::move(plan));
        }
        return false;
      });
  ASSERT_NE(syncing, nullptr);
  AudienceSyncer::Options syncer_options;
  syncer_options.clock = &clock_;
  AudienceSyncer racing(syncer_options, *syncing);
  racing.SetConfig(config_);
  absl::StatusOr<hookrelay::v1::AudienceState> raced = racing.SyncNow("aud_power");
  ASSERT_TRUE(ran.load()) << "the sync never reached the point between its check and its jobs";
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(deleted->record.purged_profile());
  EXPECT_TRUE(absl::IsAborted(raced.status())) << raced.status();

  // Nothing of the refused sync was stored: no identify job (u2's neither; the audience's
  // destinations: hook for web, hook-ios for ios), no state. Lease takes jobs of every
  // destination, so a barrier on each: what is left is the deletion's two notifications.
  std::vector<std::string> left;
  for (const std::string destination : {"hook", "hook-ios", "d1"}) {
    for (const LeasedJob& j : LeasedBeforeBarrier(destination)) {
      left.push_back(j.job.message_id());
    }
  }
  EXPECT_THAT(left, ::testing::UnorderedElementsAre("del_fence/web", "del_fence/ios"));
  absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> state =
      store_->GetAudienceState("aud_power");
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_FALSE(state->has_value() && (*state)->computed());

  // The next sync (its lock released, no wait) has u2 only.
  absl::StatusOr<hookrelay::v1::AudienceState> synced = syncer_->SyncNow("aud_power");
  ASSERT_TRUE(synced.ok()) << synced.status();
  EXPECT_EQ(synced->members(), 1u);
  std::vector<std::string> identified;
  for (const std::string destination : {"hook", "hook-ios"}) {
    for (const LeasedJob& j : LeasedBeforeBarrier(destination)) {
      identified.push_back(absl::StrCat(j.job.destination_id(), " ", j.job.user_id()));
    }
  }
  EXPECT_THAT(identified, ::testing::UnorderedElementsAre("hook u2", "hook-ios u2"));
  // The audience's fence stays in the jobs' stream; it is not a job.
  EXPECT_EQ(store_->Counts().scheduled, 0);
}

// A sync that stored its identify jobs and stopped before committing (a crash, a lost
// connection) leaves them in the stream; the next sync, computed from the same state, makes the
// same jobs with the same message ids. Its atomic batch is refused for holding ids the stream
// has seen; it then stores them one at a time behind the fence, skipping those stored before:
// every identify call is sent once, and the sync commits.
TEST_F(JetStreamUserDataTest, SyncAfterOneThatStoppedAfterItsJobsSendsEachIdentifyOnce) {
  Identify("web", "u1", R"({"plan":"pro"})");
  Identify("web", "u2", R"({"plan":"pro"})");
  {
    std::unique_ptr<JetStreamJobStore> stopping =
        Open(absl::Seconds(30), [](std::string_view at) { return at == "sync-jobs-stored"; });
    ASSERT_NE(stopping, nullptr);
    AudienceSyncer::Options syncer_options;
    syncer_options.clock = &clock_;
    AudienceSyncer stopped(syncer_options, *stopping);
    stopped.SetConfig(config_);
    EXPECT_EQ(stopped.SyncNow("aud_power").status().code(), absl::StatusCode::kUnavailable);
  }
  clock_.Advance(absl::Seconds(61));  // Its lock runs out.
  absl::StatusOr<hookrelay::v1::AudienceState> synced = syncer_->SyncNow("aud_power");
  ASSERT_TRUE(synced.ok()) << synced.status();
  EXPECT_EQ(synced->members(), 2u);
  std::vector<std::string> identified;
  for (const std::string destination : {"hook", "hook-ios"}) {
    for (const LeasedJob& j : LeasedBeforeBarrier(destination)) {
      identified.push_back(absl::StrCat(j.job.destination_id(), " ", j.job.user_id()));
    }
  }
  EXPECT_THAT(identified, ::testing::UnorderedElementsAre("hook u1", "hook u2", "hook-ios u1",
                                                          "hook-ios u2"));
}

// An event of the user accepted by another collector while the deletion runs — after its
// "applying" record, before its purge of the index entry; or, with the pair cached (no entry
// written), in the milliseconds between that purge and the record's arrival — keeps its index
// entry: the collector writes the entry again once the deletion is COMPLETED. A user with no
// event during the deletion gets none back.
TEST_F(JetStreamUserDataTest, IndexEntryOfAnEventAcceptedDuringADeletionIsKept) {
  using hookrelay::v1::TRACK;
  Append({Item("web", "u2", TRACK, "e", "", "")});
  Append({Item("web", "u1", TRACK, "e", "", "")});  // Indexed, and (u1, web) cached here.
  {
    std::atomic<bool> stopped{false};
    std::unique_ptr<JetStreamJobStore> doomed = Open(absl::Hours(1), [&](std::string_view at) {
      return at == "recorded" && !stopped.exchange(true);
    });
    ASSERT_NE(doomed, nullptr);
    ASSERT_EQ(doomed->ApplyDeletion(MakeDeletion("del_idx", "u1", {"web"})).status().code(),
              absl::StatusCode::kUnavailable);
  }
  // Whether or not the record has reached this collector yet (the window either way).
  Append({Item("web", "u1", TRACK, "e", "", "")});
  std::unique_ptr<JetStreamJobStore> survivor = Open(absl::Seconds(1));
  ASSERT_NE(survivor, nullptr);
  bool completed = false;
  std::vector<std::string> seen;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (seen.empty() && absl::Now() < deadline) {
    completed = completed || store_->GetDeletion("del_idx").value_or(std::nullopt).has_value();
    if (completed) seen = store_->SourcesSeen("u1").value_or(std::vector<std::string>{});
    absl::SleepFor(absl::Milliseconds(100));  // Waits for the survivor, then for the entry.
  }
  EXPECT_TRUE(completed);
  EXPECT_THAT(seen, ElementsAre("web"));
  // u2's last event came seconds before its deletion: no entry is written again (this
  // collector applies it, and writes any entry again before ApplyDeletion returns).
  ASSERT_TRUE(store_->ApplyDeletion(MakeDeletion("del_u2", "u2", {"web"})).ok());
  EXPECT_THAT(store_->SourcesSeen("u2").value_or(std::vector<std::string>{"x"}), IsEmpty());
}

// A profile no audience reads (source srv) is rolled up off the ingest path: its deltas do not
// pile up, and the folded profile is unchanged.
TEST_F(JetStreamUserDataTest, ProfilesNoAudienceReadsAreRolledUpInTheBackground) {
  for (int i = 0; i < 40; ++i) Identify("srv", "u9", absl::StrCat(R"({"n":)", i, "}"));
  natsConnection* nc = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&nc, urls_.c_str()), NATS_OK);
  const std::string subject = absl::StrCat("hr.prof.", JetStreamToken("srv"), ".",
                                           JetStreamToken("u9"));
  auto messages = [&]() -> std::string {
    absl::StatusOr<JetStreamApiReply> info =
        JetStreamApi(nc, "$JS.API.STREAM.INFO.HR_PROFILES",
                     absl::StrCat(R"({"subjects_filter":")", subject, R"("})"), absl::Seconds(5));
    if (!info.ok()) return info.status().ToString();
    const std::string key = absl::StrCat("\"", subject, "\":");
    const size_t at = info->body.find(key);
    if (at == std::string::npos) return "none";
    return info->body.substr(at + key.size(), info->body.find_first_of(",}", at) - at - key.size());
  };
  // 40 deltas: rolled up once 32 were published (with those that came meanwhile), so 9 messages
  // at most are left.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int count = 0;
  while (absl::Now() < deadline) {
    if (absl::SimpleAtoi(messages(), &count) && count <= 9) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_GE(count, 1);
  EXPECT_LE(count, 9);
  natsConnection_Destroy(nc);
  absl::StatusOr<std::vector<AudienceUser>> users =
      store_->ReadAudienceUsers("aud_x", {"u9"}, {"srv"});
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_EQ((*users)[0].profiles.size(), 1u);
  EXPECT_EQ((*users)[0].profiles[0].traits().fields().at("n").number_value(), 39);
}

// Two collectors: one syncs an audience at a time; the other is told so and nothing is sent
// twice.
TEST_F(JetStreamUserDataTest, OneSyncAtATimeAcrossCollectors) {
  Identify("web", "u1", R"({"plan":"pro"})");
  std::unique_ptr<JetStreamJobStore> other = Open();
  ASSERT_NE(other, nullptr);
  const std::vector<std::string> sources = {"web", "ios"};
  absl::StatusOr<AudienceSyncInput> input =
      store_->BeginAudienceSync("aud_power", sources, clock_.Now());
  ASSERT_TRUE(input.ok()) << input.status();
  EXPECT_EQ(other->BeginAudienceSync("aud_power", sources, clock_.Now()).status().code(),
            absl::StatusCode::kAborted);
  AudienceSyncPlan plan;
  plan.audience_id = "aud_power";
  plan.sources = sources;
  plan.log_position = input->log_position;
  ASSERT_TRUE(store_->CommitAudienceSync(std::move(plan)).ok());
  // Released: the other one may sync now.
  absl::StatusOr<AudienceSyncInput> next =
      other->BeginAudienceSync("aud_power", sources, clock_.Now());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->users.empty());
}

// What the index entries and profile deltas add to Append: 100-event batches of identify calls
// (one job each) without user data, by users seen before (a profile delta each: the index entry
// is cached) and by new users (a delta and an index entry each), interleaved on the same cluster
// in the same run. Prints the numbers (docs/BENCHMARKS.md).
// A collector that dies in the middle of an audience's sync holds its lock for at most a minute
// (on the store's clock): another collector is refused before that, then syncs the audience,
// from the state the dead one never committed (the user is evaluated again).
TEST_F(JetStreamUserDataTest, SyncLockOfADeadCollectorRunsOutWithinAMinute) {
  Identify("web", "u1", R"({"plan":"pro"})");
  const std::vector<std::string> sources = {"web", "ios"};
  {
    std::unique_ptr<JetStreamJobStore> dying = Open();
    ASSERT_NE(dying, nullptr);
    absl::StatusOr<AudienceSyncInput> begun =
        dying->BeginAudienceSync("aud_power", sources, clock_.Now());
    ASSERT_TRUE(begun.ok()) << begun.status();
    EXPECT_THAT(begun->users, ElementsAre("u1"));
  }  // Gone without committing or releasing, as a killed process would be.
  clock_.Advance(absl::Seconds(59));
  EXPECT_EQ(store_->BeginAudienceSync("aud_power", sources, clock_.Now()).status().code(),
            absl::StatusCode::kAborted);
  clock_.Advance(absl::Seconds(2));
  absl::StatusOr<AudienceSyncInput> next =
      store_->BeginAudienceSync("aud_power", sources, clock_.Now());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE(next->state.has_value());  // Never committed: computed afresh.
  EXPECT_THAT(next->users, ElementsAre("u1"));
}

TEST_F(JetStreamUserDataTest, AppendCostOfUserData) {
  constexpr int kBatches = 30;
  enum Kind { kNone, kKnownUsers, kNewUsers };
  int round = 0;
  auto run = [&](Kind kind) {
    ++round;
    const auto started = std::chrono::steady_clock::now();
    for (int b = 0; b < kBatches; ++b) {
      std::vector<AppendItem> items;
      for (int i = 0; i < 100; ++i) {
        const std::string user = kind == kNewUsers ? absl::StrCat("new-", round, "-", b, "-", i)
                                                   : absl::StrCat("known-", i);
        AppendItem item =
            Item("web", user, hookrelay::v1::IDENTIFY, "", R"({"plan":"pro"})", "hook");
        if (kind == kNone) {
          item.user_id.clear();
          item.profile_delta.clear();
        }
        items.push_back(std::move(item));
      }
      Append(std::move(items));
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
    return took.count() * 1000 / kBatches;
  };
  run(kNone);        // Warm up (leaders, connections).
  run(kKnownUsers);  // Fills the index cache for "known-*".
  double sum[3] = {0, 0, 0};
  for (int r = 0; r < 3; ++r) {
    for (Kind kind : {kNone, kKnownUsers, kNewUsers}) sum[kind] += run(kind);
  }
  std::printf("Append of 100 identify events (1 job each), ms per batch, mean of 3 interleaved "
              "runs of %d batches: no user data %.1f, known users (profile delta) %.1f, new "
              "users (delta + index entry) %.1f\n",
              kBatches, sum[kNone] / 3, sum[kKnownUsers] / 3, sum[kNewUsers] / 3);
  EXPECT_GT(sum[kNewUsers], 0);
}

}  // namespace
}  // namespace hookrelay::collector
