#include "deliverer/server.h"

#include <curl/curl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "deliverer/fake_collector.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hookrelay::deliverer {
namespace {

using ::testing::HasSubstr;

struct HttpResponse {
  long status = 0;  // 0: no response.
  std::string body;
};

size_t AppendBody(char* data, size_t size, size_t count, void* body) {
  static_cast<std::string*>(body)->append(data, size * count);
  return size * count;
}

// GET http://127.0.0.1:<port><path>.
HttpResponse Get(int port, const std::string& path) {
  HttpResponse response;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return response;
  const std::string url = absl::StrCat("http://127.0.0.1:", port, path);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  }
  curl_easy_cleanup(curl);
  return response;
}

// Options that start: one collector (the caller's), a metrics port the OS picks, small sizing.
Server::Options ValidOptions(const std::string& collector) {
  Server::Options options;
  options.collectors = {collector};
  options.metrics_address = "127.0.0.1:0";
  options.sizing = {.sender_threads = 1, .max_host_connections = 4, .credits = 7};
  options.drain_timeout = absl::Seconds(5);
  return options;
}

// A server on valid options subscribes to the collector with its credits, reports itself ready
// with the stream counted in /metrics, and on Shutdown drains and closes the stream.
TEST(ServerTest, SubscribesReportsReadyAndDrainsOnShutdown) {
  ServedCollector collector;
  ASSERT_NE(collector.server, nullptr);
  Server server(ValidOptions(collector.endpoint()));
  ASSERT_TRUE(server.Start().ok());

  ASSERT_TRUE(collector.service.WaitHello());
  EXPECT_EQ(collector.service.hello_credits(), 7u);
  EXPECT_EQ(server.connected_streams(), 1);
  EXPECT_EQ(server.jobs_in_flight(), 0);
  ASSERT_GT(server.metrics_port(), 0);
  EXPECT_EQ(Get(server.metrics_port(), "/healthz").status, 200);
  EXPECT_EQ(Get(server.metrics_port(), "/readyz").status, 200);
  const HttpResponse metrics = Get(server.metrics_port(), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.body, HasSubstr("\nhookrelay_deliverer_collectors_connected 1\n"));

  server.Shutdown();
  EXPECT_TRUE(collector.service.WaitDrained());
  EXPECT_TRUE(collector.service.WaitStreamEnded());
  EXPECT_EQ(server.connected_streams(), 0);
  server.Shutdown();  // Idempotent.
}

// Start refuses Options that cannot work, with an error naming the option; nothing is left
// running (the destructor has nothing to stop).
TEST(ServerTest, StartRefusesBadOptionsNamingTheOption) {
  struct Case {
    const char* name;
    void (*change)(Server::Options&);
    absl::StatusCode code;
    const char* names;
  };
  const Case cases[] = {
      {"no collector", [](Server::Options& o) { o.collectors.clear(); },
       absl::StatusCode::kInvalidArgument, "--collector"},
      {"empty collector address", [](Server::Options& o) { o.collectors = {""}; },
       absl::StatusCode::kInvalidArgument, "--collector"},
      {"unreadable CA file",
       [](Server::Options& o) { o.ca_file = "/nonexistent/hookrelay-test-ca.pem"; },
       absl::StatusCode::kInvalidArgument, "ca_file"},
      {"short resolve interval",
       [](Server::Options& o) { o.resolve_interval = absl::Milliseconds(500); },
       absl::StatusCode::kInvalidArgument, "resolve_interval"},
      {"no credits", [](Server::Options& o) { o.sizing.credits = 0; },
       absl::StatusCode::kInvalidArgument, "credits"},
      {"no sender threads", [](Server::Options& o) { o.sizing.sender_threads = 0; },
       absl::StatusCode::kInvalidArgument, "threads"},
      {"unparsable metrics address",
       [](Server::Options& o) { o.metrics_address = "not-an-address"; },
       absl::StatusCode::kUnavailable, "metrics address"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Server::Options options = ValidOptions("127.0.0.1:1");
    c.change(options);
    Server server(options);
    const absl::Status status = server.Start();
    EXPECT_EQ(status.code(), c.code) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.names));
    EXPECT_EQ(server.connected_streams(), 0);
  }
}

// A metrics address already in use is Unavailable (the binary exits 1 for it) and the first
// server keeps serving.
TEST(ServerTest, StartRefusesATakenMetricsPort) {
  ServedCollector collector;
  ASSERT_NE(collector.server, nullptr);
  Server first(ValidOptions(collector.endpoint()));
  ASSERT_TRUE(first.Start().ok());

  Server::Options options = ValidOptions(collector.endpoint());
  options.metrics_address = absl::StrCat("127.0.0.1:", first.metrics_port());
  Server second(options);
  const absl::Status status = second.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("metrics address"));
  EXPECT_EQ(Get(first.metrics_port(), "/healthz").status, 200);
}

}  // namespace
}  // namespace hookrelay::deliverer
