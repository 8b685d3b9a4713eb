#include "common/check.h"

#include <cstdio>
#include <string_view>

#include "common/log.h"
#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

// A holding invariant costs nothing visible; a broken one aborts with a structured line naming
// the condition and the message.
TEST(CheckDeathTest, AbortsWithTheConditionAndMessage) {
  int evaluated = 0;
  HOOKRELAY_CHECK(++evaluated == 1, "evaluated once");
  EXPECT_EQ(evaluated, 1);
  // Log lines go to stderr here, where the death test looks for them.
  SetLogSinkForTesting([](std::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  EXPECT_DEATH(HOOKRELAY_CHECK(evaluated == 2, "the count is off"),
               R"(invariant violated.*evaluated == 2.*the count is off.*check_test\.cc)");
  SetLogSinkForTesting(nullptr);
}

}  // namespace
}  // namespace hookrelay::common
