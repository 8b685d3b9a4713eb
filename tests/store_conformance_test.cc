// The job store's contract (collector/store/store.h), one parameterised suite run on both
// engines (issue 22 §3; LevelDB's env_test, Envoy's extension conformance tests): the embedded
// engine in a temp directory and the JetStream engine on a loopback 3-node cluster at 3
// replicas (tests/test_engines.h), each opened through OpenStore with a manual clock.
//
// Only engine-neutral behaviour is asserted. The JetStream engine's Lease returns what a
// background fetcher brought, its settlements and counts follow acks by a moment: results are
// polled for with a deadline, and absence is shown after a later barrier job was leased, never
// after a sleep. Job ids are compared only where the header promises them (a retried or
// replayed job is matched by its message id).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collector/store/store.h"
#include "collector/store/factory/job_store_factory.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/job.pb.h"
#include "tests/collector_test_util.h"
#include "tests/test_engines.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Attempt;
using hookrelay::v1::AudienceState;
using hookrelay::v1::Deletion;
using hookrelay::v1::Job;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr absl::Duration kLease = absl::Seconds(90);
// How long an eventual result (a fetched job, a settled ack, a count) may take on real time.
constexpr absl::Duration kEventually = absl::Seconds(20);

Attempt MakeAttempt(absl::Time at, int status) {
  Attempt attempt;
  attempt.set_at_unix_ms(absl::ToUnixMillis(at));
  auto* url = attempt.add_urls();
  url->set_url("https://hooks.example.com/x");
  url->set_status(status);
  return attempt;
}

std::vector<std::string> MessageIds(const std::vector<LeasedJob>& jobs) {
  std::vector<std::string> out;
  for (const LeasedJob& j : jobs) out.push_back(j.job.message_id());
  return out;
}

std::vector<std::string> MessageIds(const std::vector<Job>& jobs) {
  std::vector<std::string> out;
  for (const Job& j : jobs) out.push_back(j.message_id());
  return out;
}

// Polls `done` until it holds or kEventually passed; returns whether it held.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + kEventually;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

class StoreConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<test::EngineSetup> engine = test::PrepareEngine(GetParam());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *engine;
    data_dir_ = test::MakeTempDir("store_conformance") + "/data";
  }
  void TearDown() override { store_.reset(); }

  // Opens (or reopens: same data_dir, same cluster) the store with `lease` as its lease
  // duration.
  void Open(absl::Duration lease = kLease) {
    store_.reset();
    lease_ = lease;
    JobStoreOptions options;
    options.engine = engine_.engine;
    options.data_dir = data_dir_;
    options.nats_url = engine_.nats_url;
    options.nats_replicas = 3;
    options.lease_duration = lease;
    options.clock = &clock_;
    // Retries due later on the manual clock come back at once and are held by the store until
    // the clock reaches them (the servers' schedules run on real time).
    if (engine_.engine == "jetstream") options.max_schedule_delay = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // One event with one job; the item carries the user and source for the per-user index.
  AppendItem Event(const std::string& message, const std::string& destination = "d1",
                   const std::string& user = "u1", const std::string& source = "s1") {
    AppendItem item;
    item.dedup_key = DedupKey(source, message);
    item.user_id = user;
    item.source_id = source;
    Job job;
    job.set_source_id(source);
    job.set_destination_id(destination);
    job.set_type(hookrelay::v1::TRACK);
    job.set_message_id(message);
    job.set_user_id(user);
    job.set_event_json(absl::StrCat(R"({"type":"track","messageId":")", message, R"("})"));
    job.set_received_at_unix_ms(absl::ToUnixMillis(clock_.Now()));
    item.jobs.emplace_back(job);
    return item;
  }

  // Appends and waits for the callback, which must run exactly once.
  AppendResult AppendOk(std::vector<AppendItem> items) {
    const size_t n = items.size();
    auto calls = std::make_shared<std::atomic<int>>(0);
    auto done = std::make_shared<absl::Notification>();
    auto result = std::make_shared<absl::StatusOr<AppendResult>>();
    store_->Append(std::move(items), [calls, done, result](absl::StatusOr<AppendResult> r) {
      if (calls->fetch_add(1) == 0) {
        *result = std::move(r);
        done->Notify();
      }
    });
    EXPECT_TRUE(done->WaitForNotificationWithTimeout(kEventually)) << "no Append callback";
    if (!done->HasBeenNotified()) return AppendResult();
    EXPECT_EQ(calls->load(), 1);
    EXPECT_TRUE(result->ok()) << result->status();
    if (!result->ok()) return AppendResult();
    EXPECT_EQ((*result)->stored.size(), n);
    return **result;
  }
  void AppendAll(std::vector<AppendItem> items) {
    const size_t n = items.size();
    EXPECT_EQ(AppendOk(std::move(items)).stored, std::vector<bool>(n, true));
  }

  // Leases until `n` jobs came or kEventually passed; every Lease returns at most what it was
  // asked for.
  std::vector<LeasedJob> LeaseN(size_t n) {
    std::vector<LeasedJob> out;
    const absl::Time deadline = absl::Now() + kEventually;
    while (out.size() < n && absl::Now() < deadline) {
      const size_t max = n - out.size();
      absl::StatusOr<std::vector<LeasedJob>> got = store_->Lease(max);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) break;
      EXPECT_LE(got->size(), max);
      if (got->empty()) absl::SleepFor(absl::Milliseconds(2));  // Lease never waits.
      for (LeasedJob& j : *got) out.push_back(std::move(j));
    }
    return out;
  }

  // Leases until the job of message `message` came (or kEventually passed): everything leased
  // on the way, that job last.
  std::vector<LeasedJob> LeaseThrough(const std::string& message) {
    std::vector<LeasedJob> out;
    const absl::Time deadline = absl::Now() + kEventually;
    while (absl::Now() < deadline) {
      absl::StatusOr<std::vector<LeasedJob>> got = store_->Lease(1);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) break;
      if (got->empty()) absl::SleepFor(absl::Milliseconds(2));
      for (LeasedJob& j : *got) {
        const bool last = j.job.message_id() == message;
        out.push_back(std::move(j));
        if (last) return out;
      }
    }
    ADD_FAILURE() << "job " << message << " never leased";
    return out;
  }

  // Appends a barrier job (due after everything appended so far) and leases through it: the
  // message ids of the other jobs leased on the way. A job not among them was not leasable.
  std::vector<std::string> LeaseThroughBarrier() {
    const std::string barrier = absl::StrCat("barrier-", ++barriers_);
    clock_.Advance(absl::Milliseconds(1));  // Due after every job appended before it.
    AppendAll({Event(barrier, "d-barrier", "u-barrier", "s-barrier")});
    std::vector<std::string> ids = MessageIds(LeaseThrough(barrier));
    EXPECT_FALSE(ids.empty());
    if (!ids.empty() && ids.back() == barrier) ids.pop_back();
    return ids;
  }

  // Dead letters matching `filter`, once there are `n` of them (Bury settles asynchronously on
  // some engines).
  std::vector<Job> ListDeadN(const DeadFilter& filter, size_t n) {
    std::vector<Job> dead;
    Eventually([&] {
      absl::StatusOr<std::vector<Job>> got = store_->ListDead(filter);
      EXPECT_TRUE(got.ok()) << got.status();
      dead = got.value_or(std::vector<Job>());
      return dead.size() == n;
    });
    return dead;
  }

  common::ManualClock clock_{absl::FromUnixSeconds(test::kNowUnixSeconds)};
  test::EngineSetup engine_;
  std::string data_dir_;
  absl::Duration lease_ = kLease;
  std::unique_ptr<Store> store_;
  int barriers_ = 0;
};

// Appended jobs are leased with an id and their due time assigned and every other field kept,
// after the Append callback reported them stored.
TEST_P(StoreConformanceTest, AppendThenLeaseKeepsTheJob) {
  Open();
  const absl::Time appended_at = clock_.Now();
  AppendItem item = Event("m1");
  // The ingest request's trace context (common/trace_context.h) travels with the job.
  Job sent = item.jobs[0].ToJob(0, 0);
  sent.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  sent.set_tracestate("rojo=00f067aa0ba902b7");
  Job second = sent;
  second.set_destination_id("d2");  // One event fanned out to two destinations.
  item.jobs = {sent, second};
  AppendAll({std::move(item)});
  std::vector<LeasedJob> leased = LeaseN(2);
  ASSERT_EQ(leased.size(), 2u);
  std::sort(leased.begin(), leased.end(), [](const LeasedJob& a, const LeasedJob& b) {
    return a.job.destination_id() < b.job.destination_id();
  });
  const Job& job = leased[0].job;
  EXPECT_GT(job.id(), 0u);
  EXPECT_NE(job.id(), leased[1].job.id());
  EXPECT_NE(leased[0].lease, leased[1].lease);
  EXPECT_EQ(job.due_unix_ms(), absl::ToUnixMillis(appended_at));
  EXPECT_GT(leased[0].deadline, clock_.Now());
  EXPECT_EQ(job.source_id(), sent.source_id());
  EXPECT_EQ(job.destination_id(), "d1");
  EXPECT_EQ(leased[1].job.destination_id(), "d2");
  EXPECT_EQ(job.type(), sent.type());
  EXPECT_EQ(job.message_id(), sent.message_id());
  EXPECT_EQ(job.user_id(), sent.user_id());
  EXPECT_EQ(job.event_json(), sent.event_json());
  EXPECT_EQ(job.received_at_unix_ms(), sent.received_at_unix_ms());
  EXPECT_EQ(job.attempts(), 0);
  EXPECT_EQ(job.history_size(), 0);
  EXPECT_EQ(job.deferrals(), 0);
  for (const LeasedJob& l : leased) {
    EXPECT_EQ(l.job.traceparent(), sent.traceparent());
    EXPECT_EQ(l.job.tracestate(), sent.tracestate());
  }
}

// A store closed and opened again on the same data has every appended job not yet settled,
// leased ones included (a lease is not durable); a completed one stays gone.
TEST_P(StoreConformanceTest, ReopenedStoreKeepsUnsettledJobs) {
  // A short lease: the JetStream engine's jobs fetched by the closed store come back when it
  // ends.
  Open(absl::Seconds(2));
  AppendAll({Event("m1"), Event("m2"), Event("m3"), Event("m4")});
  std::vector<LeasedJob> leased = LeaseN(2);
  ASSERT_EQ(leased.size(), 2u);
  ASSERT_THAT(MessageIds(leased), ElementsAre("m1", "m2"));
  ASSERT_TRUE(store_->Complete(leased[0].job.id(), leased[0].lease).ok());

  Open(absl::Seconds(2));
  clock_.Advance(absl::Seconds(2));  // The embedded engine counts leases on its clock.
  std::vector<LeasedJob> again = LeaseN(3);
  EXPECT_THAT(MessageIds(again), UnorderedElementsAre("m2", "m3", "m4"));
  for (const LeasedJob& j : again) {
    if (j.job.message_id() == "m2") {
      EXPECT_EQ(j.job.id(), leased[1].job.id());
    }
  }
  // The completed job stays gone. (The JetStream engine hands the jobs the closed store had
  // fetched back at once, so m3 and m4 may be leased two seconds before m2 comes back, and their
  // two-second leases may run out on the way to the barrier: they may come again, m1 never.)
  EXPECT_THAT(LeaseThroughBarrier(), testing::Not(testing::Contains("m1")));
}

// Lease returns at most `max` jobs, oldest due first.
TEST_P(StoreConformanceTest, LeaseReturnsAtMostMaxOldestDueFirst) {
  Open();
  for (int i = 1; i <= 5; ++i) {
    AppendAll({Event(absl::StrCat("m", i))});
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_THAT(MessageIds(LeaseN(2)), ElementsAre("m1", "m2"));  // LeaseN checks each `max`.
  EXPECT_THAT(MessageIds(LeaseN(3)), ElementsAre("m3", "m4", "m5"));
  absl::StatusOr<std::vector<LeasedJob>> none = store_->Lease(0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(*none, IsEmpty());
}

// Complete removes the job: no later Lease returns it, and settling it again is refused as
// NOT_FOUND (gone) or FAILED_PRECONDITION (not the current lease).
TEST_P(StoreConformanceTest, CompleteRemovesTheJob) {
  Open();
  AppendAll({Event("m1"), Event("m2")});
  std::vector<LeasedJob> leased = LeaseN(2);
  ASSERT_EQ(leased.size(), 2u);
  ASSERT_TRUE(store_->Complete(leased[0].job.id(), leased[0].lease).ok());
  const absl::StatusCode again = store_->Complete(leased[0].job.id(), leased[0].lease).code();
  EXPECT_TRUE(again == absl::StatusCode::kNotFound ||
              again == absl::StatusCode::kFailedPrecondition)
      << again;
  EXPECT_EQ(store_->Complete(987654321, 1).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_->Complete(leased[1].job.id(), leased[1].lease).ok());
  EXPECT_THAT(LeaseThroughBarrier(), IsEmpty());
}

// A retry at T records the attempt and hides the job until the clock passes T.
TEST_P(StoreConformanceTest, RetryIsDueAtNotBeforeWithTheAttemptRecorded) {
  Open();
  AppendAll({Event("m1")});
  std::vector<LeasedJob> leased = LeaseN(1);
  ASSERT_EQ(leased.size(), 1u);
  const absl::Time attempted_at = clock_.Now();
  const absl::Time not_before = attempted_at + absl::Minutes(1);
  ASSERT_TRUE(store_->Retry(leased[0].job.id(), leased[0].lease, not_before,
                            MakeAttempt(attempted_at, 503))
                  .ok());
  EXPECT_THAT(LeaseThroughBarrier(), IsEmpty());  // Not before T.

  clock_.Advance(absl::Minutes(1) + absl::Milliseconds(1));
  std::vector<LeasedJob> retried = LeaseThrough("m1");
  ASSERT_THAT(MessageIds(retried), ElementsAre("m1"));
  const Job& job = retried[0].job;
  EXPECT_EQ(job.attempts(), 1);
  EXPECT_EQ(job.deferrals(), 0);
  EXPECT_EQ(job.first_attempt_unix_ms(), absl::ToUnixMillis(attempted_at));
  EXPECT_EQ(job.due_unix_ms(), absl::ToUnixMillis(not_before));
  ASSERT_EQ(job.history_size(), 1);
  EXPECT_EQ(job.history(0).urls(0).status(), 503);
}

// A retry with an empty Attempt is a deferral: deferrals grows, attempts and history do not.
TEST_P(StoreConformanceTest, RetryWithoutAnAttemptIsADeferral) {
  Open();
  AppendAll({Event("m1")});
  std::vector<LeasedJob> leased = LeaseN(1);
  ASSERT_EQ(leased.size(), 1u);
  ASSERT_TRUE(store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now(),
                            MakeAttempt(clock_.Now(), 500))
                  .ok());
  leased = LeaseThrough("m1");
  ASSERT_THAT(MessageIds(leased), ElementsAre("m1"));
  ASSERT_TRUE(store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now(), Attempt()).ok());
  leased = LeaseThrough("m1");
  ASSERT_THAT(MessageIds(leased), ElementsAre("m1"));
  EXPECT_EQ(leased[0].job.attempts(), 1);
  EXPECT_EQ(leased[0].job.deferrals(), 1);
  EXPECT_EQ(leased[0].job.history_size(), 1);
}

// A buried job is a dead letter with its reason and attempt, listed in id order by destination,
// time of death and page (DeadFilter::after_id, limit); Replay makes the matching ones ready
// again, with a fresh retry window.
TEST_P(StoreConformanceTest, BuryListDeadReplay) {
  Open();
  AppendAll({Event("m1", "d1"), Event("m2", "d2"), Event("m3", "d1")});
  std::vector<LeasedJob> leased = LeaseN(3);
  ASSERT_EQ(leased.size(), 3u);
  // Jobs of different destinations due at the same time may come in any order (the JetStream
  // engine fetches each destination's on its own).
  std::sort(leased.begin(), leased.end(), [](const LeasedJob& a, const LeasedJob& b) {
    return a.job.message_id() < b.job.message_id();
  });
  // Buried a minute apart, last one first.
  const absl::Time t0 = clock_.Now();
  for (auto it = leased.rbegin(); it != leased.rend(); ++it) {
    ASSERT_TRUE(
        store_->Bury(it->job.id(), it->lease, "HTTP 410", MakeAttempt(clock_.Now(), 410)).ok());
    clock_.Advance(absl::Minutes(1));
  }
  std::vector<Job> dead = ListDeadN(DeadFilter(), 3);
  ASSERT_EQ(dead.size(), 3u);
  EXPECT_TRUE(std::is_sorted(dead.begin(), dead.end(),
                             [](const Job& a, const Job& b) { return a.id() < b.id(); }));
  EXPECT_THAT(MessageIds(dead), UnorderedElementsAre("m1", "m2", "m3"));
  for (const Job& j : dead) {
    EXPECT_EQ(j.dead_reason(), "HTTP 410");
    EXPECT_EQ(j.attempts(), 1);
    ASSERT_EQ(j.history_size(), 1);
    EXPECT_EQ(j.history(0).urls(0).status(), 410);
    const int64_t minute = j.message_id() == "m3" ? 0 : j.message_id() == "m2" ? 1 : 2;
    EXPECT_EQ(j.dead_at_unix_ms(), absl::ToUnixMillis(t0 + absl::Minutes(minute)));
  }
  auto list = [&](const DeadFilter& filter) {
    absl::StatusOr<std::vector<Job>> got = store_->ListDead(filter);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.value_or(std::vector<Job>());
  };
  DeadFilter d1;
  d1.destination_id = "d1";
  EXPECT_THAT(MessageIds(list(d1)), UnorderedElementsAre("m1", "m3"));
  DeadFilter range;  // Died at t0 + 1 min .. t0 + 2 min, both ends in the range.
  range.from = t0 + absl::Minutes(1);
  range.to = t0 + absl::Minutes(2) + absl::Milliseconds(1);
  EXPECT_THAT(MessageIds(list(range)), UnorderedElementsAre("m1", "m2"));
  DeadFilter page;
  page.limit = 2;
  const std::vector<Job> first_page = list(page);
  ASSERT_EQ(first_page.size(), 2u);
  EXPECT_EQ(first_page[0].id(), dead[0].id());
  EXPECT_EQ(first_page[1].id(), dead[1].id());
  page.after_id = first_page[1].id();
  const std::vector<Job> second_page = list(page);
  ASSERT_EQ(second_page.size(), 1u);
  EXPECT_EQ(second_page[0].id(), dead[2].id());

  DeadFilter d2;
  d2.destination_id = "d2";
  absl::StatusOr<size_t> replayed = store_->Replay(d2);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(*replayed, 1u);
  std::vector<LeasedJob> back = LeaseThrough("m2");
  ASSERT_THAT(MessageIds(back), ElementsAre("m2"));
  EXPECT_EQ(back[0].job.destination_id(), "d2");
  EXPECT_EQ(back[0].job.attempts(), 1);
  EXPECT_EQ(back[0].job.dead_reason(), "");
  EXPECT_EQ(back[0].job.first_attempt_unix_ms(), 0);  // A fresh retry window.
  EXPECT_EQ(back[0].job.due_unix_ms(), absl::ToUnixMillis(clock_.Now()));
  EXPECT_THAT(MessageIds(ListDeadN(DeadFilter(), 2)), UnorderedElementsAre("m1", "m3"));
}

// Settle takes a batch: one status per settlement, in order, and the callback runs exactly once;
// OK ones take effect as Complete/Retry/Bury would, refused ones change nothing.
TEST_P(StoreConformanceTest, SettleABatch) {
  Open();
  AppendAll({Event("m1"), Event("m2"), Event("m3"), Event("m4")});
  std::vector<LeasedJob> leased = LeaseN(4);
  ASSERT_THAT(MessageIds(leased), ElementsAre("m1", "m2", "m3", "m4"));
  const absl::Time later = clock_.Now() + absl::Hours(1);
  std::vector<Settlement> batch;
  batch.push_back(Settlement::Complete(leased[0].job.id(), leased[0].lease));
  batch.push_back(Settlement::Retry(leased[1].job.id(), leased[1].lease, later,
                                    MakeAttempt(clock_.Now(), 503)));
  batch.push_back(Settlement::Bury(leased[2].job.id(), leased[2].lease, "HTTP 400",
                                   MakeAttempt(clock_.Now(), 400)));
  batch.push_back(Settlement::Complete(leased[3].job.id(), leased[3].lease + 1));  // not its lease
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto done = std::make_shared<absl::Notification>();
  auto statuses = std::make_shared<std::vector<absl::Status>>();
  store_->Settle(std::move(batch), [calls, done, statuses](std::vector<absl::Status> got) {
    if (calls->fetch_add(1) == 0) {
      *statuses = std::move(got);
      done->Notify();
    }
  });
  ASSERT_TRUE(done->WaitForNotificationWithTimeout(kEventually));
  ASSERT_EQ(statuses->size(), 4u);
  EXPECT_TRUE((*statuses)[0].ok()) << (*statuses)[0];
  EXPECT_TRUE((*statuses)[1].ok()) << (*statuses)[1];
  EXPECT_TRUE((*statuses)[2].ok()) << (*statuses)[2];
  EXPECT_FALSE((*statuses)[3].ok());
  // The refused settlement left m4 leased under its lease: that one still settles it.
  EXPECT_TRUE(store_->Complete(leased[3].job.id(), leased[3].lease).ok());
  EXPECT_THAT(MessageIds(ListDeadN(DeadFilter(), 1)), ElementsAre("m3"));
  EXPECT_THAT(LeaseThroughBarrier(), IsEmpty());  // m2 not before its time, m1 gone.
  clock_.Advance(absl::Hours(1) + absl::Milliseconds(1));
  // (The barrier's lease ran out with the hour: it may come back first.)
  std::vector<LeasedJob> retried = LeaseThrough("m2");
  ASSERT_FALSE(retried.empty());
  EXPECT_EQ(retried.back().job.message_id(), "m2");
  EXPECT_EQ(retried.back().job.attempts(), 1);
  EXPECT_EQ(calls->load(), 1);
}

// The queue is per destination: Lease takes each destination's budget, asked at most once per
// call, and leaves the jobs of a destination without budget queued (not leased, not written),
// in their order, for a later Lease with budget. Also after a reopen (jobs paged in from disk)
// and for a retried job (queued anew).
TEST_P(StoreConformanceTest, LeaseWithinEachDestinationsBudget) {
  Open();
  AppendAll({Event("s1", "slow"), Event("f1", "fast"), Event("s2", "slow"), Event("f2", "fast"),
             Event("s3", "slow"), Event("f3", "fast")});
  Open();  // Reopened: the queue comes back from disk (or the servers) with its destinations.
  absl::flat_hash_map<std::string, size_t> budgets = {{"slow", 0}};
  // Leases with `budgets` (absent: unlimited) through a barrier job appended to
  // `barrier_destination` (within one destination jobs are leased in order; across destinations
  // an engine that fetches each destination's jobs on its own may return them in any order), or
  // with `enough`, until it holds for the ids leased; the message ids leased on the way.
  auto lease_through_barrier =
      [&](std::vector<LeasedJob>* leased_out, const std::string& barrier_destination = "d-barrier",
          std::function<bool(const std::vector<std::string>&)> enough = nullptr) {
    const std::string barrier = absl::StrCat("barrier-", ++barriers_);
    clock_.Advance(absl::Milliseconds(1));
    AppendAll({Event(barrier, barrier_destination, "u-barrier", "s-barrier")});
    std::vector<std::string> ids;
    // The budgets hold for the whole pass through the barrier (a Lease never exceeds what is
    // left of them).
    absl::flat_hash_map<std::string, size_t> left = budgets;
    const absl::Time deadline = absl::Now() + kEventually;
    while (absl::Now() < deadline) {
      absl::flat_hash_map<std::string, int> asked;
      absl::StatusOr<std::vector<LeasedJob>> got =
          store_->Lease(8, [&](std::string_view destination) -> size_t {
            const std::string d(destination);
            EXPECT_EQ(++asked[d], 1) << "budget of " << d << " asked twice in one Lease";
            auto it = left.find(d);
            return it == left.end() ? ~size_t{0} : it->second;
          });
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) break;
      absl::flat_hash_map<std::string, size_t> per_destination;
      for (LeasedJob& j : *got) {
        const std::string& d = j.job.destination_id();
        ++per_destination[d];
        if (auto it = left.find(d); it != left.end()) {
          EXPECT_LE(per_destination[d], it->second) << d << " leased beyond its budget";
        }
        if (j.job.message_id() == barrier) {
          if (!enough) return ids;
          continue;  // With `enough`, the pass ends when it holds.
        }
        ids.push_back(j.job.message_id());
        if (leased_out != nullptr) leased_out->push_back(std::move(j));
        if (enough && enough(ids)) return ids;
      }
      for (auto& [d, n] : per_destination) {
        if (auto it = left.find(d); it != left.end()) it->second -= std::min(it->second, n);
      }
      if (got->empty()) absl::SleepFor(absl::Milliseconds(2));
    }
    ADD_FAILURE() << "barrier " << barrier << " never leased";
    return ids;
  };
  std::vector<LeasedJob> fast;
  EXPECT_THAT(lease_through_barrier(&fast, "fast"), ElementsAre("f1", "f2", "f3"));
  // The slow destination gets a budget of 2: its two oldest, in order (and never more: the
  // budget check above).
  budgets["slow"] = 2;
  std::vector<LeasedJob> slow;
  const std::vector<std::string> first =
      lease_through_barrier(&slow, "d-barrier", [](const std::vector<std::string>& ids) {
        return std::count_if(ids.begin(), ids.end(),
                             [](const std::string& id) { return id[0] == 's'; }) == 2;
      });
  std::vector<std::string> first_slow;
  for (const std::string& id : first) {
    if (id[0] == 's') first_slow.push_back(id);
  }
  EXPECT_THAT(first_slow, ElementsAre("s1", "s2"));
  // A retried fast job is queued anew and held back like the others.
  budgets = {{"slow", 0}, {"fast", 0}};
  ASSERT_TRUE(store_->Retry(fast[0].job.id(), fast[0].lease, clock_.Now(), MakeAttempt(clock_.Now(), 503)).ok());
  std::vector<std::string> held = lease_through_barrier(nullptr);
  EXPECT_THAT(held, testing::Not(testing::Contains("f1")));
  EXPECT_THAT(held, testing::Not(testing::Contains("s3")));
  budgets.clear();
  std::vector<std::string> rest =
      lease_through_barrier(nullptr, "d-barrier", [](const std::vector<std::string>& ids) {
        return std::count(ids.begin(), ids.end(), "f1") + std::count(ids.begin(), ids.end(), "s3") == 2;
      });
  EXPECT_THAT(rest, testing::IsSupersetOf({"f1", "s3"}));
}

// Per-key order (DeliveryOptions.ordering, SPEC §5.4), on an engine that keeps it: one job of a
// (destination, key) leased at a time, the oldest first; a retry holds only its own key (and
// keeps holding it across a restart); a completed or buried job lets the next one go; an expired
// lease hands the same job out again before the later ones.
TEST_P(StoreConformanceTest, PerKeyOrderOneJobOfAKeyAtATime) {
  Open(absl::Seconds(30));
  if (!store_->KeepsPerKeyOrder()) GTEST_SKIP() << "this engine does not keep per-key order";
  auto ordered = [&](const std::string& message, const std::string& user) {
    AppendItem item = Event(message, "d1", user);
    Job job = item.jobs[0].ToJob(0, 0);
    job.set_ordering_key(user);
    item.jobs[0] = job;
    return item;
  };
  // Jobs leased earlier come back when their 30 s leases run out: what matters is a's jobs.
  const auto no_a_jobs = ::testing::Each(::testing::Not(::testing::StartsWith("a")));
  AppendAll({ordered("a1", "a"), ordered("a2", "a"), ordered("b1", "b"), Event("x1", "d1", "c"),
             Event("x2", "d1", "c"), ordered("a3", "a")});
  std::vector<LeasedJob> first = LeaseN(4);
  EXPECT_THAT(MessageIds(first), UnorderedElementsAre("a1", "b1", "x1", "x2"));
  EXPECT_THAT(LeaseThroughBarrier(), IsEmpty());  // a2, a3 wait for a1.
  auto find = [&](const std::vector<LeasedJob>& jobs, const std::string& message) {
    for (const LeasedJob& j : jobs) {
      if (j.job.message_id() == message) return j;
    }
    ADD_FAILURE() << message << " not leased";
    return LeasedJob();
  };
  const LeasedJob a1 = find(first, "a1");
  const LeasedJob b1 = find(first, "b1");

  // a1 fails and retries in a minute: only a's jobs wait. b1 completes and b2 follows it.
  ASSERT_TRUE(store_->Retry(a1.job.id(), a1.lease, clock_.Now() + absl::Minutes(1),
                            MakeAttempt(clock_.Now(), 503))
                  .ok());
  ASSERT_TRUE(store_->Complete(b1.job.id(), b1.lease).ok());
  AppendAll({ordered("b2", "b")});
  EXPECT_THAT(MessageIds(LeaseThrough("b2")), ElementsAre("b2"));
  EXPECT_THAT(LeaseThroughBarrier(), IsEmpty());

  // A restart: leases end (b2 and the others are ready again), and a1's retry still holds a's
  // jobs. (On JetStream leases end with the servers' ack wait, in real time: the kill -9 test,
  // tests/ordering_fault_test, covers restarts there.)
  const bool embedded = engine_.engine == "embedded";
  if (embedded) {
    Open(absl::Seconds(30));
    const std::vector<std::string> after_restart = LeaseThroughBarrier();
    EXPECT_THAT(after_restart, Contains("b2"));
    EXPECT_THAT(after_restart, no_a_jobs);
  }

  // The retry's time: a1 first (attempt recorded, place kept), a2 once a1 completed.
  clock_.Advance(absl::Minutes(1) + absl::Milliseconds(1));
  std::vector<LeasedJob> again = LeaseThrough("a1");
  ASSERT_THAT(MessageIds(again), ElementsAre("a1"));
  EXPECT_EQ(again[0].job.attempts(), 1);
  EXPECT_THAT(LeaseThroughBarrier(), no_a_jobs);
  ASSERT_TRUE(store_->Complete(again[0].job.id(), again[0].lease).ok());
  std::vector<LeasedJob> a2 = LeaseThrough("a2");
  ASSERT_THAT(MessageIds(a2), ElementsAre("a2"));

  // An expired lease: a2 comes back before a3 (on the embedded engine's clock).
  std::vector<LeasedJob> a2_again = a2;
  if (embedded) {
    clock_.Advance(absl::Seconds(31));
    a2_again = LeaseThrough("a2");
    ASSERT_THAT(MessageIds(a2_again), ElementsAre("a2"));
  }
  EXPECT_THAT(LeaseThroughBarrier(), no_a_jobs);

  // A dead letter lets the next one go.
  ASSERT_TRUE(store_->Bury(a2_again[0].job.id(), a2_again[0].lease, "gone",
                           MakeAttempt(clock_.Now(), 410))
                  .ok());
  EXPECT_THAT(MessageIds(LeaseThrough("a3")), ElementsAre("a3"));
  DeadFilter all;
  EXPECT_THAT(MessageIds(ListDeadN(all, 1)), ElementsAre("a2"));
}

// A retry that is due at once (a deferral put back now) does not hold its key.
TEST_P(StoreConformanceTest, PerKeyOrderRetryDueNowKeepsItsPlace) {
  Open();
  if (!store_->KeepsPerKeyOrder()) GTEST_SKIP() << "this engine does not keep per-key order";
  std::vector<AppendItem> items;
  for (const char* message : {"k1", "k2"}) {
    AppendItem item = Event(message, "d1", "k");
    Job job = item.jobs[0].ToJob(0, 0);
    job.set_ordering_key("k");
    item.jobs[0] = job;
    items.push_back(std::move(item));
  }
  AppendAll(std::move(items));
  std::vector<LeasedJob> leased = LeaseN(1);
  ASSERT_THAT(MessageIds(leased), ElementsAre("k1"));
  ASSERT_TRUE(store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now(), Attempt()).ok());
  leased = LeaseThrough("k1");
  ASSERT_THAT(MessageIds(leased), ElementsAre("k1"));  // Not k2: k1 kept its place.
  EXPECT_EQ(leased[0].job.deferrals(), 1);
  ASSERT_TRUE(store_->Complete(leased[0].job.id(), leased[0].lease).ok());
  EXPECT_THAT(MessageIds(LeaseThrough("k2")), ElementsAre("k2"));
}

// An attempt still running as its lease nears its end keeps its job: ExtendLeases moves the
// deadline (JetStream: InProgress restarts the servers' ack wait, in real time), the job is not
// handed out again past its first deadline, and the same lease still settles it. A lease that
// ended is refused.
TEST_P(StoreConformanceTest, ExtendedLeaseOutlivesItsFirstDeadline) {
  const absl::Duration lease = absl::Seconds(3);
  Open(lease);
  // JetStream's leases run on the servers' clock: real time passes with the manual one.
  auto pass = [&](absl::Duration d) {
    if (engine_.engine == "jetstream") absl::SleepFor(d);
    clock_.Advance(d);
  };
  AppendAll({Event("m1")});
  std::vector<LeasedJob> leased = LeaseN(1);
  ASSERT_EQ(leased.size(), 1u);
  pass(absl::Milliseconds(1500));
  std::vector<absl::StatusOr<absl::Time>> extended =
      store_->ExtendLeases({{leased[0].job.id(), leased[0].lease}});
  ASSERT_EQ(extended.size(), 1u);
  ASSERT_TRUE(extended[0].ok()) << extended[0].status();
  EXPECT_GT(*extended[0], leased[0].deadline);
  pass(absl::Milliseconds(2000));  // Past the first deadline, before the new one.
  EXPECT_THAT(LeaseThroughBarrier(), Not(Contains("m1")));
  EXPECT_TRUE(store_->Complete(leased[0].job.id(), leased[0].lease).ok());
  std::vector<absl::StatusOr<absl::Time>> ended =
      store_->ExtendLeases({{leased[0].job.id(), leased[0].lease}});
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_FALSE(ended[0].ok());
}

// The one ready signal: raised when jobs are stored, and when a retry falls due on the store's
// clock (a ManualClock's Advance is all it takes: no real time, no poll).
TEST_P(StoreConformanceTest, ReadySignalForStoredJobsAndRetriesFallingDue) {
  Open();
  auto raised = std::make_shared<std::atomic<int>>(0);
  store_->SetReadyCallback([raised] { raised->fetch_add(1); });
  AppendAll({Event("m1")});
  std::vector<LeasedJob> leased = LeaseN(1);  // On JetStream, the signal said when to ask.
  ASSERT_EQ(leased.size(), 1u);
  EXPECT_GE(raised->load(), 1);
  ASSERT_TRUE(store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now() + absl::Hours(1),
                            MakeAttempt(clock_.Now(), 503))
                  .ok());
  // Whatever the engine did meanwhile (JetStream: the retry came back and is held), the count
  // is taken once the retry is stored and not yet due.
  EXPECT_THAT(LeaseThroughBarrier(), IsEmpty());
  const int before = raised->load();
  clock_.Advance(absl::Hours(1));
  EXPECT_TRUE(Eventually([&] { return raised->load() > before; }))
      << "no ready signal when the retry fell due";
  EXPECT_THAT(MessageIds(LeaseThrough("m1")), Contains("m1"));
  store_->SetReadyCallback(nullptr);
}

// A retry that fell due is announced even when a count (a gauge scrape) sees it first: the
// count must not take the news from the store's timer, which reads the next due time after it.
TEST_P(StoreConformanceTest, ReadySignalForARetryACountSawFallDue) {
  Open();
  auto raised = std::make_shared<std::atomic<int>>(0);
  store_->SetReadyCallback([raised] { raised->fetch_add(1); });
  AppendAll({Event("m1"), Event("m2")});
  std::vector<LeasedJob> leased = LeaseN(2);
  ASSERT_EQ(leased.size(), 2u);
  for (size_t i = 0; i < leased.size(); ++i) {
    // m2 falls due an hour after m1: the timer has a later time to wait for.
    ASSERT_TRUE(store_->Retry(leased[i].job.id(), leased[i].lease,
                              clock_.Now() + absl::Hours(static_cast<int64_t>(i + 1)),
                              MakeAttempt(clock_.Now(), 503))
                    .ok());
  }
  EXPECT_THAT(LeaseThroughBarrier(), IsEmpty());
  const int before = raised->load();
  clock_.Advance(absl::Hours(1));
  // At once: the timer notices a moved manual clock within a millisecond. (JetStream counts
  // held retries from the server's view, so no count is asserted here.)
  (void)store_->Counts();
  EXPECT_TRUE(Eventually([&] { return raised->load() > before; }))
      << "no ready signal for the retry the count saw fall due";
  EXPECT_THAT(MessageIds(LeaseThrough("m1")), Contains("m1"));
  store_->SetReadyCallback(nullptr);
}

// DeadFilter's time range is [from, to): a job that died at `to` is not in it (the admin API's
// filter.from/filter.to promise this).
TEST_P(StoreConformanceTest, DeadFilterRangeExcludesItsEnd) {
  Open();
  AppendAll({Event("m1"), Event("m2")});
  std::vector<LeasedJob> leased = LeaseN(2);
  ASSERT_EQ(leased.size(), 2u);
  const absl::Time t0 = clock_.Now();
  for (const LeasedJob& j : leased) {
    ASSERT_TRUE(store_->Bury(j.job.id(), j.lease, "HTTP 410", MakeAttempt(clock_.Now(), 410)).ok());
    clock_.Advance(absl::Minutes(1));
  }
  ASSERT_EQ(ListDeadN(DeadFilter(), 2).size(), 2u);
  DeadFilter range;
  range.from = t0;
  range.to = t0 + absl::Minutes(1);  // When m2 died.
  absl::StatusOr<std::vector<Job>> dead = store_->ListDead(range);
  ASSERT_TRUE(dead.ok()) << dead.status();
  EXPECT_THAT(MessageIds(*dead), ElementsAre("m1"));
  absl::StatusOr<size_t> replayed = store_->Replay(range);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(*replayed, 1u);
  EXPECT_THAT(MessageIds(ListDeadN(DeadFilter(), 1)), ElementsAre("m2"));
}

// A dedup key already stored, or earlier in the same Append, drops the item: stored=false and no
// second job.
TEST_P(StoreConformanceTest, DuplicateDedupKeysAreDropped) {
  Open();
  EXPECT_THAT(AppendOk({Event("m1")}).stored, ElementsAre(true));
  EXPECT_THAT(AppendOk({Event("m1"), Event("m2"), Event("m2")}).stored,
              ElementsAre(false, true, false));
  EXPECT_THAT(MessageIds(LeaseN(2)), ElementsAre("m1", "m2"));
  EXPECT_THAT(LeaseThroughBarrier(), IsEmpty());
}

// A lease not settled in time expires: the job is leased again and the old lease is refused.
TEST_P(StoreConformanceTest, ExpiredLeaseReturnsTheJobAndRefusesTheOldLease) {
  // The JetStream engine's lease is its consumer's ack wait (real time); the embedded engine
  // counts it on its clock.
  Open(absl::Seconds(2));
  AppendAll({Event("m1")});
  std::vector<LeasedJob> first = LeaseN(1);
  ASSERT_EQ(first.size(), 1u);
  clock_.Advance(lease_);
  std::vector<LeasedJob> second = LeaseN(1);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].job.id(), first[0].job.id());
  EXPECT_NE(second[0].lease, first[0].lease);
  EXPECT_EQ(store_->Complete(first[0].job.id(), first[0].lease).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Bury(first[0].job.id(), first[0].lease, "gone",
                         MakeAttempt(clock_.Now(), 500))
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store_->Complete(second[0].job.id(), second[0].lease).ok());
}

// A deletion plan for `user` over `sources` with one `delete` notification per source.
DeletionPlan MakeDeletion(const std::string& id, const std::string& user,
                          const std::vector<std::string>& sources, const std::string& request_id) {
  DeletionPlan plan;
  plan.record.set_id(id);
  plan.record.set_user_id(user);
  plan.record.set_request_id(request_id);
  for (const std::string& source : sources) {
    plan.record.add_source_ids(source);
    Job& job = plan.notifications.emplace_back();
    job.set_source_id(source);
    job.set_destination_id("hook");
    job.set_type(hookrelay::v1::DELETE);
    job.set_message_id(absl::StrCat(id, "/", source));
    job.set_user_id(user);
  }
  return plan;
}

// The sources a user was seen in come from the per-user index written with the append (events
// without jobs too), sorted; user ids are exact (no prefix match, NUL inside works). A deletion
// forgets the pairs it covered, a later event is indexed again, and the index survives a reopen.
TEST_P(StoreConformanceTest, SourcesSeenIndex) {
  Open();
  AppendItem no_jobs = Event("m2", "d1", "u1", "ios");
  no_jobs.jobs.clear();  // No destination enabled: still indexed.
  const std::string nul_user("u\0x", 3);
  AppendAll({Event("m1", "d1", "u1", "web"), std::move(no_jobs), Event("m3", "d1", "u1", "web"),
             Event("m4", "d1", "u2", "srv"), Event("m5", "d1", "u1", "app"),
             Event("m6", "d1", nul_user, "web")});
  auto seen = [&](const std::string& user) {
    absl::StatusOr<std::vector<std::string>> got = store_->SourcesSeen(user);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.value_or(std::vector<std::string>{"(error)"});
  };
  EXPECT_THAT(seen("u1"), ElementsAre("app", "ios", "web"));
  EXPECT_THAT(seen("u2"), ElementsAre("srv"));
  EXPECT_THAT(seen(nul_user), ElementsAre("web"));
  EXPECT_THAT(seen("u"), IsEmpty());
  EXPECT_THAT(seen("nobody"), IsEmpty());

  ASSERT_TRUE(store_->ApplyDeletion(MakeDeletion("del_1", "u1", {"web", "app"}, "")).ok());
  EXPECT_THAT(seen("u1"), ElementsAre("ios"));
  AppendItem again = Event("m7", "d1", "u1", "web");
  again.jobs.clear();
  AppendAll({std::move(again)});  // Seen again after the deletion.
  EXPECT_THAT(seen("u1"), ElementsAre("ios", "web"));
  Open();
  EXPECT_THAT(seen("u1"), ElementsAre("ios", "web"));
  EXPECT_THAT(seen(nul_user), ElementsAre("web"));
}

// A deletion enqueues its notifications, removes the user's undelivered (ready, scheduled, dead)
// jobs of its sources and their sources-seen entries and nothing else (a leased one is dropped
// instead of retried; a later event is kept), is recorded, and applies once per request id.
TEST_P(StoreConformanceTest, ApplyDeletion) {
  Open();
  AppendAll({Event("m1", "d1", "u1", "s1"), Event("m2", "d1", "u1", "s1"),
             Event("m6", "d1", "u1", "s1")});
  clock_.Advance(absl::Milliseconds(1));
  AppendAll({Event("m3", "d1", "u1", "s1"), Event("m4", "d1", "u1", "s2"),
             Event("m5", "d1", "u2", "s1")});
  std::vector<LeasedJob> leased = LeaseN(3);  // m6 stays leased.
  ASSERT_THAT(MessageIds(leased), ElementsAre("m1", "m2", "m6"));
  ASSERT_TRUE(store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now() + absl::Hours(1),
                            MakeAttempt(clock_.Now(), 503))
                  .ok());  // Scheduled.
  ASSERT_TRUE(
      store_->Bury(leased[1].job.id(), leased[1].lease, "HTTP 400", MakeAttempt(clock_.Now(), 400))
          .ok());
  ASSERT_EQ(ListDeadN(DeadFilter(), 1).size(), 1u);

  absl::StatusOr<DeletionOutcome> first =
      store_->ApplyDeletion(MakeDeletion("del_a", "u1", {"s1"}, "req-1"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  EXPECT_EQ(first->record.id(), "del_a");
  EXPECT_EQ(first->record.state(), Deletion::COMPLETED);
  EXPECT_EQ(first->record.notifications(), 1u);
  EXPECT_EQ(first->record.purged_jobs(), 3u);  // m1 (scheduled), m3 (ready), m6 (leased)
  EXPECT_EQ(first->record.purged_dead_letters(), 1u);
  // The leased job's attempt failed: it is dropped, not retried.
  EXPECT_EQ(store_->Retry(leased[2].job.id(), leased[2].lease, clock_.Now(),
                          MakeAttempt(clock_.Now(), 500))
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(store_->ListDead(DeadFilter()).value_or(std::vector<Job>{Job()}), IsEmpty());
  EXPECT_THAT(store_->SourcesSeen("u1").value_or(std::vector<std::string>{}), ElementsAre("s2"));

  // The same request again (another id, even another user): nothing more is done.
  absl::StatusOr<DeletionOutcome> again =
      store_->ApplyDeletion(MakeDeletion("del_b", "u1", {"s1"}, "req-1"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->record.id(), "del_a");
  EXPECT_EQ(again->record.purged_jobs(), 3u);
  absl::StatusOr<DeletionOutcome> other_user =
      store_->ApplyDeletion(MakeDeletion("del_x", "u2", {"s1"}, "req-1"));
  ASSERT_TRUE(other_user.ok()) << other_user.status();
  EXPECT_FALSE(other_user->created);
  EXPECT_EQ(other_user->record.user_id(), "u1");

  clock_.Advance(absl::Hours(2));  // m1's retry would be due.
  AppendAll({Event("m7", "d1", "u1", "s1")});  // After the deletion: kept.
  EXPECT_THAT(LeaseThroughBarrier(), UnorderedElementsAre("m4", "m5", "del_a/s1", "m7"));

  ASSERT_TRUE(store_->ApplyDeletion(MakeDeletion("del_c", "u3", {}, "")).ok());
  Open();  // The records survive a restart.
  absl::StatusOr<DeletionOutcome> after_restart =
      store_->ApplyDeletion(MakeDeletion("del_d", "u1", {"s1"}, "req-1"));
  ASSERT_TRUE(after_restart.ok()) << after_restart.status();
  EXPECT_FALSE(after_restart->created);
  EXPECT_EQ(after_restart->record.id(), "del_a");
  absl::StatusOr<std::optional<Deletion>> got = store_->GetDeletion("del_a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ((*got)->user_id(), "u1");
  EXPECT_EQ((*got)->request_id(), "req-1");
  EXPECT_EQ((*got)->purged_jobs(), 3u);
  EXPECT_FALSE(store_->GetDeletion("del_b").value_or(Deletion()).has_value());
  auto ids = [&](std::string_view before, size_t limit) {
    std::vector<std::string> out;
    absl::StatusOr<std::vector<Deletion>> listed = store_->ListDeletions(before, limit);
    EXPECT_TRUE(listed.ok()) << listed.status();
    for (const Deletion& d : listed.value_or(std::vector<Deletion>{})) out.push_back(d.id());
    return out;
  };
  EXPECT_THAT(ids("", 10), ElementsAre("del_c", "del_a"));
  EXPECT_THAT(ids("", 1), ElementsAre("del_c"));
  EXPECT_THAT(ids("del_c", 10), ElementsAre("del_a"));
  EXPECT_THAT(ids("del_a", 10), IsEmpty());
}

// An identify event as ingest records it for audiences: a profile delta setting trait `plan`.
AppendItem ProfileEvent(const std::string& message, const std::string& user,
                        const std::string& source, const std::string& plan, absl::Time at,
                        bool log_change) {
  AppendItem item;
  item.dedup_key = DedupKey(source, message);
  item.user_id = user;
  item.source_id = source;
  hookrelay::v1::ProfileDelta delta;
  (*delta.mutable_traits()->mutable_fields())["plan"].set_string_value(plan);
  delta.set_at_ms(absl::ToUnixMillis(at));
  delta.SerializeToString(&item.profile_delta);
  item.log_profile_change = log_change;
  return item;
}

std::vector<std::string> UserIds(const std::vector<AudienceUser>& users) {
  std::vector<std::string> out;
  for (const AudienceUser& u : users) out.push_back(u.user_id);
  return out;
}

const AudienceUser* FindUser(const std::vector<AudienceUser>& users, const std::string& id) {
  for (const AudienceUser& u : users) {
    if (u.user_id == id) return &u;
  }
  return nullptr;
}

// Audience syncs: the first reads every user with a profile in the audience's sources, later
// ones only the changed users, each once; commits record memberships and the member count and
// enqueue the identify jobs; a deletion removes the user's profile and membership; a dropped
// audience starts over.
TEST_P(StoreConformanceTest, AudienceSyncs) {
  Open();
  const std::vector<std::string> sources = {"ios", "web"};
  AppendAll({ProfileEvent("p1", "u1", "web", "pro", clock_.Now(), false),
             ProfileEvent("p2", "u2", "ios", "free", clock_.Now(), false),
             ProfileEvent("p3", "u3", "srv", "pro", clock_.Now(), false)});
  EXPECT_FALSE(store_->GetAudienceState("aud").value_or(AudienceState()).has_value());

  absl::StatusOr<AudienceSyncInput> input = store_->BeginAudienceSync("aud", sources, clock_.Now());
  ASSERT_TRUE(input.ok()) << input.status();
  EXPECT_FALSE(input->state.has_value());
  EXPECT_THAT(input->users, UnorderedElementsAre("u1", "u2"));
  absl::StatusOr<std::vector<AudienceUser>> users =
      store_->ReadAudienceUsers("aud", {"u1", "u2"}, sources);
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_THAT(UserIds(*users), UnorderedElementsAre("u1", "u2"));
  const AudienceUser* u1 = FindUser(*users, "u1");
  EXPECT_FALSE(u1->member);
  ASSERT_EQ(u1->profiles.size(), 1u);
  EXPECT_EQ(u1->profiles[0].traits().fields().at("plan").string_value(), "pro");

  AudienceSyncPlan plan;
  plan.audience_id = "aud";
  plan.sources = sources;
  plan.log_position = input->log_position;
  plan.changes = {{"u1", true}};
  Job& identify = plan.jobs.emplace_back();
  identify.set_source_id("web");
  identify.set_destination_id("hook");
  identify.set_type(hookrelay::v1::IDENTIFY);
  identify.set_message_id("aud-1");
  identify.set_user_id("u1");
  plan.stats.set_last_evaluated(2);
  plan.stats.set_last_first(true);
  absl::StatusOr<AudienceState> state = store_->CommitAudienceSync(std::move(plan));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->members(), 1u);
  EXPECT_TRUE(state->computed());
  EXPECT_EQ(state->cursor(), input->log_position);
  EXPECT_EQ(state->last_evaluated(), 2u);
  absl::StatusOr<std::optional<AudienceState>> stored = store_->GetAudienceState("aud");
  ASSERT_TRUE(stored.ok() && stored->has_value()) << stored.status();
  EXPECT_EQ((*stored)->members(), 1u);
  std::vector<LeasedJob> sent = LeaseThrough("aud-1");
  ASSERT_THAT(MessageIds(sent), ElementsAre("aud-1"));
  EXPECT_EQ(sent[0].job.type(), hookrelay::v1::IDENTIFY);
  EXPECT_EQ(sent[0].job.user_id(), "u1");

  // Two changes of u2 since: evaluated once.
  AppendAll({ProfileEvent("p4", "u2", "ios", "pro", clock_.Now(), true)});
  AppendAll({ProfileEvent("p5", "u2", "ios", "pro", clock_.Now(), true)});
  input = store_->BeginAudienceSync("aud", sources, clock_.Now());
  ASSERT_TRUE(input.ok()) << input.status();
  ASSERT_TRUE(input->state.has_value());
  EXPECT_EQ(input->state->members(), 1u);
  EXPECT_THAT(input->users, ElementsAre("u2"));
  users = store_->ReadAudienceUsers("aud", {"u1", "u2"}, sources);
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_THAT(UserIds(*users), UnorderedElementsAre("u1", "u2"));
  EXPECT_TRUE(FindUser(*users, "u1")->member);
  EXPECT_FALSE(FindUser(*users, "u2")->member);
  plan = AudienceSyncPlan();
  plan.audience_id = "aud";
  plan.sources = sources;
  plan.log_position = input->log_position;
  plan.changes = {{"u2", true}};
  state = store_->CommitAudienceSync(std::move(plan));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->members(), 2u);

  // Deleting a member: profile and membership go.
  DeletionPlan deletion = MakeDeletion("del_1", "u1", {"web"}, "");
  deletion.audience_ids.push_back("aud");
  absl::StatusOr<DeletionOutcome> deleted = store_->ApplyDeletion(std::move(deletion));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(deleted->record.purged_profile());
  EXPECT_EQ(store_->GetAudienceState("aud").value_or(std::nullopt).value_or(AudienceState())
                .members(),
            1u);
  users = store_->ReadAudienceUsers("aud", {"u1"}, sources);
  ASSERT_TRUE(users.ok()) << users.status();
  for (const AudienceUser& u : *users) {
    EXPECT_FALSE(u.member);
    EXPECT_THAT(u.profiles, IsEmpty());
  }

  // Dropped: no state, no memberships; the next sync is a first computation again.
  ASSERT_TRUE(store_->DropAudience("aud").ok());
  EXPECT_FALSE(store_->GetAudienceState("aud").value_or(AudienceState()).has_value());
  input = store_->BeginAudienceSync("aud", sources, clock_.Now());
  ASSERT_TRUE(input.ok()) << input.status();
  EXPECT_FALSE(input->state.has_value());
  EXPECT_THAT(input->users, ElementsAre("u2"));
  users = store_->ReadAudienceUsers("aud", {"u2"}, sources);
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_THAT(UserIds(*users), ElementsAre("u2"));
  EXPECT_FALSE((*users)[0].member);
  plan = AudienceSyncPlan();
  plan.audience_id = "aud";
  plan.sources = sources;
  plan.log_position = input->log_position;
  ASSERT_TRUE(store_->CommitAudienceSync(std::move(plan)).ok());
}

// The run-time configuration: nullopt before the first save, then the bytes last saved, also
// after the store was opened again.
TEST_P(StoreConformanceTest, ConfigIsStoredWithTheJobs) {
  Open();
  absl::StatusOr<std::optional<std::string>> loaded = store_->LoadConfig();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->has_value());
  ASSERT_TRUE(store_->SaveConfig(std::string("v1\0bytes", 8)).ok());
  loaded = store_->LoadConfig();
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status();
  EXPECT_EQ(**loaded, std::string("v1\0bytes", 8));
  ASSERT_TRUE(store_->SaveConfig("v2").ok());

  Open();
  loaded = store_->LoadConfig();
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status();
  EXPECT_EQ(**loaded, "v2");
}

// A healthy store can write; Counts reflect the ready, scheduled, leased and dead jobs.
TEST_P(StoreConformanceTest, WriteHealthAndCounts) {
  Open();
  EXPECT_TRUE(store_->WriteHealth().ok());
  AppendAll({Event("m1"), Event("m2"), Event("m3"), Event("m4")});
  EXPECT_TRUE(Eventually([&] { return store_->Counts().ready == 4; }));
  std::vector<LeasedJob> leased = LeaseN(4);
  ASSERT_THAT(MessageIds(leased), ElementsAre("m1", "m2", "m3", "m4"));
  ASSERT_TRUE(store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now() + absl::Hours(1),
                            MakeAttempt(clock_.Now(), 503))
                  .ok());
  ASSERT_TRUE(
      store_->Bury(leased[1].job.id(), leased[1].lease, "HTTP 400", MakeAttempt(clock_.Now(), 400))
          .ok());
  ASSERT_TRUE(store_->Complete(leased[2].job.id(), leased[2].lease).ok());
  // m4 stays leased. Leasing meanwhile returns nothing (m1 is due in an hour) but lets an engine
  // that fetches jobs from elsewhere see the retried one.
  auto counts_are = [&](int64_t ready, int64_t scheduled, int64_t leased_n, int64_t dead) {
    JobCounts c;
    const bool reached = Eventually([&] {
      absl::StatusOr<std::vector<LeasedJob>> none = store_->Lease(1);
      EXPECT_TRUE(none.ok() && none->empty());
      c = store_->Counts();
      return c.ready == ready && c.scheduled == scheduled && c.leased == leased_n &&
             c.dead == dead;
    });
    EXPECT_TRUE(reached) << "ready " << c.ready << " scheduled " << c.scheduled << " leased "
                         << c.leased << " dead " << c.dead;
  };
  counts_are(0, 1, 1, 1);
  EXPECT_EQ(store_->NextDue(), clock_.Now() + absl::Hours(1));
  clock_.Advance(absl::Milliseconds(1));
  AppendAll({Event("m5")});
  EXPECT_TRUE(Eventually([&] {
    const JobCounts c = store_->Counts();
    return c.ready == 1 && c.scheduled == 1 && c.leased == 1 && c.dead == 1;
  })) << "after m5";
  EXPECT_TRUE(store_->WriteHealth().ok());
}

// Counts().oldest_ready_due is when the oldest ready job became due; InfiniteFuture when
// nothing is ready.
TEST_P(StoreConformanceTest, CountsOldestReadyDue) {
  Open();
  EXPECT_EQ(store_->Counts().oldest_ready_due, absl::InfiniteFuture());
  const absl::Time first_due = clock_.Now();
  AppendAll({Event("m1")});
  clock_.Advance(absl::Seconds(1));
  AppendAll({Event("m2")});
  EXPECT_TRUE(Eventually([&] { return store_->Counts().oldest_ready_due == first_due; }));
  std::vector<LeasedJob> leased = LeaseN(2);
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_TRUE(
      Eventually([&] { return store_->Counts().oldest_ready_due == absl::InfiniteFuture(); }));
}

INSTANTIATE_TEST_SUITE_P(Engines, StoreConformanceTest, test::EngineParams(),
                         test::EngineParamName);

}  // namespace
}  // namespace hookrelay::collector
