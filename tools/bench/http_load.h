// The HTTP side of the ingest load generator: POST /v1/batch over keep-alive connections with
// Boost.Beast, one io_context per thread.
#ifndef HOOKRELAY_TOOLS_BENCH_HTTP_LOAD_H_
#define HOOKRELAY_TOOLS_BENCH_HTTP_LOAD_H_

#include <string>

#include "absl/status/statusor.h"
#include "tools/bench/load_plan.h"
#include "tools/bench/load_stats.h"

namespace hookrelay::bench {

// The complete HTTP request (headers and a placeholder body) every connection copies and stamps.
// `body_offset` receives where the body starts.
std::string BuildHttpRequest(const LoadOptions& options, const BatchTemplate& batch,
                             size_t* body_offset);

// Runs the load described by `options` and `plan` (plan.batch in JSON format) and blocks until
// every thread has stopped: at plan.end, plus at most plan.drain for answers still in flight.
// Fails only when the target cannot be resolved.
absl::StatusOr<LoadStats> RunHttpLoad(const LoadOptions& options, const RunPlan& plan);

}  // namespace hookrelay::bench

#endif  // HOOKRELAY_TOOLS_BENCH_HTTP_LOAD_H_
