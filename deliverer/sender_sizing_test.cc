#include "deliverer/sender_sizing.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hookrelay::deliverer {
namespace {

using ::testing::HasSubstr;

// No flags: a sender thread per two cores, 128 connections per host per thread, credits eight
// times the connection slots (2 cores: 1 / 128 / 1024; 8 cores: 4 / 128 / 4096).
TEST(SenderSizingTest, DerivesEverythingFromTheCores) {
  absl::StatusOr<Sizing> s = DeriveSizing({}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->sender_threads, 1);
  EXPECT_EQ(s->max_host_connections, 128);
  EXPECT_EQ(s->credits, 1024u);

  s = DeriveSizing({}, 8);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->sender_threads, 4);
  EXPECT_EQ(s->max_host_connections, 128);
  EXPECT_EQ(s->credits, 4096u);

  s = DeriveSizing({}, 3);  // an odd count rounds down
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->sender_threads, 1);
}

// hardware_concurrency() may answer 0 (unknown), and a single core gives no half: one thread.
TEST(SenderSizingTest, UnknownOrSingleCoreMeansOneThread) {
  for (unsigned cores : {0u, 1u}) {
    absl::StatusOr<Sizing> s = DeriveSizing({}, cores);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->sender_threads, 1) << cores;
    EXPECT_EQ(s->credits, 1024u) << cores;
  }
}

// A flag given replaces its derived value; credits follow the values in effect, capped at 20000.
TEST(SenderSizingTest, FlagsOverrideAndCreditsFollow) {
  absl::StatusOr<Sizing> s = DeriveSizing({.max_host_connections = 64}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->sender_threads, 1);
  EXPECT_EQ(s->max_host_connections, 64);
  EXPECT_EQ(s->credits, 512u);

  s = DeriveSizing({.sender_threads = 2}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->sender_threads, 2);
  EXPECT_EQ(s->max_host_connections, 128);
  EXPECT_EQ(s->credits, 2048u);

  s = DeriveSizing({.sender_threads = 3, .max_host_connections = 100, .credits = 128}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->sender_threads, 3);
  EXPECT_EQ(s->max_host_connections, 100);
  EXPECT_EQ(s->credits, 128u);

  s = DeriveSizing({.sender_threads = 200, .max_host_connections = 10000}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->credits, 20000u);
}

// Out-of-range values are refused with the flag's name and its limits.
TEST(SenderSizingTest, RefusesValuesOutOfRange) {
  absl::StatusOr<Sizing> s = DeriveSizing({.sender_threads = -1}, 2);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "--sender_threads must be between 0 (derived) and 256, got -1");

  s = DeriveSizing({.max_host_connections = 10001}, 2);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("--max_host_connections must be between 0 (derived) and 10000"));

  s = DeriveSizing({.credits = 30000}, 2);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "--credits must be between 0 (derived) and 20000, got 30000");
}

}  // namespace
}  // namespace hookrelay::deliverer
