// hookrelay deliverer: flags → HttpSender + Deliverer; SIGTERM/SIGINT drain and exit 0.
#include <signal.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "common/log.h"
#include "deliverer/deliverer.h"
#include "deliverer/delivery_metrics.h"
#include "deliverer/http_sender.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

ABSL_FLAG(std::string, collector, "127.0.0.1:50051",
          "collector gRPC addresses, comma separated (host:port,host:port)");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0:9465", "Prometheus /metrics address");
ABSL_FLAG(bool, allow_private_networks, false,
          "permit receivers on loopback, private, link-local and metadata addresses");
ABSL_FLAG(std::string, deliverer_id, "", "name shown in collector logs (default hostname-pid)");
ABSL_FLAG(int32_t, credits, 2000, "jobs held per collector stream at most");
ABSL_FLAG(int32_t, sender_threads, 1, "HTTP sender threads (each with its own connection pool)");
ABSL_FLAG(int32_t, max_host_connections, 64, "connections per receiver host per sender thread");
ABSL_FLAG(std::string, ca_file, "",
          "extra PEM CA certificates to trust besides the system store (private PKI)");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(15),
          "on SIGTERM, how long to wait for jobs in flight");

namespace {

using hookrelay::common::LogError;
using hookrelay::common::LogInfo;

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "hookrelay deliverer: takes jobs from collectors and delivers signed webhooks");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status st = hookrelay::common::SetMinLogLevelFromEnv(); !st.ok()) {
    LogError("bad HOOKRELAY_LOG_LEVEL", {{"error", st.message()}});
    return 2;
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  hookrelay::deliverer::Deliverer::Options options;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_collector), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) options.collectors.emplace_back(part);
  }
  if (options.collectors.empty()) {
    LogError("--collector needs at least one address", {});
    return 2;
  }
  const int32_t credits = absl::GetFlag(FLAGS_credits);
  if (credits < 1 || credits > 20000) {
    LogError("--credits must be between 1 and 20000", {{"credits", credits}});
    return 2;
  }
  options.credits = static_cast<uint32_t>(credits);
  options.deliverer_id = absl::GetFlag(FLAGS_deliverer_id);
  options.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);

  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(absl::GetFlag(FLAGS_metrics_address));
  } catch (const std::exception& e) {
    LogError("cannot listen on the metrics address",
             {{"metrics_address", absl::GetFlag(FLAGS_metrics_address)}, {"error", e.what()}});
    return 1;
  }
  exposer->RegisterCollectable(registry);
  const auto ports = exposer->GetListeningPorts();
  hookrelay::deliverer::DeliveryMetrics metrics(*registry);

  hookrelay::deliverer::HttpSender::Options sender_options;
  sender_options.allow_private_networks = absl::GetFlag(FLAGS_allow_private_networks);
  sender_options.ca_file = absl::GetFlag(FLAGS_ca_file);
  sender_options.threads = absl::GetFlag(FLAGS_sender_threads);
  sender_options.max_host_connections = absl::GetFlag(FLAGS_max_host_connections);
  auto sender = hookrelay::deliverer::HttpSender::Create(sender_options);
  if (!sender.ok()) {
    LogError("cannot start the HTTP sender", {{"error", sender.status().message()}});
    return 2;
  }

  hookrelay::deliverer::Deliverer deliverer(options, **sender, hookrelay::common::Clock::Real(),
                                            &metrics);
  if (absl::Status st = deliverer.Start(); !st.ok()) {
    LogError("deliverer failed to start", {{"error", st.message()}});
    return 2;
  }
  LogInfo("deliverer running",
          {{"collectors", absl::GetFlag(FLAGS_collector)},
           {"metrics_port", ports.empty() ? 0 : ports.front()},
           {"metrics_address", absl::GetFlag(FLAGS_metrics_address)},
           {"allow_private_networks", sender_options.allow_private_networks},
           {"credits", credits},
           {"sender_threads", sender_options.threads}});

  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  LogInfo("signal received; draining", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"},
                                        {"jobs_in_flight", deliverer.jobs_in_flight()}});
  deliverer.Shutdown();
  sender->reset();
  exposer.reset();
  LogInfo("deliverer stopped", {});
  return 0;
}
