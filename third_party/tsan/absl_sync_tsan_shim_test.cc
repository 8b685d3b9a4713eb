// Hand-offs through Debian's Abseil synchronization primitives, over plain (non-atomic) data.
// Without //third_party/tsan:absl_sync_tsan_shim every test here fails under --config=tsan with
// a false "data race" report; in ordinary builds they are plain functional tests.
#include <thread>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace {

constexpr int kIterations = 20000;

TEST(AbslSyncTsanShimTest, MutexLockProtectsCounter) {
  absl::Mutex mu;
  long counter = 0;
  auto work = [&] {
    for (int i = 0; i < kIterations; ++i) {
      absl::MutexLock lock(&mu);
      ++counter;
    }
  };
  std::thread a(work);
  std::thread b(work);
  a.join();
  b.join();
  EXPECT_EQ(counter, 2L * kIterations);
}

TEST(AbslSyncTsanShimTest, ReaderAndTryLocks) {
  absl::Mutex mu;
  long value = 0;
  long seen = 0;
  std::thread writer([&] {
    for (int i = 0; i < kIterations; ++i) {
      if (i % 2 == 0) {
        absl::WriterMutexLock lock(&mu);
        ++value;
      } else {
        while (!mu.TryLock()) {
        }
        ++value;
        mu.Unlock();
      }
    }
  });
  std::thread reader([&] {
    for (int i = 0; i < kIterations; ++i) {
      if (i % 2 == 0) {
        absl::ReaderMutexLock lock(&mu);
        seen = value;
      } else {
        while (!mu.ReaderTryLock()) {
        }
        seen = value;
        mu.ReaderUnlock();
      }
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(value, kIterations);
  EXPECT_LE(seen, kIterations);
}

// Await and LockWhen release the mutex while they wait for the producer.
TEST(AbslSyncTsanShimTest, AwaitAndLockWhenHandOff) {
  absl::Mutex mu;
  int stage = 0;
  std::vector<int> data;  // only touched under mu
  std::thread producer([&] {
    for (int i = 1; i <= 100; ++i) {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](int* s) { return *s % 2 == 0; }, &stage));  // consumer took the last one
      data.push_back(i);
      ++stage;
    }
  });
  long sum = 0;
  for (int i = 1; i <= 100; ++i) {
    if (i % 2 == 0) {
      mu.LockWhen(absl::Condition(+[](int* s) { return *s % 2 == 1; }, &stage));
    } else {
      mu.ReaderLockWhen(absl::Condition(+[](int* s) { return *s % 2 == 1; }, &stage));
      mu.ReaderUnlock();
      mu.Lock();
      mu.Await(absl::Condition(+[](int* s) { return *s % 2 == 1; }, &stage));
    }
    sum += data.back();
    ++stage;
    mu.Unlock();
  }
  producer.join();
  EXPECT_EQ(sum, 5050);
}

TEST(AbslSyncTsanShimTest, TimedWaits) {
  absl::Mutex mu;
  bool ready = false;
  int payload = 0;
  std::thread producer([&] {
    absl::MutexLock lock(&mu);
    payload = 42;
    ready = true;
  });
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(30)));
    EXPECT_EQ(payload, 42);
    payload = 1;
  }
  EXPECT_TRUE(mu.LockWhenWithTimeout(absl::Condition(&ready), absl::Seconds(30)));
  EXPECT_EQ(payload, 1);
  mu.Unlock();
  // A condition that never becomes true: the mutex is held again when the wait gives up.
  bool never = false;
  mu.Lock();
  EXPECT_FALSE(mu.AwaitWithTimeout(absl::Condition(&never), absl::Milliseconds(10)));
  mu.Unlock();
  EXPECT_FALSE(mu.ReaderLockWhenWithTimeout(absl::Condition(&never), absl::Milliseconds(10)));
  mu.ReaderUnlock();
  producer.join();
}

TEST(AbslSyncTsanShimTest, CondVarHandOff) {
  absl::Mutex mu;
  absl::CondVar cv;
  int turn = 0;  // 0: main writes, 1: worker writes
  std::vector<int> log;
  std::thread worker([&] {
    absl::MutexLock lock(&mu);
    for (int i = 0; i < 50; ++i) {
      while (turn != 1) cv.Wait(&mu);
      log.push_back(2 * i + 1);
      turn = 0;
      cv.Signal();
    }
  });
  {
    absl::MutexLock lock(&mu);
    for (int i = 0; i < 50; ++i) {
      while (turn != 0) {
        if (i % 2 == 0) {
          cv.Wait(&mu);
        } else {
          cv.WaitWithTimeout(&mu, absl::Seconds(30));
        }
      }
      log.push_back(2 * i);
      turn = 1;
      cv.SignalAll();
    }
    while (turn != 0) cv.Wait(&mu);
    ASSERT_EQ(log.size(), 100u);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(log[i], i);
  }
  worker.join();
}

TEST(AbslSyncTsanShimTest, NotificationPublishesData) {
  std::vector<int> data;  // written before Notify, read after the wait: no lock
  absl::Notification ready;
  std::thread producer([&] {
    data.assign(1000, 7);
    ready.Notify();
  });
  ready.WaitForNotification();
  EXPECT_EQ(data.size(), 1000u);
  data.clear();
  producer.join();

  std::vector<int> more;
  absl::Notification ready2;
  std::thread producer2([&] {
    more.assign(10, 3);
    ready2.Notify();
  });
  ASSERT_TRUE(ready2.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(more.size(), 10u);
  more.clear();
  producer2.join();
}

TEST(AbslSyncTsanShimTest, NotificationPolledWithHasBeenNotified) {
  std::vector<int> data;
  absl::Notification ready;
  std::thread producer([&] {
    data.assign(100, 1);
    ready.Notify();
  });
  while (!ready.HasBeenNotified()) std::this_thread::yield();
  EXPECT_EQ(data.size(), 100u);
  data.clear();
  producer.join();
}

TEST(AbslSyncTsanShimTest, BlockingCounterPublishesEveryWorker) {
  constexpr int kWorkers = 4;
  int slots[kWorkers] = {};
  absl::BlockingCounter done(kWorkers);
  std::vector<std::thread> workers;
  for (int i = 0; i < kWorkers; ++i) {
    workers.emplace_back([&, i] {
      slots[i] = i + 1;
      done.DecrementCount();
    });
  }
  done.Wait();
  int sum = 0;
  for (int v : slots) sum += v;
  EXPECT_EQ(sum, 10);
  for (int& v : slots) v = 0;
  for (auto& t : workers) t.join();
}

}  // namespace
