// The standard process metrics of Prometheus client libraries (process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
// process_max_fds, process_start_time_seconds), read from /proc/self at scrape time. Debian's
// prometheus-cpp does not export them; dashboards and alerts expect them. Linux only.
#ifndef HOOKRELAY_COMMON_PROCESS_METRICS_H_
#define HOOKRELAY_COMMON_PROCESS_METRICS_H_

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace hookrelay::common {

// Thread-safe (stateless apart from the clock-tick and page sizes read at construction).
class ProcessMetrics : public prometheus::Collectable {
 public:
  ProcessMetrics();
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const double ticks_per_second_;
  const double page_size_;
  const double boot_time_seconds_;
};

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_PROCESS_METRICS_H_
