// AppendJsonString on the strings an event carries: ids, names, ISO times, free text with some
// UTF-8, and one with escapes. bazel run -c opt --config=bench //common:json_writer_benchmark
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/json_writer.h"

namespace hookrelay::common {
namespace {

const std::vector<std::string>& Strings() {
  static const std::vector<std::string> strings = {
      "user_8f14e45fceea167a5a36dedd4bea2543",
      "Order Completed",
      "2026-11-26T13:30:00.123Z",
      "https://shop.example.com/checkout/confirm?order=A-1029384756",
      "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0",
      "Café au lait, crème brûlée — 3 × 4,50 €",
      "line one\nline \"two\"\t\\ end",
      "sku-00042",
  };
  return strings;
}

void BM_AppendJsonString(benchmark::State& state) {
  const std::vector<std::string>& strings = Strings();
  size_t bytes = 0;
  for (const std::string& s : strings) bytes += s.size();
  std::string out;
  out.reserve(4096);
  for (auto _ : state) {
    out.clear();
    for (const std::string& s : strings) AppendJsonString(&out, s);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_AppendJsonString);

}  // namespace
}  // namespace hookrelay::common

BENCHMARK_MAIN();
