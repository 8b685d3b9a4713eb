// Outcome counters and latencies of a load run, and their report.
//
// Not thread-safe: each event-loop thread fills its own LoadStats; Merge() them once the threads
// have stopped.
#ifndef HOOKRELAY_TOOLS_BENCH_LOAD_STATS_H_
#define HOOKRELAY_TOOLS_BENCH_LOAD_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/bench/latency_histogram.h"
#include "tools/bench/load_plan.h"

namespace hookrelay::bench {

// Everything counts only answers (or failures) that arrive inside the measurement window.
struct LoadStats {
  // Requests answered (any status) or failed.
  uint64_t requests = 0;
  // Requests answered 200 / gRPC OK: their accepted events are durable.
  uint64_t ok_requests = 0;
  uint64_t durable_events = 0;
  // Events a 200 answer listed as rejected (invalid); not durable.
  uint64_t rejected_events = 0;
  // Everything else, by cause: "http 429", "grpc RESOURCE_EXHAUSTED", "io: Connection reset ...".
  std::map<std::string, uint64_t> failures;
  // Acknowledgement latency of the OK requests: from the send (closed loop) or from the
  // scheduled send time (open loop) to the complete answer.
  LatencyHistogram latency;
  // Open loop: requests that went out more than 1 ms after their slot (the client or the server
  // could not keep up with the asked rate).
  uint64_t late_sends = 0;

  // One acknowledged request, kept only when RunPlan::keep_samples is set.
  struct Sample {
    Clock::time_point done;
    int64_t latency_ns = 0;
  };
  std::vector<Sample> samples;

  // Records the latency of an acknowledged request answered at `done`, measured from `from`.
  void RecordAck(Clock::time_point from, Clock::time_point done, bool keep_sample) {
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(done - from).count();
    latency.Record(ns);
    if (keep_sample) samples.push_back({done, ns});
  }

  void Merge(const LoadStats& other);
};

// CPU time the load generator itself spent in the measurement window.
struct ClientCpu {
  double user_seconds = 0;
  double system_seconds = 0;
};

// A human-readable report (several lines) and a one-line JSON summary (prefixed "RESULT ") for
// scripts.
std::string FormatReport(const std::string& mode, const LoadOptions& options,
                         size_t request_bytes, const LoadStats& stats, double window_seconds,
                         const ClientCpu& cpu);
std::string FormatJsonSummary(const std::string& mode, const LoadOptions& options,
                              const LoadStats& stats, double window_seconds, const ClientCpu& cpu);

// Writes stats.samples as CSV ("t_s,latency_ms": completion time in seconds from `origin`, and
// the acknowledgement latency), in completion order. False when the file cannot be written.
bool WriteLatencyLog(const std::string& path, const LoadStats& stats, Clock::time_point origin);

}  // namespace hookrelay::bench

#endif  // HOOKRELAY_TOOLS_BENCH_LOAD_STATS_H_
