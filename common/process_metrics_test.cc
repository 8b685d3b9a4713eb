#include "common/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

std::map<std::string, double> Values() {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& f : ProcessMetrics().Collect()) {
    EXPECT_EQ(f.metric.size(), 1u) << f.name;
    const prometheus::ClientMetric& m = f.metric.front();
    out[f.name] = f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  return out;
}

// Every standard family is there with a plausible value: CPU grows with work, RSS is more than
// a megabyte, the start time is in the last hour, and an extra open file is counted.
TEST(ProcessMetricsTest, ReadsThisProcess) {
  const std::map<std::string, double> before = Values();
  for (const char* name : {"process_cpu_seconds_total", "process_start_time_seconds",
                           "process_virtual_memory_bytes", "process_resident_memory_bytes",
                           "process_open_fds", "process_max_fds"}) {
    EXPECT_TRUE(before.count(name)) << name;
  }
  EXPECT_GT(before.at("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(before.at("process_virtual_memory_bytes"), before.at("process_resident_memory_bytes"));
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(before.at("process_start_time_seconds"), now + 1);
  EXPECT_GT(before.at("process_start_time_seconds"), now - 3600);

  const int fd = open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  volatile double spin = 0;
  const clock_t start = clock();
  while (clock() - start < CLOCKS_PER_SEC / 20) spin = spin + 1;  // 50 ms of CPU
  const std::map<std::string, double> after = Values();
  close(fd);
  EXPECT_EQ(after.at("process_open_fds"), before.at("process_open_fds") + 1);
  EXPECT_GT(after.at("process_cpu_seconds_total"), before.at("process_cpu_seconds_total"));
}

}  // namespace
}  // namespace hookrelay::common
