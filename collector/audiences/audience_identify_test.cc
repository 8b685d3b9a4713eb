// AudienceIdentifyJson: the identify call an audience sync sends (SPEC §6.2). The syncs
// themselves run on both engines in tests/audience_syncer_test.cc.
#include "collector/audiences/audience_syncer.h"

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::collector {
namespace {

using ::testing::HasSubstr;

// The body receivers get (SPEC §6.2).
TEST(AudienceIdentifyJsonTest, Body) {
  hookrelay::v1::Audience a;
  a.set_id("aud_1");
  a.set_name("Power Users!");
  EXPECT_EQ(AudienceIdentifyJson(a, "u\"1", true, "m-1", absl::FromUnixMillis(1700000000123)),
            R"({"type":"identify","messageId":"m-1","userId":"u\"1","traits":{"power_users":true},)"
            R"("context":{"personas":{"computation_class":"audience","computation_key":"power_users",)"
            R"("computation_id":"aud_1"}},"timestamp":"2023-11-14T22:13:20.123Z",)"
            R"("originalTimestamp":"2023-11-14T22:13:20.123Z","sentAt":"2023-11-14T22:13:20.123Z",)"
            R"("receivedAt":"2023-11-14T22:13:20.123Z"})");
  a.set_name("2024 Kunden – Ü");
  EXPECT_THAT(AudienceIdentifyJson(a, "u", false, "m", absl::UnixEpoch()),
              HasSubstr(R"("traits":{"2024_kunden_ü":false})"));
}

}  // namespace
}  // namespace hookrelay::collector
