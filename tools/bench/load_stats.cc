#include "tools/bench/load_stats.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hookrelay::bench {
namespace {

double Ms(int64_t nanos) { return static_cast<double>(nanos) / 1e6; }

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

void LoadStats::Merge(const LoadStats& other) {
  requests += other.requests;
  ok_requests += other.ok_requests;
  durable_events += other.durable_events;
  rejected_events += other.rejected_events;
  for (const auto& [cause, n] : other.failures) failures[cause] += n;
  latency.Merge(other.latency);
  late_sends += other.late_sends;
  samples.insert(samples.end(), other.samples.begin(), other.samples.end());
}

bool WriteLatencyLog(const std::string& path, const LoadStats& stats, Clock::time_point origin) {
  std::vector<LoadStats::Sample> samples = stats.samples;
  std::sort(samples.begin(), samples.end(),
            [](const LoadStats::Sample& a, const LoadStats::Sample& b) { return a.done < b.done; });
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fputs("t_s,latency_ms\n", f);
  for (const LoadStats::Sample& s : samples) {
    std::fprintf(f, "%.4f,%.3f\n", std::chrono::duration<double>(s.done - origin).count(),
                 static_cast<double>(s.latency_ns) / 1e6);
  }
  return std::fclose(f) == 0;
}

std::string FormatReport(const std::string& mode, const LoadOptions& o, size_t request_bytes,
                         const LoadStats& s, double window, const ClientCpu& cpu) {
  std::string out;
  absl::StrAppendFormat(
      &out,
      "mode=%s target=%s connections=%d threads=%d events/request=%d event_bytes=%d "
      "request_bytes=%u load=%s measured=%.1fs (after %.1fs warm-up)\n",
      mode, o.target, o.connections, o.threads, o.events_per_request, o.event_bytes,
      request_bytes,
      o.rate > 0 ? absl::StrFormat("open-loop %.0f events/s", o.rate) : std::string("closed-loop"),
      window, std::chrono::duration<double>(o.warmup).count());
  absl::StrAppendFormat(&out, "requests:          %u (ok %u, failed %u)\n", s.requests,
                        s.ok_requests, s.requests - s.ok_requests);
  absl::StrAppendFormat(&out, "durable events:    %u (rejected inside ok answers: %u)\n",
                        s.durable_events, s.rejected_events);
  if (s.failures.empty()) {
    absl::StrAppend(&out, "failures:          none\n");
  } else {
    absl::StrAppend(&out, "failures:\n");
    for (const auto& [cause, n] : s.failures) absl::StrAppendFormat(&out, "  %-40s %u\n", cause, n);
  }
  absl::StrAppendFormat(&out, "durable events/s:  %.0f  (%.0f requests/s)\n",
                        static_cast<double>(s.durable_events) / window,
                        static_cast<double>(s.ok_requests) / window);
  const LatencyHistogram& h = s.latency;
  absl::StrAppendFormat(&out,
                        "ack latency (ok):  p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  p99.9 %.2f ms  "
                        "max %.2f ms  mean %.2f ms\n",
                        Ms(h.Quantile(0.50)), Ms(h.Quantile(0.90)), Ms(h.Quantile(0.99)),
                        Ms(h.Quantile(0.999)), Ms(h.max()), h.mean() / 1e6);
  if (o.rate > 0) {
    absl::StrAppendFormat(&out, "late sends (>1ms): %u\n", s.late_sends);
  }
  absl::StrAppendFormat(&out, "client cpu:        user %.2fs sys %.2fs = %.0f%% of one core\n",
                        cpu.user_seconds, cpu.system_seconds,
                        100.0 * (cpu.user_seconds + cpu.system_seconds) / window);
  return out;
}

std::string FormatJsonSummary(const std::string& mode, const LoadOptions& o, const LoadStats& s,
                              double window, const ClientCpu& cpu) {
  const LatencyHistogram& h = s.latency;
  std::string failures;
  for (const auto& [cause, n] : s.failures) {
    absl::StrAppendFormat(&failures, "%s\"%s\":%u", failures.empty() ? "" : ",", JsonEscape(cause),
                          n);
  }
  return absl::StrFormat(
      "RESULT {\"mode\":\"%s\",\"connections\":%d,\"rate\":%.0f,\"window_s\":%.3f,"
      "\"requests\":%u,\"ok_requests\":%u,\"durable_events\":%u,\"rejected_events\":%u,"
      "\"durable_events_per_s\":%.0f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,"
      "\"p999_ms\":%.3f,\"max_ms\":%.3f,\"late_sends\":%u,\"client_cpu_s\":%.2f,"
      "\"failures\":{%s}}",
      mode, o.connections, o.rate, window, s.requests, s.ok_requests, s.durable_events,
      s.rejected_events, static_cast<double>(s.durable_events) / window, Ms(h.Quantile(0.50)),
      Ms(h.Quantile(0.90)), Ms(h.Quantile(0.99)), Ms(h.Quantile(0.999)), Ms(h.max()), s.late_sends,
      cpu.user_seconds + cpu.system_seconds, failures);
}

}  // namespace hookrelay::bench
