#include "common/uuid.h"

#include <set>

#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

// Version nibble 4, variant 10xx, canonical 8-4-4-4-12 lowercase hex, and no repeats.
TEST(UuidTest, VersionFourAndUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    const std::string u = NewUuidV4();
    ASSERT_EQ(u.size(), 36u);
    EXPECT_EQ(u[8], '-');
    EXPECT_EQ(u[13], '-');
    EXPECT_EQ(u[18], '-');
    EXPECT_EQ(u[23], '-');
    EXPECT_EQ(u[14], '4');
    EXPECT_NE(std::string("89ab").find(u[19]), std::string::npos) << u;
    for (size_t k = 0; k < u.size(); ++k) {
      if (k == 8 || k == 13 || k == 18 || k == 23) continue;
      EXPECT_NE(std::string("0123456789abcdef").find(u[k]), std::string::npos) << u;
    }
    EXPECT_TRUE(seen.insert(u).second) << u;
  }
}

}  // namespace
}  // namespace hookrelay::common
