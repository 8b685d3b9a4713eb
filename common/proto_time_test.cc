#include "common/proto_time.h"

#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

// Round trips keep nanoseconds, times before 1970 floor correctly, and the valid range's ends
// are the limits both ways.
TEST(ProtoTimeTest, RoundTripsAndRange) {
  for (const absl::Time t :
       {absl::FromUnixNanos(1700000000123456789), absl::FromUnixNanos(-1500000001),
        absl::UnixEpoch(), absl::FromUnixSeconds(-62135596800), absl::FromUnixSeconds(253402300799)}) {
    google::protobuf::Timestamp ts;
    ToProtoTime(t, &ts);
    EXPECT_GE(ts.nanos(), 0);
    EXPECT_LE(ts.nanos(), 999999999);
    ASSERT_TRUE(FromProtoTime(ts).has_value());
    EXPECT_EQ(*FromProtoTime(ts), t);
  }
  google::protobuf::Timestamp ts;
  ToProtoTime(absl::FromUnixNanos(-1500000001), &ts);
  EXPECT_EQ(ts.seconds(), -2);
  EXPECT_EQ(ts.nanos(), 499999999);

  ToProtoTime(absl::InfiniteFuture(), &ts);
  EXPECT_EQ(ts.seconds(), 253402300799);
  ToProtoTime(absl::InfinitePast(), &ts);
  EXPECT_EQ(ts.seconds(), -62135596800);

  google::protobuf::Timestamp bad;
  bad.set_seconds(253402300800);
  EXPECT_FALSE(FromProtoTime(bad).has_value());
  bad.set_seconds(0);
  bad.set_nanos(-1);
  EXPECT_FALSE(FromProtoTime(bad).has_value());
  bad.set_nanos(1000000000);
  EXPECT_FALSE(FromProtoTime(bad).has_value());
}

}  // namespace
}  // namespace hookrelay::common
