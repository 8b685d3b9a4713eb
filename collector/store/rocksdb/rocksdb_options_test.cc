// The embedded store's RocksDB tuning, on a real RocksDB in a temporary directory: what the
// options promise about writes and compactions (see rocksdb_options.cc for why each matters).
#include "collector/store/rocksdb/rocksdb_options.h"

#include <stdlib.h>

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/listener.h"
#include "collector/store/rocksdb/rocksdb_layout.h"

namespace hookrelay::collector::rocksdb_internal {
namespace {

std::string TempDir() {
  const char* root = getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(root != nullptr ? root : "/tmp", "/rocksdb_options_XXXXXX");
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

std::string Key(uint64_t id) {
  char bytes[8];
  EncodeU64(id, bytes);
  return std::string(bytes, sizeof(bytes));
}

// A pending-index key; the user hashes make the keys' order random, as at ingest.
PendingKeyBytes PendingKey(uint64_t id) { return PendingKeyBytes(id * 0x9E3779B97F4A7C15u, id); }

// A job-like value: ~500 bytes, partly repetitive, partly varying with the id.
std::string Value(uint64_t id) {
  std::string value = absl::StrCat(R"({"type":"track","event":"Order Completed","messageId":")",
                                    id * 2654435761u, R"(","properties":{"plan":"pro"}})");
  value.resize(500, 'x');
  return value;
}

// A DB of the default family and one more, `name`, with the given options.
class TwoFamilies {
 public:
  TwoFamilies(const std::string& path, rocksdb::DBOptions db_options, const std::string& name,
              const rocksdb::ColumnFamilyOptions& options) {
    cache_ = rocksdb::NewLRUCache(8 << 20);
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, MakeSmallOptions(cache_)}, {name, options}};
    rocksdb::DB* db = nullptr;
    status_ = rocksdb::DB::Open(db_options, path, families, &handles_, &db);
    db_.reset(db);
  }
  ~TwoFamilies() {
    for (rocksdb::ColumnFamilyHandle* handle : handles_) db_->DestroyColumnFamilyHandle(handle);
  }

  const rocksdb::Status& status() const { return status_; }
  rocksdb::DB& db() { return *db_; }
  rocksdb::ColumnFamilyHandle* family() { return handles_[1]; }

  uint64_t Property(const std::string& name) {
    uint64_t value = 0;
    EXPECT_TRUE(db_->GetIntProperty(family(), name, &value)) << name;
    return value;
  }
  uint64_t FilesAtLevel(int level) {
    std::string value;
    EXPECT_TRUE(db_->GetProperty(family(), absl::StrCat("rocksdb.num-files-at-level", level),
                                 &value));
    return std::stoull(value);
  }
  // Waits (up to 30 s) until no compaction of the family is pending or running.
  bool WaitForCompactions() {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      uint64_t running = 0;
      db_->GetIntProperty("rocksdb.num-running-compactions", &running);
      if (Property("rocksdb.compaction-pending") == 0 && running == 0) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

 private:
  std::shared_ptr<rocksdb::Cache> cache_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::Status status_;
};

// Holds every compaction of one family on its thread until released.
class HoldCompactions : public rocksdb::EventListener {
 public:
  explicit HoldCompactions(std::string family) : family_(std::move(family)) {}

  void OnCompactionBegin(rocksdb::DB*, const rocksdb::CompactionJobInfo& info) override {
    if (info.cf_name != family_) return;
    std::unique_lock lock(mu_);
    ++held_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return released_; });
  }
  bool WaitHeld() {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [this] { return held_ > 0; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  const std::string family_;
  std::mutex mu_;
  std::condition_variable changed_;
  int held_ = 0;
  bool released_ = false;
};

// A long compaction of one family (here, held on its thread) does not keep another family's
// flushed files in L0: with a single compaction slot, `jobs` reached RocksDB's slowdown trigger
// and every write was delayed.
TEST(DbOptionsTest, OneFamilysCompactionDoesNotHoldBackAnothers) {
  const std::string path = TempDir();
  auto cache = rocksdb::NewLRUCache(8 << 20);
  rocksdb::DBOptions db_options = MakeDbOptions();
  auto hold = std::make_shared<HoldCompactions>(kUsersCf);
  db_options.listeners.push_back(hold);
  {
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, MakeSmallOptions(cache)},
        {kUsersCf, MakeUsersOptions(cache)},
        {kJobsCf, MakeJobsOptions(cache)}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(db_options, path, families, &handles, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::ColumnFamilyHandle* users = handles[1];
    rocksdb::ColumnFamilyHandle* jobs = handles[2];

    // Enough flushed files of `users` for a compaction, which is then held.
    uint64_t id = 1;
    for (int flush = 0; flush < 6; ++flush) {
      for (int i = 0; i < 100; ++i, ++id) {
        ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), users, PendingKey(id).slice(), "").ok());
      }
      ASSERT_TRUE(db->Flush(rocksdb::FlushOptions(), users).ok());
    }
    ASSERT_TRUE(hold->WaitHeld());
    absl::Cleanup release = [&hold] { hold->Release(); };  // on every way out, or Close waits

    // `jobs`' flushed files are still compacted out of L0 while it is held. RocksDB runs a second
    // compaction only once a family needs one urgently: `jobs` with 4 files in L0 (twice its
    // trigger).
    for (int flush = 0; flush < 6; ++flush) {
      for (int i = 0; i < 100; ++i, ++id) {
        ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), jobs, Key(id), Value(id)).ok());
      }
      ASSERT_TRUE(db->Flush(rocksdb::FlushOptions(), jobs).ok());
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    uint64_t l0 = 6;
    while (absl::Now() < deadline) {
      std::string value;
      ASSERT_TRUE(db->GetProperty(jobs, "rocksdb.num-files-at-level0", &value));
      l0 = std::stoull(value);
      if (l0 < 4) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    std::move(release).Invoke();
    EXPECT_LT(l0, 4u) << "jobs' L0 files waited for the held compaction of users";
    for (rocksdb::ColumnFamilyHandle* handle : handles) db->DestroyColumnFamilyHandle(handle);
  }
  std::filesystem::remove_all(path);
}

// A data dir written before `users` used universal compaction (level style, files in L0 and in
// the last level) opens with today's options, compacts, and keeps every key and deletion.
TEST(UsersOptionsTest, LevelStyleDataDirOpensAndCompacts) {
  const std::string path = TempDir();
  auto cache = rocksdb::NewLRUCache(8 << 20);
  rocksdb::ColumnFamilyOptions before = MakeUsersOptions(cache);
  before.compaction_style = rocksdb::kCompactionStyleLevel;
  before.disable_auto_compactions = true;
  constexpr uint64_t kKeys = 6000;
  {
    TwoFamilies db(path, MakeDbOptions(), kUsersCf, before);
    ASSERT_TRUE(db.status().ok()) << db.status().ToString();
    for (uint64_t i = 0; i < kKeys; ++i) {
      ASSERT_TRUE(
          db.db().Put(rocksdb::WriteOptions(), db.family(), PendingKey(i).slice(), "").ok());
      if (i % 1000 == 999) {
        ASSERT_TRUE(db.db().Flush(rocksdb::FlushOptions(), db.family()).ok());
      }
    }
    rocksdb::CompactRangeOptions to_bottom;
    ASSERT_TRUE(db.db().CompactRange(to_bottom, db.family(), nullptr, nullptr).ok());
    // Newer files in L0 on top, with deletions of every third key.
    for (uint64_t i = 0; i < kKeys; i += 3) {
      ASSERT_TRUE(db.db().Delete(rocksdb::WriteOptions(), db.family(), PendingKey(i).slice()).ok());
      if (i % 1500 == 0) {
        ASSERT_TRUE(db.db().Flush(rocksdb::FlushOptions(), db.family()).ok());
      }
    }
    ASSERT_TRUE(db.db().Flush(rocksdb::FlushOptions(), db.family()).ok());
    ASSERT_GT(db.FilesAtLevel(0), 1u);
  }
  {
    TwoFamilies db(path, MakeDbOptions(), kUsersCf, MakeUsersOptions(cache));
    ASSERT_TRUE(db.status().ok()) << db.status().ToString();
    for (uint64_t i = kKeys; i < 2 * kKeys; ++i) {
      ASSERT_TRUE(
          db.db().Put(rocksdb::WriteOptions(), db.family(), PendingKey(i).slice(), "").ok());
      if (i % 1000 == 999) {
        ASSERT_TRUE(db.db().Flush(rocksdb::FlushOptions(), db.family()).ok());
      }
    }
    ASSERT_TRUE(db.WaitForCompactions());
    ASSERT_TRUE(
        db.db().CompactRange(rocksdb::CompactRangeOptions(), db.family(), nullptr, nullptr).ok());
    uint64_t found = 0;
    for (uint64_t i = 0; i < 2 * kKeys; ++i) {
      std::string value;
      const rocksdb::Status status =
          db.db().Get(rocksdb::ReadOptions(), db.family(), PendingKey(i).slice(), &value);
      const bool deleted = i < kKeys && i % 3 == 0;
      ASSERT_EQ(status.IsNotFound(), deleted) << i << " " << status.ToString();
      if (status.ok()) ++found;
    }
    EXPECT_EQ(found, 2 * kKeys - kKeys / 3);
  }
  std::filesystem::remove_all(path);
}

}  // namespace
}  // namespace hookrelay::collector::rocksdb_internal
