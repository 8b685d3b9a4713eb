#include "common/metrics_server.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/collector_test_util.h"

namespace hookrelay::test {
namespace {

using common::MetricsServer;

HttpResponse Get(int port, const std::string& path, const std::string& method = "GET") {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(port);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return {};
  absl::StatusOr<HttpResponse> r;
  if (method == "HEAD") {
    EXPECT_TRUE((*c)->SendAll(absl::StrCat("HEAD ", path, " HTTP/1.1\r\nHost: x\r\n\r\n")).ok());
    r = (*c)->ReadResponse(/*head=*/true);
  } else {
    r = (*c)->Request(method, path, "", {});
  }
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : HttpResponse{};
}

// /metrics serves every collectable (also one added while serving), /healthz and /readyz follow
// their callbacks (503 with the reason when not OK), other paths are 404, and Shutdown is quick.
TEST(MetricsServerTest, ServesMetricsAndProbes) {
  absl::Mutex mu;
  absl::Status ready = absl::UnavailableError("no collector connected");
  MetricsServer::Options options;
  options.address = "127.0.0.1:0";
  options.ready = [&] {
    absl::MutexLock lock(&mu);
    return ready;
  };
  MetricsServer server(options);
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("test_things_total").Help("h").Register(*registry).Add({}).Increment(3);
  server.Add(registry);
  ASSERT_TRUE(server.Start().ok());
  ASSERT_GT(server.port(), 0);

  HttpResponse metrics = Get(server.port(), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_TRUE(absl::StrContains(metrics.body, "\ntest_things_total 3\n")) << metrics.body;
  EXPECT_TRUE(absl::StartsWith(metrics.Header("Content-Type"), "text/plain; version=0.0.4"));

  auto later = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("test_later_total").Help("h").Register(*later).Add({});
  server.Add(later);
  EXPECT_TRUE(absl::StrContains(Get(server.port(), "/metrics").body, "test_later_total 0"));

  EXPECT_EQ(Get(server.port(), "/healthz").status, 200);
  const HttpResponse not_ready = Get(server.port(), "/readyz");
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_TRUE(absl::StrContains(not_ready.body, "no collector connected")) << not_ready.body;
  {
    absl::MutexLock lock(&mu);
    ready = absl::OkStatus();
  }
  EXPECT_EQ(Get(server.port(), "/readyz").status, 200);
  EXPECT_EQ(Get(server.port(), "/nope").status, 404);
  EXPECT_EQ(Get(server.port(), "/metrics", "POST").status, 405);
  const HttpResponse head = Get(server.port(), "/metrics", "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());

  // A keep-alive connection left open does not hold Shutdown.
  absl::StatusOr<std::unique_ptr<HttpConnection>> idle = HttpConnection::Connect(server.port());
  ASSERT_TRUE(idle.ok());
  ASSERT_TRUE((*idle)->Request("GET", "/healthz", "", {}).ok());
  const absl::Time start = absl::Now();
  server.Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
}

// A bad or busy address is an error naming it.
TEST(MetricsServerTest, BadAddressIsAnError) {
  MetricsServer::Options options;
  options.address = "not-an-address";
  absl::Status s = MetricsServer(options).Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "not-an-address"));
  options.address = "256.1.1.1:80";
  EXPECT_FALSE(MetricsServer(options).Start().ok());
}

}  // namespace
}  // namespace hookrelay::test
