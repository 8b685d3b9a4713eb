// The end-to-end suites run on both job-store engines (issue 12 §3): parameterise a suite with
// EngineParams() and prepare the engine at the start of each test with PrepareEngine().
//
// "jetstream" runs on one 3-node nats-server cluster per test binary (started on first use,
// stopped at exit), emptied of hookrelay's streams and buckets before each test, at 3 replicas.
#ifndef HOOKRELAY_TESTS_TEST_ENGINES_H_
#define HOOKRELAY_TESTS_TEST_ENGINES_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/collector_test_util.h"

namespace hookrelay::test {

// ::testing::Values("embedded", "jetstream").
inline auto EngineParams() { return ::testing::Values(std::string("embedded"), std::string("jetstream")); }

// Test name suffixes: "/embedded", "/jetstream".
inline std::string EngineParamName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// A clean engine for one test.
absl::StatusOr<EngineSetup> PrepareEngine(std::string_view engine);

// The collector flags that select `engine` (none for the embedded engine).
inline std::vector<std::string> CollectorEngineFlags(const EngineSetup& engine) {
  if (engine.engine != "jetstream") return {};
  return {"--store=jetstream", "--nats_url=" + engine.nats_url, "--nats_replicas=3"};
}

}  // namespace hookrelay::test

#endif  // HOOKRELAY_TESTS_TEST_ENGINES_H_
