#include "deliverer/batcher.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace hookrelay::deliverer {
namespace {

// Batches handed to Send, in order, as the members' bodies.
class Sent {
 public:
  Batcher::Send Fn() {
    return [this](std::vector<BatchItem> items) {
      std::vector<std::string> bodies;
      for (const BatchItem& item : items) bodies.push_back(item.body);
      absl::MutexLock lock(&mu_);
      batches_.push_back(std::move(bodies));
    };
  }
  // Waits (real time, bounded) until `n` batches were sent; returns them all.
  std::vector<std::vector<std::string>> Wait(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return batches_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    return batches_;
  }
  size_t count() {
    absl::MutexLock lock(&mu_);
    return batches_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<std::vector<std::string>> batches_ ABSL_GUARDED_BY(mu_);
};

hookrelay::v1::BatchOptions Options(uint32_t events, uint32_t bytes, uint32_t wait_ms) {
  hookrelay::v1::BatchOptions o;
  o.set_max_events(events);
  o.set_max_bytes(bytes);
  o.set_max_wait_ms(wait_ms);
  return o;
}

BatchItem Item(std::string body) { return BatchItem{nullptr, std::move(body)}; }

TEST(BatchBodyTest, JoinsMembersInOrder) {
  const std::vector<BatchItem> items = {Item(R"({"a":1})"), Item(R"({"b":2})")};
  const std::string body = BatchBody(items);
  EXPECT_EQ(body, R"({"batch":[{"a":1},{"b":2}]})");
  EXPECT_EQ(body.size(), BatchBodySize(14, 2));
  EXPECT_EQ(BatchBody({Item("{}")}).size(), BatchBodySize(2, 1));
}

// max_events sends the batch at once, on the caller of Add; another key is another batch.
TEST(BatcherTest, FullBatchGoesAtOnce) {
  common::ManualClock clock;
  Sent sent;
  Batcher batcher(clock, sent.Fn());
  const auto options = Options(3, 500000, 10000);
  batcher.Add("a", options, Item("1"));
  batcher.Add("b", options, Item("x"));
  batcher.Add("a", options, Item("2"));
  EXPECT_EQ(sent.count(), 0u);
  EXPECT_EQ(batcher.pending(), 3);
  batcher.Add("a", options, Item("3"));
  ASSERT_EQ(sent.count(), 1u);  // Sent by Add itself: no wait.
  EXPECT_EQ(sent.Wait(1)[0], (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(batcher.pending(), 1);
  batcher.FlushAll();
  EXPECT_EQ(sent.Wait(2)[1], (std::vector<std::string>{"x"}));
  EXPECT_EQ(batcher.pending(), 0);
}

// max_wait_ms after the first member, by the injected clock, the batch goes however small.
TEST(BatcherTest, DueBatchGoesAfterMaxWait) {
  common::ManualClock clock;
  Sent sent;
  Batcher batcher(clock, sent.Fn());
  batcher.Add("a", Options(100, 500000, 200), Item("1"));
  clock.Advance(absl::Milliseconds(150));
  batcher.Add("a", Options(100, 500000, 200), Item("2"));
  clock.Advance(absl::Milliseconds(49));
  absl::SleepFor(absl::Milliseconds(20));  // The timer thread runs, and finds nothing due yet.
  EXPECT_EQ(sent.count(), 0u);
  clock.Advance(absl::Milliseconds(1));  // 200 ms after the first member.
  const auto batches = sent.Wait(1);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0], (std::vector<std::string>{"1", "2"}));
  // The next batch waits its own max_wait_ms from its own first member.
  batcher.Add("a", Options(100, 500000, 200), Item("3"));
  clock.Advance(absl::Milliseconds(200));
  EXPECT_EQ(sent.Wait(2).size(), 2u);
}

// A member that would pass max_bytes sends the pending batch first; one too large on its own goes
// alone at once.
TEST(BatcherTest, MaxBytesSplitsAndOversizedGoesAlone) {
  common::ManualClock clock;
  Sent sent;
  Batcher batcher(clock, sent.Fn());
  const std::string member(40, 'm');
  const uint32_t max_bytes = static_cast<uint32_t>(BatchBodySize(2 * member.size(), 2));
  const auto options = Options(100, max_bytes, 10000);
  batcher.Add("a", options, Item(member));
  batcher.Add("a", options, Item(member));  // Exactly max_bytes: stays.
  EXPECT_EQ(sent.count(), 0u);
  batcher.Add("a", options, Item(member));  // One more would pass it: the two go.
  ASSERT_EQ(sent.count(), 1u);
  EXPECT_EQ(sent.Wait(1)[0].size(), 2u);
  batcher.Add("a", options, Item(std::string(max_bytes, 'x')));  // Too large for any batch.
  ASSERT_EQ(sent.count(), 2u);
  EXPECT_EQ(sent.Wait(2)[1].size(), 1u);
  EXPECT_EQ(batcher.pending(), 1);  // The third member still waits.
}

}  // namespace
}  // namespace hookrelay::deliverer
