// What a load run is asked to do (LoadOptions), when it happens (RunPlan) and which request goes
// out when (Schedule). Shared by the HTTP and gRPC drivers.
#ifndef HOOKRELAY_TOOLS_BENCH_LOAD_PLAN_H_
#define HOOKRELAY_TOOLS_BENCH_LOAD_PLAN_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench/batch_template.h"

namespace hookrelay::bench {

using Clock = std::chrono::steady_clock;

struct LoadOptions {
  // host:port of the collector's HTTP or gRPC listener (loopback only).
  std::string target;
  std::string write_key;
  // HTTP: keep-alive connections; gRPC: concurrent in-flight calls. Spread over `threads`.
  int connections = 32;
  int events_per_request = 100;
  // Approximate size of one event as JSON.
  int event_bytes = 300;
  std::chrono::nanoseconds duration = std::chrono::seconds(20);
  std::chrono::nanoseconds warmup = std::chrono::seconds(3);
  // Events per second; 0 = closed loop (each connection sends its next request as soon as the
  // previous one is answered).
  double rate = 0;
  // Client threads, each with its own event loop (io_context or completion queue).
  int threads = 1;
  // gRPC only: separate channels (TCP connections) the calls are spread over.
  int grpc_channels = 1;
  // After the run: how long to wait for answers to requests still in flight.
  std::chrono::nanoseconds drain = std::chrono::seconds(10);
  // When set, every acknowledged request's completion time and latency are written there (CSV).
  std::string latency_log;
};

// Fixed for the whole run, shared by every thread.
struct RunPlan {
  Clock::time_point start;
  // Only answers arriving in [measure_from, end) are counted.
  Clock::time_point measure_from;
  Clock::time_point end;
  std::chrono::nanoseconds drain{};
  const BatchTemplate* batch = nullptr;
  // Source of unique request sequence numbers (hence unique messageIds).
  std::atomic<uint64_t>* next_request_seq = nullptr;
  // Keep one LoadStats::Sample per acknowledged request (for LoadOptions::latency_log).
  bool keep_samples = false;

  bool InWindow(Clock::time_point t) const { return t >= measure_from && t < end; }
};

// One thread's request schedule. Closed loop: "now", until the end. Open loop: slots spaced
// evenly at `requests_per_second`, starting at `first`; a connection that falls behind takes the
// overdue slot at once, and latency is measured from the slot, not from the (late) send, so a
// stalled server shows up in the latency instead of silently lowering the offered load
// (coordinated omission). Not thread-safe: one per event-loop thread.
class Schedule {
 public:
  Schedule(Clock::time_point first, Clock::time_point end, double requests_per_second)
      : next_(first), end_(end), open_loop_(requests_per_second > 0) {
    if (open_loop_) {
      interval_ = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(1.0 / requests_per_second));
      if (interval_.count() <= 0) interval_ = Clock::duration(1);
    }
  }

  bool open_loop() const { return open_loop_; }

  // When the next request is due (never earlier than `now` in closed loop); nullopt once the run
  // is over.
  std::optional<Clock::time_point> Next(Clock::time_point now) {
    if (!open_loop_) {
      if (now >= end_) return std::nullopt;
      return now;
    }
    if (next_ >= end_) return std::nullopt;
    const Clock::time_point slot = next_;
    next_ += interval_;
    return slot;
  }

 private:
  Clock::time_point next_;
  const Clock::time_point end_;
  const bool open_loop_;
  Clock::duration interval_{};
};

// The number of event-loop threads for `options`, and thread `t`'s schedule: in open loop each
// thread takes an equal share of the rate, its slots offset so that together they send evenly.
inline int LoadThreads(const LoadOptions& options) {
  return std::max(1, std::min(options.threads, options.connections));
}

inline Schedule ThreadSchedule(const LoadOptions& options, const RunPlan& plan, int t) {
  const int threads = LoadThreads(options);
  const double requests_per_second =
      options.rate / options.events_per_request / static_cast<double>(threads);
  const auto phase = requests_per_second > 0
                         ? std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(t / (requests_per_second * threads)))
                         : Clock::duration::zero();
  return Schedule(plan.start + phase, plan.end, requests_per_second);
}

}  // namespace hookrelay::bench

#endif  // HOOKRELAY_TOOLS_BENCH_LOAD_PLAN_H_
