// hookrelay deliverer: flags → Server::Options; SIGTERM/SIGINT drain and exit 0.
#include <signal.h>

#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/process_setup.h"
#include "common/secret_file.h"
#include "deliverer/sender_sizing.h"
#include "deliverer/server.h"

ABSL_FLAG(std::string, collector, "127.0.0.1:50051",
          "collector gRPC addresses, comma separated: host:port (one collector) or "
          "dns:///host:port (every address the name resolves to, re-resolved every "
          "--collector_resolve_interval; a Kubernetes headless Service)");
ABSL_FLAG(absl::Duration, collector_resolve_interval, absl::Seconds(30),
          "how often dns:/// collector addresses are resolved again");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0:9465", "Prometheus /metrics address");
ABSL_FLAG(bool, allow_private_networks, false,
          "permit receivers on loopback, private, link-local and metadata addresses");
ABSL_FLAG(std::string, deliverer_id, "", "name shown in collector logs (default hostname-pid)");
ABSL_FLAG(int32_t, credits, 0,
          "jobs held per collector stream at most; 0 = derived: 8 x sender_threads x "
          "max_host_connections (at most 20000)");
ABSL_FLAG(int32_t, sender_threads, 0,
          "HTTP sender threads, each with its own connection pool; 0 = derived: half the "
          "number of cores, at least 1 (at most 256)");
ABSL_FLAG(int32_t, max_host_connections, 0,
          "connection slots per receiver host per sender thread (requests beyond them wait in "
          "the deliverer, their timeout not yet started); 0 = derived: 128 (at most 10000)");
ABSL_FLAG(std::string, ca_file, "",
          "extra PEM CA certificates to trust besides the system store (private PKI)");
ABSL_FLAG(std::string, admin_token_file, "",
          "a file holding the collectors' admin token (a mounted Secret), sent on Subscribe");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(15),
          "on SIGTERM, how long to wait for jobs in flight");

using hookrelay::common::LogError;
using hookrelay::common::LogInfo;

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "hookrelay deliverer: takes jobs from collectors and delivers signed webhooks");
  absl::ParseCommandLine(argc, argv);
  hookrelay::common::DisableMutexDeadlockDetection();
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

  hookrelay::deliverer::Server::Options options;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_collector), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) options.collectors.emplace_back(part);
  }
  if (options.collectors.empty()) {
    LogError("--collector needs at least one address", {});
    return 2;
  }
  const absl::StatusOr<hookrelay::deliverer::Sizing> sizing = hookrelay::deliverer::DeriveSizing(
      {.sender_threads = absl::GetFlag(FLAGS_sender_threads),
       .max_host_connections = absl::GetFlag(FLAGS_max_host_connections),
       .credits = absl::GetFlag(FLAGS_credits)},
      std::thread::hardware_concurrency());
  if (!sizing.ok()) {
    LogError("bad flag value", {{"error", sizing.status().message()}});
    return 2;
  }
  options.sizing = *sizing;
  options.deliverer_id = absl::GetFlag(FLAGS_deliverer_id);
  options.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  options.resolve_interval = absl::GetFlag(FLAGS_collector_resolve_interval);
  if (options.resolve_interval < absl::Seconds(1)) {
    LogError("--collector_resolve_interval must be at least 1s",
             {{"collector_resolve_interval", absl::FormatDuration(options.resolve_interval)}});
    return 2;
  }

  if (const std::string file = absl::GetFlag(FLAGS_admin_token_file); !file.empty()) {
    absl::StatusOr<std::string> token = hookrelay::common::ReadSecretFile(file);
    if (!token.ok()) {
      LogError("cannot read --admin_token_file", {{"error", token.status().message()}});
      return 2;
    }
    options.admin_token = *std::move(token);
  }
  options.allow_private_networks = absl::GetFlag(FLAGS_allow_private_networks);
  options.ca_file = absl::GetFlag(FLAGS_ca_file);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);

  // Start logs its own failure. A metrics address that cannot be bound (Unavailable) exits 1;
  // options the sender or the deliverer refuse exit 2.
  hookrelay::deliverer::Server server(options);
  if (absl::Status st = server.Start(); !st.ok()) {
    return st.code() == absl::StatusCode::kUnavailable ? 1 : 2;
  }
  LogInfo("deliverer running",
          {{"collectors", absl::GetFlag(FLAGS_collector)},
           {"metrics_port", server.metrics_port()},
           {"metrics_address", absl::GetFlag(FLAGS_metrics_address)},
           {"allow_private_networks", options.allow_private_networks},
           {"credits", options.sizing.credits},
           {"sender_threads", options.sizing.sender_threads},
           {"max_host_connections", options.sizing.max_host_connections}});

  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  LogInfo("signal received; draining", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"},
                                        {"jobs_in_flight", server.jobs_in_flight()}});
  server.Shutdown();  // Logs "deliverer stopped".
  return 0;
}
