// The deliverer's concurrency settings, derived from the machine unless given:
//
//   sender_threads       = half the cores (std::thread::hardware_concurrency() / 2, at least 1)
//   max_host_connections = 128 (per receiver host per sender thread; the host's connection slots
//                          in all are sender_threads x max_host_connections)
//   credits              = 8 x sender_threads x max_host_connections, at most 20000 (every
//                          connection slot busy with one job and seven more waiting for it)
//
// On a 2-core machine: 1 thread, 128 connections per host, 1024 credits. Half the cores, because
// the stream's gRPC thread does about 40 % of each delivery's work (reading, rendering, signing)
// besides the sender threads' 60 %: with a sender thread per core the threads outnumbered the
// cores, woke each other up and batched less. Measured on 2 cores (docs/BENCHMARKS.md, "Deliverer
// CPU per delivery: a sender thread per two cores"): 1 thread x 128 connections gave 13 us of
// deliverer CPU per delivery against 17 us, and 11 % more deliveries/s, than 2 x 64 (the same
// slots per host and credits in all). Eight jobs per slot, not two: a credit comes back with an
// outcome and goes out again with the collector's next job, and with two per slot a fast
// receiver's connections sat idle for that round trip, the more so beside a slow destination
// holding its share of the credits (half of them: the collector's fair share). "Credits for the
// collector's round trip": 4 per slot (512) gave 5-13 % more deliveries/s than 2 and a fast
// destination beside a 2 s one kept 0.87 of its solo rate against 0.78; "Eight credits per
// slot": 8 (1024) kept 0.93-0.98 (0.83-0.91 with 4), with the same deliveries/s alone.
// Each value given (non-zero) replaces its derived one, and credits are derived from the values
// in effect (so --sender_threads=2 alone gives 8 x 2 x 128 = 2048 credits).
//
// Thread-safe (pure functions).
#ifndef HOOKRELAY_DELIVERER_SENDER_SIZING_H_
#define HOOKRELAY_DELIVERER_SENDER_SIZING_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace hookrelay::deliverer {

inline constexpr int32_t kDefaultConnectionsPerThread = 128;
inline constexpr int32_t kMaxSenderThreads = 256;
inline constexpr int32_t kMaxHostConnections = 10000;
inline constexpr int32_t kMaxCredits = 20000;

// What the flags say; 0 = derive.
struct SizingFlags {
  int32_t sender_threads = 0;
  int32_t max_host_connections = 0;
  int32_t credits = 0;
};

struct Sizing {
  int sender_threads = 1;
  int32_t max_host_connections = kDefaultConnectionsPerThread;
  uint32_t credits = 4 * kDefaultConnectionsPerThread;
};

// `hardware_threads`: std::thread::hardware_concurrency() (0 = unknown, taken as 1).
// InvalidArgument naming the flag and its limits for a negative or too large value, e.g.
// "--credits must be between 0 (derived) and 20000, got 30000".
absl::StatusOr<Sizing> DeriveSizing(const SizingFlags& flags, unsigned hardware_threads);

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_SENDER_SIZING_H_
