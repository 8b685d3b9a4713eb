#include "deliverer/round_end.h"

#include <vector>

#include "gtest/gtest.h"

namespace hookrelay::deliverer {
namespace {

TEST(RoundEndTest, OutsideARoundRunsAtOnce) {
  int ran = 0;
  EXPECT_FALSE(InRound());
  DeferToRoundEnd([&] { ++ran; });
  EXPECT_EQ(ran, 1);
}

TEST(RoundEndTest, InsideARoundRunsAtItsEndInOrderWithWorkDeferredByDeferredWork) {
  std::vector<int> order;
  {
    RoundScope round;
    EXPECT_TRUE(InRound());
    DeferToRoundEnd([&] {
      order.push_back(1);
      DeferToRoundEnd([&] { order.push_back(3); });
    });
    DeferToRoundEnd([&] { order.push_back(2); });
    EXPECT_TRUE(order.empty());
  }
  EXPECT_FALSE(InRound());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

}  // namespace
}  // namespace hookrelay::deliverer
