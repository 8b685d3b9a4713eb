#include "collector/api/admin_auth.h"

#include <string>

#include "gtest/gtest.h"

namespace hookrelay::collector {
namespace {

TEST(AdminAuthTest, TokenRequiredWhenConfigured) {
  AdminAuth auth("s3cret-token");
  EXPECT_TRUE(auth.has_token());
  absl::StatusOr<std::string> who = auth.Check("Bearer s3cret-token", "ipv4:10.1.2.3:5000");
  ASSERT_TRUE(who.ok()) << who.status();
  // An id of the token, never the token.
  EXPECT_EQ(who->rfind("token:", 0), 0u);
  EXPECT_EQ(who->size(), 6u + 8u);
  EXPECT_EQ(who->find("s3cret"), std::string::npos);
  EXPECT_TRUE(auth.Check("bearer s3cret-token", "ipv4:127.0.0.1:1").ok());
  EXPECT_TRUE(auth.Check("BEARER   s3cret-token ", "ipv4:127.0.0.1:1").ok());

  for (const char* bad : {"", "Bearer", "Bearer ", "Bearer s3cret-toke", "Bearer s3cret-token2",
                          "Basic s3cret-token", "s3cret-token"}) {
    absl::StatusOr<std::string> r = auth.Check(bad, "ipv4:127.0.0.1:1");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << bad;
  }
}

TEST(AdminAuthTest, WithoutTokenOnlyLoopback) {
  AdminAuth auth("");
  EXPECT_FALSE(auth.has_token());
  for (const char* peer : {"ipv4:127.0.0.1:5000", "ipv4:127.8.9.10:1", "ipv6:[::1]:5000",
                           "ipv6:[::ffff:127.0.0.1]:80"}) {
    absl::StatusOr<std::string> who = auth.Check("", peer);
    ASSERT_TRUE(who.ok()) << peer << " " << who.status();
    EXPECT_EQ(*who, std::string("peer:") + peer);
  }
  for (const char* peer : {"ipv4:10.0.0.1:5000", "ipv6:[fd00::1]:1", "unix:/tmp/x", "",
                           "ipv4:1127.0.0.1:1", "ipv6:[::ffff:10.0.0.1]:1"}) {
    absl::StatusOr<std::string> r = auth.Check("Bearer anything", peer);
    ASSERT_FALSE(r.ok()) << peer;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << peer;
  }
}

TEST(AdminAuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secre", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret0", "secret"));
}

}  // namespace
}  // namespace hookrelay::collector
