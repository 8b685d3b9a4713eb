// ingest_load: drives the collector's ingest (HTTP POST /v1/batch or gRPC Collector/Ingest) and
// reports durable events/s and acknowledgement latency. See docs/bench-ingest.md.
//
//   ingest_load --mode=http --target=127.0.0.1:8080 --write_key=wk_live_123 --connections=32
//   ingest_load --mode=grpc --target=127.0.0.1:50051 --write_key=wk_live_123 --rate=100000
//
// Traffic goes to loopback addresses only.
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "tools/bench/batch_template.h"
#include "tools/bench/grpc_load.h"
#include "tools/bench/http_load.h"
#include "tools/bench/load_plan.h"
#include "tools/bench/load_stats.h"

ABSL_FLAG(std::string, mode, "http", "http (POST /v1/batch) or grpc (Collector/Ingest)");
ABSL_FLAG(std::string, target, "127.0.0.1:8080", "collector listener, host:port (loopback only)");
ABSL_FLAG(std::string, write_key, "wk_live_123", "source write key");
ABSL_FLAG(int, connections, 32, "HTTP keep-alive connections, or gRPC calls in flight");
ABSL_FLAG(int, events_per_request, 100, "events per request");
ABSL_FLAG(int, event_bytes, 300, "approximate size of one event as JSON");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(20), "measured period, after the warm-up");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(3), "unmeasured period at the start");
ABSL_FLAG(double, rate, 0,
          "offered load in events/s (open loop, latency from the scheduled send time); "
          "0 = closed loop, as fast as the connections go");
ABSL_FLAG(int, threads, 1, "client event-loop threads");
ABSL_FLAG(int, users, 0,
          "distinct userIds cycled through over all events (at most 1000000); 0 = event i of "
          "every request is user i");
ABSL_FLAG(int, grpc_channels, 1, "gRPC: TCP connections the calls are spread over");
ABSL_FLAG(bool, omit_timestamp, false,
          "send events without a timestamp, so the collector stamps each with its receipt time "
          "(end-to-end delivery latency can then be read from the webhook body)");
ABSL_FLAG(std::string, latency_log, "",
          "if set, a CSV file of every acknowledged request in the window: completion time "
          "(seconds from the start of the measurement) and latency (ms), to find stalls");

namespace hookrelay::bench {
namespace {

bool IsLoopback(const std::string& target) {
  const size_t colon = target.rfind(':');
  const std::string host = colon == std::string::npos ? target : target.substr(0, colon);
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "[::1]" || host == "::1";
}

ClientCpu CpuNow() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return ClientCpu{seconds(u.ru_utime), seconds(u.ru_stime)};
}

int Main(const std::string& mode, const LoadOptions& options, bool omit_timestamp) {
  if (mode != "http" && mode != "grpc") {
    std::fprintf(stderr, "--mode must be http or grpc, got %s\n", mode.c_str());
    return 2;
  }
  if (!IsLoopback(options.target)) {
    std::fprintf(stderr, "--target %s: only loopback targets are allowed\n", options.target.c_str());
    return 2;
  }
  if (options.connections < 1 || options.events_per_request < 1 || options.threads < 1 ||
      options.duration <= std::chrono::nanoseconds::zero() || options.rate < 0) {
    std::fprintf(stderr, "--connections, --events_per_request, --threads, --duration must be "
                         "positive and --rate not negative\n");
    return 2;
  }

  // A per-run id, so runs against the same data directory never collide on messageIds. The
  // leading 'r' is not a hex digit (see BatchTemplate).
  const std::string run_id = absl::StrFormat(
      "r%x%x", static_cast<unsigned>(getpid()),
      static_cast<unsigned long long>(
          std::chrono::system_clock::now().time_since_epoch().count() & 0xffffffffff));
  const BatchTemplate batch(mode == "http" ? BatchTemplate::Format::kJson
                                           : BatchTemplate::Format::kProto,
                            options.events_per_request, options.event_bytes, run_id,
                            omit_timestamp ? BatchTemplate::Timestamp::kOmit
                                           : BatchTemplate::Timestamp::kInclude,
                            absl::GetFlag(FLAGS_users));
  size_t request_bytes = batch.bytes().size();
  if (mode == "http") {
    size_t body_offset = 0;
    request_bytes = BuildHttpRequest(options, batch, &body_offset).size();
  }

  std::atomic<uint64_t> next_request_seq{0};
  RunPlan plan;
  // A short lead so every thread and connection is ready before the first open-loop slot.
  plan.start = Clock::now() + std::chrono::milliseconds(100);
  plan.measure_from = plan.start + options.warmup;
  plan.end = plan.measure_from + options.duration;
  plan.drain = options.drain;
  plan.batch = &batch;
  plan.next_request_seq = &next_request_seq;
  plan.keep_samples = !options.latency_log.empty();

  // The generator's own CPU time over the measurement window, sampled from the side.
  ClientCpu cpu_from, cpu_to;
  std::thread sampler([&] {
    std::this_thread::sleep_until(plan.measure_from);
    cpu_from = CpuNow();
    std::this_thread::sleep_until(plan.end);
    cpu_to = CpuNow();
  });
  absl::StatusOr<LoadStats> stats =
      mode == "http" ? RunHttpLoad(options, plan) : RunGrpcLoad(options, plan);
  sampler.join();
  if (!stats.ok()) {
    std::fprintf(stderr, "ingest_load: %s\n", std::string(stats.status().message()).c_str());
    return 1;
  }
  const ClientCpu cpu{cpu_to.user_seconds - cpu_from.user_seconds,
                      cpu_to.system_seconds - cpu_from.system_seconds};
  const double window = std::chrono::duration<double>(options.duration).count();
  std::fputs(FormatReport(mode, options, request_bytes, *stats, window, cpu).c_str(), stdout);
  std::fputs((FormatJsonSummary(mode, options, *stats, window, cpu) + "\n").c_str(), stdout);
  if (plan.keep_samples && !WriteLatencyLog(options.latency_log, *stats, plan.measure_from)) {
    std::fprintf(stderr, "ingest_load: cannot write %s\n", options.latency_log.c_str());
    return 1;
  }
  return stats->ok_requests > 0 ? 0 : 1;
}

}  // namespace
}  // namespace hookrelay::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "load generator for the collector's ingest: --mode=http|grpc --target=127.0.0.1:PORT");
  absl::ParseCommandLine(argc, argv);
  hookrelay::bench::LoadOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.write_key = absl::GetFlag(FLAGS_write_key);
  options.connections = absl::GetFlag(FLAGS_connections);
  options.events_per_request = absl::GetFlag(FLAGS_events_per_request);
  options.event_bytes = absl::GetFlag(FLAGS_event_bytes);
  options.duration = absl::ToChronoNanoseconds(absl::GetFlag(FLAGS_duration));
  options.warmup = absl::ToChronoNanoseconds(absl::GetFlag(FLAGS_warmup));
  options.rate = absl::GetFlag(FLAGS_rate);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.grpc_channels = absl::GetFlag(FLAGS_grpc_channels);
  options.latency_log = absl::GetFlag(FLAGS_latency_log);
  return hookrelay::bench::Main(absl::GetFlag(FLAGS_mode), options,
                                absl::GetFlag(FLAGS_omit_timestamp));
}
