// The collector's HTTP event parser on the ingest bench's request: POST /v1/batch with 100 track
// events of ~300 bytes (tools/bench/batch_template.h), parse + validation + per-event size.
//   bazel run -c opt --config=bench //tools/bench:http_parse_benchmark
#include <string>

#include "benchmark/benchmark.h"
#include "collector/ingest/http_event_parser.h"
#include "tools/bench/batch_template.h"

namespace hookrelay::bench {
namespace {

void BM_ParseBatch(benchmark::State& state) {
  const BatchTemplate batch(BatchTemplate::Format::kJson, static_cast<int>(state.range(0)), 300,
                            "run");
  std::string body = batch.bytes();
  batch.Stamp(1, body.data());
  collector::HttpEventParser parser;
  for (auto _ : state) {
    auto parsed = parser.Parse("batch", body);
    if (!parsed.ok()) {
      state.SkipWithError("parse failed");
      break;
    }
    benchmark::DoNotOptimize(parsed->events.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
}
BENCHMARK(BM_ParseBatch)->Arg(100);

}  // namespace
}  // namespace hookrelay::bench

BENCHMARK_MAIN();
