// The gRPC side of the ingest load generator: hookrelay.v1.Collector/Ingest with pre-serialized
// requests through the generic async API, one completion queue per thread.
#ifndef HOOKRELAY_TOOLS_BENCH_GRPC_LOAD_H_
#define HOOKRELAY_TOOLS_BENCH_GRPC_LOAD_H_

#include "absl/status/statusor.h"
#include "tools/bench/load_plan.h"
#include "tools/bench/load_stats.h"

namespace hookrelay::bench {

// Runs the load described by `options` and `plan` (plan.batch in protobuf format) and blocks
// until every thread has stopped: at plan.end, plus at most plan.drain for calls still in flight
// (then cancelled). Fails when no channel connects within five seconds.
absl::StatusOr<LoadStats> RunGrpcLoad(const LoadOptions& options, const RunPlan& plan);

}  // namespace hookrelay::bench

#endif  // HOOKRELAY_TOOLS_BENCH_GRPC_LOAD_H_
