#include "deliverer/deliverer.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/config_validate.h"
#include "common/log.h"
#include "common/pickup.h"
#include "common/proto_time.h"
#include "common/redact.h"
#include "common/strings.h"
#include "common/time_format.h"
#include "common/trace_context.h"
#include "deliverer/batcher.h"
#include "deliverer/deliverer_call.h"
#include "deliverer/deliverer_state.h"
#include "deliverer/renderer.h"
#include "deliverer/round_end.h"
#include "deliverer/signer.h"
#include "hookrelay/v1/collector.grpc.pb.h"

namespace hookrelay::deliverer {

using hookrelay::v1::Delivery;
using hookrelay::v1::Outcome;
using hookrelay::v1::SubscribeRequest;
using hookrelay::v1::SubscribeResponse;

namespace {

constexpr char kIdempotencyHeader[] = "Idempotency-Key";

std::string DefaultDelivererId() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat(host[0] != '\0' ? host : "deliverer", "-", getpid());
}

}  // namespace

// One collector: a thread that keeps a Call open, reconnecting with backoff.
class Deliverer::Link {
 public:
  Link(Deliverer& deliverer, std::string address)
      : deliverer_(deliverer), address_(std::move(address)) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 * 1024 * 1024);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
    channel_ = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
    stub_ = hookrelay::v1::Collector::NewStub(channel_);
  }

  void Start() { thread_ = std::thread([this] { Run(); }); }

  // Drain step 1.
  void BeginStop() {
    std::shared_ptr<Call> call;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      call = call_;
    }
    if (call) call->RequestDrain();
  }
  // Jobs the current call still holds.
  int64_t held() const {
    absl::MutexLock lock(&mu_);
    return call_ ? call_->held() : 0;
  }
  // Drain step 2, then join. Waits (bounded) until the last call object is destroyed: gRPC may
  // still be running its OnDone when WaitDone returns.
  void Stop(bool now) {
    std::shared_ptr<Call> call;
    std::shared_ptr<absl::Notification> destroyed;
    {
      absl::MutexLock lock(&mu_);
      call = std::move(call_);
      destroyed = call_destroyed_;
    }
    if (call) {
      call->RequestClose(now);
      if (!call->WaitDone(absl::Seconds(3))) {
        call->Cancel();
        call->WaitDone(absl::Seconds(3));
      }
    }
    if (thread_.joinable()) thread_.join();
    call.reset();
    if (destroyed && !destroyed->WaitForNotificationWithTimeout(absl::Seconds(5))) {
      common::LogWarning("collector stream still referenced at shutdown",
                         {{"collector", address_}});
    }
  }
  bool connected() const {
    absl::MutexLock lock(&mu_);
    return connected_;
  }

 private:
  void Run() {
    absl::Duration backoff = deliverer_.options_.reconnect_initial_backoff;
    while (true) {
      auto destroyed = std::make_shared<absl::Notification>();
      auto call = std::make_shared<Call>(deliverer_, address_, destroyed);
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        call_ = call;
        call_destroyed_ = destroyed;
        connected_ = true;
      }
      call->Start(*stub_, deliverer_.options_.deliverer_id.empty()
                              ? DefaultDelivererId()
                              : deliverer_.options_.deliverer_id,
                  deliverer_.options_.credits, deliverer_.options_.admin_token,
                  deliverer_.collector_count_.load(std::memory_order_relaxed));
      // Wait for the call to end; a stop request is handled by Stop() on the caller's thread.
      call->WaitDone(absl::InfiniteDuration());
      const grpc::Status status = call->status();
      {
        absl::MutexLock lock(&mu_);
        connected_ = false;
        if (stopping_) return;
      }
      if (call->received_any()) backoff = deliverer_.options_.reconnect_initial_backoff;
      const absl::Duration wait =
          backoff * absl::Uniform(ThreadBitGen(), 0.5, 1.0);
      common::LogWarning("collector stream ended; reconnecting",
                         {{"collector", address_},
                          {"code", static_cast<int>(status.error_code())},
                          {"error", status.error_message()},
                          {"retry_in", absl::FormatDuration(wait)}});
      backoff = std::min(backoff * 2, deliverer_.options_.reconnect_max_backoff);
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
      if (stopping_) return;
    }
  }

  Deliverer& deliverer_;
  const std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<hookrelay::v1::Collector::Stub> stub_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  std::shared_ptr<Call> call_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<absl::Notification> call_destroyed_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
};

Deliverer::Deliverer(Options options, HttpSender& sender, const common::Clock& clock,
                     DeliveryMetrics* metrics)
    : options_(std::move(options)),
      sender_(sender),
      clock_(clock),
      metrics_(metrics),
      batcher_(std::make_unique<Batcher>(
          clock, [this](std::vector<BatchItem> items) { SendBatch(std::move(items)); })) {}

Deliverer::~Deliverer() { Shutdown(); }

absl::Status Deliverer::Start() {
  if (options_.collectors.empty()) {
    return absl::InvalidArgumentError("--collector: at least one collector address is needed");
  }
  for (const std::string& address : options_.collectors) {
    if (address.empty()) {
      return absl::InvalidArgumentError("--collector: empty address in the list");
    }
    absl::StatusOr<CollectorTarget> target = ParseCollectorTarget(address);
    if (!target.ok()) return target.status();
    targets_.push_back(*std::move(target));
  }
  started_ = true;
  bool any_dynamic = false;
  {
    absl::MutexLock lock(&links_mu_);
    int static_count = 0;
    for (const CollectorTarget& t : targets_) static_count += t.dynamic ? 0 : 1;
    collector_count_.store(static_count, std::memory_order_relaxed);
    for (const CollectorTarget& t : targets_) {
      if (t.dynamic) {
        any_dynamic = true;
        continue;
      }
      const std::string endpoint = absl::StrCat(
          t.host.find(':') != std::string::npos ? absl::StrCat("[", t.host, "]") : t.host, ":",
          t.port);
      if (links_.count(endpoint) > 0) continue;
      auto link = std::make_unique<Link>(*this, endpoint);
      link->Start();
      links_.emplace(endpoint, std::move(link));
    }
  }
  if (any_dynamic) {
    Reconcile();
    resolver_thread_ = std::thread([this] { ResolveLoop(); });
  }
  return absl::OkStatus();
}

bool Deliverer::Reconcile() {
  bool all_resolved = true;
  std::map<std::string, std::vector<std::string>> fresh;
  for (const CollectorTarget& t : targets_) {
    if (!t.dynamic) continue;
    absl::StatusOr<std::vector<std::string>> endpoints =
        options_.resolver ? options_.resolver(t.host, t.port) : ResolveWithSystem(t.host, t.port);
    if (!endpoints.ok()) {
      all_resolved = false;
      common::LogWarning("cannot resolve collector address; keeping the last known collectors",
                         {{"collector", t.spec}, {"error", endpoints.status().message()}});
      continue;
    }
    fresh[t.spec] = *std::move(endpoints);
  }

  absl::MutexLock lock(&links_mu_);
  if (stopping_) return all_resolved;
  for (auto& [spec, endpoints] : fresh) resolved_[spec] = std::move(endpoints);
  // Wanted: every static endpoint and every endpoint of the last good resolutions.
  std::map<std::string, const CollectorTarget*> wanted;
  for (const CollectorTarget& t : targets_) {
    if (t.dynamic) {
      for (const std::string& e : resolved_[t.spec]) wanted.emplace(e, &t);
    } else {
      wanted.emplace(absl::StrCat(t.host.find(':') != std::string::npos
                                      ? absl::StrCat("[", t.host, "]")
                                      : t.host,
                                  ":", t.port),
                     &t);
    }
  }
  for (auto it = links_.begin(); it != links_.end();) {
    if (wanted.count(it->first) > 0) {
      ++it;
      continue;
    }
    common::LogInfo("collector gone from DNS; draining its stream", {{"endpoint", it->first}});
    it->second->BeginStop();
    retired_.emplace_back(absl::Now() + options_.drain_timeout, std::move(it->second));
    it = links_.erase(it);
  }
  collector_count_.store(static_cast<int>(wanted.size()), std::memory_order_relaxed);
  for (const auto& [endpoint, target] : wanted) {
    if (links_.count(endpoint) > 0) continue;
    if (target->dynamic) {
      common::LogInfo("collector found; subscribing",
                      {{"endpoint", endpoint}, {"collector", target->spec}});
    }
    auto link = std::make_unique<Link>(*this, endpoint);
    link->Start();
    links_.emplace(endpoint, std::move(link));
  }
  return all_resolved;
}

void Deliverer::ReapRetired(bool all) {
  std::vector<std::unique_ptr<Link>> done;
  {
    absl::MutexLock lock(&links_mu_);
    const absl::Time now = absl::Now();
    for (auto it = retired_.begin(); it != retired_.end();) {
      if (all || it->second->held() <= 0 || now >= it->first) {
        done.push_back(std::move(it->second));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Outside the lock: Stop joins the link's thread.
  for (auto& link : done) link->Stop(/*now=*/true);
}

void Deliverer::ResolveLoop() {
  // A failed resolution is retried sooner than the regular interval.
  const absl::Duration retry = std::min(options_.resolve_interval, absl::Seconds(2));
  bool last_ok = true;
  absl::Time next_resolve = absl::Now() + options_.resolve_interval;
  while (true) {
    {
      absl::MutexLock lock(&links_mu_);
      // Wake at least every 100 ms while links drain, so they are stopped soon after.
      const absl::Time wake =
          retired_.empty() ? next_resolve : std::min(next_resolve, absl::Now() + absl::Milliseconds(100));
      links_mu_.AwaitWithDeadline(absl::Condition(&stopping_), wake);
      if (stopping_) return;
    }
    ReapRetired(/*all=*/false);
    if (absl::Now() >= next_resolve) {
      last_ok = Reconcile();
      next_resolve = absl::Now() + (last_ok ? options_.resolve_interval : retry);
    }
  }
}

void Deliverer::Shutdown() {
  if (shut_down_ || !started_) return;
  shut_down_ = true;
  {
    absl::MutexLock lock(&links_mu_);
    stopping_ = true;
  }
  if (resolver_thread_.joinable()) resolver_thread_.join();
  // From here on links_ and retired_ change no more.
  std::vector<Link*> all;
  {
    absl::MutexLock lock(&links_mu_);
    for (auto& [endpoint, link] : links_) all.push_back(link.get());
    for (auto& [deadline, link] : retired_) all.push_back(link.get());
  }
  for (Link* link : all) link->BeginStop();
  const absl::Time deadline = absl::Now() + options_.drain_timeout;
  while (absl::Now() < deadline) {
    // Jobs waiting for their batch go now (and any that still arrive): draining does not wait
    // for max_wait_ms.
    batcher_->FlushAll();
    int64_t held = 0;
    for (Link* link : all) held += link->held();
    if (held <= 0) break;
    absl::SleepFor(absl::Milliseconds(10));  // Real time: receivers and collectors answering.
  }
  for (Link* link : all) link->Stop(/*now=*/absl::Now() >= deadline);
}

int Deliverer::connected_streams() const {
  absl::MutexLock lock(&links_mu_);
  int n = 0;
  for (const auto& [endpoint, link] : links_) n += link->connected() ? 1 : 0;
  return n;
}

std::vector<std::string> Deliverer::endpoints() const {
  absl::MutexLock lock(&links_mu_);
  std::vector<std::string> out;
  for (const auto& [endpoint, link] : links_) out.push_back(endpoint);
  return out;
}

int64_t Deliverer::jobs_in_flight() const {
  absl::MutexLock lock(&links_mu_);
  int64_t n = 0;
  for (const auto& [endpoint, link] : links_) n += link->held();
  for (const auto& [deadline, link] : retired_) n += link->held();
  return n;
}

Deliverer::StreamDestination::StreamDestination(const hookrelay::v1::Destination& d)
    : destination(d), options(common::EffectiveOptions(destination)) {
  if (options.has_batch()) batch_key = BatchKey(destination, options);
}

void Deliverer::Handle(std::shared_ptr<const Delivery> delivery,
                       std::shared_ptr<const StreamDestination> shared_destination,
                       std::shared_ptr<Call> call) {
  auto job = std::make_shared<JobState>();
  job->delivery = std::move(delivery);
  job->shared_destination = std::move(shared_destination);
  job->call = std::move(call);
  if (job->shared_destination == nullptr) {
    job->own_options = common::EffectiveOptions(job->destination());
  }
  const hookrelay::v1::DeliveryOptions& options = job->options();
  job->started = clock_.Now();
  if (metrics_) {
    metrics_->JobStarted();
    // Pickup: the collector's receipt of the event to this deliverer's receipt of its job.
    if (std::optional<absl::Duration> l =
            common::PickupLatency(job->delivery->job(), job->started)) {
      metrics_->ObservePickup(absl::ToDoubleSeconds(*l));
    }
  }

  thread_local WebhookRenderer renderer;
  auto body = std::make_shared<std::string>();
  if (absl::Status st = renderer.Render(job->delivery->job().event_json(), body.get()); !st.ok()) {
    FailWithoutAttempt(job, absl::StrCat("the event cannot be rendered: ", st.message()));
    return;
  }
  const hookrelay::v1::Destination& destination = job->destination();
  if (!job->delivery->has_destination() && job->shared_destination == nullptr) {
    FailWithoutAttempt(job, absl::StrCat("destination ", job->delivery->job().destination_id(),
                                         " was not sent on this stream"));
    return;
  }
  const int url_count = destination.urls_size();
  if (url_count == 0) {
    FailWithoutAttempt(job, absl::StrCat("destination ", destination.id(), " has no URLs"));
    return;
  }
  // A batched destination's job waits for its batch (test jobs go alone, as usual).
  if (options.has_batch() && !job->delivery->job().test()) {
    // A job whose last attempt was in a batch that is to be retried goes with the same members
    // again (they are due at the same time), never with jobs that were not in it.
    const hookrelay::v1::Job& j = job->delivery->job();
    const hookrelay::v1::Attempt* last = j.history_size() > 0 ? &j.history(j.history_size() - 1)
                                                              : nullptr;
    if (last != nullptr && !last->batch_key().empty() && last->batch_members() > 0) {
      const std::string key = absl::StrCat(
          job->shared_destination != nullptr ? job->shared_destination->batch_key
                                             : BatchKey(destination, options),
          "#", last->batch_key());
      batcher_->Add(key, options.batch(), BatchItem{job, std::move(*body)},
                    static_cast<size_t>(last->batch_members()));
    } else if (job->shared_destination != nullptr) {
      batcher_->Add(job->shared_destination->batch_key, options.batch(),
                    BatchItem{job, std::move(*body)});
    } else {
      batcher_->Add(BatchKey(destination, options), options.batch(),
                    BatchItem{job, std::move(*body)});
    }
    return;
  }

  Headers headers;
  // Ours (at most 7), and the URL's own when there is one URL (see SendToUrls).
  headers.reserve(7 + (url_count == 1 ? destination.urls(0).headers_size() : 0));
  headers.emplace_back(kIdempotencyHeader, job->delivery->job().message_id());
  // The ingest request's trace context (W3C): this attempt is a new span of the same trace, so
  // a receiver's tracing links it to the client's request. Never invented when none came.
  bool traced = false;
  if (std::string traceparent = common::ChildTraceparent(job->delivery->job().traceparent(),
                                                         ThreadBitGen());
      !traceparent.empty()) {
    traced = true;
    headers.emplace_back(common::kTraceparentHeader, std::move(traceparent));
    if (!job->delivery->job().tracestate().empty()) {
      headers.emplace_back(common::kTracestateHeader, job->delivery->job().tracestate());
    }
  }
  AddSignatureHeaders(destination, options, job->delivery->job().message_id(), *body,
                      headers);

  job->results.resize(url_count);
  job->details.resize(url_count);
  job->durations.resize(url_count);
  job->remaining.store(url_count, std::memory_order_relaxed);
  SendToUrls(destination, options, std::move(headers), traced, std::move(body),
             [this, job](size_t i) {
               return [this, job, i](HttpResult result) { OnUrlDone(job, i, std::move(result)); };
             });
}

void Deliverer::AddSignatureHeaders(const hookrelay::v1::Destination& destination,
                                    const hookrelay::v1::DeliveryOptions& options,
                                    const std::string& webhook_id, const std::string& body,
                                    Headers& headers) const {
  const std::string& secret = destination.shared_secret();
  if (secret.empty()) return;
  thread_local Signer signer;
  const absl::Time now = clock_.Now();
  // In a rotation's overlap (SPEC §5.4), X-Signature stays with the previous secret, and
  // Standard Webhooks carries both signatures, the new one first, space-separated.
  const std::string* previous = nullptr;
  if (destination.has_rotation() && !destination.rotation().previous_secret().empty()) {
    std::optional<absl::Time> ends = common::FromProtoTime(destination.rotation().ends_at());
    if (ends.has_value() && now < *ends) previous = &destination.rotation().previous_secret();
  }
  headers.emplace_back(kSignatureHeader,
                       signer.XSignature(previous != nullptr ? *previous : secret, body));
  if (!options.standard_webhooks()) return;
  const int64_t timestamp = absl::ToUnixSeconds(now);
  StandardWebhookHeaderValues sw = signer.StandardWebhookHeaders(secret, webhook_id, timestamp, body);
  if (previous != nullptr) {
    StandardWebhookHeaderValues old =
        signer.StandardWebhookHeaders(*previous, webhook_id, timestamp, body);
    absl::StrAppend(&sw.signature, " ", old.signature);
  }
  headers.emplace_back(kWebhookIdHeader, std::move(sw.id));
  headers.emplace_back(kWebhookTimestampHeader, std::move(sw.timestamp));
  headers.emplace_back(kWebhookSignatureHeader, std::move(sw.signature));
}

template <typename DoneFor>
void Deliverer::SendToUrls(const hookrelay::v1::Destination& destination,
                           const hookrelay::v1::DeliveryOptions& options, Headers headers,
                           bool traced, std::shared_ptr<const std::string> body, DoneFor done_for) {
  const int url_count = destination.urls_size();
  const absl::Duration timeout = absl::Milliseconds(options.timeout_ms());
  for (int i = 0; i < url_count; ++i) {
    const hookrelay::v1::WebhookUrl& url = destination.urls(i);
    HttpRequest request;
    request.url = url.url();
    // The last (usually the only) URL takes the headers instead of a copy.
    if (i + 1 == url_count) {
      request.headers = std::move(headers);
    } else {
      request.headers = headers;
    }
    request.headers.reserve(request.headers.size() + url.headers_size());
    for (const auto& h : url.headers()) {
      // The event's own trace context replaces a URL's static one: a receiver gets one trace.
      if (traced &&
          (absl::EqualsIgnoreCase(h.name(), common::ToAbsl(common::kTraceparentHeader)) ||
           absl::EqualsIgnoreCase(h.name(), common::ToAbsl(common::kTracestateHeader)))) {
        continue;
      }
      request.headers.emplace_back(h.name(), h.value());
    }
    request.body = body;
    request.timeout = timeout;
    if (metrics_) metrics_->RequestStarted();
    sender_.Send(std::move(request), done_for(static_cast<size_t>(i)));
  }
}

void Deliverer::SendBatch(std::vector<BatchItem> items) {
  // In job id order (acceptance order on one collector): a retried batch has the same body.
  std::sort(items.begin(), items.end(), [](const BatchItem& a, const BatchItem& b) {
    return static_cast<const JobState*>(a.job.get())->delivery->job().id() <
           static_cast<const JobState*>(b.job.get())->delivery->job().id();
  });
  auto batch = std::make_shared<BatchState>();
  batch->sent = clock_.Now();
  batch->members.reserve(items.size());
  for (BatchItem& item : items) {
    batch->members.push_back(std::static_pointer_cast<JobState>(std::move(item.job)));
  }
  auto body = std::make_shared<const std::string>(BatchBody(items));
  items.clear();
  const JobState& first = *batch->members.front();
  const hookrelay::v1::Destination& destination = first.destination();
  if (metrics_) metrics_->ObserveBatch(batch->members.size());
  // The same members give the same key, on every deliverer: a retried batch is recognisable.
  std::vector<std::string_view> message_ids;
  message_ids.reserve(batch->members.size());
  for (const auto& m : batch->members) message_ids.push_back(m->delivery->job().message_id());
  batch->key = BatchIdempotencyKey(std::move(message_ids));
  const std::string& key = batch->key;
  // A batch carries no traceparent: its members may belong to different traces.
  Headers headers;
  headers.reserve(5 + (destination.urls_size() == 1 ? destination.urls(0).headers_size() : 0));
  headers.emplace_back(kIdempotencyHeader, key);
  AddSignatureHeaders(destination, first.options(), key, *body, headers);
  const size_t url_count = static_cast<size_t>(destination.urls_size());
  batch->results.resize(url_count);
  batch->details.resize(url_count);
  batch->durations.resize(url_count);
  batch->remaining.store(url_count, std::memory_order_relaxed);
  SendToUrls(destination, first.options(), std::move(headers), /*traced=*/false, std::move(body),
             [this, batch](size_t i) {
               return [this, batch, i](HttpResult result) {
                 OnBatchUrlDone(batch, i, std::move(result));
               };
             });
}

}  // namespace hookrelay::deliverer
