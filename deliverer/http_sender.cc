#include "deliverer/http_sender.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/intrusive/list.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

#include "deliverer/http/curl_sender.h"
#include "deliverer/http/h1_connection.h"
#include "deliverer/http/request_head.h"
#include "deliverer/http/tls.h"
#include "deliverer/http/url.h"
#include "deliverer/round_end.h"

namespace hookrelay::deliverer {
namespace {

namespace net = boost::asio;
using http::H1Connection;
using http::SlotRequest;

constexpr char kShuttingDown[] = "sender shutting down";
// An idle connection older than this is closed rather than reused (as libcurl does by default):
// a receiver's idle timeout has most likely closed it already.
constexpr std::chrono::seconds kMaxIdleAge(118);

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(d));
}

// `started`: when the request got its slot, if it did.
HttpResult ShutdownResult(std::string url, absl::Time queued, std::optional<absl::Time> started) {
  const absl::Time now = absl::Now();
  HttpResult r;
  r.result.url = std::move(url);
  r.result.error = TransportError::kOther;
  r.error_detail = kShuttingDown;
  r.queued = (started ? *started : now) - queued;
  r.duration = started ? now - *started : absl::ZeroDuration();
  return r;
}

}  // namespace

// What the workers share: constant after Create, except the libcurl transport, made on first use.
struct HttpSender::Shared {
  Options options;
  std::shared_ptr<const http::TlsTrust> trust;
  std::unique_ptr<net::ssl::context> tls_context;

  // The transport of HTTP/2 receivers; null until a receiver first selects h2.
  http::CurlSender* Curl(absl::Status* error) {
    absl::MutexLock lock(&curl_mu);
    if (curl == nullptr && curl_error.ok()) {
      const long threads = std::max(1, options.threads);
      absl::StatusOr<std::unique_ptr<http::CurlSender>> created = http::CurlSender::Create({
          .allow_private_networks = options.allow_private_networks,
          .trust = trust,
          .threads = 1,
          // The workers' slots bound the requests; nothing should wait inside.
          .max_host_connections =
              options.max_host_connections > std::numeric_limits<long>::max() / threads
                  ? std::numeric_limits<long>::max()
                  : options.max_host_connections * threads,
          .max_cached_connections = options.max_cached_connections,
      });
      if (created.ok()) {
        curl = *std::move(created);
      } else {
        curl_error = created.status();
      }
    }
    if (curl == nullptr) *error = curl_error;
    return curl.get();
  }

  // Destroys the libcurl transport: its pending requests report "sender shutting down" to their
  // workers, which have already completed them.
  void StopCurl() {
    std::unique_ptr<http::CurlSender> stopping;
    {
      absl::MutexLock lock(&curl_mu);
      stopping = std::move(curl);
    }
  }

  absl::Mutex curl_mu;
  std::unique_ptr<http::CurlSender> curl ABSL_GUARDED_BY(curl_mu);
  absl::Status curl_error ABSL_GUARDED_BY(curl_mu);
};

// One thread, one io_context. The thread owns everything but the incoming queues.
class HttpSender::Worker final : public http::H1ConnectionOwner {
 public:
  Worker(Shared& shared, std::atomic<int64_t>& in_flight)
      : shared_(shared),
        options_(shared.options),
        in_flight_(in_flight),
        work_(net::make_work_guard(io_)) {}

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  ~Worker() {
    // Joined: nothing runs on io_ any more. Connections go before the io_context they use.
    all_.clear_and_dispose([](H1Connection* c) { delete c; });
  }

  void Start() {
    thread_ = std::thread([this] {
      // In rounds: the handlers ready after a wait, then what they deferred (the outcomes of the
      // jobs they finished go back in one write per stream).
      for (;;) {
        RoundScope round;
        if (io_.run_one() == 0) break;
        io_.poll();
      }
      while (FailQueued()) {
      }
    });
  }

  void Enqueue(HttpRequest request, Callback done, absl::Time queued) {
    SlotRequest r;
    r.request = std::move(request);
    r.done = std::move(done);
    r.queued = queued;
    absl::MutexLock lock(&mu_);
    incoming_.push_back(std::move(r));
    WakeLocked();
  }

  // From the libcurl transport's thread (or the thread destroying it).
  void CurlDone(uint64_t id, HttpResult result) {
    absl::MutexLock lock(&mu_);
    curl_done_.emplace_back(id, std::move(result));
    WakeLocked();
  }

  void RequestStop() {
    net::post(io_, [this] { Stop(); });
  }

  void Join() {
    if (thread_.joinable()) thread_.join();
  }

  // Fails every queued request with "sender shutting down". Returns whether there was any.
  bool FailQueued() {
    std::vector<SlotRequest> batch;
    {
      absl::MutexLock lock(&mu_);
      batch.swap(incoming_);
      curl_done_.clear();  // completed by Stop()
    }
    for (SlotRequest& r : batch) {
      Complete(std::move(r.done), ShutdownResult(std::move(r.request.url), r.queued, std::nullopt));
    }
    return !batch.empty();
  }

  void ExchangeDone(H1Connection& c, http::ExchangeOutcome& outcome) override;

  void IdleConnectionLost(H1Connection& c) override {
    Host* host = static_cast<Host*>(c.host);
    if (c.idle_hook.is_linked()) --idle_count_;
    c.Retire();  // unlinks it from the pool
    ForgetIfIdle(host);
  }

 private:
  // One receiver host's slots, the requests waiting for one, and its idle connections.
  struct Host {
    explicit Host(std::string k) : key(std::move(k)) {}
    const std::string key;
    long active = 0;  // requests holding a slot
    std::deque<SlotRequest> waiting;
    boost::intrusive::list<
        H1Connection,
        boost::intrusive::member_hook<H1Connection, H1Connection::AutoUnlinkHook,
                                      &H1Connection::idle_hook>,
        boost::intrusive::constant_time_size<false>>
        idle;  // most recently used first
    // A TLS handshake with it selected h2: its requests go through libcurl.
    bool http2 = false;
  };

  // A request handed to the libcurl transport.
  struct CurlPending {
    Callback done;
    std::string url;
    absl::Time queued;
    absl::Time started;
    Host* host;
  };

  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (wake_posted_) return;
    wake_posted_ = true;
    net::post(io_, [this] { Drain(); });
  }

  void Drain() {
    {
      absl::MutexLock lock(&mu_);
      wake_posted_ = false;
      if (stopping_) return;
      batch_.swap(incoming_);
      curl_batch_.swap(curl_done_);
    }
    for (auto& [id, result] : curl_batch_) FinishCurl(id, std::move(result));
    curl_batch_.clear();
    for (SlotRequest& r : batch_) Admit(std::move(r));
    batch_.clear();
  }

  void Complete(Callback done, HttpResult result) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    std::move(done)(std::move(result));
  }

  // Completes a request that never got a slot.
  void FailEarly(SlotRequest r, std::string detail) {
    HttpResult result;
    result.result.url = std::move(r.request.url);
    result.result.error = TransportError::kOther;
    result.error_detail = std::move(detail);
    result.queued = absl::Now() - r.queued;
    Complete(std::move(r.done), std::move(result));
  }

  // A new request: it starts when its host has a free slot (and nobody waiting ahead of it),
  // else it goes to the back of the host's queue. Unsafe requests fail here, nothing sent.
  void Admit(SlotRequest r) {
    std::string error;
    if (!http::ParseUrl(r.request.url, &url_, &error)) {
      FailEarly(std::move(r), std::move(error));
      return;
    }
    if (std::string bad = http::CheckHeaders(r.request); !bad.empty()) {
      FailEarly(std::move(r), std::move(bad));
      return;
    }
    http::HostKey(url_, &key_);
    auto it = hosts_.find(key_);
    if (it == hosts_.end()) it = hosts_.emplace(key_, std::make_unique<Host>(key_)).first;
    Host* host = it->second.get();
    if (host->active < options_.max_host_connections && host->waiting.empty()) {
      StartRequest(std::move(r), host);
    } else {
      host->waiting.push_back(std::move(r));
    }
  }

  // Takes one of `host`'s slots for `r`: the request's time starts now.
  void StartRequest(SlotRequest r, Host* host) {
    ++host->active;
    r.started = absl::Now();
    r.deadline = std::chrono::steady_clock::now() +
                 ToChrono(std::max(r.request.timeout, absl::Milliseconds(1)));
    if (host->http2) {
      StartCurl(std::move(r), host);
      return;
    }
    H1Connection* c = TakeIdle(host);
    if (c == nullptr) c = NewConnection(host, r.request.url);
    c->Begin(std::move(r));
  }

  // Fills the host's free slots from its queue, oldest first.
  void StartWaiting(Host* host) {
    while (host->active < options_.max_host_connections && !host->waiting.empty()) {
      SlotRequest r = std::move(host->waiting.front());
      host->waiting.pop_front();
      StartRequest(std::move(r), host);
    }
  }

  // A host with nothing running, waiting or pooled is dropped (receivers come and go); HTTP/2
  // hosts are kept, to remember that they are.
  void ForgetIfIdle(Host* host) {
    if (host->active == 0 && host->waiting.empty() && host->idle.empty() && !host->http2) {
      hosts_.erase(host->key);
    }
  }

  H1Connection* NewConnection(Host* host, const std::string& url) {
    http::UrlParts parts;
    std::string error;
    http::ParseUrl(url, &parts, &error);  // parsed in Admit
    auto* c = new H1Connection(io_, *shared_.tls_context, *this, parts,
                               options_.allow_private_networks);
    c->host = host;
    all_.push_back(*c);
    return c;
  }

  // The most recently used idle connection of `host` that is still open, if any.
  H1Connection* TakeIdle(Host* host) {
    const auto now = std::chrono::steady_clock::now();
    while (!host->idle.empty()) {
      H1Connection& c = host->idle.front();
      host->idle.pop_front();
      c.lru_hook.unlink();
      --idle_count_;
      if (now - c.idle_since > kMaxIdleAge || !c.StillOpen()) {
        c.Retire();
        continue;
      }
      return &c;
    }
    return nullptr;
  }

  // Pools `c` for its host; beyond max_cached_connections the least recently used idle
  // connection is closed.
  void Pool(H1Connection& c, Host* host) {
    c.idle_since = std::chrono::steady_clock::now();
    host->idle.push_front(c);
    lru_.push_front(c);
    ++idle_count_;
    while (idle_count_ > options_.max_cached_connections && !lru_.empty()) {
      H1Connection& oldest = lru_.back();
      Host* its_host = static_cast<Host*>(oldest.host);
      oldest.Retire();
      --idle_count_;
      ForgetIfIdle(its_host);
    }
  }

  void StartCurl(SlotRequest r, Host* host) {
    absl::Status error;
    http::CurlSender* curl = shared_.Curl(&error);
    if (curl == nullptr) {
      --host->active;
      HttpResult result;
      result.result.url = std::move(r.request.url);
      result.result.error = TransportError::kOther;
      result.error_detail = absl::StrCat("HTTP/2 receiver, and libcurl is unavailable: ",
                                         error.ToString());
      result.queued = r.started - r.queued;
      Complete(std::move(r.done), std::move(result));
      return;
    }
    const uint64_t id = next_curl_id_++;
    // What is left of the request's time (a first connection may have spent some of it).
    const auto left = r.deadline - std::chrono::steady_clock::now();
    r.request.timeout = std::max(absl::FromChrono(left), absl::Milliseconds(1));
    curl_pending_.emplace(
        id, CurlPending{std::move(r.done), r.request.url, r.queued, r.started, host});
    curl->Send(std::move(r.request),
               [this, id](HttpResult result) { CurlDone(id, std::move(result)); });
  }

  void FinishCurl(uint64_t id, HttpResult result) {
    auto it = curl_pending_.find(id);
    if (it == curl_pending_.end()) return;  // completed by Stop()
    CurlPending p = std::move(it->second);
    curl_pending_.erase(it);
    result.queued = p.started - p.queued;
    result.duration = absl::Now() - p.started;
    --p.host->active;
    StartWaiting(p.host);
    Complete(std::move(p.done), std::move(result));
  }

  // On the worker thread: completes everything pending with "sender shutting down" and stops the
  // io_context (no handler runs after this one).
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    std::vector<SlotRequest> running;
    for (H1Connection& c : all_) {
      if (c.busy()) running.push_back(c.TakeRequest());
    }
    for (SlotRequest& r : running) {
      Complete(std::move(r.done),
               ShutdownResult(std::move(r.request.url), r.queued, r.started));
    }
    for (auto& [id, p] : curl_pending_) {
      Complete(std::move(p.done), ShutdownResult(std::move(p.url), p.queued, p.started));
    }
    curl_pending_.clear();
    for (auto& [key, host] : hosts_) {
      for (SlotRequest& r : host->waiting) {
        Complete(std::move(r.done),
                 ShutdownResult(std::move(r.request.url), r.queued, std::nullopt));
      }
      host->waiting.clear();
    }
    work_.reset();
    io_.stop();
  }

  Shared& shared_;
  const Options& options_;
  std::atomic<int64_t>& in_flight_;
  // Declared before everything that uses it, so destroyed after.
  net::io_context io_{1};
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::thread thread_;

  // Owned by the worker thread (and by the destructor once joined).
  absl::flat_hash_map<std::string, std::unique_ptr<Host>> hosts_;
  boost::intrusive::list<
      H1Connection,
      boost::intrusive::member_hook<H1Connection, H1Connection::AutoUnlinkHook,
                                    &H1Connection::all_hook>,
      boost::intrusive::constant_time_size<false>>
      all_;
  boost::intrusive::list<
      H1Connection,
      boost::intrusive::member_hook<H1Connection, H1Connection::AutoUnlinkHook,
                                    &H1Connection::lru_hook>,
      boost::intrusive::constant_time_size<false>>
      lru_;  // idle connections, most recently used first
  long idle_count_ = 0;
  absl::flat_hash_map<uint64_t, CurlPending> curl_pending_;
  uint64_t next_curl_id_ = 0;
  // Scratch, reused: the parsed URL and host key of the request being admitted, the batches.
  http::UrlParts url_;
  std::string key_;
  std::vector<SlotRequest> batch_;
  std::vector<std::pair<uint64_t, HttpResult>> curl_batch_;

  absl::Mutex mu_;
  std::vector<SlotRequest> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, HttpResult>> curl_done_ ABSL_GUARDED_BY(mu_);
  bool wake_posted_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

void HttpSender::Worker::ExchangeDone(H1Connection& c, http::ExchangeOutcome& outcome) {
  Host* host = static_cast<Host*>(c.host);
  SlotRequest r = c.TakeRequest();
  if (outcome.end == http::ExchangeEnd::kHttp2) {
    // Nothing was sent on this connection: the request goes to libcurl within its slot.
    host->http2 = true;
    c.Retire();
    StartCurl(std::move(r), host);
    return;
  }
  if (outcome.end == http::ExchangeEnd::kRetry) {
    // Reset before any answer on a reused connection: once more on a fresh one, same slot and
    // deadline.
    r.retried = true;
    c.Retire();
    H1Connection* fresh = NewConnection(host, r.request.url);
    fresh->Begin(std::move(r));
    return;
  }
  HttpResult result;
  result.result.url = std::move(r.request.url);
  result.queued = r.started - r.queued;
  result.duration = absl::Now() - r.started;
  if (outcome.end == http::ExchangeEnd::kResponse) {
    result.result.error = TransportError::kNone;
    result.result.status = outcome.status;
    result.http_version = outcome.http_version;
    if (!outcome.retry_after.empty()) result.result.retry_after = outcome.retry_after;
  } else {
    result.result.error = outcome.error;
    result.error_detail = std::move(outcome.detail);
  }
  if (c.reusable()) {
    Pool(c, host);
  } else {
    c.Retire();
  }
  // The slot goes to the next request waiting for this host before the callback runs.
  --host->active;
  StartWaiting(host);
  ForgetIfIdle(host);
  Complete(std::move(r.done), std::move(result));
}

absl::StatusOr<std::unique_ptr<HttpSender>> HttpSender::Create(Options options) {
  if (options.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads must be at least 1, got ", options.threads));
  }
  if (options.max_host_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_host_connections must be at least 1, got ",
                                                   options.max_host_connections));
  }
  if (options.max_cached_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_cached_connections must be at least 1, got ", options.max_cached_connections));
  }
  auto shared = std::make_unique<Shared>();
  if (!options.ca_file.empty()) {
    absl::StatusOr<std::shared_ptr<const http::TlsTrust>> loaded =
        http::TlsTrust::Load(options.ca_file);
    if (!loaded.ok()) return loaded.status();
    shared->trust = *std::move(loaded);
  }
  absl::StatusOr<std::unique_ptr<net::ssl::context>> context =
      http::MakeClientContext(shared->trust.get());
  if (!context.ok()) return context.status();
  shared->tls_context = *std::move(context);
  shared->options = std::move(options);
  std::unique_ptr<HttpSender> sender(new HttpSender(std::move(shared)));
  for (auto& worker : sender->workers_) worker->Start();
  return sender;
}

HttpSender::HttpSender(std::unique_ptr<Shared> shared) : shared_(std::move(shared)) {
  workers_.reserve(shared_->options.threads);
  for (int i = 0; i < shared_->options.threads; ++i) {
    workers_.push_back(std::make_unique<Worker>(*shared_, in_flight_));
  }
}

HttpSender::~HttpSender() {
  for (auto& worker : workers_) worker->RequestStop();
  for (auto& worker : workers_) worker->Join();
  // Callbacks run during the workers' own shutdown may have queued requests on workers that had
  // already exited: fail those here until nothing is left.
  bool any = true;
  while (any) {
    any = false;
    for (auto& worker : workers_) any = worker->FailQueued() || any;
  }
  // The workers completed their HTTP/2 requests; libcurl's late reports of them are dropped.
  shared_->StopCurl();
}

void HttpSender::Send(HttpRequest request, Callback done) {
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t i = next_worker_.fetch_add(1, std::memory_order_relaxed) % workers_.size();
  workers_[i]->Enqueue(std::move(request), std::move(done), absl::Now());
}

}  // namespace hookrelay::deliverer
