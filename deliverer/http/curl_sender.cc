#include "deliverer/http/curl_sender.h"

#include <curl/curl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

#include "common/log.h"
#include "common/strings.h"
#include "deliverer/address_policy.h"
#include "deliverer/http/tls.h"

namespace hookrelay::deliverer::http {
namespace {

constexpr char kUserAgent[] = "hookrelay/1.0";
constexpr char kShuttingDown[] = "sender shutting down";
// Idle easy handles kept per worker for reuse; beyond this they are freed (each holds buffers).
// (Handles in use are bounded by the slots: max_host_connections per host.)
constexpr size_t kMaxIdleHandles = 256;
// curl_multi_poll waits at most this long when curl has no earlier timer of its own.
constexpr int kMaxPollMs = 1000;

absl::Status GlobalInit() {
  static std::once_flag once;
  static CURLcode rc = CURLE_OK;
  std::call_once(once, [] { rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (rc != CURLE_OK) {
    return absl::InternalError(absl::StrCat("curl_global_init: ", curl_easy_strerror(rc)));
  }
  return absl::OkStatus();
}

TransportError MapCurlError(CURLcode code) {
  switch (code) {
    case CURLE_OK:
      return TransportError::kNone;
    case CURLE_OPERATION_TIMEDOUT:
      return TransportError::kTimeout;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
      return TransportError::kConnect;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
      return TransportError::kTlsVerification;
    default:
      return TransportError::kOther;
  }
}

bool HasControlBytes(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

bool HasHeader(const HttpRequest& request, std::string_view name) {
  for (const auto& [n, v] : request.headers) {
    if (absl::EqualsIgnoreCase(common::ToAbsl(n), common::ToAbsl(name))) return true;
  }
  return false;
}

long TimeoutMs(absl::Duration timeout) {
  const int64_t ms = absl::ToInt64Milliseconds(timeout);
  return static_cast<long>(std::clamp<int64_t>(ms, 1, std::numeric_limits<int32_t>::max()));
}

// The key of a receiver host's connection slots: scheme://host:port, lower case, the scheme's
// default port filled in, user info dropped. Not a validating parser: libcurl rejects what is
// malformed, and a malformed URL only needs some stable key.
std::string HostKey(std::string_view url) {
  const size_t scheme_end = url.find("://");
  const std::string_view scheme =
      scheme_end == std::string_view::npos ? std::string_view() : url.substr(0, scheme_end);
  const std::string_view authority = UrlHost(url);
  std::string key = absl::AsciiStrToLower(absl::StrCat(common::ToAbsl(scheme), "://",
                                                       common::ToAbsl(authority)));
  // A port is present when the last ':' comes after any IPv6 literal's ']'.
  const size_t colon = authority.rfind(':');
  const size_t bracket = authority.rfind(']');
  const bool has_port =
      colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket);
  if (!has_port) {
    if (absl::EqualsIgnoreCase(common::ToAbsl(scheme), "https")) {
      key += ":443";
    } else if (absl::EqualsIgnoreCase(common::ToAbsl(scheme), "http")) {
      key += ":80";
    }
  }
  return key;
}

int HttpVersionNumber(long curl_version) {
  switch (curl_version) {
    case CURL_HTTP_VERSION_1_0:
      return 10;
    case CURL_HTTP_VERSION_1_1:
      return 11;
    case CURL_HTTP_VERSION_2_0:
      return 20;
    case CURL_HTTP_VERSION_3:
      return 30;
    default:
      return 0;
  }
}

}  // namespace

// CURLOPT_SSL_CTX_FUNCTION: runs on the worker thread before each new TLS handshake.
static CURLcode AddTrustToContext(CURL*, void* ssl_ctx, void* userptr) {
  const auto* trust = static_cast<const TlsTrust*>(userptr);
  return trust->AddTo(static_cast<SSL_CTX*>(ssl_ctx)) ? CURLE_OK : CURLE_SSL_CERTPROBLEM;
}

// One thread, one multi handle. The thread owns everything but the incoming queue.
class CurlSender::Worker {
 public:
  Worker(const Options& options, const TlsTrust* trust, std::atomic<int64_t>& in_flight)
      : options_(options), trust_(trust), in_flight_(in_flight) {}

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  ~Worker() {
    // Joined, and every transfer completed by now (CurlSender::~HttpSender).
    for (std::unique_ptr<Transfer>& t : idle_) curl_easy_cleanup(t->easy);
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
  }

  absl::Status Init() {
    multi_ = curl_multi_init();
    if (multi_ == nullptr) return absl::InternalError("curl_multi_init failed");
    // No CURLMOPT_MAX_HOST_CONNECTIONS / MAX_TOTAL_CONNECTIONS: either would park transfers
    // inside the multi handle with their timeouts running. The per-host slots (Admit) bound the
    // connections instead.
    CURLMcode rc = curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS,
                                     std::max(options_.max_cached_connections,
                                              options_.max_host_connections));
    if (rc == CURLM_OK) rc = curl_multi_setopt(multi_, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
    if (rc != CURLM_OK) {
      return absl::InternalError(absl::StrCat("curl_multi_setopt: ", curl_multi_strerror(rc)));
    }
    return absl::OkStatus();
  }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  void Enqueue(HttpRequest request, Callback done, absl::Time queued) {
    bool wake;
    {
      absl::MutexLock lock(&mu_);
      wake = incoming_.empty();
      incoming_.push_back(Pending{std::move(request), std::move(done), queued});
    }
    // An empty queue means the thread may be asleep in curl_multi_poll (or is about to take the
    // queue and will poll with a pending wakeup): one wakeup per batch suffices.
    if (wake) curl_multi_wakeup(multi_);
  }

  void RequestStop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    curl_multi_wakeup(multi_);
  }

  void Join() {
    if (thread_.joinable()) thread_.join();
  }

  // Fails every queued request with "sender shutting down". Returns whether there was any.
  bool FailQueued() {
    std::deque<Pending> batch;
    {
      absl::MutexLock lock(&mu_);
      batch.swap(incoming_);
    }
    for (Pending& p : batch) {
      Complete(std::move(p.done), ShutdownResult(p.request.url, p.queued, std::nullopt));
    }
    return !batch.empty();
  }

 private:
  struct Pending {
    HttpRequest request;
    Callback done;
    absl::Time queued;
  };

  // One receiver host's slots and the requests waiting for one.
  struct Host {
    std::string key;
    long active = 0;  // transfers in the multi handle
    std::deque<Pending> waiting;
  };

  // An easy handle and the state its callbacks point at. Pooled with its handle: the options
  // that never change (callbacks and their data, TLS, protocols, ...) are set once.
  struct Transfer {
    CURL* easy = nullptr;
    HttpRequest request;
    Callback done;
    absl::Time queued;
    absl::Time started;  // entered the multi handle
    Host* host = nullptr;
    bool allow_private_networks = false;
    // The request's header lines, NUL-terminated one after the other, and the list curl reads
    // (CURLOPT_HTTPHEADER) pointing into them: built in place, so a pooled transfer reuses their
    // memory instead of curl_slist_append allocating a node and a copy per line per request.
    std::string header_bytes;
    std::vector<curl_slist> header_nodes;
    std::string retry_after;
    // Set by OpenSocket when it refused an address.
    std::string forbidden;
    char error[CURL_ERROR_SIZE] = {};
  };

  // `started`: when the request entered libcurl, if it did.
  static HttpResult ShutdownResult(const std::string& url, absl::Time queued,
                                   std::optional<absl::Time> started) {
    const absl::Time now = absl::Now();
    HttpResult r;
    r.result.url = url;
    r.result.error = TransportError::kOther;
    r.error_detail = kShuttingDown;
    r.queued = (started ? *started : now) - queued;
    r.duration = started ? now - *started : absl::ZeroDuration();
    return r;
  }

  void Complete(Callback done, HttpResult result) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    std::move(done)(std::move(result));
  }

  void Run() {
    while (true) {
      std::deque<Pending> batch;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) break;
        batch.swap(incoming_);
      }
      for (Pending& p : batch) Admit(std::move(p));
      int running = 0;
      curl_multi_perform(multi_, &running);  // per-transfer errors arrive as CURLMSG_DONE
      ReapDone();
      const CURLMcode rc = curl_multi_poll(multi_, nullptr, 0, kMaxPollMs, nullptr);
      if (rc != CURLM_OK) {
        static common::LogRateLimiter* const limiter = new common::LogRateLimiter(1.0, 1);
        common::LogRateLimited(*limiter, common::LogLevel::kError, "curl_multi_poll failed",
                               {{"error", curl_multi_strerror(rc)}});
        // Real time (I/O): do not spin on a persistent failure.
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    // Shutting down: in-flight transfers first, then those waiting for a slot, then whatever is
    // (or gets) queued.
    while (!active_.empty()) {
      auto it = active_.begin();
      std::unique_ptr<Transfer> t = std::move(it->second);
      active_.erase(it);
      curl_multi_remove_handle(multi_, t->easy);
      --t->host->active;
      Callback done = std::move(t->done);
      HttpResult result = ShutdownResult(t->request.url, t->queued, t->started);
      Recycle(std::move(t));
      Complete(std::move(done), std::move(result));
    }
    while (!hosts_.empty()) {
      auto it = hosts_.begin();
      std::unique_ptr<Host> host = std::move(it->second);
      hosts_.erase(it);
      for (Pending& p : host->waiting) {
        Complete(std::move(p.done), ShutdownResult(p.request.url, p.queued, std::nullopt));
      }
    }
    while (FailQueued()) {
    }
  }

  // A new request: into libcurl when its host has a free slot (and nobody waiting ahead of it),
  // else to the back of the host's queue.
  void Admit(Pending p) {
    const std::string key = HostKey(p.request.url);
    auto [it, inserted] = hosts_.try_emplace(key, nullptr);
    if (inserted) {
      it->second = std::make_unique<Host>();
      it->second->key = key;
    }
    Host* host = it->second.get();
    if (host->active < options_.max_host_connections && host->waiting.empty()) {
      StartTransfer(std::move(p), host);
      ForgetIfIdle(host);
    } else {
      host->waiting.push_back(std::move(p));
    }
  }

  // Fills the host's free slots from its queue, oldest first.
  void StartWaiting(Host* host) {
    while (host->active < options_.max_host_connections && !host->waiting.empty()) {
      Pending p = std::move(host->waiting.front());
      host->waiting.pop_front();
      StartTransfer(std::move(p), host);
    }
    ForgetIfIdle(host);
  }

  // A host with nothing in flight or waiting is dropped (receivers come and go).
  void ForgetIfIdle(Host* host) {
    if (host->active == 0 && host->waiting.empty()) {
      auto it = hosts_.find(host->key);
      if (it != hosts_.end()) hosts_.erase(it);
    }
  }

  std::unique_ptr<Transfer> TakeTransfer() {
    if (!idle_.empty()) {
      std::unique_ptr<Transfer> t = std::move(idle_.back());
      idle_.pop_back();
      return t;
    }
    auto t = std::make_unique<Transfer>();
    t->easy = curl_easy_init();
    if (t->easy == nullptr) return t;
    if (ConfigureOnce(*t) != CURLE_OK) {
      curl_easy_cleanup(t->easy);
      t->easy = nullptr;
    }
    return t;
  }

  // Keeps the transfer and its handle for the next request (or frees them beyond the pool's
  // size). The connection stays in the multi handle's cache either way.
  void Recycle(std::unique_ptr<Transfer> t) {
    if (t->easy == nullptr) return;
    if (!t->header_nodes.empty()) {
      // The handle must not point at the old lines (nor at the body about to be released).
      curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(nullptr));
      curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, static_cast<const char*>(nullptr));
      t->header_nodes.clear();
      t->header_bytes.clear();
    }
    if (idle_.size() >= kMaxIdleHandles) {
      curl_easy_cleanup(t->easy);
      return;
    }
    t->request = HttpRequest();
    t->done = nullptr;
    t->host = nullptr;
    t->retry_after.clear();
    t->forbidden.clear();
    t->error[0] = '\0';
    idle_.push_back(std::move(t));
  }

  // Completes a request that never entered libcurl.
  void FailEarly(Pending p, std::string detail) {
    HttpResult r;
    r.result.url = p.request.url;
    r.result.error = TransportError::kOther;
    r.error_detail = std::move(detail);
    r.queued = absl::Now() - p.queued;
    Complete(std::move(p.done), std::move(r));
  }

  // Hands a request to libcurl, taking one of `host`'s slots; or fails it at once (the slot
  // stays free).
  void StartTransfer(Pending p, Host* host) {
    const HttpRequest& req = p.request;
    if (HasControlBytes(req.url)) {
      FailEarly(std::move(p), "invalid URL: contains CR, LF or NUL");
      return;
    }
    for (const auto& [name, value] : req.headers) {
      if (name.empty() || HasControlBytes(name) || HasControlBytes(value) ||
          name.find(':') != std::string::npos) {
        FailEarly(std::move(p), absl::StrCat("invalid header name or value for header \"",
                                             absl::CEscape(name), "\""));
        return;
      }
    }

    std::unique_ptr<Transfer> t = TakeTransfer();
    if (t->easy == nullptr) {
      FailEarly(std::move(p), "curl_easy_init failed");
      return;
    }
    t->request = std::move(p.request);
    t->done = std::move(p.done);
    t->queued = p.queued;
    BuildHeaders(*t);
    if (const CURLcode rc = ConfigureRequest(*t); rc != CURLE_OK) {
      FailStarted(std::move(t), absl::StrCat("curl_easy_setopt: ", curl_easy_strerror(rc)));
      return;
    }
    t->started = absl::Now();
    if (const CURLMcode rc = curl_multi_add_handle(multi_, t->easy); rc != CURLM_OK) {
      FailStarted(std::move(t),
                  absl::StrCat("curl_multi_add_handle: ", curl_multi_strerror(rc)));
      return;
    }
    t->host = host;
    ++host->active;
    CURL* easy = t->easy;
    active_.emplace(easy, std::move(t));
  }

  // Headers: ours first unless the caller sets them; "Expect:" (empty) removes curl's
  // `Expect: 100-continue`, which would cost a round trip on larger bodies. Then the caller's, in
  // order; curl drops "Name:" (it means "remove the header"), "Name;" sends an empty value.
  static void BuildHeaders(Transfer& t) {
    std::string& bytes = t.header_bytes;
    size_t lines = 0;
    auto add = [&](std::string_view a, std::string_view b, std::string_view c) {
      bytes.append(a).append(b).append(c).push_back('\0');
      ++lines;
    };
    if (!HasHeader(t.request, "Content-Type")) add("Content-Type: application/json", "", "");
    add("Expect:", "", "");
    for (const auto& [name, value] : t.request.headers) {
      if (value.empty()) {
        add(name, ";", "");
      } else {
        add(name, ": ", value);
      }
    }
    // Linked once `bytes` has stopped growing (and moving). No line contains a NUL (checked).
    t.header_nodes.resize(lines);
    char* line = bytes.data();
    for (size_t i = 0; i < lines; ++i) {
      t.header_nodes[i].data = line;
      t.header_nodes[i].next = i + 1 < lines ? &t.header_nodes[i + 1] : nullptr;
      line += std::strlen(line) + 1;
    }
  }

  // A transfer that was being set up but never entered the multi handle.
  void FailStarted(std::unique_ptr<Transfer> t, std::string detail) {
    Pending p{std::move(t->request), std::move(t->done), t->queued};
    Recycle(std::move(t));
    FailEarly(std::move(p), std::move(detail));
  }

  // The options every request on this handle shares; they point into `t`, which lives as long as
  // the handle.
  CURLcode ConfigureOnce(Transfer& t) {
    t.allow_private_networks = options_.allow_private_networks;
    CURL* e = t.easy;
    CURLcode rc = CURLE_OK;
    auto set = [&](CURLoption option, auto value) {
      if (rc == CURLE_OK) rc = curl_easy_setopt(e, option, value);
    };
    set(CURLOPT_PRIVATE, static_cast<void*>(&t));
    set(CURLOPT_ERRORBUFFER, t.error);
    set(CURLOPT_PROTOCOLS_STR, "http,https");
    set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    set(CURLOPT_FOLLOWLOCATION, 0L);
    set(CURLOPT_POST, 1L);
    set(CURLOPT_USERAGENT, kUserAgent);
    set(CURLOPT_NOSIGNAL, 1L);
    // HTTP/2 when an https receiver offers it through ALPN, else HTTP/1.1; http:// stays
    // HTTP/1.1 (no Upgrade: h2c).
    set(CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
    set(CURLOPT_SSL_VERIFYPEER, 1L);
    set(CURLOPT_SSL_VERIFYHOST, 2L);
    // Environment proxies (http_proxy, ALL_PROXY, ...) must not see customer traffic.
    set(CURLOPT_PROXY, "");
    set(CURLOPT_NOPROXY, "*");
    set(CURLOPT_WRITEFUNCTION, &DiscardBody);
    set(CURLOPT_WRITEDATA, static_cast<void*>(&t));
    set(CURLOPT_HEADERFUNCTION, &OnHeader);
    set(CURLOPT_HEADERDATA, static_cast<void*>(&t));
    set(CURLOPT_OPENSOCKETFUNCTION, &OpenSocket);
    set(CURLOPT_OPENSOCKETDATA, static_cast<void*>(&t));
    if (trust_ != nullptr) {
      set(CURLOPT_SSL_CTX_FUNCTION, &AddTrustToContext);
      set(CURLOPT_SSL_CTX_DATA, static_cast<void*>(const_cast<TlsTrust*>(trust_)));
    }
    return rc;
  }

  // The options of this request.
  CURLcode ConfigureRequest(Transfer& t) {
    static const std::string* const kEmpty = new std::string();
    const std::string& body = t.request.body != nullptr ? *t.request.body : *kEmpty;
    CURL* e = t.easy;
    CURLcode rc = CURLE_OK;
    auto set = [&](CURLoption option, auto value) {
      if (rc == CURLE_OK) rc = curl_easy_setopt(e, option, value);
    };
    set(CURLOPT_URL, t.request.url.c_str());
    // The body is sent from the shared buffer; CURLOPT_COPYPOSTFIELDS would copy it.
    set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    set(CURLOPT_POSTFIELDS, body.data());
    set(CURLOPT_HTTPHEADER, t.header_nodes.data());
    set(CURLOPT_TIMEOUT_MS, TimeoutMs(t.request.timeout));
    return rc;
  }

  static size_t DiscardBody(char*, size_t size, size_t nmemb, void*) { return size * nmemb; }

  // Called once per header line, CRLF included, for every response (1xx included).
  static size_t OnHeader(char* data, size_t size, size_t nitems, void* userdata) {
    auto* t = static_cast<Transfer*>(userdata);
    const size_t n = size * nitems;
    const std::string_view line(data, n);
    constexpr std::string_view kRetryAfter = "retry-after:";
    if (line.starts_with("HTTP/")) {
      t->retry_after.clear();  // a new response (after a 1xx): its own headers count
    } else if (line.size() >= kRetryAfter.size() &&
               absl::EqualsIgnoreCase(common::ToAbsl(line.substr(0, kRetryAfter.size())),
                                      common::ToAbsl(kRetryAfter))) {
      t->retry_after = std::string(
          absl::StripAsciiWhitespace(common::ToAbsl(line.substr(kRetryAfter.size()))));
    }
    return n;
  }

  // Every connection curl opens goes through here, with the address actually connected to.
  static curl_socket_t OpenSocket(void* clientp, curlsocktype purpose, curl_sockaddr* address) {
    auto* t = static_cast<Transfer*>(clientp);
    if (!t->allow_private_networks) {
      sockaddr_storage storage{};
      std::memcpy(&storage, &address->addr,
                  std::min<size_t>(address->addrlen, sizeof(storage)));
      const auto* addr = reinterpret_cast<const sockaddr*>(&storage);
      const std::string_view reason = ForbiddenAddressReason(addr);
      if (!reason.empty()) {
        t->forbidden = absl::StrCat("refused ", FormatAddress(addr), ": ", common::ToAbsl(reason),
                                    "; --allow_private_networks permits it");
        return CURL_SOCKET_BAD;
      }
    }
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
  }

  void ReapDone() {
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* easy = msg->easy_handle;
      const CURLcode code = msg->data.result;  // read before remove_handle frees the message
      auto it = active_.find(easy);
      if (it == active_.end()) continue;  // not ours: cannot happen
      std::unique_ptr<Transfer> t = std::move(it->second);
      active_.erase(it);
      curl_multi_remove_handle(multi_, easy);
      HttpResult r = ResultOf(*t, code);
      Callback done = std::move(t->done);
      Host* host = t->host;
      --host->active;
      Recycle(std::move(t));
      // The slot goes to the next request waiting for this host before the callback runs.
      StartWaiting(host);
      Complete(std::move(done), std::move(r));
    }
  }

  static HttpResult ResultOf(Transfer& t, CURLcode code) {
    HttpResult r;
    r.result.url = std::move(t.request.url);  // the transfer is recycled next
    const absl::Time now = absl::Now();
    r.duration = now - t.started;
    r.queued = t.started - t.queued;
    if (code == CURLE_OK) {
      long status = 0;
      curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
      long version = 0;
      curl_easy_getinfo(t.easy, CURLINFO_HTTP_VERSION, &version);
      r.http_version = HttpVersionNumber(version);
      r.result.status = static_cast<int>(status);
      r.result.error = TransportError::kNone;
      r.result.retry_after = std::move(t.retry_after);
      return r;
    }
    if (!t.forbidden.empty() && code == CURLE_COULDNT_CONNECT) {
      r.result.error = TransportError::kForbiddenAddress;
      r.error_detail = std::move(t.forbidden);
      return r;
    }
    r.result.error = MapCurlError(code);
    r.error_detail = t.error[0] != '\0' ? std::string(t.error) : curl_easy_strerror(code);
    return r;
  }

  // Constant after construction.
  const Options& options_;
  const TlsTrust* const trust_;
  std::atomic<int64_t>& in_flight_;
  CURLM* multi_ = nullptr;  // curl_multi_wakeup may be called from any thread
  std::thread thread_;

  // Owned by the worker thread (and by the destructor once joined).
  std::vector<std::unique_ptr<Transfer>> idle_;
  absl::flat_hash_map<CURL*, std::unique_ptr<Transfer>> active_;
  absl::flat_hash_map<std::string, std::unique_ptr<Host>> hosts_;

  absl::Mutex mu_;
  std::deque<Pending> incoming_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::unique_ptr<CurlSender>> CurlSender::Create(Options options) {
  if (options.threads < 1 || options.max_host_connections < 1 ||
      options.max_cached_connections < 1) {
    return absl::InvalidArgumentError("CurlSender: threads and connection limits must be positive");
  }
  if (absl::Status s = GlobalInit(); !s.ok()) return s;
  if (options.trust != nullptr) {
    // The certificates are added through the OpenSSL context; another TLS backend has none.
    const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
    if (info == nullptr || info->ssl_version == nullptr ||
        !absl::StartsWith(info->ssl_version, "OpenSSL")) {
      return absl::InvalidArgumentError("ca_file needs a libcurl built with OpenSSL");
    }
  }
  std::unique_ptr<CurlSender> sender(new CurlSender(std::move(options)));
  for (auto& worker : sender->workers_) {
    if (absl::Status s = worker->Init(); !s.ok()) return s;
  }
  for (auto& worker : sender->workers_) worker->Start();
  return sender;
}

CurlSender::CurlSender(Options options) : options_(std::move(options)) {
  workers_.reserve(options_.threads);
  for (int i = 0; i < options_.threads; ++i) {
    workers_.push_back(std::make_unique<Worker>(options_, options_.trust.get(), in_flight_));
  }
}

CurlSender::~CurlSender() {
  for (auto& worker : workers_) worker->RequestStop();
  for (auto& worker : workers_) worker->Join();
  // Callbacks run during the workers' own shutdown may have queued requests on workers that had
  // already exited: fail those here until nothing is left.
  bool any = true;
  while (any) {
    any = false;
    for (auto& worker : workers_) any = worker->FailQueued() || any;
  }
}

void CurlSender::Send(HttpRequest request, Callback done) {
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t i = next_worker_.fetch_add(1, std::memory_order_relaxed) % workers_.size();
  workers_[i]->Enqueue(std::move(request), std::move(done), absl::Now());
}

}  // namespace hookrelay::deliverer::http
