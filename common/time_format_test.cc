#include "common/time_format.h"

#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

absl::Time Ms(int64_t ms) { return absl::FromUnixMillis(ms); }

// Output is UTC with exactly three fraction digits, as in the seed's samples.
TEST(TimeFormatTest, FormatsUtcMillis) {
  EXPECT_EQ(FormatIso8601Millis(Ms(1354408208276)), "2012-12-02T00:30:08.276Z");
  EXPECT_EQ(FormatIso8601Millis(Ms(0)), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatIso8601Millis(Ms(-1)), "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(FormatIso8601Millis(absl::FromUnixMicros(1354408208276999)),
            "2012-12-02T00:30:08.276Z");  // truncated, not rounded
  EXPECT_EQ(FormatIso8601Millis(Ms(951782400000)), "2000-02-29T00:00:00.000Z");
}

TEST(TimeFormatTest, ParsesOffsetsAndFractions) {
  EXPECT_EQ(ParseIso8601("2012-12-02T00:30:08.276Z"), Ms(1354408208276));
  EXPECT_EQ(ParseIso8601("2012-12-02T00:30:08Z"), Ms(1354408208000));
  EXPECT_EQ(ParseIso8601("2012-12-02T01:30:08.276+01:00"), Ms(1354408208276));
  EXPECT_EQ(ParseIso8601("2012-12-01T19:30:08.276-0500"), Ms(1354408208276));
  EXPECT_EQ(ParseIso8601("2012-12-02 00:30:08.2764567z"),
            absl::FromUnixNanos(1354408208276456700));
  EXPECT_EQ(ParseIso8601("2012-12-02T00:30Z"), Ms(1354408200000));
  EXPECT_EQ(ParseIso8601("2012-12-02"), Ms(1354406400000));
}

TEST(TimeFormatTest, RefusesMalformed) {
  for (const char* bad : {"", "yesterday", "2012-13-01T00:00:00Z", "2012-02-30T00:00:00Z",
                          "2013-02-29", "2012-12-02T24:00:00Z", "2012-12-02T00:30:08",
                          "2012-12-02T00:30:08.Z", "2012-12-02T00:30:08Zjunk", "1354408208276",
                          "2012-12-02T00:30:08+25:00"}) {
    EXPECT_FALSE(ParseIso8601(bad).has_value()) << bad;
  }
}

// Parse and format agree over a range of instants.
TEST(TimeFormatTest, RoundTrips) {
  for (int64_t ms = -5000000000000; ms < 5000000000000; ms += 123456789013) {
    EXPECT_EQ(ParseIso8601(FormatIso8601Millis(Ms(ms))), Ms(ms)) << ms;
  }
}

}  // namespace
}  // namespace hookrelay::common
