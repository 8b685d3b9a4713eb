#include "common/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace hookrelay::common {
namespace {

// "btime" of /proc/stat: the boot time in unix seconds (process start times count from it).
double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

prometheus::MetricFamily One(const char* name, const char* help, prometheus::MetricType type,
                             double value) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace

ProcessMetrics::ProcessMetrics()
    : ticks_per_second_(static_cast<double>(sysconf(_SC_CLK_TCK))),
      page_size_(static_cast<double>(sysconf(_SC_PAGESIZE))),
      boot_time_seconds_(BootTimeSeconds()) {}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  // /proc/self/stat: fields after the ")" that ends the command name; utime is field 14, stime
  // 15, starttime 22, vsize 23, rss 24 (counting from 1).
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream fields(stat.substr(paren + 2));
    std::vector<std::string> f;
    std::string token;
    while (fields >> token) f.push_back(token);
    // f[0] is field 3 (state).
    auto field = [&f](int number) { return std::strtod(f[number - 3].c_str(), nullptr); };
    if (f.size() >= 22) {
      out.push_back(One("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                        prometheus::MetricType::Counter,
                        (field(14) + field(15)) / ticks_per_second_));
      out.push_back(One("process_start_time_seconds",
                        "Start time of the process since unix epoch in seconds.",
                        prometheus::MetricType::Gauge,
                        boot_time_seconds_ + field(22) / ticks_per_second_));
      out.push_back(One("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                        prometheus::MetricType::Gauge, field(23)));
      out.push_back(One("process_resident_memory_bytes", "Resident memory size in bytes.",
                        prometheus::MetricType::Gauge, field(24) * page_size_));
    }
  }
  int fds = 0;
  if (DIR* dir = opendir("/proc/self/fd"); dir != nullptr) {
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++fds;
    }
    closedir(dir);
    --fds;  // The descriptor of the directory being read.
  }
  out.push_back(One("process_open_fds", "Number of open file descriptors.",
                    prometheus::MetricType::Gauge, fds));
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    out.push_back(One("process_max_fds", "Maximum number of open file descriptors.",
                      prometheus::MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
  }
  return out;
}

}  // namespace hookrelay::common
