// Every metric family of SPEC §8 (and the collector's own) is in /metrics from start-up, before
// the first event, with its known label values at 0; and again after a kill -9 and a restart.
// Dashboards then show 0 instead of "no data", and rate() sees the first increment.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"

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
void ExpectCollectorSeriesAtZero(const std::string& metrics) {
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
  for (const char* state : {"ready", "scheduled", "leased", "dead"}) {
    zero.push_back(absl::StrCat("hookrelay_jobs{state=\"", state, "\"} 0"));
  }
  zero.push_back("hookrelay_jobs_oldest_ready_age_seconds 0");
  zero.push_back("hookrelay_ingest_duplicates_total 0");
  for (const std::string& series : zero) {
    EXPECT_TRUE(absl::StrContains(metrics, absl::StrCat("\n", series, "\n"))) << "missing: " << series;
  }
  for (const char* family :
       {"hookrelay_ingest_request_duration_seconds_count{api=\"http\"}",
        "hookrelay_store_commit_duration_seconds_count", "hookrelay_store_writable 1",
        "hookrelay_http_connections", "hookrelay_dispatch_streams", "process_cpu_seconds_total",
        "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds"}) {
    EXPECT_TRUE(absl::StrContains(metrics, absl::StrCat("\n", family))) << "missing: " << family;
  }
}

// A collector just started, and one restarted after kill -9, export every family at 0.
TEST(MetricsFamiliesTest, CollectorExportsEveryFamilyFromStart) {
  const std::string dir = MakeTempDir("families");
  const std::string config = dir + "/config.yaml";
  ASSERT_TRUE(WriteFile(config, TestConfigYaml()).ok());
  auto first = StartCollectorProcess(config, dir + "/data");
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectCollectorSeriesAtZero(Scrape((*first)->IntField("metrics_port")));
  ASSERT_TRUE((*first)->Signal(SIGKILL));
  (*first)->Wait();

  auto second = StartCollectorProcess(config, dir + "/data");
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectCollectorSeriesAtZero(Scrape((*second)->IntField("metrics_port")));
  ASSERT_TRUE((*second)->Signal(SIGTERM));
  (*second)->Wait();
}

}  // namespace
}  // namespace hookrelay::test
