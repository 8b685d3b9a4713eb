// Audience syncs through the AudienceSyncer on both engines (SPEC §6.2), each opened through
// OpenStore on a manual clock: entering and leaving by trait and by event count, window expiry
// (30 days in milliseconds), first computation vs later syncs, an audience over two sources, a
// restart between syncs, deleting a member, a deletion between evaluation and commit, dropping an
// audience, and profiles rolled up. What only one engine does stays beside it
// (tests/jetstream_user_data_test.cc: one sync at a time across collectors, background roll-ups).
//
// The identify calls a sync enqueued are read up to a barrier job appended after it, so "nothing
// was sent" is shown by the barrier arriving first, never by a wait.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collector/audiences/audience_eval.h"
#include "collector/audiences/audience_syncer.h"
#include "collector/store/factory/job_store_factory.h"
#include "collector/store/store.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/config.pb.h"
#include "tests/collector_test_util.h"
#include "tests/test_engines.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::AudienceState;
using hookrelay::v1::Config;
using hookrelay::v1::Job;
using ::testing::UnorderedElementsAre;

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

class AudienceSyncerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<test::EngineSetup> engine = test::PrepareEngine(GetParam());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *engine;
    data_dir_ = test::MakeTempDir("audience_syncer") + "/data";
    config_ = std::make_shared<Config>();
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(kConfig, config_.get()).ok());
    Open();
  }
  void TearDown() override {
    syncer_.reset();
    store_.reset();
  }

  void Open() {
    JobStoreOptions options;
    options.engine = engine_.engine;
    options.data_dir = data_dir_;
    options.nats_url = engine_.nats_url;
    options.nats_replicas = 3;
    options.clock = &clock_;
    if (engine_.engine == "jetstream") options.max_schedule_delay = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    AudienceSyncer::Options syncer_options;
    syncer_options.clock = &clock_;
    syncer_options.chunk = 2;  // Several chunks even with a few users.
    syncer_ = std::make_unique<AudienceSyncer>(syncer_options, *store_);
    syncer_->SetConfig(config_);
  }

  void Restart() {
    syncer_.reset();
    store_.reset();
    Open();
  }

  void Append(std::vector<AppendItem> items) {
    absl::Notification done;
    store_->Append(std::move(items), [&](absl::StatusOr<AppendResult> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }

  // An event of `user` in `source`, recorded as ingest would (profile delta included).
  void Event(const std::string& source, const std::string& user, hookrelay::v1::EventType type,
             const std::string& event, const std::string& traits = "") {
    const AudienceInputs inputs(*config_);
    AppendItem item;
    item.dedup_key = DedupKey(source, absl::StrCat("m", ++messages_));
    item.user_id = user;
    item.source_id = source;
    hookrelay::v1::ProfileDelta delta;
    if (inputs.DeltaFor(source, type, event, traits, clock_.Now(), &delta)) {
      delta.SerializeToString(&item.profile_delta);
      item.log_profile_change = true;
    }
    Append({std::move(item)});
  }
  void Identify(const std::string& source, const std::string& user, const std::string& traits) {
    Event(source, user, hookrelay::v1::IDENTIFY, "", traits);
  }
  void Order(const std::string& source, const std::string& user) {
    Event(source, user, hookrelay::v1::TRACK, "Order Completed");
  }

  AudienceState Sync() {
    absl::StatusOr<AudienceState> state = syncer_->SyncNow("aud_power");
    EXPECT_TRUE(state.ok()) << state.status();
    return state.value_or(AudienceState());
  }

  // The identify calls enqueued since the last call: "user:destination:true|false". A barrier
  // job appended now to each destination is leased after every job of that destination enqueued
  // before it (both engines hand out a destination's ready jobs in the order they were stored;
  // across destinations the JetStream engine fetches each on its own); everything leased before
  // both barriers is the answer.
  std::vector<std::string> Sent() {
    const std::string barrier = absl::StrCat("barrier-", ++barriers_);
    AppendItem item;
    item.dedup_key = DedupKey("web", barrier);
    for (const char* destination : {"hook", "hook-ios"}) {
      Job job;
      job.set_source_id("web");
      job.set_destination_id(destination);
      job.set_type(hookrelay::v1::TRACK);
      job.set_message_id(barrier);
      job.set_event_json("{}");
      item.jobs.emplace_back(job);
    }
    Append({std::move(item)});
    std::vector<std::string> out;
    int barriers_seen = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (barriers_seen < 2 && absl::Now() < deadline) {
      absl::StatusOr<std::vector<LeasedJob>> leased = store_->Lease(1000);
      if (!leased.ok()) {
        ADD_FAILURE() << leased.status();
        return out;
      }
      for (const LeasedJob& j : *leased) {
        EXPECT_TRUE(store_->Complete(j.job.id(), j.lease).ok());
        if (j.job.message_id() == barrier) {
          ++barriers_seen;
          continue;
        }
        const std::string& body = j.job.event_json();
        EXPECT_EQ(j.job.type(), hookrelay::v1::IDENTIFY);
        const bool member = body.find(R"("power_users":true)") != std::string::npos;
        EXPECT_TRUE(member || body.find(R"("power_users":false)") != std::string::npos) << body;
        out.push_back(absl::StrCat(j.job.user_id(), ":", j.job.destination_id(), ":",
                                   member ? "true" : "false"));
      }
      if (barriers_seen < 2 && leased->empty()) absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_EQ(barriers_seen, 2) << "the barrier jobs " << barrier << " were not leased within 30 s";
    return out;
  }

  common::ManualClock clock_{absl::FromUnixSeconds(20834LL * 86400)};
  test::EngineSetup engine_;
  std::string data_dir_;
  std::shared_ptr<Config> config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<AudienceSyncer> syncer_;
  int messages_ = 0;
  int barriers_ = 0;
};

TEST_P(AudienceSyncerTest, FirstComputationThenOnlyChanges) {
  Identify("web", "u1", R"({"plan":"pro"})");           // member by trait
  for (int i = 0; i < 3; ++i) Order("ios", "u2");        // member by count
  for (int i = 0; i < 2; ++i) Order("web", "u3");        // not yet
  Identify("srv", "u4", R"({"plan":"pro"})");            // a source the audience does not read
  Identify("web", "u5", R"({"plan":"free"})");           // not a member

  AudienceState state = Sync();
  EXPECT_TRUE(state.last_first());
  EXPECT_EQ(state.last_evaluated(), 4u);  // u1, u2, u3, u5: every profile of web and ios
  EXPECT_EQ(state.last_entered(), 2u);
  EXPECT_EQ(state.members(), 2u);
  // One identify per member to every enabled destination of web and ios; none to hook-off.
  EXPECT_THAT(Sent(), UnorderedElementsAre("u1:hook:true", "u1:hook-ios:true", "u2:hook:true",
                                           "u2:hook-ios:true"));

  state = Sync();  // Nothing changed: nothing evaluated, nothing sent.
  EXPECT_FALSE(state.last_first());
  EXPECT_EQ(state.last_evaluated(), 0u);
  EXPECT_TRUE(Sent().empty());

  Order("ios", "u3");  // u3's third order, across two sources
  Identify("web", "u1", R"({"plan":"free"})");
  Identify("web", "u5", R"({"plan":"free","age":3})");  // changed, still out
  Identify("srv", "u4", R"({"plan":"free"})");          // not a source of the audience
  state = Sync();
  EXPECT_EQ(state.last_evaluated(), 3u);
  EXPECT_EQ(state.last_entered(), 1u);
  EXPECT_EQ(state.last_exited(), 1u);
  EXPECT_EQ(state.members(), 2u);
  EXPECT_THAT(Sent(), UnorderedElementsAre("u3:hook:true", "u3:hook-ios:true", "u1:hook:false",
                                           "u1:hook-ios:false"));
  EXPECT_EQ(store_->GetAudienceState("aud_power").value()->members(), 2u);
}

// Windows expire on the clock: the orders of u2 (days 0..2) and u3 (day 10) leave the 30-day
// window on days 31 and 41; each exit is sent once, at the first sync after it.
TEST_P(AudienceSyncerTest, WindowExpiry) {
  for (int i = 0; i < 3; ++i) {
    Order("web", "u2");
    clock_.Advance(absl::Hours(24));
  }
  Sync();
  EXPECT_THAT(Sent(), UnorderedElementsAre("u2:hook:true", "u2:hook-ios:true"));
  clock_.Advance(absl::Hours(24 * 27));  // Day 30: still three orders within 30 days.
  EXPECT_EQ(Sync().last_exited(), 0u);
  EXPECT_TRUE(Sent().empty());
  clock_.Advance(absl::Hours(24 * 2));  // Day 32: the first day's bucket has left.
  AudienceState state = Sync();
  EXPECT_EQ(state.last_exited(), 1u);
  EXPECT_EQ(state.members(), 0u);
  EXPECT_THAT(Sent(), UnorderedElementsAre("u2:hook:false", "u2:hook-ios:false"));
  clock_.Advance(absl::Hours(24 * 5));
  EXPECT_EQ(Sync().last_exited(), 0u);  // Not sent twice.
  EXPECT_TRUE(Sent().empty());
}

// Memberships sent are durable: a restart between syncs neither re-sends nor skips.
TEST_P(AudienceSyncerTest, RestartBetweenSyncs) {
  Identify("web", "u1", R"({"plan":"pro"})");
  Sync();
  EXPECT_EQ(Sent().size(), 2u);
  Identify("web", "u2", R"({"plan":"pro"})");  // Logged before the restart, synced after.
  Restart();
  AudienceState state = Sync();
  EXPECT_FALSE(state.last_first());
  EXPECT_EQ(state.members(), 2u);
  EXPECT_THAT(Sent(), UnorderedElementsAre("u2:hook:true", "u2:hook-ios:true"));
  Restart();
  EXPECT_EQ(Sync().last_evaluated(), 0u);
  EXPECT_TRUE(Sent().empty());
}

// Deleting a member removes the profile and the membership: no identify follows, the count
// drops; a later event makes the user new again.
TEST_P(AudienceSyncerTest, DeletingAMember) {
  Identify("web", "u1", R"({"plan":"pro"})");
  Identify("web", "u2", R"({"plan":"pro"})");
  Sync();
  EXPECT_EQ(Sent().size(), 4u);
  Identify("web", "u1", R"({"plan":"pro","x":1})");  // In the change log when deleted.
  DeletionPlan plan;
  plan.record.set_id("del_1");
  plan.record.set_user_id("u1");
  plan.record.add_source_ids("web");
  plan.record.add_source_ids("ios");
  plan.audience_ids.push_back("aud_power");
  absl::StatusOr<DeletionOutcome> deleted = store_->ApplyDeletion(std::move(plan));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(deleted->record.purged_profile());
  EXPECT_EQ(store_->GetAudienceState("aud_power").value()->members(), 1u);
  AudienceState state = Sync();
  EXPECT_EQ(state.last_exited(), 0u);
  EXPECT_EQ(state.members(), 1u);
  EXPECT_TRUE(Sent().empty());
}

// A user deleted between a sync's evaluation and its commit gets no identify, in either
// direction, and the member count stays right.
TEST_P(AudienceSyncerTest, DeletionBetweenEvaluationAndCommit) {
  Identify("web", "u1", R"({"plan":"pro"})");
  Sync();
  EXPECT_EQ(Sent().size(), 2u);
  Identify("web", "u1", R"({"plan":"free"})");  // u1 is leaving...
  Identify("web", "u2", R"({"plan":"pro"})");   // ...u2 entering.
  const std::vector<std::string> sources = {"web", "ios"};
  absl::StatusOr<AudienceSyncInput> input =
      store_->BeginAudienceSync("aud_power", sources, clock_.Now());
  ASSERT_TRUE(input.ok()) << input.status();
  AudienceSyncPlan plan;
  plan.audience_id = "aud_power";
  plan.sources = sources;
  plan.log_position = input->log_position;
  for (const auto& [user, member] : {std::pair<std::string, bool>{"u1", false}, {"u2", true}}) {
    plan.changes.emplace_back(user, member);
    Job& job = plan.jobs.emplace_back();
    job.set_user_id(user);
    job.set_destination_id("hook");
    job.set_source_id("web");
    job.set_type(hookrelay::v1::IDENTIFY);
  }
  for (const char* user : {"u1", "u2"}) {  // Both deleted before the commit.
    DeletionPlan deletion;
    deletion.record.set_id(absl::StrCat("del_", user));
    deletion.record.set_user_id(user);
    deletion.record.add_source_ids("web");
    deletion.audience_ids.push_back("aud_power");
    ASSERT_TRUE(store_->ApplyDeletion(std::move(deletion)).ok());
  }
  absl::StatusOr<AudienceState> state = store_->CommitAudienceSync(std::move(plan));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->members(), 0u);
  EXPECT_TRUE(Sent().empty());
}

// An audience removed from the configuration is dropped (nothing sent); defined again, it is
// computed afresh.
TEST_P(AudienceSyncerTest, DroppedAudienceStartsOver) {
  Identify("web", "u1", R"({"plan":"pro"})");
  Sync();
  EXPECT_EQ(Sent().size(), 2u);
  auto without = std::make_shared<Config>(*config_);
  without->clear_audiences();
  syncer_->SetConfig(without);
  EXPECT_FALSE(store_->GetAudienceState("aud_power").value().has_value());
  EXPECT_EQ(syncer_->SyncNow("aud_power").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Sent().empty());
  syncer_->SetConfig(config_);
  EXPECT_TRUE(Sync().last_first());
  EXPECT_EQ(Sent().size(), 2u);
}

// Many deltas of one profile are rolled up; the folded profile is the same.
TEST_P(AudienceSyncerTest, ProfilesAreRolledUp) {
  for (int i = 0; i < 20; ++i) Identify("web", "u1", absl::StrCat(R"({"n":)", i, "}"));
  Identify("web", "u1", R"({"plan":"pro"})");
  Sync();
  EXPECT_THAT(Sent(), UnorderedElementsAre("u1:hook:true", "u1:hook-ios:true"));
  Identify("web", "u1", R"({"n":99})");  // After the rollup: still pro.
  AudienceState state = Sync();
  EXPECT_EQ(state.last_exited(), 0u);
  EXPECT_EQ(state.members(), 1u);
  absl::StatusOr<std::vector<AudienceUser>> users =
      store_->ReadAudienceUsers("aud_power", {"u1"}, {"web", "ios"});
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_EQ((*users)[0].profiles.size(), 1u);
  EXPECT_EQ((*users)[0].profiles[0].traits().fields().at("plan").string_value(), "pro");
  EXPECT_EQ((*users)[0].profiles[0].traits().fields().at("n").number_value(), 99);
  EXPECT_TRUE((*users)[0].member);
}

INSTANTIATE_TEST_SUITE_P(Engines, AudienceSyncerTest, test::EngineParams(),
                         test::EngineParamName);

}  // namespace
}  // namespace hookrelay::collector
