// bench_receiver: a fast webhook receiver for the delivery benchmark (tools/bench/run_delivery_bench.sh).
//
// Answers every request 200 with an empty body (after --delay, when given) (WebhookReceiver with record=false, so memory stays
// flat) and counts it. When the body holds `"timestamp":"<ISO 8601>"` it records now − timestamp
// in a latency histogram: with events sent without a timestamp the collector sets it to its
// receipt time, so this is the end-to-end latency collector receipt → receiver (the timestamp is
// truncated to milliseconds, so figures are up to 1 ms high).
//
// Output, JSON lines on stdout, each flushed:
//   {"msg":"listening","port":N,"url":"http://127.0.0.1:N/hooks"}     first line
//   {"msg":"tick","requests":N,"total":T,...}    every --report_interval: requests in that
//                                               interval, total so far, interval latency
//   {"msg":"summary",...}                       on exit: requests (events: each member of a
//                                               batch counts) since start (or the last SIGUSR1),
//                                               posts (HTTP requests), first/last request time, rate over that
//                                               span, latency count/p50/p90/p99/p99.9/max in ms
// Exits (after the summary) on SIGTERM/SIGINT, after --duration, or once --exit_after requests
// have arrived. SIGUSR1 resets the summary's counters and histogram (end of a warm-up); the
// ticks' running total is never reset.
//
// --capture=FILE writes the first request's body to FILE and its headers ("Name: value" lines) to
// FILE.headers, so a load generator (wrk) can replay exactly what the deliverer sends.
//
// --tls_cert_out=FILE serves HTTPS instead, with a fresh self-signed certificate for 127.0.0.1
// (and localhost) whose PEM is written to FILE, for the deliverer's --ca_file; the url is then
// https://.
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "common/time_format.h"
#include "tools/bench/latency_histogram.h"
#include "tools/receiver/webhook_receiver.h"

ABSL_FLAG(std::string, address, "127.0.0.1:0", "host:port to listen on; port 0 picks a free port");
ABSL_FLAG(std::string, tls_cert_out, "",
          "serve HTTPS with a fresh self-signed certificate, written (PEM) to this file");
ABSL_FLAG(int, threads, 1, "receiver I/O threads");
ABSL_FLAG(absl::Duration, duration, absl::ZeroDuration(),
          "exit after this long (0 = run until SIGTERM/SIGINT)");
ABSL_FLAG(absl::Duration, delay, absl::ZeroDuration(),
          "answer each request this long after it arrived (an Asio timer: a slow receiver "
          "that is not overloaded, for the fairness benchmark)");
ABSL_FLAG(int64_t, exit_after, 0, "exit once this many requests have arrived (0 = never)");
ABSL_FLAG(absl::Duration, report_interval, absl::Seconds(1), "how often to print a tick line");
ABSL_FLAG(std::string, capture, "",
          "write the first request's body to this file and its headers to FILE.headers");

namespace hookrelay::bench {
namespace {

constexpr std::string_view kTimestampKey = R"("timestamp":")";

// The timestamps of the events in a webhook body, in order: one for a body of one event, one per
// member of a batch ({"batch":[…]}). Those that do not parse are left out.
std::vector<absl::Time> BodyTimestamps(std::string_view body) {
  std::vector<absl::Time> out;
  for (size_t at = body.find(kTimestampKey); at != std::string_view::npos;
       at = body.find(kTimestampKey, at + 1)) {
    const size_t from = at + kTimestampKey.size();
    const size_t to = body.find('"', from);
    if (to == std::string_view::npos) break;
    if (std::optional<absl::Time> t = common::ParseIso8601(body.substr(from, to - from))) {
      out.push_back(*t);
    }
  }
  return out;
}

double Ms(int64_t nanos) { return static_cast<double>(nanos) / 1e6; }

std::string LatencyFields(const LatencyHistogram& h) {
  return absl::StrFormat(R"("latency_count":%d,"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,)"
                         R"("p999_ms":%.3f,"max_ms":%.3f,"mean_ms":%.3f)",
                         h.count(), Ms(h.Quantile(0.5)), Ms(h.Quantile(0.9)), Ms(h.Quantile(0.99)),
                         Ms(h.Quantile(0.999)), Ms(h.max()), h.mean() / 1e6);
}

void PrintLine(const std::string& line) {
  static absl::Mutex* const mu = new absl::Mutex();
  absl::MutexLock lock(mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

class Stats {
 public:
  // Counts the events of one request (each member of a batch is one; a body without a timestamp
  // counts as one) and their end-to-end latencies.
  void Record(const receiver::ReceivedRequest& request) {
    const std::vector<absl::Time> stamps = BodyTimestamps(request.body);
    const int64_t events = stamps.empty() ? 1 : static_cast<int64_t>(stamps.size());
    total_.fetch_add(events, std::memory_order_relaxed);
    absl::MutexLock lock(&mu_);
    if (requests_ == 0) first_ = request.at;
    if (request.at > last_) last_ = request.at;
    requests_ += events;
    interval_requests_ += events;
    ++posts_;
    for (absl::Time stamp : stamps) {
      const int64_t latency = absl::ToInt64Nanoseconds(request.at - stamp);
      histogram_.Record(latency);
      interval_.Record(latency);
    }
    if (stamps.empty()) ++no_timestamp_;
  }

  int64_t total() const { return total_.load(std::memory_order_relaxed); }

  void Reset() {
    absl::MutexLock lock(&mu_);
    requests_ = 0;
    posts_ = 0;
    no_timestamp_ = 0;
    first_ = last_ = absl::InfinitePast();
    histogram_ = LatencyHistogram();
  }

  std::string Tick() {
    LatencyHistogram interval;
    int64_t requests = 0;
    {
      absl::MutexLock lock(&mu_);
      interval = interval_;
      requests = interval_requests_;
      interval_ = LatencyHistogram();
      interval_requests_ = 0;
    }
    return absl::StrCat(R"({"msg":"tick","at":")", common::FormatIso8601Millis(absl::Now()),
                        R"(","requests":)", requests, R"(,"total":)", total(), ",",
                        LatencyFields(interval), "}");
  }

  std::string Summary() {
    absl::MutexLock lock(&mu_);
    const double span = requests_ > 0 ? absl::ToDoubleSeconds(last_ - first_) : 0.0;
    std::string first = requests_ > 0 ? common::FormatIso8601Millis(first_) : "";
    std::string last = requests_ > 0 ? common::FormatIso8601Millis(last_) : "";
    return absl::StrCat(
        R"({"msg":"summary","requests":)", requests_, R"(,"total":)", total(), R"(,"first":")",
        first, R"(","last":")", last, R"(","span_s":)", absl::StrFormat("%.3f", span),
        R"(,"rate_per_s":)", absl::StrFormat("%.1f", span > 0 ? requests_ / span : 0.0),
        R"(,"posts":)", posts_,
        R"(,"no_timestamp":)", no_timestamp_, ",", LatencyFields(histogram_), "}");
  }

 private:
  std::atomic<int64_t> total_{0};
  absl::Mutex mu_;
  int64_t requests_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t interval_requests_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t no_timestamp_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t posts_ ABSL_GUARDED_BY(mu_) = 0;  // HTTP requests (requests_ counts events)
  absl::Time first_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  LatencyHistogram histogram_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram interval_ ABSL_GUARDED_BY(mu_);
};

void Capture(const std::string& path, const receiver::ReceivedRequest& request) {
  std::ofstream body(path, std::ios::binary | std::ios::trunc);
  body << request.body;
  std::ofstream headers(path + ".headers", std::ios::binary | std::ios::trunc);
  for (const auto& [name, value] : request.headers) headers << name << ": " << value << "\n";
  if (!body || !headers) PrintLine(absl::StrCat(R"({"msg":"cannot write the capture"})"));
}

int Main() {
  // Signals are taken synchronously by the main thread; the receiver's threads inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const int64_t exit_after = absl::GetFlag(FLAGS_exit_after);
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const absl::Duration report_interval = absl::GetFlag(FLAGS_report_interval);
  const std::string capture = absl::GetFlag(FLAGS_capture);
  if (absl::GetFlag(FLAGS_threads) < 1 || report_interval <= absl::ZeroDuration()) {
    std::fprintf(stderr, "bench_receiver: --threads and --report_interval must be positive\n");
    return 2;
  }

  auto stats = std::make_shared<Stats>();
  auto captured = std::make_shared<std::atomic<bool>>(capture.empty());
  receiver::WebhookReceiver::Options options;
  options.address = absl::GetFlag(FLAGS_address);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.record = false;
  if (const std::string cert_out = absl::GetFlag(FLAGS_tls_cert_out); !cert_out.empty()) {
    absl::StatusOr<receiver::SelfSignedCert> cert = receiver::GenerateSelfSignedCert();
    if (!cert.ok()) {
      std::fprintf(stderr, "bench_receiver: %s\n", std::string(cert.status().message()).c_str());
      return 1;
    }
    std::ofstream out(cert_out, std::ios::binary | std::ios::trunc);
    out << cert->cert_pem;
    out.close();
    if (!out) {
      std::fprintf(stderr, "bench_receiver: cannot write %s\n", cert_out.c_str());
      return 1;
    }
    options.tls = *std::move(cert);
  }
  const absl::Duration delay = absl::GetFlag(FLAGS_delay);
  auto server = receiver::WebhookReceiver::Start(
      options, [stats, captured, capture, delay](const receiver::ReceivedRequest& request) {
        stats->Record(request);
        if (!captured->exchange(true)) Capture(capture, request);
        receiver::Response response;
        response.delay = delay;
        return response;
      });
  if (!server.ok()) {
    std::fprintf(stderr, "bench_receiver: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  PrintLine(absl::StrCat(R"({"msg":"listening","port":)", (*server)->port(), R"(,"url":")",
                         (*server)->Url(), R"(","threads":)", options.threads, "}"));

  const absl::Time start = absl::Now();
  absl::Notification stop_ticks;
  std::thread ticker([&] {
    for (absl::Time next = start + report_interval;; next += report_interval) {
      if (stop_ticks.WaitForNotificationWithDeadline(next)) return;
      PrintLine(stats->Tick());
    }
  });

  std::string reason = "signal";
  while (true) {
    timespec wait{0, 50'000'000};
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGUSR1) {
      stats->Reset();
      PrintLine(absl::StrCat(R"({"msg":"reset","total":)", stats->total(), "}"));
      continue;
    }
    if (sig == SIGTERM || sig == SIGINT) break;
    if (exit_after > 0 && stats->total() >= exit_after) {
      reason = "exit_after";
      break;
    }
    if (duration > absl::ZeroDuration() && absl::Now() - start >= duration) {
      reason = "duration";
      break;
    }
  }
  server->reset();  // stops and joins the I/O threads: no request is counted after this
  stop_ticks.Notify();
  ticker.join();
  std::string summary = stats->Summary();
  summary.insert(summary.size() - 1, absl::StrCat(R"(,"exit":")", reason, R"(")"));
  PrintLine(summary);
  return 0;
}

}  // namespace
}  // namespace hookrelay::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fast webhook receiver for the delivery benchmark: answers 200, counts, measures "
      "end-to-end latency from the body's timestamp");
  absl::ParseCommandLine(argc, argv);
  return hookrelay::bench::Main();
}
