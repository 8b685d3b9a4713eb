#include "collector/store/rocksdb/rocksdb_job_store.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "rocksdb/db.h"
#include "collector/store/store.h"
#include "common/clock.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

// Readable failure messages.
void PrintTo(const LeasedJob& job, std::ostream* os) {
  *os << "{lease " << job.lease << ", " << job.job.ShortDebugString() << "}";
}

namespace {

using ::hookrelay::v1::Attempt;
using ::hookrelay::v1::Job;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr absl::Duration kLease = absl::Seconds(30);

Job MakeJob(std::string source, std::string destination, std::string user,
            std::string message_id = "m") {
  Job job;
  job.set_source_id(std::move(source));
  job.set_destination_id(std::move(destination));
  job.set_user_id(std::move(user));
  job.set_message_id(std::move(message_id));
  job.set_event_json(R"({"type":"track","event":"Order Completed"})");
  job.set_received_at_unix_ms(1700000000000);
  return job;
}

AppendItem MakeItem(std::string dedup_key, std::vector<Job> jobs) {
  AppendItem item;
  item.dedup_key = std::move(dedup_key);
  item.jobs.assign(jobs.begin(), jobs.end());
  return item;
}

// One item with one job; the dedup key is unique per `n`.
AppendItem OneJob(int n, std::string destination = "d1", std::string user = "u1",
                  std::string source = "s1") {
  const std::string message_id = absl::StrCat("msg-", n);
  return MakeItem(DedupKey(source, message_id),
                  {MakeJob(source, std::move(destination), std::move(user), message_id)});
}

std::vector<AppendItem> Items(std::vector<AppendItem> items) { return items; }

absl::StatusOr<AppendResult> AppendAndWait(Store& store, std::vector<AppendItem> items) {
  absl::Notification done;
  absl::StatusOr<AppendResult> result;
  store.Append(std::move(items), [&](absl::StatusOr<AppendResult> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

Attempt MakeAttempt(absl::Time at, int status) {
  Attempt attempt;
  attempt.set_at_unix_ms(absl::ToUnixMillis(at));
  auto* url = attempt.add_urls();
  url->set_url("https://hooks.example.com/x");
  url->set_status(status);
  return attempt;
}

std::vector<uint64_t> Ids(const std::vector<LeasedJob>& jobs) {
  std::vector<uint64_t> ids;
  for (const LeasedJob& job : jobs) ids.push_back(job.job.id());
  return ids;
}

void ExpectCounts(Store& store, int64_t ready, int64_t scheduled, int64_t leased,
                  int64_t dead) {
  const JobCounts counts = store.Counts();
  EXPECT_EQ(counts.ready, ready);
  EXPECT_EQ(counts.scheduled, scheduled);
  EXPECT_EQ(counts.leased, leased);
  EXPECT_EQ(counts.dead, dead);
}

class RocksDbJobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = testing::TempDir();
    if (!pattern.empty() && pattern.back() != '/') pattern.push_back('/');
    pattern += "rocksdb_job_store_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  RocksDbJobStore::Options StoreOptions() {
    RocksDbJobStore::Options options;
    options.path = dir_;
    options.clock = &clock_;
    options.window_size = window_size_;
    options.lease_duration = kLease;
    return options;
  }

  void Open(prometheus::Registry* registry = nullptr) {
    RocksDbJobStore::Options options = StoreOptions();
    options.registry = registry;
    absl::StatusOr<std::unique_ptr<RocksDbJobStore>> store = RocksDbJobStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // Appends and expects every item stored.
  void AppendAll(std::vector<AppendItem> items) {
    const size_t n = items.size();
    absl::StatusOr<AppendResult> result = AppendAndWait(*store_, std::move(items));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->stored, std::vector<bool>(n, true));
  }

  std::vector<LeasedJob> LeaseAll(size_t max = 1000) {
    absl::StatusOr<std::vector<LeasedJob>> leased = store_->Lease(max);
    EXPECT_TRUE(leased.ok()) << leased.status();
    return leased.ok() ? *std::move(leased) : std::vector<LeasedJob>();
  }

  common::ManualClock clock_;
  std::string dir_;
  size_t window_size_ = 65536;
  std::unique_ptr<RocksDbJobStore> store_;
};

// One item fans out to several jobs; leases come oldest due first, then by id.
TEST_F(RocksDbJobStoreTest, FanOutAndOrder) {
  Open();
  AppendAll(Items({MakeItem(DedupKey("s1", "a"), {MakeJob("s1", "d1", "u"),
                                                   MakeJob("s1", "d2", "u")}),
                   MakeItem(DedupKey("s1", "b"), {})}));
  clock_.Advance(absl::Seconds(1));
  AppendAll(Items({OneJob(3)}));
  std::vector<LeasedJob> leased = LeaseAll();
  ASSERT_THAT(leased, SizeIs(3));
  EXPECT_EQ(leased[0].job.destination_id(), "d1");
  EXPECT_EQ(leased[1].job.destination_id(), "d2");
  EXPECT_EQ(leased[2].job.message_id(), "msg-3");
  EXPECT_LT(leased[0].job.id(), leased[1].job.id());
  EXPECT_LT(leased[1].job.id(), leased[2].job.id());
  EXPECT_NE(leased[0].lease, leased[1].lease);
  EXPECT_EQ(leased[0].deadline, clock_.Now() + kLease);
}

// A dedup key drops later copies within the window and is accepted again once it has passed.
TEST_F(RocksDbJobStoreTest, DedupWithinAndAfterWindow) {
  prometheus::Registry registry;
  Open(&registry);
  AppendAll(Items({OneJob(1)}));

  absl::StatusOr<AppendResult> again = AppendAndWait(*store_, Items({OneJob(1), OneJob(2)}));
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(again->stored, ElementsAre(false, true));

  clock_.Advance(absl::Hours(24) - absl::Milliseconds(1));
  again = AppendAndWait(*store_, Items({OneJob(1)}));
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(again->stored, ElementsAre(false));

  clock_.Advance(absl::Milliseconds(2));
  again = AppendAndWait(*store_, Items({OneJob(1)}));
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(again->stored, ElementsAre(true));
  ExpectCounts(*store_, 3, 0, 0, 0);

  double duplicates = -1;
  uint64_t commits = 0;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name == "hookrelay_ingest_duplicates_total") {
      duplicates = family.metric.at(0).counter.value;
    }
    if (family.name == "hookrelay_store_commit_duration_seconds") {
      commits = family.metric.at(0).histogram.sample_count;
    }
  }
  EXPECT_EQ(duplicates, 2);
  EXPECT_GE(commits, 3u);
}

// Expired dedup keys are removed from disk by compaction; live ones are kept.
TEST_F(RocksDbJobStoreTest, CompactionDropsExpiredDedupKeys) {
  Open();
  const std::string key = DedupKey("s1", "msg-1");
  AppendAll(Items({OneJob(1)}));
  clock_.Advance(absl::Hours(12));
  ASSERT_TRUE(store_->CompactForTesting().ok());
  EXPECT_EQ(store_->HasDedupKeyForTesting(key).value_or(false), true);

  clock_.Advance(absl::Hours(13));
  ASSERT_TRUE(store_->CompactForTesting().ok());
  EXPECT_EQ(store_->HasDedupKeyForTesting(key).value_or(true), false);
  // The job itself is not affected.
  ExpectCounts(*store_, 1, 0, 0, 0);
}

// Duplicates inside one Append (and one group) are caught; empty keys are never duplicates.
TEST_F(RocksDbJobStoreTest, DuplicatesInsideOneAppend) {
  Open();
  absl::StatusOr<AppendResult> result = AppendAndWait(
      *store_, Items({OneJob(1), OneJob(1), OneJob(2), MakeItem("", {MakeJob("s1", "d1", "u")}),
                      MakeItem("", {MakeJob("s1", "d1", "u")}), OneJob(2)}));
  ASSERT_TRUE(result.ok());
  EXPECT_THAT(result->stored, ElementsAre(true, false, true, true, true, false));
  EXPECT_THAT(LeaseAll(), SizeIs(4));
}

// Repeated retries keep counting attempts, keep the first attempt's time and the last 10
// attempts; each retried record is what the next lease sees, even before it is written.
TEST_F(RocksDbJobStoreTest, RetryHistoryIsBounded) {
  Open();
  AppendAll(Items({OneJob(1)}));
  const absl::Time start = clock_.Now();
  for (int i = 0; i < 12; ++i) {
    std::vector<LeasedJob> leased = LeaseAll();
    ASSERT_THAT(leased, SizeIs(1));
    EXPECT_EQ(leased[0].job.attempts(), i);
    ASSERT_TRUE(store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now(),
                              MakeAttempt(clock_.Now(), 500 + i))
                    .ok());
    clock_.Advance(absl::Seconds(1));
  }
  std::vector<LeasedJob> leased = LeaseAll();
  ASSERT_THAT(leased, SizeIs(1));
  const Job& job = leased[0].job;
  EXPECT_EQ(job.attempts(), 12);
  EXPECT_EQ(job.first_attempt_unix_ms(), absl::ToUnixMillis(start));
  ASSERT_THAT(job.history(), SizeIs(10));
  EXPECT_EQ(job.history(0).urls(0).status(), 502);
  EXPECT_EQ(job.history(9).urls(0).status(), 511);
}

// A deletion plan for `user` over `sources`, with one notification per source (destination
// "hook"), like the admin core builds it.
DeletionPlan MakeDeletion(std::string id, std::string user, std::vector<std::string> sources,
                          std::string request_id = "") {
  DeletionPlan plan;
  plan.record.set_id(std::move(id));
  plan.record.set_user_id(user);
  plan.record.set_request_id(std::move(request_id));
  for (const std::string& source : sources) {
    plan.record.add_source_ids(source);
    Job& job = plan.notifications.emplace_back();
    job.set_source_id(source);
    job.set_destination_id("hook");
    job.set_type(hookrelay::v1::DELETE);
    job.set_user_id(user);
    job.set_event_json(absl::StrCat(R"({"type":"delete","userId":")", user,
                                    R"(","timestamp":"2026-11-24T08:00:00.000Z"})"));
  }
  return plan;
}

// A deletion removes the user's ready, scheduled and leased jobs and dead letters of the
// affected sources, and nothing else; enqueues the notifications; forgets the sources seen; a
// leased job finishes its attempt and is not retried.
TEST_F(RocksDbJobStoreTest, DeletionPurgesTheUsersJobsOfItsSources) {
  Open();
  AppendAll(Items({OneJob(0, "d1", "u1", "s1"), OneJob(1, "d1", "u1", "s1"),
                   OneJob(2, "d1", "u1", "s1"), OneJob(3, "d1", "u1", "s1"),
                   OneJob(4, "d1", "u1", "s2"), OneJob(5, "d1", "u2", "s1")}));
  // u1's items carry the index fields as the ingestor sets them.
  std::vector<AppendItem> indexed = Items({OneJob(6, "d1", "u1", "s3")});
  indexed[0].user_id = "u1";
  indexed[0].source_id = "s3";
  AppendAll(std::move(indexed));
  std::vector<LeasedJob> leased = LeaseAll(3);  // msg-0, msg-1, msg-2 (all u1, s1)
  ASSERT_THAT(leased, SizeIs(3));
  const Attempt attempt = MakeAttempt(clock_.Now(), 500);
  ASSERT_TRUE(store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now() + absl::Hours(1),
                            attempt).ok());
  ASSERT_TRUE(store_->Bury(leased[1].job.id(), leased[1].lease, "400", attempt).ok());
  ExpectCounts(*store_, 4, 1, 1, 1);

  absl::StatusOr<DeletionOutcome> outcome =
      store_->ApplyDeletion(MakeDeletion("del_1", "u1", {"s1"}));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(outcome->created);
  EXPECT_EQ(outcome->record.state(), hookrelay::v1::Deletion::COMPLETED);
  EXPECT_EQ(outcome->record.notifications(), 1u);
  // msg-3 (ready), msg-0 (scheduled), msg-2 (leased); msg-1 was a dead letter.
  EXPECT_EQ(outcome->record.purged_jobs(), 3u);
  EXPECT_EQ(outcome->record.purged_dead_letters(), 1u);
  // ready: msg-4, msg-5, msg-6 and the notification; the leased one is still leased.
  ExpectCounts(*store_, 4, 0, 1, 0);
  EXPECT_EQ(store_->NextDue(), absl::InfiniteFuture());
  EXPECT_THAT(store_->ListDead({}).value_or(std::vector<Job>{Job()}), IsEmpty());
  // The leased job's attempt failed: it is dropped, not retried.
  EXPECT_EQ(store_->Retry(leased[2].job.id(), leased[2].lease, clock_.Now(), attempt).code(),
            absl::StatusCode::kNotFound);
  ExpectCounts(*store_, 4, 0, 0, 0);

  clock_.Advance(absl::Hours(2));  // The purged retry's due time passes: it stays gone.
  std::vector<LeasedJob> rest = LeaseAll();
  ASSERT_THAT(rest, SizeIs(4));
  std::vector<std::string> seen;
  for (const LeasedJob& job : rest) {
    seen.push_back(absl::StrCat(job.job.user_id(), "/", job.job.source_id(), "/",
                                job.job.type() == hookrelay::v1::DELETE ? "delete" : "track"));
  }
  EXPECT_THAT(seen, ::testing::UnorderedElementsAre("u1/s2/track", "u2/s1/track", "u1/s3/track",
                                                    "u1/s1/delete"));
}

// A replayed dead letter is pending again and indexed: a deletion finds it.
TEST_F(RocksDbJobStoreTest, DeletionFindsReplayedAndReopenedJobs) {
  Open();
  AppendAll(Items({OneJob(0, "d1", "u1", "s1"), OneJob(1, "d1", "u1", "s1")}));
  std::vector<LeasedJob> leased = LeaseAll(1);
  ASSERT_THAT(leased, SizeIs(1));
  ASSERT_TRUE(store_->Bury(leased[0].job.id(), leased[0].lease, "400",
                           MakeAttempt(clock_.Now(), 400)).ok());
  ASSERT_EQ(store_->Replay({}).value_or(0), 1u);
  store_.reset();
  Open();  // The in-memory index is rebuilt from the jobs.
  absl::StatusOr<DeletionOutcome> outcome =
      store_->ApplyDeletion(MakeDeletion("del_1", "u1", {"s1"}));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.purged_jobs(), 2u);
  EXPECT_EQ(outcome->record.purged_dead_letters(), 0u);
  ExpectCounts(*store_, 1, 0, 0, 0);
}

// The cost of a deletion is proportional to the user's data: 10,000 pending jobs and 100 dead
// letters among 1,000,000 other jobs touch about 3 keys per job of the user and none of the
// others. (Its time is measured by rocksdb_job_store_benchmark, BM_Deletion.)
TEST_F(RocksDbJobStoreTest, DeletionCostIsProportionalToTheUsersJobs) {
  Open();
  constexpr int kOthers = 1'000'000;
  constexpr int kUsers = 10'000;
  constexpr int kPerAppend = 1000;
  std::atomic<int> failed{0};
  int n = 0;
  for (int a = 0; a < (kOthers + kUsers) / kPerAppend; ++a) {
    std::vector<AppendItem> items;
    items.reserve(kPerAppend);
    for (int i = 0; i < kPerAppend; ++i, ++n) {
      // Every 101st job is the user's, spread through the store.
      const bool mine = n % 101 == 0 && n / 101 < kUsers;
      items.push_back(OneJob(n, "d1", mine ? "target" : absl::StrCat("user-", n % 50'000)));
    }
    store_->Append(std::move(items), [&](absl::StatusOr<AppendResult> r) {
      if (!r.ok()) failed.fetch_add(1);
    });
  }
  store_->Flush();
  ASSERT_EQ(failed.load(), 0);
  const int64_t total = n;
  const int64_t mine = std::min<int64_t>(kUsers, (total + 100) / 101);
  ASSERT_EQ(mine, kUsers);
  // 100 of the user's jobs are dead letters.
  std::vector<LeasedJob> leased = LeaseAll(1000);
  int buried = 0;
  for (const LeasedJob& job : leased) {
    if (job.job.user_id() == "target" && buried < 100) {
      ASSERT_TRUE(store_->Bury(job.job.id(), job.lease, "400", MakeAttempt(clock_.Now(), 400)).ok());
      ++buried;
    } else {
      ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
    }
  }
  ASSERT_EQ(buried, 10);  // 1000 leased jobs hold 10 of the user's.
  const int64_t completed_others = 1000 - buried;
  ExpectCounts(*store_, total - 1000, 0, 0, buried);

  absl::StatusOr<DeletionOutcome> outcome =
      store_->ApplyDeletion(MakeDeletion("del_1", "target", {"s1"}));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.purged_jobs(), static_cast<uint64_t>(kUsers - buried));
  EXPECT_EQ(outcome->record.purged_dead_letters(), static_cast<uint64_t>(buried));
  // Per pending job: its pending-index key read, its record read and deleted; per dead letter:
  // the index key read, two deletes; a constant for the rest. Never anything per other job.
  EXPECT_LE(outcome->keys_touched, 3 * (kUsers - buried) + 3 * buried + 16);
  EXPECT_GE(outcome->keys_touched, 3 * (kUsers - buried));
  ExpectCounts(*store_, total - 1000 - (kUsers - buried) + 1, 0, 0, 0);
  (void)completed_others;
}

// Killed just before the deletion's write: nothing of it happened; just after: all of it did.
// Either way, applying the request again (same request id) does it exactly once.
TEST_F(RocksDbJobStoreTest, DeletionInterruptedByAKillIsAllOrNothing) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const char* stage : {"before_write", "after_write"}) {
    SCOPED_TRACE(stage);
    std::string path = testing::TempDir();
    if (!path.empty() && path.back() != '/') path.push_back('/');
    path += absl::StrCat("rocksdb_job_store_deletion_", stage);
    std::filesystem::remove_all(path);
    RocksDbJobStore::Options options = StoreOptions();
    options.path = path;
    {
      absl::StatusOr<std::unique_ptr<RocksDbJobStore>> store = RocksDbJobStore::Open(options);
      ASSERT_TRUE(store.ok()) << store.status();
      ASSERT_TRUE(AppendAndWait(**store, Items({OneJob(0, "d1", "u1", "s1"),
                                                OneJob(1, "d1", "u1", "s1"),
                                                OneJob(2, "d1", "u2", "s1")}))
                      .ok());
    }
    RocksDbJobStore::Options killing = options;
    const std::string kill_at = stage;
    killing.deletion_hook_for_testing = [kill_at](std::string_view at) {
      if (at == kill_at) raise(SIGKILL);
    };
    EXPECT_EXIT(
        {
          absl::StatusOr<std::unique_ptr<RocksDbJobStore>> store = RocksDbJobStore::Open(killing);
          if (!store.ok()) exit(1);
          (void)(*store)->ApplyDeletion(MakeDeletion("del_1", "u1", {"s1"}, "req-1"));
          exit(2);
        },
        testing::KilledBySignal(SIGKILL), "");

    absl::StatusOr<std::unique_ptr<RocksDbJobStore>> store = RocksDbJobStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    const bool applied = kill_at == "after_write";
    EXPECT_EQ((*store)->GetDeletion("del_1").value_or(std::nullopt).has_value(), applied);
    // After: u2's job and the notification. Before: the three jobs as they were.
    ExpectCounts(**store, applied ? 2 : 3, 0, 0, 0);
    absl::StatusOr<DeletionOutcome> again =
        (*store)->ApplyDeletion(MakeDeletion("del_2", "u1", {"s1"}, "req-1"));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->created, !applied);
    EXPECT_EQ(again->record.id(), applied ? "del_1" : "del_2");
    EXPECT_EQ(again->record.purged_jobs(), 2u);
    ExpectCounts(**store, 2, 0, 0, 0);
    store->reset();
    std::filesystem::remove_all(path);
  }
}

// Records written before the user index (an 8-byte due header, no user hash) are still read:
// leased, and found by a deletion after Open indexed them by parsing.
TEST_F(RocksDbJobStoreTest, RecordsOfTheEarlierFormatAreIndexed) {
  Open();
  store_.reset();
  {
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir_, &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& name : names) families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), dir_, families, &handles, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::ColumnFamilyHandle* jobs = nullptr;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "jobs") jobs = handles[i];
    }
    ASSERT_NE(jobs, nullptr);
    Job job = MakeJob("s1", "d1", "old-user", "m-old");
    job.set_id(7);
    job.set_due_unix_ms(absl::ToUnixMillis(clock_.Now()));
    std::string value(8, '\0');
    uint64_t due = static_cast<uint64_t>(job.due_unix_ms());
    for (int i = 7; i >= 0; --i, due >>= 8) value[i] = static_cast<char>(due & 0xff);
    job.AppendToString(&value);
    const char key[8] = {0, 0, 0, 0, 0, 0, 0, 7};
    rocksdb::WriteOptions sync;
    sync.sync = true;
    ASSERT_TRUE(db->Put(sync, jobs, rocksdb::Slice(key, 8), value).ok());
    // A data dir of the version before the `due` family: converted by the next Open.
    ASSERT_TRUE(db->Delete(sync, handles[0], "layout").ok());
    for (rocksdb::ColumnFamilyHandle* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  }
  Open();
  AppendAll(Items({OneJob(1, "d1", "old-user", "s1")}));
  ExpectCounts(*store_, 2, 0, 0, 0);
  absl::StatusOr<DeletionOutcome> outcome =
      store_->ApplyDeletion(MakeDeletion("del_1", "old-user", {"s1"}));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.purged_jobs(), 2u);
  std::vector<LeasedJob> leased = LeaseAll();
  ASSERT_THAT(leased, SizeIs(1));
  EXPECT_EQ(leased[0].job.type(), hookrelay::v1::DELETE);
}

// Counts sees each state: ready, scheduled, leased, dead.
TEST_F(RocksDbJobStoreTest, CountsEachState) {
  Open();
  AppendAll(Items({OneJob(0), OneJob(1), OneJob(2), OneJob(3)}));
  ExpectCounts(*store_, 4, 0, 0, 0);
  std::vector<LeasedJob> leased = LeaseAll(3);
  ASSERT_THAT(leased, SizeIs(3));
  ExpectCounts(*store_, 1, 0, 3, 0);
  const Attempt attempt = MakeAttempt(clock_.Now(), 500);
  ASSERT_TRUE(
      store_->Retry(leased[0].job.id(), leased[0].lease, clock_.Now() + absl::Minutes(5), attempt)
          .ok());
  ASSERT_TRUE(store_->Bury(leased[1].job.id(), leased[1].lease, "400", attempt).ok());
  ExpectCounts(*store_, 1, 1, 1, 1);
  clock_.Advance(absl::Minutes(5));
  ExpectCounts(*store_, 3, 0, 0, 1);  // The retry is due, the lease expired.
}

// Appends from several threads all get their callback, and every job is leased exactly once.
TEST_F(RocksDbJobStoreTest, ConcurrentAppends) {
  Open();
  constexpr int kThreads = 4;
  constexpr int kAppendsPerThread = 50;
  constexpr int kItemsPerAppend = 10;
  constexpr int kTotal = kThreads * kAppendsPerThread * kItemsPerAppend;
  std::atomic<int> callbacks{0};
  std::atomic<int> failures{0};
  absl::Notification all_done;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int a = 0; a < kAppendsPerThread; ++a) {
        std::vector<AppendItem> items;
        for (int i = 0; i < kItemsPerAppend; ++i) {
          items.push_back(OneJob((t * kAppendsPerThread + a) * kItemsPerAppend + i));
        }
        store_->Append(std::move(items), [&](absl::StatusOr<AppendResult> result) {
          if (!result.ok() ||
              result->stored != std::vector<bool>(kItemsPerAppend, true)) {
            failures.fetch_add(1);
          }
          if (callbacks.fetch_add(1) + 1 == kThreads * kAppendsPerThread) all_done.Notify();
        });
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  all_done.WaitForNotification();
  EXPECT_EQ(failures.load(), 0);

  absl::flat_hash_set<uint64_t> seen;
  for (;;) {
    std::vector<LeasedJob> leased = LeaseAll(128);
    if (leased.empty()) break;
    for (const LeasedJob& job : leased) {
      EXPECT_TRUE(seen.insert(job.job.id()).second) << "leased twice: " << job.job.id();
      EXPECT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kTotal));
  ExpectCounts(*store_, 0, 0, 0, 0);
}

// The same event appended concurrently from two threads is stored once, whichever groups the two
// copies land in (including a group prepared while the other copy's group is being written).
TEST_F(RocksDbJobStoreTest, ConcurrentDuplicatesAreStoredOnce) {
  Open();
  constexpr int kAppends = 200;
  constexpr int kItemsPerAppend = 5;
  std::atomic<int> stored{0};
  std::atomic<int> callbacks{0};
  absl::Notification all_done;
  auto run = [&] {
    for (int a = 0; a < kAppends; ++a) {
      std::vector<AppendItem> items;
      for (int i = 0; i < kItemsPerAppend; ++i) items.push_back(OneJob(a * kItemsPerAppend + i));
      store_->Append(std::move(items), [&](absl::StatusOr<AppendResult> result) {
        if (result.ok()) {
          for (bool s : result->stored) stored.fetch_add(s ? 1 : 0);
        }
        if (callbacks.fetch_add(1) + 1 == 2 * kAppends) all_done.Notify();
      });
    }
  };
  std::thread first(run);
  std::thread second(run);
  first.join();
  second.join();
  all_done.WaitForNotification();
  EXPECT_EQ(stored.load(), kAppends * kItemsPerAppend);
  EXPECT_EQ(store_->Counts().ready, kAppends * kItemsPerAppend);
}

// Deletions run between group commits while appends keep coming: nothing is lost, nothing is
// deadlocked, and every job of the deleted user appended before a deletion is gone after it.
TEST_F(RocksDbJobStoreTest, DeletionsWhileAppending) {
  Open();
  constexpr int kAppends = 100;
  std::atomic<int> callbacks{0};
  absl::Notification all_done;
  std::thread appender([&] {
    for (int a = 0; a < kAppends; ++a) {
      store_->Append(Items({OneJob(2 * a, "d1", "keep"), OneJob(2 * a + 1, "d1", "purge")}),
                     [&](absl::StatusOr<AppendResult> result) {
                       EXPECT_TRUE(result.ok()) << result.status();
                       if (callbacks.fetch_add(1) + 1 == kAppends) all_done.Notify();
                     });
    }
  });
  size_t purged = 0;
  int deletions = 0;
  while (!all_done.HasBeenNotified()) {
    absl::StatusOr<DeletionOutcome> outcome =
        store_->ApplyDeletion(MakeDeletion(absl::StrCat("del_", deletions++), "purge", {"s1"}));
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    purged += outcome->record.purged_jobs();
  }
  appender.join();
  absl::StatusOr<DeletionOutcome> last =
      store_->ApplyDeletion(MakeDeletion(absl::StrCat("del_", deletions++), "purge", {"s1"}));
  ASSERT_TRUE(last.ok()) << last.status();
  purged += last->record.purged_jobs();
  EXPECT_EQ(purged, static_cast<size_t>(kAppends));
  std::vector<LeasedJob> leased = LeaseAll();
  ASSERT_THAT(leased, SizeIs(kAppends + deletions));
  for (const LeasedJob& job : leased) {
    EXPECT_TRUE(job.job.user_id() == "keep" || job.job.type() == hookrelay::v1::DELETE)
        << job.job.ShortDebugString();
  }
}

// Destroying the store runs the callback of every pending Append, after writing it.
TEST_F(RocksDbJobStoreTest, CloseDrainsPendingAppends) {
  Open();
  constexpr int kAppends = 200;
  std::atomic<int> ok{0};
  std::atomic<int> callbacks{0};
  for (int a = 0; a < kAppends; ++a) {
    store_->Append(Items({OneJob(2 * a), OneJob(2 * a + 1)}),
                   [&](absl::StatusOr<AppendResult> result) {
                     if (result.ok()) ok.fetch_add(1);
                     callbacks.fetch_add(1);
                   });
  }
  store_.reset();
  EXPECT_EQ(callbacks.load(), kAppends);
  EXPECT_EQ(ok.load(), kAppends);

  Open();
  ExpectCounts(*store_, 2 * kAppends, 0, 0, 0);
}

// Jobs whose Append reported OK survive kill -9 of the process: the WAL is written and synced
// before the callback runs, nothing is left in the process's buffers.
TEST_F(RocksDbJobStoreTest, AcknowledgedJobsSurviveKill) {
  // "threadsafe" runs the statement in a fresh copy of the test binary, which re-runs this test
  // up to here: the data dir must have the same name in both processes.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::string path = testing::TempDir();
  if (!path.empty() && path.back() != '/') path.push_back('/');
  path += "rocksdb_job_store_killed";
  std::filesystem::remove_all(path);  // Left over from an earlier run with the same TempDir.
  RocksDbJobStore::Options options = StoreOptions();
  options.path = path;
  EXPECT_EXIT(
      {
        absl::StatusOr<std::unique_ptr<RocksDbJobStore>> store = RocksDbJobStore::Open(options);
        if (!store.ok()) exit(1);
        std::vector<AppendItem> items;
        for (int i = 0; i < 100; ++i) items.push_back(OneJob(i));
        absl::StatusOr<AppendResult> result = AppendAndWait(**store, std::move(items));
        if (!result.ok()) exit(2);
        raise(SIGKILL);
      },
      testing::KilledBySignal(SIGKILL), "");

  absl::StatusOr<std::unique_ptr<RocksDbJobStore>> store = RocksDbJobStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectCounts(**store, 100, 0, 0, 0);
  store->reset();
  std::filesystem::remove_all(path);
}

// A data dir can be opened by one store at a time; the error says so.
TEST_F(RocksDbJobStoreTest, OpeningADirInUseFails) {
  Open();
  absl::StatusOr<std::unique_ptr<RocksDbJobStore>> second = RocksDbJobStore::Open(StoreOptions());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("is in use"));
  EXPECT_THAT(second.status().message(), HasSubstr(dir_));

  store_.reset();
  Open();  // Free again once closed.
}

// Bad options are refused with a clear message.
TEST_F(RocksDbJobStoreTest, InvalidOptions) {
  RocksDbJobStore::Options options = StoreOptions();
  options.path = "";
  EXPECT_EQ(RocksDbJobStore::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = StoreOptions();
  options.dedup_window = absl::ZeroDuration();
  EXPECT_THAT(RocksDbJobStore::Open(options).status().message(), HasSubstr("dedup_window"));
  options = StoreOptions();
  options.lease_duration = absl::ZeroDuration();
  EXPECT_THAT(RocksDbJobStore::Open(options).status().message(), HasSubstr("lease_duration"));
}

// Issue 14: a backlog larger than the in-memory window is delivered in due order, each job once,
// across restarts; the window never holds more than its size.
TEST_F(RocksDbJobStoreTest, BacklogBeyondTheWindowIsPagedInDueOrderAcrossRestarts) {
  window_size_ = 8;
  Open();
  std::vector<uint64_t> appended;
  for (int n = 0; n < 100; ++n) {
    clock_.Advance(absl::Milliseconds(1));  // Due times differ, and follow the append order.
    absl::StatusOr<AppendResult> result =
        AppendAndWait(*store_, Items({OneJob(n, "d1", absl::StrCat("u", n % 7))}));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_LE(store_->MemoryStatsForTesting().window, 8u);
  }
  EXPECT_FALSE(store_->MemoryStatsForTesting().caught_up);
  ExpectCounts(*store_, 100, 0, 0, 0);

  std::vector<uint64_t> delivered;
  for (int round = 0; delivered.size() < 100; ++round) {
    ASSERT_LT(round, 100);
    std::vector<LeasedJob> leased = LeaseAll(3);
    ASSERT_FALSE(leased.empty());
    for (const LeasedJob& job : leased) {
      ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
      delivered.push_back(job.job.id());
    }
    EXPECT_LE(store_->MemoryStatsForTesting().window, 8u);
    if (round % 5 == 4) {  // A restart now and then: the cursor starts over from disk.
      store_.reset();
      Open();
      ExpectCounts(*store_, 100 - static_cast<int64_t>(delivered.size()), 0, 0, 0);
    }
  }
  EXPECT_THAT(LeaseAll(), IsEmpty());
  std::vector<uint64_t> expected = delivered;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(delivered, expected);  // Due order (= append order here), each job once.
  EXPECT_EQ(expected.size(), 100u);
  EXPECT_EQ(std::adjacent_find(expected.begin(), expected.end()), expected.end());
}

// Issue 23: a destination held back (no budget) with more jobs than the window does not hide the
// jobs of another destination appended after them on disk: the held ones stay queued (not
// leased, not written), the held destination is detached (its jobs beyond a chunk leave the
// window), and the other destination's jobs are leased; with a budget again, the held ones
// come in order.
TEST_F(RocksDbJobStoreTest, HeldDestinationBeyondTheWindowDoesNotHideOthers) {
  window_size_ = 4;
  Open();
  for (int n = 0; n < 40; ++n) {
    clock_.Advance(absl::Milliseconds(1));
    ASSERT_TRUE(AppendAndWait(*store_, Items({OneJob(n, "held", "u")})).ok());
  }
  for (int n = 40; n < 43; ++n) {
    clock_.Advance(absl::Milliseconds(1));
    ASSERT_TRUE(AppendAndWait(*store_, Items({OneJob(n, "free", "u")})).ok());
  }
  store_.reset();
  Open();  // Everything on disk, the window empty: the pager brings it in.
  auto budget = [](std::string_view destination) -> size_t {
    return destination == "held" ? 0 : ~size_t{0};
  };
  absl::StatusOr<std::vector<LeasedJob>> free = store_->Lease(10, budget);
  ASSERT_TRUE(free.ok()) << free.status();
  ASSERT_EQ(free->size(), 3u);
  for (const LeasedJob& j : *free) EXPECT_EQ(j.job.destination_id(), "free");
  // The held destination was detached: its jobs beyond one chunk left memory.
  EXPECT_EQ(store_->MemoryStatsForTesting().detached, 1u);
  EXPECT_LE(store_->MemoryStatsForTesting().window, 4u);
  std::vector<uint64_t> ids;
  for (int round = 0; ids.size() < 40 && round < 20; ++round) {
    absl::StatusOr<std::vector<LeasedJob>> held = store_->Lease(7);
    ASSERT_TRUE(held.ok()) << held.status();
    for (const LeasedJob& j : *held) {
      EXPECT_EQ(j.job.destination_id(), "held");
      ids.push_back(j.job.id());
    }
  }
  ASSERT_EQ(ids.size(), 40u);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end())) << "held jobs out of order";
  ExpectCounts(*store_, 0, 0, 43, 0);
}

// Issue 23: a throttled destination's backlog beyond HeldWindowLimit is detached, not leased
// and written back: the other destination's jobs behind it on disk go out while the held ones
// stay queued (none leased without budget, none written), memory stays bounded, and with a
// budget again every held job comes out exactly once, in order, across appends, retries and
// restarts made while detached (the fresh floor written meanwhile must not step over them).
TEST_F(RocksDbJobStoreTest, HeldBacklogBeyondTheHeldWindowIsPagedOnItsOwn) {
  window_size_ = 8;  // page chunk 2, HeldWindowLimit 128
  Open();
  std::vector<uint64_t> held_ids;
  int n = 0;
  auto append = [&](const std::string& destination) {
    clock_.Advance(absl::Milliseconds(1));
    absl::StatusOr<AppendResult> r = AppendAndWait(*store_, Items({OneJob(n++, destination, "u")}));
    ASSERT_TRUE(r.ok()) << r.status();
  };
  for (int i = 0; i < 600; ++i) append("held");
  for (int i = 0; i < 30; ++i) append("free");
  store_.reset();
  Open();  // everything on disk, the window empty
  size_t held_budget = 0;
  auto budget = [&](std::string_view destination) -> size_t {
    return destination == "held" ? held_budget : ~size_t{0};
  };
  std::set<uint64_t> delivered;
  std::vector<uint64_t> held_order;
  std::set<uint64_t> retried;
  auto lease = [&](size_t max) {
    absl::StatusOr<std::vector<LeasedJob>> leased = store_->Lease(max, budget);
    EXPECT_TRUE(leased.ok()) << leased.status();
    return leased.ok() ? *std::move(leased) : std::vector<LeasedJob>();
  };
  // The free jobs come out though 600 held ones are before them on disk.
  size_t free_out = 0;
  for (int round = 0; free_out < 30 && round < 100; ++round) {
    for (const LeasedJob& j : lease(10)) {
      ASSERT_EQ(j.job.destination_id(), "free") << "a held job leased without budget";
      ASSERT_TRUE(store_->Complete(j.job.id(), j.lease).ok());
      EXPECT_TRUE(delivered.insert(j.job.id()).second);
      ++free_out;
    }
    EXPECT_LE(store_->MemoryStatsForTesting().window, 128u + 2u);
  }
  ASSERT_EQ(free_out, 30u);
  EXPECT_EQ(store_->MemoryStatsForTesting().detached, 1u);
  EXPECT_EQ(store_->MemoryStatsForTesting().overlay, 0u) << "no held job was written back";
  ExpectCounts(*store_, 600, 0, 0, 0);

  // While detached: more of both, a little budget for the held one (some retried), the fresh
  // floor written (an append a second later), then a restart.
  for (int i = 0; i < 5; ++i) append("held");
  for (int i = 0; i < 5; ++i) append("free");
  held_budget = 3;
  for (int round = 0; round < 4; ++round) {
    for (const LeasedJob& j : lease(10)) {
      if (j.job.destination_id() == "held" && retried.size() < 3 && round % 2 == 0) {
        ASSERT_TRUE(store_->Retry(j.job.id(), j.lease, clock_.Now() + absl::Seconds(1),
                                  MakeAttempt(clock_.Now(), 503))
                        .ok());
        retried.insert(j.job.id());
        continue;
      }
      ASSERT_TRUE(store_->Complete(j.job.id(), j.lease).ok());
      EXPECT_TRUE(delivered.insert(j.job.id()).second) << "job " << j.job.id() << " twice";
      if (j.job.destination_id() == "held") held_order.push_back(j.job.id());
    }
    held_budget = 3;
  }
  clock_.Advance(absl::Seconds(2));
  append("free");
  store_->Flush();
  store_.reset();
  Open();
  const int64_t left = 600 + 5 + 36 - static_cast<int64_t>(delivered.size());
  ExpectCounts(*store_, left, 0, 0, 0);
  held_budget = 0;
  // Detached again after the restart, then everything with budget.
  for (int round = 0; round < 200 && delivered.size() < 641; ++round) {
    if (round == 20) held_budget = ~size_t{0};
    clock_.Advance(absl::Milliseconds(100));
    for (const LeasedJob& j : lease(25)) {
      if (held_budget == 0) {
        ASSERT_EQ(j.job.destination_id(), "free");
      }
      ASSERT_TRUE(store_->Complete(j.job.id(), j.lease).ok());
      EXPECT_TRUE(delivered.insert(j.job.id()).second) << "job " << j.job.id() << " twice";
      if (j.job.destination_id() == "held") held_order.push_back(j.job.id());
    }
  }
  EXPECT_EQ(delivered.size(), 641u);
  ExpectCounts(*store_, 0, 0, 0, 0);
  EXPECT_THAT(LeaseAll(), IsEmpty());
  // Held jobs never retried came out in their order.
  std::vector<uint64_t> plain;
  for (uint64_t id : held_order) {
    if (!retried.contains(id)) plain.push_back(id);
  }
  EXPECT_TRUE(std::is_sorted(plain.begin(), plain.end()));
  EXPECT_EQ(plain.size() + retried.size(), 605u);
}

// Issue 14: appends into a caught-up window beyond its size stay on disk; retries at or after
// the cursor wait in the parked set until written and then come back from disk at their time;
// counts are right throughout and after a restart.
TEST_F(RocksDbJobStoreTest, RetriesAndCountsBeyondTheWindow) {
  window_size_ = 4;
  Open();
  std::vector<AppendItem> items;
  for (int n = 0; n < 20; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));
  EXPECT_LE(store_->MemoryStatsForTesting().window, 4u);
  ExpectCounts(*store_, 20, 0, 0, 0);

  std::vector<LeasedJob> first = LeaseAll(2);
  ASSERT_THAT(first, SizeIs(2));
  const Attempt attempt = MakeAttempt(clock_.Now(), 500);
  for (const LeasedJob& job : first) {
    ASSERT_TRUE(store_->Retry(job.job.id(), job.lease, clock_.Now() + absl::Minutes(1), attempt)
                    .ok());
  }
  ExpectCounts(*store_, 18, 2, 0, 0);
  std::vector<LeasedJob> dead = LeaseAll(1);
  ASSERT_THAT(dead, SizeIs(1));
  ASSERT_TRUE(store_->Bury(dead[0].job.id(), dead[0].lease, "400", attempt).ok());
  ExpectCounts(*store_, 17, 2, 0, 1);
  store_->Flush();
  EXPECT_EQ(store_->MemoryStatsForTesting().parked, 0u);  // Written: found on disk from now on.

  store_.reset();
  Open();
  ExpectCounts(*store_, 17, 2, 0, 1);
  std::vector<uint64_t> now_ids;
  for (int round = 0; round < 20; ++round) {
    std::vector<LeasedJob> leased = LeaseAll(5);
    if (leased.empty()) break;
    for (const LeasedJob& job : leased) {
      now_ids.push_back(job.job.id());
      ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
    }
    EXPECT_LE(store_->MemoryStatsForTesting().window, 4u);
  }
  EXPECT_THAT(now_ids, SizeIs(17));  // Not the retries: they are due in a minute.
  ExpectCounts(*store_, 0, 2, 0, 1);
  EXPECT_EQ(store_->NextDue(), clock_.Now() + absl::Minutes(1));
  clock_.Advance(absl::Minutes(1));
  std::vector<LeasedJob> retried = LeaseAll();
  EXPECT_EQ(Ids(retried), Ids(first));
  ExpectCounts(*store_, 0, 0, 2, 1);
}

// Issue 14: leases are memory-only; after a crash the leased jobs of a backlog larger than the
// window come back, first in line (their due times are the oldest), and nothing is lost.
TEST_F(RocksDbJobStoreTest, LeasesLostInACrashComeBackFirst) {
  window_size_ = 4;
  Open();
  std::vector<AppendItem> items;
  for (int n = 0; n < 30; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));
  std::vector<LeasedJob> before = LeaseAll(3);
  ASSERT_THAT(before, SizeIs(3));
  ASSERT_TRUE(store_->Complete(before[1].job.id(), before[1].lease).ok());
  store_.reset();  // The leases of before[0] and before[2] are gone with the process.
  clock_.Advance(absl::Seconds(1));
  Open();
  ExpectCounts(*store_, 29, 0, 0, 0);
  std::vector<LeasedJob> again = LeaseAll(2);
  EXPECT_EQ(Ids(again), (std::vector<uint64_t>{before[0].job.id(), before[2].job.id()}));
  EXPECT_FALSE(store_->Complete(before[0].job.id(), before[0].lease).ok());  // Old lease.
  size_t total = again.size();
  for (int round = 0; round < 20; ++round) {
    std::vector<LeasedJob> leased = LeaseAll(4);
    if (leased.empty()) break;
    total += leased.size();
  }
  EXPECT_EQ(total, 29u);
}

// Issue 14: a deletion finds the user's jobs wherever they are: in the window, on disk beyond
// it, retried and parked; the window stays consistent afterwards.
TEST_F(RocksDbJobStoreTest, DeletionReachesJobsBeyondTheWindow) {
  window_size_ = 4;
  Open();
  std::vector<AppendItem> items;
  for (int n = 0; n < 24; ++n) items.push_back(OneJob(n, "d1", n % 2 == 0 ? "u1" : "u2"));
  AppendAll(std::move(items));
  std::vector<LeasedJob> leased = LeaseAll(2);  // One of u1, one of u2.
  ASSERT_THAT(leased, SizeIs(2));
  const Attempt attempt = MakeAttempt(clock_.Now(), 500);
  for (const LeasedJob& job : leased) {
    ASSERT_TRUE(
        store_->Retry(job.job.id(), job.lease, clock_.Now() + absl::Hours(1), attempt).ok());
  }
  absl::StatusOr<DeletionOutcome> outcome =
      store_->ApplyDeletion(MakeDeletion("del_1", "u1", {"s1"}));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.purged_jobs(), 12u);
  ExpectCounts(*store_, 11 + 1, 1, 0, 0);  // u2's ready jobs and the notification; u2's retry.
  std::vector<std::string> users;
  for (int round = 0; round < 20; ++round) {
    std::vector<LeasedJob> batch = LeaseAll(3);
    if (batch.empty()) break;
    for (const LeasedJob& job : batch) {
      users.push_back(job.job.type() == hookrelay::v1::DELETE ? "delete" : job.job.user_id());
      ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
    }
  }
  EXPECT_EQ(std::count(users.begin(), users.end(), "u2"), 11);
  EXPECT_EQ(std::count(users.begin(), users.end(), "delete"), 1);
  EXPECT_EQ(users.size(), 12u);
  store_.reset();
  clock_.Advance(absl::Hours(1));
  Open();
  ExpectCounts(*store_, 1, 0, 0, 0);  // u2's retry, due now.
  std::vector<LeasedJob> last = LeaseAll();
  ASSERT_THAT(last, SizeIs(1));
  EXPECT_EQ(last[0].job.user_id(), "u2");
}

// A deletion while a destination is detached reaches its jobs wherever they are: kept in memory,
// paged in by its own cursor, or on disk only; none of the user's comes out afterwards, every
// other job does, once.
TEST_F(RocksDbJobStoreTest, DeletionReachesADetachedDestinationsJobs) {
  window_size_ = 8;  // page chunk 2
  Open();
  for (int n = 0; n < 300; ++n) {
    clock_.Advance(absl::Milliseconds(1));
    ASSERT_TRUE(
        AppendAndWait(*store_, Items({OneJob(n, "held", n % 3 == 0 ? "u1" : "u2")})).ok());
  }
  for (int n = 300; n < 310; ++n) {
    clock_.Advance(absl::Milliseconds(1));
    ASSERT_TRUE(AppendAndWait(*store_, Items({OneJob(n, "free", "u2")})).ok());
  }
  size_t held_budget = 0;
  auto budget = [&](std::string_view destination) -> size_t {
    return destination == "held" ? held_budget : ~size_t{0};
  };
  size_t free_out = 0;
  for (int round = 0; free_out < 10 && round < 50; ++round) {
    absl::StatusOr<std::vector<LeasedJob>> leased = store_->Lease(10, budget);
    ASSERT_TRUE(leased.ok()) << leased.status();
    for (const LeasedJob& j : *leased) {
      ASSERT_EQ(j.job.destination_id(), "free");
      ASSERT_TRUE(store_->Complete(j.job.id(), j.lease).ok());
      ++free_out;
    }
  }
  ASSERT_EQ(free_out, 10u);
  ASSERT_EQ(store_->MemoryStatsForTesting().detached, 1u);
  // Some of the held destination's jobs through its own cursor, then the deletion.
  held_budget = 5;
  std::set<uint64_t> seen;
  absl::StatusOr<std::vector<LeasedJob>> some = store_->Lease(5, budget);
  ASSERT_TRUE(some.ok());
  for (const LeasedJob& j : *some) {
    ASSERT_TRUE(store_->Complete(j.job.id(), j.lease).ok());
    seen.insert(j.job.id());
  }
  const size_t u1_before =
      std::count_if(some->begin(), some->end(), [](const LeasedJob& j) { return j.job.user_id() == "u1"; });
  absl::StatusOr<DeletionOutcome> outcome =
      store_->ApplyDeletion(MakeDeletion("del_1", "u1", {"s1"}));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.purged_jobs(), 100u - u1_before);
  held_budget = ~size_t{0};
  size_t u2 = 0;
  for (int round = 0; round < 300; ++round) {
    clock_.Advance(absl::Milliseconds(10));
    absl::StatusOr<std::vector<LeasedJob>> batch = store_->Lease(20, budget);
    ASSERT_TRUE(batch.ok());
    if (batch->empty() && store_->Counts().ready == 0) break;
    for (const LeasedJob& j : *batch) {
      EXPECT_TRUE(seen.insert(j.job.id()).second) << "job " << j.job.id() << " twice";
      if (j.job.type() != hookrelay::v1::DELETE) {
        EXPECT_EQ(j.job.user_id(), "u2");
        ++u2;
      }
      ASSERT_TRUE(store_->Complete(j.job.id(), j.lease).ok());
    }
  }
  EXPECT_EQ(u2 + (some->size() - u1_before), 200u);
  ExpectCounts(*store_, 0, 0, 0, 0);
}

// Issue 14: fresh records (appended jobs, no `due` key) and keyed ones (retries) are paged in
// as one order: a retry due before later appends is leased before them, one due after them
// after them, with a window smaller than either kind and restarts (with leases outstanding,
// lost as in a crash) in between; every job is leased, and completed, once.
TEST_F(RocksDbJobStoreTest, RetriesAndFreshJobsArePagedInOneDueOrder) {
  window_size_ = 4;
  Open();
  const absl::Time t0 = clock_.Now();
  std::vector<AppendItem> items;
  for (int n = 0; n < 6; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));  // Ids 1-6, due t0.
  std::vector<LeasedJob> first = LeaseAll(2);
  ASSERT_EQ(Ids(first), (std::vector<uint64_t>{1, 2}));
  const Attempt attempt = MakeAttempt(clock_.Now(), 500);
  ASSERT_TRUE(store_->Retry(1, first[0].lease, t0 + absl::Seconds(2), attempt).ok());
  ASSERT_TRUE(store_->Retry(2, first[1].lease, t0 + absl::Seconds(10), attempt).ok());
  clock_.Advance(absl::Seconds(3));
  items.clear();
  for (int n = 6; n < 16; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));  // Ids 7-16, due t0 + 3 s.
  ExpectCounts(*store_, 15, 1, 0, 0);  // Job 1 is due (t0 + 2 s), job 2 is not.
  clock_.Advance(absl::Seconds(20));  // Everything is due.

  const std::vector<uint64_t> expected = {3, 4, 5, 6, 1, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 2};
  std::vector<uint64_t> order;
  for (int round = 0; order.size() < expected.size(); ++round) {
    ASSERT_LT(round, 50);
    std::vector<LeasedJob> leased = LeaseAll(2);
    ASSERT_FALSE(leased.empty()) << "after " << order.size();
    EXPECT_LE(store_->MemoryStatsForTesting().window, 4u);
    if (round % 3 == 1) {
      // A crash with these leases outstanding: they come back first after the restart.
      store_.reset();
      Open();
      ExpectCounts(*store_, static_cast<int64_t>(expected.size() - order.size()), 0, 0, 0);
      continue;
    }
    for (const LeasedJob& job : leased) {
      ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
      order.push_back(job.job.id());
    }
    if (round % 3 == 2) store_->Flush();
  }
  EXPECT_EQ(order, expected);
  EXPECT_THAT(LeaseAll(), IsEmpty());
  ExpectCounts(*store_, 0, 0, 0, 0);
  store_.reset();
  Open();
  ExpectCounts(*store_, 0, 0, 0, 0);
  EXPECT_THAT(LeaseAll(), IsEmpty());
}

// Issue 14: jobs appended while the window is caught up join it directly; a retry of a fresh
// job due before the fresh jobs still on disk is leased before them once paged in.
TEST_F(RocksDbJobStoreTest, RetryDueBeforeFreshJobsOnDiskIsLeasedFirst) {
  window_size_ = 4;
  Open();
  AppendAll(Items({OneJob(0)}));  // Id 1, due t0, in the window.
  std::vector<LeasedJob> leased = LeaseAll();
  ASSERT_THAT(leased, SizeIs(1));
  const absl::Time retry_at = clock_.Now() + absl::Milliseconds(500);
  ASSERT_TRUE(store_->Retry(1, leased[0].lease, retry_at, MakeAttempt(clock_.Now(), 503)).ok());
  clock_.Advance(absl::Seconds(1));
  std::vector<AppendItem> items;
  for (int n = 1; n < 21; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));  // Ids 2-21, due t0 + 1 s: beyond the window.
  EXPECT_FALSE(store_->MemoryStatsForTesting().caught_up);
  store_->Flush();
  store_.reset();  // Paged in from disk: the retry's `due` key and the fresh records merged.
  Open();
  std::vector<uint64_t> order;
  for (int round = 0; round < 30; ++round) {
    std::vector<LeasedJob> batch = LeaseAll(3);
    if (batch.empty()) break;
    for (const LeasedJob& job : batch) {
      order.push_back(job.job.id());
      ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
    }
  }
  ASSERT_THAT(order, SizeIs(21));
  EXPECT_EQ(order.front(), 1u);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
}

// Issue 14: a clock that goes back makes appended jobs keyed (with `due` keys) instead of fresh,
// so fresh records stay in due order by id; both kinds are leased in due order, before and
// after a restart.
TEST_F(RocksDbJobStoreTest, AppendsAfterTheClockWentBackAreLeasedInDueOrder) {
  window_size_ = 4;
  Open();
  const absl::Time t0 = clock_.Now();
  clock_.Advance(absl::Seconds(10));
  std::vector<AppendItem> items;
  for (int n = 0; n < 6; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));  // Ids 1-6, fresh, due t0 + 10 s.
  clock_.Set(t0);
  items.clear();
  for (int n = 6; n < 12; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));  // Ids 7-12, due t0: not in id order, so keyed.
  clock_.Advance(absl::Seconds(1));
  items.clear();
  for (int n = 12; n < 14; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));  // Ids 13-14, due t0 + 1 s: still below the fresh ones.
  ExpectCounts(*store_, 8, 6, 0, 0);
  store_.reset();
  Open();
  ExpectCounts(*store_, 8, 6, 0, 0);
  clock_.Advance(absl::Seconds(10));
  std::vector<uint64_t> order;
  for (int round = 0; round < 30; ++round) {
    std::vector<LeasedJob> batch = LeaseAll(3);
    if (batch.empty()) break;
    for (const LeasedJob& job : batch) {
      order.push_back(job.job.id());
      ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
    }
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{7, 8, 9, 10, 11, 12, 13, 14, 1, 2, 3, 4, 5, 6}));
  ExpectCounts(*store_, 0, 0, 0, 0);
}

// Issue 14: fresh jobs that were all retried (their records rewritten with `due` keys) are
// stepped over by the fresh pager once; after restarts the retries and later appends are all
// found, and the fresh floor lets Open skip the rewritten records.
TEST_F(RocksDbJobStoreTest, RetriedFreshJobsComeBackAfterRestarts) {
  window_size_ = 8;
  Open();
  std::vector<AppendItem> items;
  for (int n = 0; n < 40; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));  // Ids 1-40.
  const Attempt attempt = MakeAttempt(clock_.Now(), 500);
  for (int round = 0; round < 20; ++round) {
    std::vector<LeasedJob> batch = LeaseAll(4);
    if (batch.empty()) break;
    for (const LeasedJob& job : batch) {
      ASSERT_TRUE(
          store_->Retry(job.job.id(), job.lease, clock_.Now() + absl::Minutes(1), attempt).ok());
    }
  }
  ExpectCounts(*store_, 0, 40, 0, 0);
  // The retries are written: no fresh record below id 41 is left. (Twice: the group holding the
  // first barrier may still count as being written when the next group is prepared.)
  store_->Flush();
  store_->Flush();
  clock_.Advance(absl::Seconds(2));  // The fresh floor is written at most once a second.
  AppendAll(Items({OneJob(100)}));  // Id 41.
  store_->Flush();
  EXPECT_EQ(store_->MemoryStatsForTesting().fresh_floor, 41u);
  store_.reset();
  Open();
  EXPECT_EQ(store_->MemoryStatsForTesting().fresh_floor, 41u);  // Open's pager starts there.
  ExpectCounts(*store_, 1, 40, 0, 0);
  std::vector<LeasedJob> now = LeaseAll();
  ASSERT_THAT(now, SizeIs(1));
  EXPECT_EQ(now[0].job.id(), 41u);
  ASSERT_TRUE(store_->Complete(41, now[0].lease).ok());
  clock_.Advance(absl::Minutes(1));
  store_.reset();
  Open();
  std::vector<uint64_t> order;
  for (int round = 0; round < 30; ++round) {
    std::vector<LeasedJob> batch = LeaseAll(5);
    if (batch.empty()) break;
    for (const LeasedJob& job : batch) {
      order.push_back(job.job.id());
      ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
    }
  }
  ASSERT_THAT(order, SizeIs(40));
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
  ExpectCounts(*store_, 0, 0, 0, 0);
}

// Issue 14: the fresh floor never passes a fresh record that is still on disk: a job leased
// (or retried, not yet written) when the floor is written comes back after a crash.
TEST_F(RocksDbJobStoreTest, FreshFloorStaysBelowLeasedAndRetriedJobs) {
  window_size_ = 4;
  Open();
  std::vector<AppendItem> items;
  for (int n = 0; n < 10; ++n) items.push_back(OneJob(n));
  AppendAll(std::move(items));  // Ids 1-10.
  for (const LeasedJob& job : LeaseAll(3)) {
    ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
  }
  std::vector<LeasedJob> leased = LeaseAll(3);  // 4, 5, 6.
  ASSERT_EQ(Ids(leased), (std::vector<uint64_t>{4, 5, 6}));
  ASSERT_TRUE(store_->Complete(5, leased[1].lease).ok());
  ASSERT_TRUE(store_->Retry(6, leased[2].lease, clock_.Now() + absl::Minutes(1),
                            MakeAttempt(clock_.Now(), 500))
                  .ok());
  store_->Flush();  // Twice: see RetriedFreshJobsComeBackAfterRestarts.
  store_->Flush();
  clock_.Advance(absl::Seconds(2));
  AppendAll(Items({OneJob(100)}));  // Id 11; its group writes the floor.
  store_->Flush();
  EXPECT_EQ(store_->MemoryStatsForTesting().fresh_floor, 4u);  // Job 4 is leased.
  store_.reset();  // A crash: the lease of job 4 is lost.
  Open();
  ExpectCounts(*store_, 6, 1, 0, 0);  // 4, 7-11; the retry of 6.
  std::vector<LeasedJob> again = LeaseAll();
  EXPECT_EQ(Ids(again), (std::vector<uint64_t>{4, 7, 8, 9, 10, 11}));
  for (const LeasedJob& job : again) ASSERT_TRUE(store_->Complete(job.job.id(), job.lease).ok());
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(Ids(LeaseAll()), (std::vector<uint64_t>{6}));
}

}  // namespace
}  // namespace hookrelay::collector
