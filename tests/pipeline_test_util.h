// Helpers for the delivery tests: an in-process collector and deliverer sharing one manual clock
// (so hours of retries run in milliseconds), talking over real gRPC on 127.0.0.1 and POSTing to
// real receivers (tools/receiver) through the real libcurl sender.
#ifndef HOOKRELAY_TESTS_PIPELINE_TEST_UTIL_H_
#define HOOKRELAY_TESTS_PIPELINE_TEST_UTIL_H_

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collector/store/store.h"
#include "common/clock.h"
#include "deliverer/deliverer.h"
#include "deliverer/delivery_metrics.h"
#include "deliverer/http_sender.h"
#include "prometheus/registry.h"
#include "tests/collector_test_util.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {

// How long a test waits for something the pipeline should do within milliseconds.
inline constexpr absl::Duration kPipelineWait = absl::Seconds(20);

class InProcessPipeline {
 public:
  struct Options {
    // Extra CA file for the sender (an HTTPS receiver the test trusts).
    std::string ca_file;
    bool allow_private_networks = true;
    uint32_t credits = 200;
    // The collector's job-store engine.
    EngineSetup engine;
  };

  InProcessPipeline(std::string_view name, std::string config_yaml);
  InProcessPipeline(std::string_view name, std::string config_yaml, Options options);
  ~InProcessPipeline();

  // Starts the collector, then the deliverer connected to it.
  absl::Status Start();
  // Stops the deliverer (draining), then the collector. Idempotent.
  void Stop();

  InProcessCollector& collector() { return collector_; }
  common::ManualClock& clock() { return collector_.clock(); }
  collector::Store& store() { return *collector_.server().job_store(); }
  prometheus::Registry& deliverer_registry() { return *registry_; }
  deliverer::Deliverer& deliverer() { return *deliverer_; }

  // Waits (real time, up to kPipelineWait) until `pred` holds for the store's counts.
  bool WaitForCounts(const std::function<bool(const collector::JobCounts&)>& pred);
  // Advances the manual clock by `d` and returns once the dispatcher has made a whole pass that
  // began after the move (so whatever became due was looked at). False on timeout.
  bool AdvanceAndWaitForDispatch(absl::Duration d);
  // Waits until nothing is ready or leased (every job settled: delivered, scheduled or dead).
  bool WaitSettled();
  // Moves the clock to the store's next due time when it is in the future. False when nothing
  // is scheduled.
  bool AdvanceToNextDue();

 private:
  Options options_;
  InProcessCollector collector_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<deliverer::DeliveryMetrics> metrics_;
  std::unique_ptr<deliverer::HttpSender> sender_;
  std::unique_ptr<deliverer::Deliverer> deliverer_;
};

// The distinct messageIds the receiver has been sent.
std::set<std::string> DeliveredIds(const receiver::WebhookReceiver& r);
// Waits up to `timeout` until every id of `want` was delivered to `r`.
bool WaitDelivered(const receiver::WebhookReceiver& r, const std::set<std::string>& want,
                   absl::Duration timeout);

// Lowercase hex HMAC-SHA1, computed here with OpenSSL's EVP interface (independently of
// deliverer/signer.cc) to check X-Signature.
std::string HmacSha1HexForTest(std::string_view key, std::string_view data);

// The value of counter or gauge `name` with exactly `labels` in `registry`, or -1 when absent.
double MetricValue(prometheus::Registry& registry, std::string_view name,
                   const std::map<std::string, std::string>& labels);

// The value of sample `series` (a metric's name with its labels, as /metrics prints it:
// `hookrelay_jobs{state="ready"}`) scraped from a process's metrics port, or -1.
double ScrapeMetric(int metrics_port, std::string_view series);

// A config with source "web" (write key kWebKey) and one destination "hook" for it, enabled,
// with the given URLs, shared secret (may be empty) and extra YAML lines under the destination
// (e.g. "    options:\n      timeout_ms: 300\n").
std::string PipelineConfig(const std::vector<std::string>& urls, std::string_view secret,
                           std::string_view extra_destination_yaml = {});

}  // namespace hookrelay::test

#endif  // HOOKRELAY_TESTS_PIPELINE_TEST_UTIL_H_
