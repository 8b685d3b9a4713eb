#include "deliverer/collector_targets.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hookrelay::deliverer {
namespace {

TEST(ParseCollectorTargetTest, PlainHostPortIsStatic) {
  auto t = ParseCollectorTarget("collector-0.example:50051");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->dynamic);
  EXPECT_EQ(t->host, "collector-0.example");
  EXPECT_EQ(t->port, "50051");
}

TEST(ParseCollectorTargetTest, DnsSchemesAreDynamic) {
  for (const char* spec : {"dns:///hookrelay-collector-headless:50051",
                           "dns:hookrelay-collector-headless:50051"}) {
    auto t = ParseCollectorTarget(spec);
    ASSERT_TRUE(t.ok()) << spec << ": " << t.status();
    EXPECT_TRUE(t->dynamic) << spec;
    EXPECT_EQ(t->host, "hookrelay-collector-headless") << spec;
    EXPECT_EQ(t->port, "50051") << spec;
    EXPECT_EQ(t->spec, spec);
  }
}

TEST(ParseCollectorTargetTest, BracketedIpv6) {
  auto t = ParseCollectorTarget("[::1]:7000");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->port, "7000");
}

TEST(ParseCollectorTargetTest, MalformedEntriesNameTheEntryAndTheRule) {
  struct Case {
    const char* spec;
    const char* message;
  } cases[] = {
      {"collector", "has no port"},
      {"collector:0", "port must be 1..65535"},
      {"collector:65536", "port must be 1..65535"},
      {"collector:http", "port must be 1..65535"},
      {":50051", "has no host"},
      {"::1:50051", "needs brackets"},
      {"[::1]50051", "is not [ipv6]:port"},
      {"dns://8.8.8.8/collector:50051", "DNS authority is not supported"},
      {"http://collector:50051", "expected host:port or dns:///host:port"},
      {"unix:/run/collector.sock", "expected host:port or dns:///host:port"},
  };
  for (const Case& c : cases) {
    auto t = ParseCollectorTarget(c.spec);
    ASSERT_FALSE(t.ok()) << c.spec;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.spec;
    EXPECT_NE(t.status().message().find(c.spec), std::string::npos) << t.status();
    EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status();
  }
}

// The system resolver on names every machine has: numeric addresses and localhost.
TEST(ResolveWithSystemTest, NumericAndLocalhost) {
  auto v4 = ResolveWithSystem("127.0.0.1", "50051");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(*v4, std::vector<std::string>{"127.0.0.1:50051"});

  auto v6 = ResolveWithSystem("::1", "50051");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(*v6, std::vector<std::string>{"[::1]:50051"});

  auto local = ResolveWithSystem("localhost", "9");
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_FALSE(local->empty());
  for (const std::string& e : *local) {
    EXPECT_TRUE(e == "127.0.0.1:9" || e == "[::1]:9") << e;
  }
}

TEST(ResolveWithSystemTest, UnknownNameIsAnError) {
  // .invalid never resolves (RFC 6761); no query leaves a correctly configured machine.
  auto r = ResolveWithSystem("no-such-collector.invalid", "50051");
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace hookrelay::deliverer
