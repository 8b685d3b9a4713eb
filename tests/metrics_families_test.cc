// Every metric family of SPEC §8 (and the collector's own) is in /metrics from start-up, before
// the first event, with its known label values at 0; and again after a kill -9 and a restart.
// Dashboards then show 0 instead of "no data", and rate() sees the first increment.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"
#include "tests/test_engines.h"

namespace hookrelay::test {
namespace {

std::string Scrape(int port) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(port);
  if (!c.ok()) return "";
  absl::StatusOr<HttpResponse> r = (*c)->Request("GET", "/metrics", "", {});
  return r.ok() ? r->body : "";
}

// The collector's series that must exist, with value 0, before anything happened. The test
// config has sources web, fan and quiet (tests/collector_test_util.h).
void ExpectCollectorSeriesAtZero(const std::string& metrics, const std::string& engine) {
  std::vector<std::string> zero;
  for (const char* source : {"web", "fan", "quiet"}) {
    for (const char* type : {"track", "identify", "page", "screen", "group", "alias"}) {
      zero.push_back(absl::StrCat("hookrelay_ingest_events_total{source=\"", source,
                                  "\",type=\"", type, "\"} 0"));
    }
  }
  for (const char* reason : {"unauthenticated", "overload", "store_unavailable", "too_large",
                             "invalid_json", "invalid_userId", "invalid_messageId"}) {
    zero.push_back(absl::StrCat("hookrelay_ingest_rejected_total{reason=\"", reason, "\"} 0"));
  }
  for (const char* kind : {"no_space", "io_error"}) {
    zero.push_back(absl::StrCat("hookrelay_store_errors_total{kind=\"", kind, "\"} 0"));
  }
  if (engine == "jetstream") {
    zero.push_back("hookrelay_store_errors_total{kind=\"unavailable\"} 0");
    zero.push_back("hookrelay_jetstream_dedup_lookup_failures_total 0");
    // The cluster's health: no leader change seen yet (the copies and leaders are read at start;
    // their values are the cluster's, checked for presence below).
    for (const char* group : {"HR_JOBS", "HR_JOBS/dispatch"}) {
      zero.push_back(absl::StrCat("hookrelay_jetstream_leader_changes_total{group=\"", group,
                                  "\"} 0"));
    }
  }
  // The job counts: what this collector holds (its store; on JetStream the jobs it fetched,
  // holds or leased), and on JetStream the shared streams' part, the same on every collector.
  for (const char* state : {"ready", "scheduled", "leased"}) {
    zero.push_back(absl::StrCat("hookrelay_jobs{state=\"", state, "\",scope=\"collector\"} 0"));
  }
  if (engine == "jetstream") {
    for (const char* state : {"ready", "scheduled", "dead"}) {
      zero.push_back(absl::StrCat("hookrelay_jobs{state=\"", state, "\",scope=\"cluster\"} 0"));
    }
    zero.push_back("hookrelay_jobs_oldest_ready_age_seconds{scope=\"cluster\"} 0");
  } else {
    zero.push_back("hookrelay_jobs{state=\"dead\",scope=\"collector\"} 0");
    zero.push_back("hookrelay_jobs_oldest_ready_age_seconds{scope=\"collector\"} 0");
  }
  zero.push_back("hookrelay_ingest_duplicates_total 0");
  zero.push_back("hookrelay_deletions_total 0");
  zero.push_back("hookrelay_purged_jobs_total 0");
  for (const std::string& series : zero) {
    EXPECT_TRUE(absl::StrContains(metrics, absl::StrCat("\n", series, "\n"))) << "missing: " << series;
  }
  for (const char* family :
       {"hookrelay_ingest_request_duration_seconds_count{api=\"http\"}",
        "hookrelay_store_writable 1",
        "hookrelay_http_connections", "hookrelay_dispatch_streams",
        "hookrelay_dispatch_latency_seconds_count 0", "process_cpu_seconds_total",
        "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds"}) {
    EXPECT_TRUE(absl::StrContains(metrics, absl::StrCat("\n", family))) << "missing: " << family;
  }
  if (engine == "jetstream") {
    for (const char* family :
         {"hookrelay_jetstream_replicas{group=\"HR_JOBS\",state=\"current\"} ",
          "hookrelay_jetstream_replicas{group=\"HR_JOBS/dispatch\",state=\"offline\"} ",
          "hookrelay_jetstream_replica_lag{group=\"HR_JOBS\"} ",
          "hookrelay_jetstream_has_leader{group=\"HR_JOBS/dispatch\"} "}) {
      EXPECT_TRUE(absl::StrContains(metrics, absl::StrCat("\n", family))) << "missing: " << family;
    }
  }
  EXPECT_TRUE(absl::StrContains(metrics, "\nhookrelay_store_commit_duration_seconds_count"))
      << "missing: hookrelay_store_commit_duration_seconds_count";
}

// On both job-store engines (tests/test_engines.h).
class CollectorMetricsFamiliesTest : public ::testing::TestWithParam<std::string> {};

// A collector just started, and one restarted after kill -9, export every family at 0.
TEST_P(CollectorMetricsFamiliesTest, EveryFamilyFromStart) {
  absl::StatusOr<EngineSetup> engine = PrepareEngine(GetParam());
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string dir = MakeTempDir("families");
  const std::string config = dir + "/config.yaml";
  ASSERT_TRUE(WriteFile(config, TestConfigYaml()).ok());
  auto first = StartCollectorProcess(config, dir + "/data", CollectorEngineFlags(*engine));
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectCollectorSeriesAtZero(Scrape((*first)->IntField("metrics_port")), engine->engine);
  ASSERT_TRUE((*first)->Signal(SIGKILL));
  (*first)->Wait();

  auto second = StartCollectorProcess(config, dir + "/data", CollectorEngineFlags(*engine));
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectCollectorSeriesAtZero(Scrape((*second)->IntField("metrics_port")), engine->engine);
  ASSERT_TRUE((*second)->Signal(SIGTERM));
  (*second)->Wait();
}

INSTANTIATE_TEST_SUITE_P(Engines, CollectorMetricsFamiliesTest, EngineParams(), EngineParamName);

int Probe(int port, const std::string& path) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(port);
  if (!c.ok()) return -1;
  absl::StatusOr<HttpResponse> r = (*c)->Request("GET", path, "", {});
  return r.ok() ? r->status : -1;
}

// A deliverer's families once it is subscribed: alive and ready, every destination the
// collector announced × outcome at 0 (the test config's destinations), the histograms, gauges
// and process metrics.
void ExpectDelivererFamiliesAtZero(int port) {
  EXPECT_EQ(Probe(port, "/healthz"), 200);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Probe(port, "/readyz") != 200 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // The stream connects over a real socket.
  }
  EXPECT_EQ(Probe(port, "/readyz"), 200);
  std::vector<std::string> zero;
  for (const char* destination : {"hook-web", "hook-fan", "hook-off"}) {
    for (const char* outcome : {"delivered", "retry", "dead"}) {
      zero.push_back(absl::StrCat("\nhookrelay_delivery_attempts_total{destination=\"",
                                  destination, "\",outcome=\"", outcome, "\"} 0\n"));
    }
    zero.push_back(absl::StrCat("\nhookrelay_delivery_retries_total{destination=\"", destination,
                                "\"} 0\n"));
  }
  std::string metrics = Scrape(port);
  const absl::Time announce_deadline = absl::Now() + absl::Seconds(30);
  while (!absl::StrContains(metrics, zero.back()) && absl::Now() < announce_deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    metrics = Scrape(port);
  }
  for (const std::string& series : zero) {
    EXPECT_TRUE(absl::StrContains(metrics, series)) << "missing: " << series << "\n" << metrics;
  }
  for (const char* series : {"\nhookrelay_deliverer_collectors_connected 1\n",
                             "\nhookrelay_delivery_jobs_in_flight 0\n",
                             "\nhookrelay_delivery_in_flight_requests 0\n",
                             "\nhookrelay_delivery_attempt_duration_seconds_count 0\n",
                             "\nhookrelay_delivery_queue_seconds_count 0\n",
                             "\nhookrelay_delivery_end_to_end_seconds_count 0\n",
                             "\nhookrelay_delivery_pickup_seconds_count 0\n",
                             "\nprocess_cpu_seconds_total ", "\nprocess_resident_memory_bytes "}) {
    EXPECT_TRUE(absl::StrContains(metrics, series)) << "missing: " << series << "\n" << metrics;
  }
}

// The deliverer's metrics port: its families (process metrics and the connected-collectors gauge
// included) from start-up, every destination × outcome at 0 once a collector announced its
// destinations, /healthz alive, /readyz 200 only while a collector stream is open;
// it reads its admin token from a file. The same after a kill -9 and restart.
TEST(MetricsFamiliesTest, DelivererMetricsAndProbes) {
  const std::string dir = MakeTempDir("deliverer-probes");
  const std::string config = dir + "/config.yaml";
  ASSERT_TRUE(WriteFile(config, TestConfigYaml()).ok());
  const std::string token = dir + "/admin-token";
  ASSERT_TRUE(WriteFile(token, "t0ken\n").ok());
  auto collector = StartCollectorProcess(config, dir + "/data");
  ASSERT_TRUE(collector.ok()) << collector.status();
  auto deliverer = StartDelivererProcess({(*collector)->IntField("grpc_port")},
                                         {absl::StrCat("--admin_token_file=", token)});
  ASSERT_TRUE(deliverer.ok()) << deliverer.status();
  int port = (*deliverer)->IntField("metrics_port");
  ASSERT_GT(port, 0);
  ExpectDelivererFamiliesAtZero(port);

  // A deliverer restarted after kill -9 exports them all again.
  ASSERT_TRUE((*deliverer)->Signal(SIGKILL));
  (*deliverer)->Wait();
  deliverer = StartDelivererProcess({(*collector)->IntField("grpc_port")},
                                    {absl::StrCat("--admin_token_file=", token)});
  ASSERT_TRUE(deliverer.ok()) << deliverer.status();
  port = (*deliverer)->IntField("metrics_port");
  ASSERT_GT(port, 0);
  ExpectDelivererFamiliesAtZero(port);

  // Without a collector it stays alive but is not ready.
  ASSERT_TRUE((*collector)->Signal(SIGKILL));
  (*collector)->Wait();
  const absl::Time unready_deadline = absl::Now() + absl::Seconds(30);
  while (Probe(port, "/readyz") != 503 && absl::Now() < unready_deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // Waits for the stream to break.
  }
  EXPECT_EQ(Probe(port, "/readyz"), 503);
  EXPECT_EQ(Probe(port, "/healthz"), 200);
  ASSERT_TRUE((*deliverer)->Signal(SIGTERM));
  EXPECT_EQ((*deliverer)->Wait(), 0);

  // An unreadable token file is refused at start, naming the flag.
  auto refused = StartDelivererProcess({1}, {"--admin_token_file=" + dir + "/missing"});
  EXPECT_FALSE(refused.ok());
}

// --lame_duck: after SIGTERM the collector reports not ready (so a load balancer stops sending)
// but still takes events; after the period it drains and exits 0.
TEST(MetricsFamiliesTest, CollectorLameDuckBeforeDraining) {
  const std::string dir = MakeTempDir("lame-duck");
  const std::string config = dir + "/config.yaml";
  ASSERT_TRUE(WriteFile(config, TestConfigYaml()).ok());
  auto collector = StartCollectorProcess(config, dir + "/data", {"--lame_duck=3s"});
  ASSERT_TRUE(collector.ok()) << collector.status();
  const int metrics = (*collector)->IntField("metrics_port");
  const int http = (*collector)->IntField("http_port");
  EXPECT_EQ(Probe(metrics, "/readyz"), 200);
  const absl::Time signalled = absl::Now();
  ASSERT_TRUE((*collector)->Signal(SIGTERM));
  ASSERT_TRUE((*collector)->WaitForMsg("collector not ready (lame duck)"));
  EXPECT_EQ(Probe(metrics, "/readyz"), 503);
  EXPECT_EQ(Probe(metrics, "/healthz"), 200);
  absl::StatusOr<HttpResponse> r =
      HttpPost(http, "/v1/track", R"({"userId":"u1","event":"Late","messageId":"lame-1"})", kWebKey);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ((*collector)->Wait(), 0);
  EXPECT_GE(absl::Now() - signalled, absl::Seconds(3));

  // A bad value is refused at start.
  auto refused = StartCollectorProcess(config, dir + "/data2", {"--lame_duck=-1s"});
  EXPECT_FALSE(refused.ok());
}

}  // namespace
}  // namespace hookrelay::test
