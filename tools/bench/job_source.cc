// A stand-in for the collector's side of Collector.Subscribe, for measuring the deliverer alone
// (tools/bench/run_deliverer_bench.sh): serves one stream on 127.0.0.1, hands out --jobs webhook
// jobs for one destination as fast as the deliverer's credits allow (each outcome returns one),
// and exits once every job has an outcome, printing one JSON line:
//   {"jobs":N,"delivered":N,"retry":0,"dead":0,"seconds":S,"per_s":R,"cpu_s":C}
// (seconds: from the first job sent to the last outcome; cpu_s: this process's own CPU time).
// No storage and no leases: the jobs are made in memory, so nearly all of the machine's work is
// the deliverer's and the receiver's.
//
//   job_source --url=http://127.0.0.1:PORT/hook --jobs=300000 [--secret=s] [--max_per_response=64]
//              [--batch=100:500000:1000]   (the destination batches its webhooks; jobs = events)
//
// Prints {"port":P} first (the port the OS chose, or --port).
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <optional>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "hookrelay/v1/collector.grpc.pb.h"

ABSL_FLAG(int32_t, port, 0, "port on 127.0.0.1 (0 = chosen by the OS)");
ABSL_FLAG(std::string, url, "", "the destination's webhook URL (required)");
ABSL_FLAG(int64_t, jobs, 300000, "jobs to hand out, at least 1");
ABSL_FLAG(std::string, secret, "bench-secret",
          "the destination's shared secret (empty = unsigned)");
ABSL_FLAG(int32_t, max_per_response, 64, "deliveries per stream message, at most");
ABSL_FLAG(int32_t, pad, 90, "bytes of padding in each event's properties");
ABSL_FLAG(std::string, batch, "",
          "max_events:max_bytes:max_wait_ms: the destination batches its webhooks (SPEC 5.4)");

namespace {

using hookrelay::v1::Delivery;
using hookrelay::v1::Outcome;
using hookrelay::v1::SubscribeRequest;
using hookrelay::v1::SubscribeResponse;

constexpr char kDestinationId[] = "bench-hook";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Source final : public hookrelay::v1::Collector::Service {
 public:
  Source(int64_t jobs, std::string url, std::string secret, int max_per_response, int pad,
         std::optional<hookrelay::v1::BatchOptions> batch)
      : jobs_(jobs), url_(std::move(url)), secret_(std::move(secret)),
        max_per_response_(max_per_response), pad_(pad, 'x'), batch_(std::move(batch)) {}

  grpc::Status Subscribe(grpc::ServerContext* context,
                         grpc::ServerReaderWriter<SubscribeResponse, SubscribeRequest>* stream)
      override {
    SubscribeRequest request;
    if (!stream->Read(&request) || !request.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "expected a Hello first");
    }
    const bool by_reference = request.hello().destinations_by_reference();
    {
      absl::MutexLock lock(&mu_);
      credits_ = std::max<int64_t>(1, request.hello().credits());
    }
    std::thread reader([&] { ReadOutcomes(stream); });
    SubscribeResponse response;
    response.mutable_destinations()->add_ids(kDestinationId);
    response.set_grouped_outcomes(true);  // as the collector does
    if (by_reference) *response.add_destination_configs() = Destination();
    int64_t next = 1;
    bool first = true;
    while (next <= jobs_ && !context->IsCancelled()) {
      int64_t n = 0;
      {
        absl::MutexLock lock(&mu_);
        auto room = [this] { return in_flight_ < credits_ || stream_ended_; };
        mu_.Await(absl::Condition(&room));
        if (stream_ended_) break;
        n = std::min<int64_t>({credits_ - in_flight_, max_per_response_, jobs_ - next + 1});
        in_flight_ += n;
        if (first) start_ = std::chrono::steady_clock::now();
      }
      first = false;
      response.clear_deliveries();
      for (int64_t i = 0; i < n; ++i, ++next) AddDelivery(next, by_reference, response);
      if (!stream->Write(response)) break;
      response.Clear();
    }
    reader.join();
    return grpc::Status::OK;
  }

  // Waits until every job has an outcome (or the stream ended); prints the summary.
  bool WaitAndReport() {
    absl::MutexLock lock(&mu_);
    auto done = [this] { return outcomes_ >= jobs_ || stream_ended_; };
    mu_.Await(absl::Condition(&done));
    const double seconds = std::chrono::duration<double>(end_ - start_).count();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    std::printf(
        "{\"jobs\":%lld,\"delivered\":%lld,\"retry\":%lld,\"dead\":%lld,\"seconds\":%.3f,"
        "\"per_s\":%.1f,\"cpu_s\":%.3f}\n",
        static_cast<long long>(jobs_), static_cast<long long>(delivered_),
        static_cast<long long>(retry_), static_cast<long long>(dead_), seconds,
        seconds > 0 ? static_cast<double>(outcomes_) / seconds : 0.0, cpu);
    std::fflush(stdout);
    return outcomes_ >= jobs_;
  }

 private:
  hookrelay::v1::Destination Destination() const {
    hookrelay::v1::Destination d;
    d.set_id(kDestinationId);
    d.set_type("webhook");
    d.set_enabled(true);
    d.set_shared_secret(secret_);
    hookrelay::v1::WebhookUrl* url = d.add_urls();
    url->set_url(url_);
    hookrelay::v1::Header* header = url->add_headers();
    header->set_name("X-Api-Key");
    header->set_value("bench");
    if (batch_.has_value()) *d.mutable_options()->mutable_batch() = *batch_;
    return d;
  }

  void AddDelivery(int64_t id, bool by_reference, SubscribeResponse& response) const {
    Delivery* d = response.add_deliveries();
    d->set_lease(static_cast<uint64_t>(id));
    if (!by_reference) *d->mutable_destination() = Destination();
    hookrelay::v1::Job* job = d->mutable_job();
    job->set_id(static_cast<uint64_t>(id));
    job->set_source_id("bench-source");
    job->set_destination_id(kDestinationId);
    job->set_type(hookrelay::v1::TRACK);
    const std::string message_id = absl::StrCat("bench-", id);
    job->set_message_id(message_id);
    job->set_user_id("user-000001");
    const int64_t now = NowMs();
    job->set_received_at_unix_ms(now);
    job->set_received_at_unix_us(now * 1000);
    job->set_due_unix_ms(now);
    job->set_event_json(absl::StrCat(
        R"({"type":"track","userId":"user-000001","messageId":")", message_id,
        R"(","event":"Order Completed","properties":{"orderId":"ord-)", id,
        R"(","revenue":42.5,"currency":"EUR","plan":"pro","pad":")", pad_,
        R"("},"timestamp":"2026-11-29T00:00:00.000Z","context":{}})"));
  }

  void ReadOutcomes(grpc::ServerReaderWriter<SubscribeResponse, SubscribeRequest>* stream) {
    SubscribeRequest request;
    while (stream->Read(&request)) {
      if (!request.has_outcomes()) continue;
      absl::MutexLock lock(&mu_);
      for (const Outcome& o : request.outcomes().outcomes()) {
        const int64_t jobs = 1 + o.also_job_ids_size();  // a grouped outcome settles several
        outcomes_ += jobs;
        in_flight_ -= jobs;
        if (o.kind() == Outcome::DELIVERED) {
          delivered_ += jobs;
        } else if (o.kind() == Outcome::RETRY) {
          retry_ += jobs;
        } else {
          dead_ += jobs;
        }
      }
      if (outcomes_ >= jobs_) {
        end_ = std::chrono::steady_clock::now();
        break;
      }
    }
    absl::MutexLock lock(&mu_);
    if (outcomes_ < jobs_) stream_ended_ = true;
  }

  const int64_t jobs_;
  const std::string url_;
  const std::string secret_;
  const int max_per_response_;
  const std::string pad_;
  const std::optional<hookrelay::v1::BatchOptions> batch_;

  absl::Mutex mu_;
  int64_t credits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outcomes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t delivered_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t retry_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dead_ ABSL_GUARDED_BY(mu_) = 0;
  bool stream_ended_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point start_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point end_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("hookrelay bench: hands webhook jobs to one deliverer stream");
  absl::ParseCommandLine(argc, argv);
  const std::string url = absl::GetFlag(FLAGS_url);
  const int64_t jobs = absl::GetFlag(FLAGS_jobs);
  const int max_per_response = absl::GetFlag(FLAGS_max_per_response);
  const int pad = absl::GetFlag(FLAGS_pad);
  if (url.empty() || jobs < 1 || max_per_response < 1 || pad < 0 || pad > 1 << 20) {
    std::fprintf(stderr,
                 "job_source: --url is required; --jobs and --max_per_response must be at "
                 "least 1; --pad between 0 and 1048576\n");
    return 2;
  }
  std::optional<hookrelay::v1::BatchOptions> batch;
  if (const std::string spec = absl::GetFlag(FLAGS_batch); !spec.empty()) {
    std::vector<std::string> parts = absl::StrSplit(spec, ':');
    uint32_t events = 0, bytes = 0, wait_ms = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &events) ||
        !absl::SimpleAtoi(parts[1], &bytes) || !absl::SimpleAtoi(parts[2], &wait_ms)) {
      std::fprintf(stderr, "job_source: --batch wants max_events:max_bytes:max_wait_ms, got %s\n",
                   spec.c_str());
      return 2;
    }
    batch.emplace();
    batch->set_max_events(events);
    batch->set_max_bytes(bytes);
    batch->set_max_wait_ms(wait_ms);
  }
  Source source(jobs, url, absl::GetFlag(FLAGS_secret), max_per_response, pad, std::move(batch));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", absl::GetFlag(FLAGS_port)),
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&source);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "job_source: cannot listen on 127.0.0.1:%d\n", absl::GetFlag(FLAGS_port));
    return 1;
  }
  std::printf("{\"port\":%d}\n", port);
  std::fflush(stdout);
  const bool ok = source.WaitAndReport();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return ok ? 0 : 1;
}
