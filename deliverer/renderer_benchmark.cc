// Rendering cost of a typical webhook body: a ~350-byte track event as the collector stores it.
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "benchmark/benchmark.h"

#include "deliverer/renderer.h"

namespace hookrelay::deliverer {
namespace {

constexpr std::string_view kTrackEvent =
    R"({"type":"track","messageId":"3f9c2b1e-7a4d-4c1b-9e2f-5d6a7b8c9d0e","userId":"user-1842",)"
    R"("event":"Order Completed","properties":{"orderId":"50314b8e","total":27.5,"revenue":25,)"
    R"("currency":"USD","coupon":"SPRING"},)"
    R"("context":{"ip":"203.0.113.7","library":{"name":"analytics-go","version":"3.0.0"}},)"
    R"("timestamp":"2024-03-01T12:00:00.123Z","receivedAt":"2024-03-01T12:00:00.130Z"})";

// The hot path: one renderer per worker, reused.
void BM_RenderTrackReused(benchmark::State& state) {
  WebhookRenderer renderer;
  std::string body;
  for (auto _ : state) {
    const absl::Status status = renderer.Render(kTrackEvent, &body);
    if (!status.ok()) state.SkipWithError("render failed");
    benchmark::DoNotOptimize(body.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kTrackEvent.size()));
  state.counters["input_bytes"] = static_cast<double>(kTrackEvent.size());
  state.counters["body_bytes"] = static_cast<double>(body.size());
}
BENCHMARK(BM_RenderTrackReused);

// The one-shot function, which builds a parser per call.
void BM_RenderWebhookBodyOneShot(benchmark::State& state) {
  for (auto _ : state) {
    absl::StatusOr<std::string> body = RenderWebhookBody(kTrackEvent);
    if (!body.ok()) state.SkipWithError("render failed");
    benchmark::DoNotOptimize(body);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kTrackEvent.size()));
}
BENCHMARK(BM_RenderWebhookBodyOneShot);

}  // namespace
}  // namespace hookrelay::deliverer
