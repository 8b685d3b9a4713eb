// Signing cost of a typical webhook body (~360 bytes): the one-shot functions against Signer,
// which keeps an HMAC context per secret.
#include <string>

#include "benchmark/benchmark.h"

#include "deliverer/signer.h"

namespace hookrelay::deliverer {
namespace {

const std::string& Body() {
  static const std::string* const body = new std::string(
      R"({"version":1,"type":"track","userId":"user-1842","messageId":"3f9c2b1e-7a4d-4c1b-9e2f-)"
      R"(5d6a7b8c9d0e","event":"Order Completed","properties":{"orderId":"50314b8e","total":27.5,)"
      R"("revenue":25,"currency":"USD","coupon":"SPRING"},"timestamp":"2024-03-01T12:00:00.123Z",)"
      R"("context":{"ip":"203.0.113.7","library":{"name":"analytics-go","version":"3.0.0"}}})");
  return *body;
}

constexpr char kSecret[] = "bench-s3cr3t";
constexpr char kWhsec[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

void BM_XSignatureOneShot(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(XSignature(kSecret, Body()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Body().size()));
}
BENCHMARK(BM_XSignatureOneShot);

void BM_XSignatureReused(benchmark::State& state) {
  Signer signer;
  for (auto _ : state) benchmark::DoNotOptimize(signer.XSignature(kSecret, Body()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Body().size()));
}
BENCHMARK(BM_XSignatureReused);

void BM_StandardWebhooksOneShot(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(StandardWebhookHeaders(kWhsec, "msg_1", 1700000000, Body()));
  }
}
BENCHMARK(BM_StandardWebhooksOneShot);

void BM_StandardWebhooksReused(benchmark::State& state) {
  Signer signer;
  for (auto _ : state) {
    benchmark::DoNotOptimize(signer.StandardWebhookHeaders(kWhsec, "msg_1", 1700000000, Body()));
  }
}
BENCHMARK(BM_StandardWebhooksReused);

}  // namespace
}  // namespace hookrelay::deliverer
