// The embedded store's group commit linger (Options::commit_linger): small writes arriving while
// the disk is idle wait for company; a linger that gathers nothing backs off.

#include <stdlib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"
#include "collector/store/store.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {
namespace {

using ::testing::HasSubstr;

AppendItem Jobs(int n, int count) {
  AppendItem item;
  const std::string message_id = absl::StrCat("msg-", n);
  item.dedup_key = DedupKey("s1", message_id);
  for (int i = 0; i < count; ++i) {
    hookrelay::v1::Job job;
    job.set_source_id("s1");
    job.set_destination_id(absl::StrCat("d", i));
    job.set_user_id("u1");
    job.set_message_id(message_id);
    job.set_event_json(R"({"type":"track","event":"Order Completed"})");
    item.jobs.emplace_back(job);
  }
  return item;
}

// Commits, items written and lingers by result, from the store's metrics.
struct CommitStats {
  uint64_t commits = 0;
  double items = 0;
  std::map<std::string, double> lingers;
};

CommitStats Stats(prometheus::Registry& registry) {
  CommitStats stats;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name == "hookrelay_store_commit_batch_items") {
      stats.commits = family.metric.at(0).histogram.sample_count;
      stats.items = family.metric.at(0).histogram.sample_sum;
    }
    if (family.name == "hookrelay_store_commit_lingers_total") {
      for (const prometheus::ClientMetric& m : family.metric) {
        stats.lingers[m.label.at(0).value] = m.counter.value;
      }
    }
  }
  return stats;
}

class GroupCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = testing::TempDir();
    if (!pattern.empty() && pattern.back() != '/') pattern.push_back('/');
    pattern += "group_commit_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Open(absl::Duration linger, size_t linger_jobs) {
    RocksDbJobStore::Options options;
    options.path = dir_;
    options.registry = &registry_;
    options.commit_linger = linger;
    options.linger_jobs = linger_jobs;
    absl::StatusOr<std::unique_ptr<RocksDbJobStore>> store = RocksDbJobStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // Appends without waiting; `done` is notified with the append's success.
  void Append(AppendItem item, absl::Notification& done, bool& ok) {
    std::vector<AppendItem> items;
    items.push_back(std::move(item));
    store_->Append(std::move(items), [&done, &ok](absl::StatusOr<AppendResult> result) {
      ok = result.ok();
      done.Notify();
    });
  }

  // Waits (bounded) until the writer has finished with every group handed to it.
  void AwaitIdleWriter() {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!store_->WriterIdleForTesting() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_TRUE(store_->WriterIdleForTesting());
  }

  std::string dir_;
  prometheus::Registry registry_;
  std::unique_ptr<RocksDbJobStore> store_;
};

// Two appends 50 ms apart go in one commit: the first waits for company, and the second (the
// queue now holds two appends and linger_jobs jobs) ends the wait long before the one-second
// linger is over.
TEST_F(GroupCommitTest, AppendsArrivingWithinTheLingerShareOneCommit) {
  Open(absl::Seconds(1), /*linger_jobs=*/3);
  absl::Notification first_done, second_done;
  bool first_ok = false, second_ok = false;
  Append(Jobs(1, 1), first_done, first_ok);
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time second_at = absl::Now();
  Append(Jobs(2, 2), second_done, second_ok);
  ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(second_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - second_at, absl::Milliseconds(900));
  EXPECT_TRUE(first_ok);
  EXPECT_TRUE(second_ok);
  const CommitStats stats = Stats(registry_);
  EXPECT_EQ(stats.commits, 1u);
  EXPECT_EQ(stats.items, 3);
  EXPECT_EQ(stats.lingers.at("joined"), 1);
  EXPECT_EQ(stats.lingers.at("alone"), 0);
}

// Three clients answered by one commit: the next linger waits for all three to be back (not
// just two), then ends at once.
TEST_F(GroupCommitTest, ALingerWaitsForEveryClientJustAnswered) {
  Open(absl::Seconds(1), /*linger_jobs=*/64);
  {
    // Three appends queued behind a pause go in one group (three queued: no linger).
    std::shared_ptr<absl::Notification> resume = store_->PauseWritesForTesting();
    absl::Notification done[3];
    bool ok[3] = {false, false, false};
    for (int i = 0; i < 3; ++i) Append(Jobs(i, 1), done[i], ok[i]);
    resume->Notify();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(done[i].WaitForNotificationWithTimeout(absl::Seconds(10)));
      EXPECT_TRUE(ok[i]);
    }
  }
  EXPECT_EQ(Stats(registry_).commits, 1u);
  AwaitIdleWriter();
  absl::Notification done[3];
  bool ok[3] = {false, false, false};
  Append(Jobs(10, 1), done[0], ok[0]);
  Append(Jobs(11, 1), done[1], ok[1]);
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time third_at = absl::Now();
  Append(Jobs(12, 1), done[2], ok[2]);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(done[i].WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_TRUE(ok[i]);
  }
  EXPECT_LT(absl::Now() - third_at, absl::Milliseconds(900));
  const CommitStats stats = Stats(registry_);
  EXPECT_EQ(stats.commits, 2u);
  EXPECT_EQ(stats.items, 6);
  EXPECT_EQ(stats.lingers.at("joined"), 1);
}

// One client writing one append at a time: a linger that gathers nothing makes the next 1, then
// 2, then 4 small groups skip it (groups 1, 3 and 6 of 8 linger).
TEST_F(GroupCommitTest, ALingerThatGathersNothingBacksOff) {
  Open(absl::Milliseconds(20), /*linger_jobs=*/64);
  for (int i = 0; i < 8; ++i) {
    AwaitIdleWriter();
    absl::Notification done;
    bool ok = false;
    Append(Jobs(i, 1), done, ok);
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_TRUE(ok);
  }
  const CommitStats stats = Stats(registry_);
  EXPECT_EQ(stats.commits, 8u);
  EXPECT_EQ(stats.lingers.at("alone"), 3);
  EXPECT_EQ(stats.lingers.at("joined"), 0);
}

// A barrier (Flush) ends a linger at once; without a linger nothing waits.
TEST_F(GroupCommitTest, FlushEndsALinger) {
  Open(absl::Seconds(1), /*linger_jobs=*/64);
  absl::Notification done;
  bool ok = false;
  Append(Jobs(1, 1), done, ok);
  const absl::Time start = absl::Now();
  store_->Flush();
  EXPECT_TRUE(done.HasBeenNotified());
  EXPECT_TRUE(ok);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(900));
}

TEST_F(GroupCommitTest, LingerOutsideItsRangeIsRefused) {
  RocksDbJobStore::Options options;
  options.path = dir_;
  options.commit_linger = absl::Seconds(2);
  EXPECT_THAT(RocksDbJobStore::Open(options).status().message(),
              HasSubstr("commit_linger must be between 0s and 1s, got 2s"));
  options.commit_linger = -absl::Milliseconds(1);
  EXPECT_THAT(RocksDbJobStore::Open(options).status().message(), HasSubstr("commit_linger"));
}

}  // namespace
}  // namespace hookrelay::collector
