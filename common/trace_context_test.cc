#include "common/trace_context.h"

#include <optional>
#include <set>
#include <string>

#include "absl/random/random.h"
#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

constexpr char kValid[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// The W3C example parses into its three fields and prints back unchanged.
TEST(TraceContextTest, ParsesVersion00) {
  std::optional<TraceParent> p = ParseTraceparent(kValid);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(p->parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(p->flags, "01");
  EXPECT_EQ(p->ToString(), kValid);
  // Surrounding optional whitespace of a header value is not part of it.
  EXPECT_TRUE(ParseTraceparent(std::string(" ") + kValid + "\t").has_value());
}

// Version ff is forbidden; version 00 has exactly 55 characters; a non-hex version is invalid.
TEST(TraceContextTest, RefusesInvalidVersions) {
  EXPECT_FALSE(ParseTraceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"));
}

// A future version is read as 00 when its first fields have 00's shape; it is kept as 00.
TEST(TraceContextTest, ReadsFutureVersionsAsVersion00) {
  std::optional<TraceParent> p =
      ParseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->ToString(), kValid);
  EXPECT_TRUE(ParseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"));
}

// Every field has its exact length, separated by single dashes.
TEST(TraceContextTest, RefusesBadLengths) {
  EXPECT_FALSE(ParseTraceparent(""));
  EXPECT_FALSE(ParseTraceparent("00"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b-01"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-001"));
  EXPECT_FALSE(ParseTraceparent("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01"));
}

// W3C allows lowercase hex only: uppercase is invalid, not folded.
TEST(TraceContextTest, RefusesUppercaseHex) {
  EXPECT_FALSE(ParseTraceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"));
}

// An all-zero trace id or parent id is invalid.
TEST(TraceContextTest, RefusesZeroIds) {
  EXPECT_FALSE(ParseTraceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
  EXPECT_FALSE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
  // Zero flags are fine.
  EXPECT_TRUE(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
}

// A child keeps the trace id and flags and gets a new parent id each time; nothing from an
// invalid or missing traceparent.
TEST(TraceContextTest, ChildKeepsTraceIdAndFlagsWithNewParentIds) {
  absl::BitGen gen;
  std::set<std::string> parents;
  for (int i = 0; i < 100; ++i) {
    std::optional<TraceParent> child = ParseTraceparent(ChildTraceparent(kValid, gen));
    ASSERT_TRUE(child.has_value());
    EXPECT_EQ(child->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(child->flags, "01");
    EXPECT_NE(child->parent_id, "00f067aa0ba902b7");
    EXPECT_TRUE(parents.insert(child->parent_id).second);
  }
  EXPECT_EQ(ChildTraceparent("", gen), "");
  EXPECT_EQ(ChildTraceparent("00-0-0-0", gen), "");
  EXPECT_EQ(TraceIdOf(kValid), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(TraceIdOf("garbage"), "");
}

// tracestate is kept trimmed up to the bound, printable ASCII only; otherwise dropped.
TEST(TraceContextTest, TracestateIsBounded) {
  EXPECT_EQ(SanitizeTracestate(" congo=t61rcWkgMzE,rojo=00f067aa0ba902b7 "),
            "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  EXPECT_EQ(SanitizeTracestate(std::string(kMaxTracestateBytes, 'a')).size(), kMaxTracestateBytes);
  EXPECT_EQ(SanitizeTracestate(std::string(kMaxTracestateBytes + 1, 'a')), "");
  EXPECT_EQ(SanitizeTracestate("a=b\r\nx: y"), "");
  EXPECT_EQ(SanitizeTracestate("a=\xc3\xa9"), "");
}

// Headers become a context only with a valid traceparent; tracestate alone is not kept.
TEST(TraceContextTest, ContextFromHeaders) {
  TraceContext c = TraceContextFromHeaders(
      "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", "rojo=1");
  EXPECT_EQ(c.traceparent, kValid);
  EXPECT_EQ(c.tracestate, "rojo=1");
  c = TraceContextFromHeaders("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "rojo=1");
  EXPECT_EQ(c.traceparent, "");
  EXPECT_EQ(c.tracestate, "");
  c = TraceContextFromHeaders("", "");
  EXPECT_EQ(c.traceparent, "");
}

}  // namespace
}  // namespace hookrelay::common
