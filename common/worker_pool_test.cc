#include "common/worker_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

TEST(WorkerPoolTest, EachIterationRunsOnce) {
  WorkerPool pool(3);
  for (size_t n : {0u, 1u, 7u, 1000u}) {
    std::vector<std::atomic<int>> runs(n);
    pool.ForEach(n, [&](size_t i) { runs[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << "n " << n << ", i " << i;
  }
}

// helpers + 1 iterations that each wait for all the others: they only end if they run at once.
TEST(WorkerPoolTest, IterationsRunSideBySide) {
  WorkerPool pool(3);
  absl::Mutex mu;
  int arrived = 0;
  std::atomic<int> met{0};
  pool.ForEach(4, [&](size_t) {
    absl::MutexLock lock(&mu);
    ++arrived;
    if (mu.AwaitWithTimeout(absl::Condition(+[](int* a) { return *a == 4; }, &arrived),
                            absl::Seconds(30))) {
      met.fetch_add(1);
    }
  });
  EXPECT_EQ(met.load(), 4);
}

TEST(WorkerPoolTest, WithoutHelpersTheCallerRunsEverything) {
  WorkerPool pool(0);
  EXPECT_EQ(pool.helpers(), 0u);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0}, runs{0};
  pool.ForEach(50, [&](size_t) {
    runs.fetch_add(1);
    if (std::this_thread::get_id() != caller) elsewhere.fetch_add(1);
  });
  EXPECT_EQ(runs.load(), 50);
  EXPECT_EQ(elsewhere.load(), 0);
}

// Loops from two threads take turns; each returns only when its own iterations are done.
TEST(WorkerPoolTest, LoopsFromTwoThreadsEachComplete) {
  WorkerPool pool(2);
  std::vector<std::atomic<int>> a(500), b(500);
  std::thread other([&] {
    for (int round = 0; round < 20; ++round) {
      pool.ForEach(a.size(), [&](size_t i) { a[i].fetch_add(1); });
    }
  });
  for (int round = 0; round < 20; ++round) {
    pool.ForEach(b.size(), [&](size_t i) { b[i].fetch_add(1); });
    for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i].load(), round + 1) << i;
  }
  other.join();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].load(), 20) << i;
}

TEST(WorkerPoolTest, DestroyedIdleOrAfterWork) {
  { WorkerPool idle(4); }
  WorkerPool used(4);
  std::atomic<int> runs{0};
  used.ForEach(10, [&](size_t) { runs.fetch_add(1); });
  EXPECT_EQ(runs.load(), 10);
}

}  // namespace
}  // namespace hookrelay::common
