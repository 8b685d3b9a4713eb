#include "collector/store/jetstream/jetstream_job_store.h"

#include "collector/store/jetstream/jetstream_user_data.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "absl/strings/escaping.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include <openssl/sha.h>
#include <string.h>
#include <simdjson.h>
#include <limits>

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;

constexpr absl::Duration kRepublishFor = absl::Seconds(10);
// A connection lost for longer than this makes the store unwritable (503, not ready); shorter
// (a reconnect to another server of the cluster) is absorbed by the client's buffer.
constexpr absl::Duration kWriteGrace = absl::Seconds(2);
// Acks of delivered jobs wait at most this long, or until this many are waiting (see AckLoop).
constexpr absl::Duration kAckBurstDelay = absl::Milliseconds(20);
constexpr size_t kAckBurstSize = 256;
constexpr char kConfigBucket[] = "hr_config";
constexpr char kConfigKey[] = "config";



// Runs `call` again while it fails in a way that passes within seconds (a node rejoining, a leader
// election: no responders, a timeout), for up to 10 s.
template <typename Call>
natsStatus RetryPassing(Call call) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  natsStatus s = call();
  while ((s == NATS_NO_RESPONDERS || s == NATS_TIMEOUT) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    s = call();
  }
  return s;
}

// Options for an asynchronous publish: its ack is awaited for at most `wait`. Without a MaxWait
// cnats waits for ever, and an ack that never comes (the node the connection was on died with the
// publish in flight; the connection moves to another node, the ack does not follow) would hold
// its Append — the HTTP request, and the collector's drain — for ever. A timeout reaches
// OnPublishAck as NATS_TIMEOUT: sent again (same Nats-Msg-Id: stored once) within kRepublishFor.
jsPubOptions AsyncPublishOptions(absl::Duration wait) {
  jsPubOptions o;
  jsPubOptions_Init(&o);
  o.MaxWait = absl::ToInt64Milliseconds(wait);
  return o;
}

absl::Status NatsError(std::string_view what, natsStatus s) {
  return absl::UnavailableError(
      absl::StrCat("JetStream: ", std::string(what), ": ", natsStatus_GetText(s)));
}

// A stable message id for a job: its event's dedup marker and its destination.
std::string JobMsgId(const std::string& marker, const std::string& destination) {
  return absl::StrCat(marker.substr(sizeof("hr.dedup.") - 1), "-", destination);
}

std::string ReadySubject(const Job& job) {
  return absl::StrCat("hr.jobs.ready.", JobSubjectTail(job));
}

// The most dedup markers one lookup request asks for.
constexpr size_t kMarkersPerLookup = 256;
constexpr absl::Duration kLookupTimeout = absl::Seconds(5);


}  // namespace

std::string JetStreamToken(std::string_view id) {
  if (id.empty()) return "_";
  std::string out;
  absl::WebSafeBase64Escape(absl::string_view(id.data(), id.size()), &out);
  return out;
}

std::string JobSubjectTail(const Job& job) {
  const bool never_purged = job.type() == hookrelay::v1::DELETE || job.test();
  return absl::StrCat(never_purged ? std::string("~") : JetStreamToken(job.source_id()), ".",
                      JetStreamToken(job.user_id()));
}

std::string DedupMarkerSubject(std::string_view dedup_key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(dedup_key.data()), dedup_key.size(), digest);
  std::string out = "hr.dedup.";
  absl::StrAppend(&out, absl::BytesToHexString(absl::string_view(
                            reinterpret_cast<const char*>(digest), 16)));
  return out;
}

JetStreamJobStore::JetStreamJobStore(Options options, const common::Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

absl::StatusOr<std::unique_ptr<JetStreamJobStore>> JetStreamJobStore::Open(Options options) {
  const common::Clock& clock = options.clock != nullptr ? *options.clock : common::Clock::Real();
  auto store = std::unique_ptr<JetStreamJobStore>(new JetStreamJobStore(std::move(options), clock));
  const Options& o = store->options_;
  std::vector<std::string> urls = absl::StrSplit(o.urls, ',', absl::SkipEmpty());
  if (urls.empty()) return absl::InvalidArgumentError("--nats_url is empty");
  std::vector<const char*> servers;
  for (const std::string& u : urls) servers.push_back(u.c_str());
  natsStatus s = natsOptions_Create(&store->nats_options_);
  if (s == NATS_OK) {
    s = natsOptions_SetServers(store->nats_options_, servers.data(),
                               static_cast<int>(servers.size()));
  }
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(store->nats_options_, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(store->nats_options_, 250);
  // Publishes made while reconnecting wait in a bounded buffer (8 MB); beyond it they fail.
  if (s == NATS_OK) s = natsOptions_SetReconnectBufSize(store->nats_options_, 8 << 20);
  store->events_ = new ConnectionEvents;
  store->events_->urls = o.urls;
  store->events_->on_write_health = o.on_write_health;
  if (o.registry != nullptr) {
    try {
      store->events_->writable =
          &prometheus::BuildGauge()
               .Name("hookrelay_store_writable")
               .Help("1 while the job store can write, 0 while it cannot (a full disk, an I/O "
                     "error, the JetStream cluster unreachable) and ingest is refused")
               .Register(*o.registry)
               .Add({});
      store->events_->writable->Set(1);
      store->duplicates_ = &prometheus::BuildCounter()
                                .Name("hookrelay_ingest_duplicates_total")
                                .Help("Events dropped because their (source, messageId) was seen "
                                      "within the dedup window")
                                .Register(*o.registry)
                                .Add({});
      store->dedup_lookup_failures_ =
          &prometheus::BuildCounter()
               .Name("hookrelay_jetstream_dedup_lookup_failures_total")
               .Help("Appends whose de-duplication lookup failed (a leader change, a server "
                     "rejoining): stored without the dedup-window check")
               .Register(*o.registry)
               .Add({});
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("job store: registering metrics: ", e.what()));
    }
  }
  if (s == NATS_OK) {
    s = natsOptions_SetDisconnectedCB(store->nats_options_, &JetStreamJobStore::OnDisconnected,
                                      store->events_);
  }
  if (s == NATS_OK) {
    s = natsOptions_SetReconnectedCB(store->nats_options_, &JetStreamJobStore::OnReconnected,
                                     store->events_);
  }
  if (s == NATS_OK) {
    s = natsOptions_SetClosedCB(store->nats_options_, &JetStreamJobStore::OnClosed,
                                store->events_);
  }
  if (s != NATS_OK) return absl::InvalidArgumentError(absl::StrCat("--nats_url: ", natsStatus_GetText(s)));
  s = natsConnection_Connect(&store->nc_, store->nats_options_);
  if (s != NATS_OK) return NatsError(absl::StrCat("connecting to ", o.urls), s);

  const absl::Time deadline = absl::Now() + o.connect_timeout;
  absl::Status layout = EnsureJetStreamLayout(store->nc_, o.layout);
  while (absl::IsUnavailable(layout) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(300));
    layout = EnsureJetStreamLayout(store->nc_, o.layout);
  }
  if (!layout.ok()) return layout;

  // Dedup lookup answers arrive on <inbox>.<lookup token>.
  {
    natsInbox* inbox = nullptr;
    s = natsInbox_Create(&inbox);
    if (s == NATS_OK) {
      store->lookup_inbox_ = inbox;
      natsInbox_Destroy(inbox);
      s = natsConnection_Subscribe(&store->lookup_sub_, store->nc_,
                                   absl::StrCat(store->lookup_inbox_, ".*").c_str(),
                                   &JetStreamJobStore::OnLookupReply, store.get());
    }
    if (s != NATS_OK) return NatsError("subscribing to de-duplication answers", s);
  }

  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.PublishAsync.AckHandler = &JetStreamJobStore::OnPublishAck;
  js_options.PublishAsync.AckHandlerClosure = store.get();
  js_options.PublishAsync.MaxPending = 65536;
  s = natsConnection_JetStream(&store->js_, store->nc_, &js_options);
  if (s != NATS_OK) return NatsError("JetStream context", s);
  store->republisher_ = std::thread([raw = store.get()] { raw->RepublishLoop(); });
  store->acker_ = std::thread([raw = store.get()] { raw->AckLoop(); });
  absl::StatusOr<std::unique_ptr<JetStreamUserData>> user_data =
      JetStreamUserData::Start(store->nc_, o.layout, clock);
  if (!user_data.ok()) return user_data.status();
  store->user_data_ = *std::move(user_data);

  // The configuration bucket: bound when it exists, created (replicated like the jobs) when not.
  // On a cluster formed moments ago the creation can be refused with a generic error (its
  // meta leader still settling) that RetryPassing does not know: every failure is tried again
  // until the connect timeout, like the streams above.
  for (;;) {
    s = RetryPassing([&] { return js_KeyValue(&store->config_kv_, store->js_, kConfigBucket); });
    if (s == NATS_NOT_FOUND) {
      kvConfig kv_config;
      kvConfig_Init(&kv_config);
      kv_config.Bucket = kConfigBucket;
      kv_config.History = 5;
      kv_config.StorageType = js_FileStorage;
      kv_config.Replicas = o.layout.replicas;
      s = RetryPassing(
          [&] { return js_CreateKeyValue(&store->config_kv_, store->js_, &kv_config); });
    }
    if (s == NATS_OK || absl::Now() >= deadline) break;
    const char* detail = nats_GetLastError(nullptr);
    common::LogWarning("JetStream: binding the configuration bucket failed; trying again",
                       {{"bucket", kConfigBucket}, {"error", natsStatus_GetText(s)},
                        {"detail", detail != nullptr ? detail : ""}});
    absl::SleepFor(absl::Milliseconds(300));
  }
  if (s != NATS_OK) return NatsError("the configuration bucket hr_config", s);

  jsSubOptions sub_options;
  jsSubOptions_Init(&sub_options);
  sub_options.Stream = kJobsStream;
  sub_options.Consumer = kDispatchConsumer;
  sub_options.ManualAck = true;
  jsErrCode code = static_cast<jsErrCode>(0);
  s = js_PullSubscribe(&store->dispatch_, store->js_, kReadySubjects, kDispatchConsumer, nullptr,
                       &sub_options, &code);
  if (s != NATS_OK) return NatsError("binding the dispatch consumer", s);
  store->fetcher_ = std::thread([raw = store.get()] { raw->FetchLoop(); });
  return store;
}

void JetStreamJobStore::SetReadyCallback(std::function<void()> ready) {
  absl::MutexLock lock(&ready_mu_);  // Waits for a call in progress.
  ready_ = std::move(ready);
}

void JetStreamJobStore::FetchLoop() {
  // Each fetch is a pull request the server holds until jobs come or it expires: no polling.
  // It asks for a full batch whatever the demand of the moment: the dispatcher's demand comes
  // back a few jobs at a time, and fetches of a few jobs cost the servers more than twice as
  // much per delivery as fetches of 256 (docs/BENCHMARKS.md, "JetStream engine"). What is not
  // leased at once waits in fetched_ (at most one batch beyond the demand: the fetcher asks
  // again only when Lease found the buffer empty) and goes back to the consumer if it waits
  // longer than a quarter of the ack wait.
  constexpr int kExpiryMs = 250;
  constexpr size_t kFetchBatch = 256;
  for (;;) {
    size_t want = 0;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && demand_ == 0) fetch_cv_.Wait(&mu_);
      if (stopping_) return;
      want = kFetchBatch;
    }
    natsMsgList list{};
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s =
        natsSubscription_Fetch(&list, dispatch_, static_cast<int>(want), kExpiryMs, &code);
    if (s == NATS_TIMEOUT) continue;  // Nothing yet; the demand stands.
    if (s != NATS_OK) {
      // No responders (a node rejoining), a closed or reconnecting connection: passing.
      natsMsgList_Destroy(&list);
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    const absl::Time at = absl::Now();
    {
      absl::MutexLock lock(&mu_);
      for (int i = 0; i < list.Count; ++i) {
        fetched_.emplace_back(at, list.Msgs[i]);
        list.Msgs[i] = nullptr;
      }
      demand_ -= std::min<size_t>(demand_, static_cast<size_t>(list.Count));
    }
    natsMsgList_Destroy(&list);
    absl::MutexLock lock(&ready_mu_);
    if (ready_) ready_();
  }
}

void JetStreamJobStore::RepublishLoop() {
  for (;;) {
    natsMsg* msg = nullptr;
    // Lookups that got no answer in time: their appends go on without the check.
    std::vector<std::shared_ptr<Lookup>> expired;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      for (auto it = lookups_.begin(); it != lookups_.end();) {
        if (it->second->deadline <= now) {
          it->second->failed = true;
          expired.push_back(it->second);
          lookups_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    for (const std::shared_ptr<Lookup>& lookup : expired) FinishLookup(lookup);
    CheckConnection();
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!republish_.empty() && republish_.front().first <= absl::Now());
      };
      const absl::Time next = republish_.empty() ? absl::Now() + absl::Milliseconds(250)
                                                 : republish_.front().first;
      mu_.AwaitWithDeadline(absl::Condition(&ready), next);
      if (stopping_) return;
      if (republish_.empty() || republish_.front().first > absl::Now()) continue;
      msg = republish_.front().second;
      republish_.pop_front();
    }
    natsMsg* owned = msg;
    jsPubOptions publish = AsyncPublishOptions(options_.layout.request_timeout);
    const natsStatus s = js_PublishMsgAsync(js_, &owned, &publish);
    if (s != NATS_OK) {
      natsMsg* leased = nullptr;
      {
        absl::MutexLock lock(&mu_);
        if (auto it = settling_.find(msg); it != settling_.end()) {
          leased = it->second.leased;
          settling_.erase(it);
        }
      }
      if (leased != nullptr) {  // A retry or dead letter not stored: the job comes back now.
        natsMsg_Nak(leased, nullptr);
        natsMsg_Destroy(leased);
      } else {
        Acked(msg, NatsError("publishing a job", s), false);
      }
      if (owned != nullptr) natsMsg_Destroy(owned);
    }
  }
}

JetStreamJobStore::~JetStreamJobStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  fetch_cv_.SignalAll();
  if (fetcher_.joinable()) fetcher_.join();
  {
    absl::MutexLock lock(&ack_mu_);
    acks_stopping_ = true;
  }
  if (acker_.joinable()) acker_.join();  // Sends the acks still waiting.
  if (lookup_sub_ != nullptr) {
    natsSubscription_Unsubscribe(lookup_sub_);
    natsSubscription_WaitForDrainCompletion(lookup_sub_, 1000);
  }
  {
    absl::flat_hash_map<uint64_t, std::shared_ptr<Lookup>> left;
    {
      absl::MutexLock lock(&mu_);
      left.swap(lookups_);
    }
    for (auto& [token, lookup] : left) {
      std::move(lookup->append->done)(
          absl::UnavailableError("JetStream store closed before the de-duplication lookup"));
    }
  }
  if (config_watcher_ != nullptr) kvWatcher_Stop(config_watcher_);
  if (watcher_.joinable()) watcher_.join();
  if (config_watcher_ != nullptr) kvWatcher_Destroy(config_watcher_);
  if (republisher_.joinable()) republisher_.join();
  {
    // Messages waiting to be sent again: their appends fail.
    std::deque<std::pair<absl::Time, natsMsg*>> left;
    {
      absl::MutexLock lock(&mu_);
      left.swap(republish_);
    }
    for (auto& [at, msg] : left) {
      Acked(msg, absl::UnavailableError("JetStream store closed before the publish ack"), false);
      natsMsg_Destroy(msg);
    }
  }
  if (js_ != nullptr) {
    jsPubOptions wait;
    jsPubOptions_Init(&wait);
    wait.MaxWait = 5000;
    js_PublishAsyncComplete(js_, &wait);  // Pending appends get their callbacks.
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, leased] : leased_) natsMsg_Destroy(leased.msg);  // Their leases expire.
    leased_.clear();
    for (auto& [due, msg] : held_) natsMsg_Destroy(msg);
    held_.clear();
    for (auto& [at, msg] : fetched_) natsMsg_Destroy(msg);
    fetched_.clear();
    for (auto& [msg, settling] : settling_) natsMsg_Destroy(settling.leased);  // Leases expire.
    settling_.clear();
  }
  if (config_kv_ != nullptr) kvStore_Destroy(config_kv_);
  if (lookup_sub_ != nullptr) natsSubscription_Destroy(lookup_sub_);
  if (dispatch_ != nullptr) natsSubscription_Destroy(dispatch_);
  if (js_ != nullptr) jsCtx_Destroy(js_);
  user_data_.reset();  // Before the connection goes.
  if (events_ != nullptr) events_->store_closed = true;
  if (nc_ != nullptr) {
    natsConnection_Close(nc_);  // The closed callback frees events_.
    natsConnection_Destroy(nc_);
  } else {
    delete events_;  // No connection: no callback.
  }
  if (nats_options_ != nullptr) natsOptions_Destroy(nats_options_);
  // Appends whose acks never came.
  absl::flat_hash_map<natsMsg*, Publishing> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(publishing_);
  }
  for (auto& [msg, p] : left) {
    if (p.append->done) {
      std::move(p.append->done)(absl::UnavailableError("JetStream store closed before the publish ack"));
    }
  }
}

void JetStreamJobStore::OnPublishAck(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae,
                                     void* self) {
  auto* store = static_cast<JetStreamJobStore*>(self);
  natsMsg* leased = nullptr;
  {
    const bool passing = pa == nullptr && pae != nullptr &&
                         (pae->Err == NATS_NO_RESPONDERS || pae->Err == NATS_TIMEOUT);
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&store->mu_);
    if (auto it = store->settling_.find(msg); it != store->settling_.end()) {
      // Passing (a node rejoining, an election): sent again after a pause, within a bound.
      if (passing && !store->stopping_) {
        if (it->second.first_failure == absl::InfiniteFuture()) it->second.first_failure = now;
        if (now - it->second.first_failure < kRepublishFor) {
          store->republish_.emplace_back(now + absl::Milliseconds(200), msg);
          return;  // The message stays ours until it is sent again.
        }
      }
      leased = it->second.leased;
      store->settling_.erase(it);
    }
  }
  if (leased != nullptr) {
    // A retry or dead letter stored: the leased message is done. Not stored: it comes back now
    // (the attempt is not counted) rather than when its lease ends.
    if (pa != nullptr) {
      natsMsg_Ack(leased, nullptr);
    } else {
      natsMsg_Nak(leased, nullptr);
      common::LogWarning("a retry or dead letter was not stored; the job is handed out again",
                         {{"subject", natsMsg_GetSubject(msg)},
                          {"error", pae != nullptr && pae->ErrText != nullptr ? pae->ErrText
                                                                               : "no answer"}});
    }
    natsMsg_Destroy(leased);
    natsMsg_Destroy(msg);
    return;
  }
  absl::Status status;
  if (pa == nullptr && pae != nullptr &&
      (pae->Err == NATS_NO_RESPONDERS || pae->Err == NATS_TIMEOUT)) {
    // Passing (a node rejoining, an election): sent again after a pause, within a bound.
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&store->mu_);
    auto it = store->publishing_.find(msg);
    if (it != store->publishing_.end() && !store->stopping_) {
      if (it->second.first_failure == absl::InfiniteFuture()) it->second.first_failure = now;
      if (now - it->second.first_failure < kRepublishFor) {
        store->republish_.emplace_back(now + absl::Milliseconds(200), msg);
        return;  // The message stays ours until it is sent again.
      }
    }
  }
  if (pa == nullptr) {
    status = absl::UnavailableError(absl::StrCat(
        "JetStream publish not acknowledged: ",
        pae != nullptr && pae->ErrText != nullptr ? pae->ErrText : "no answer"));
  }
  store->Acked(msg, status, pa != nullptr && pa->Duplicate);
  natsMsg_Destroy(msg);
}

void JetStreamJobStore::Acked(natsMsg* msg, const absl::Status& status, bool duplicate) {
  std::shared_ptr<PendingAppend> finished;
  {
    absl::MutexLock lock(&mu_);
    auto it = publishing_.find(msg);
    if (it == publishing_.end()) return;
    PendingAppend& p = *it->second.append;
    if (!status.ok() && p.status.ok()) p.status = status;
    // Not a job (an index entry or profile delta, JetStreamUserData::kNotAJob): no stored flag.
    if (duplicate && it->second.item < p.result.stored.size() && p.result.stored[it->second.item]) {
      p.result.stored[it->second.item] = false;  // A racing copy of the event was stored first.
      if (duplicates_ != nullptr) duplicates_->Increment();
    }
    if (--p.outstanding == 0) finished = it->second.append;
    publishing_.erase(it);
  }
  if (finished != nullptr) {
    if (finished->status.ok()) {
      PublishMarkers(finished->markers);
      std::move(finished->done)(std::move(finished->result));
    } else {
      std::move(finished->done)(finished->status);
    }
  }
}

void JetStreamJobStore::Append(std::vector<AppendItem> items, AppendCallback done) {
  if (absl::Status health = WriteHealth(); !health.ok()) {
    std::move(done)(health);
    return;
  }
  auto pending = std::make_shared<PendingAppend>();
  pending->result.stored.assign(items.size(), true);
  pending->done = std::move(done);
  // De-duplication over the dedup window: the markers of earlier events are looked up first
  // (batched direct gets on HR_DEDUP); only events not seen get their jobs published; their
  // markers are written once the jobs are acknowledged (never before: a marker for an event not
  // stored would refuse the client's retry of it). Two copies racing each other are caught by
  // the jobs' Nats-Msg-Id within the stream's duplicate window.
  auto lookup = std::make_shared<Lookup>();
  lookup->markers.resize(items.size());
  std::vector<std::string> subjects;
  absl::flat_hash_set<std::string> asked;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].dedup_key.empty()) continue;
    lookup->markers[i] = DedupMarkerSubject(items[i].dedup_key);
    if (asked.insert(lookup->markers[i]).second) subjects.push_back(lookup->markers[i]);
  }
  lookup->append = pending;
  lookup->items = std::move(items);
  if (subjects.empty()) {
    FinishLookup(lookup);
    return;
  }
  uint64_t token = 0;
  const int requests =
      static_cast<int>((subjects.size() + kMarkersPerLookup - 1) / kMarkersPerLookup);
  {
    absl::MutexLock lock(&mu_);
    token = next_lookup_++;
    lookup->outstanding = requests;
    lookup->deadline = absl::Now() + kLookupTimeout;
    lookups_[token] = lookup;
  }
  const std::string reply = absl::StrCat(lookup_inbox_, ".", token);
  const std::string api = absl::StrCat("$JS.API.DIRECT.GET.", kDedupStream);
  for (size_t first = 0; first < subjects.size(); first += kMarkersPerLookup) {
    const size_t n = std::min(kMarkersPerLookup, subjects.size() - first);
    std::string body = R"({"multi_last":[)";
    for (size_t i = 0; i < n; ++i) {
      absl::StrAppend(&body, i == 0 ? "\"" : ",\"", subjects[first + i], "\"");
    }
    absl::StrAppend(&body, R"(],"batch":)", n, "}");
    const natsStatus s = natsConnection_PublishRequest(nc_, api.c_str(), reply.c_str(),
                                                       body.data(), static_cast<int>(body.size()));
    if (s != NATS_OK) {
      std::shared_ptr<Lookup> done_lookup;
      {
        absl::MutexLock lock(&mu_);
        lookup->failed = true;
        if (--lookup->outstanding == 0 && lookups_.erase(token) > 0) done_lookup = lookup;
      }
      if (done_lookup != nullptr) FinishLookup(done_lookup);
    }
  }
}

void JetStreamJobStore::OnLookupReply(natsConnection*, natsSubscription*, natsMsg* msg,
                                      void* self) {
  auto* store = static_cast<JetStreamJobStore*>(self);
  const char* subject = natsMsg_GetSubject(msg);
  const char* dot = subject == nullptr ? nullptr : strrchr(subject, '.');
  uint64_t token = 0;
  if (dot == nullptr || !absl::SimpleAtoi(dot + 1, &token)) {
    natsMsg_Destroy(msg);
    return;
  }
  const char* status = nullptr;
  const bool has_status = natsMsgHeader_Get(msg, "Status", &status) == NATS_OK && status != nullptr;
  const char* found = nullptr;
  if (!has_status) natsMsgHeader_Get(msg, "Nats-Subject", &found);
  std::shared_ptr<Lookup> finished;
  {
    absl::MutexLock lock(&store->mu_);
    auto it = store->lookups_.find(token);
    if (it != store->lookups_.end()) {
      Lookup& lookup = *it->second;
      if (!has_status) {
        if (found != nullptr) lookup.found.insert(found);
      } else {
        // 204: the end of a batch; 404: none of the markers exists; anything else (no
        // responders while a node rejoins, a timeout) fails the lookup.
        if (strcmp(status, "204") != 0 && strcmp(status, "404") != 0) lookup.failed = true;
        if (--lookup.outstanding == 0) {
          finished = it->second;
          store->lookups_.erase(it);
        }
      }
    }
  }
  natsMsg_Destroy(msg);
  if (finished != nullptr) store->FinishLookup(finished);
}

void JetStreamJobStore::FinishLookup(const std::shared_ptr<Lookup>& lookup) {
  if (lookup->failed) {
    // Availability first: the event is stored, and the stream's duplicate window still catches
    // a retry within minutes. Counted and logged: a retry later than that may be delivered twice.
    // Rate-limited: with --nats_dedup_replicas=1 and that server down, every append fails its
    // lookup until the server is back.
    if (dedup_lookup_failures_ != nullptr) dedup_lookup_failures_->Increment();
    static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 5);
    common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                           "de-duplication lookup failed (the cluster is changing leaders or a "
                           "node is rejoining): events stored without their 24 h duplicate check",
                           {{"events", lookup->items.size()}});
  }
  std::vector<bool> publish(lookup->items.size(), true);
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < lookup->items.size(); ++i) {
    const std::string& marker = lookup->markers[i];
    if (marker.empty()) continue;
    if (lookup->found.contains(marker) || !seen.insert(marker).second) {
      publish[i] = false;
      lookup->append->result.stored[i] = false;
      if (duplicates_ != nullptr) duplicates_->Increment();
      continue;
    }
    lookup->append->markers.push_back(marker);
  }
  PublishJobs(lookup->append, lookup->items, lookup->markers, publish);
}

void JetStreamJobStore::PublishMarkers(const std::vector<std::string>& markers) {
  // Core publishes: no ack to wait for. A marker lost with a node is a duplicate check missed
  // (at-least-once), never an event lost.
  for (const std::string& marker : markers) {
    natsConnection_Publish(nc_, marker.c_str(), nullptr, 0);
  }
}

void JetStreamJobStore::PublishJobs(const std::shared_ptr<PendingAppend>& pending,
                                    std::vector<AppendItem>& items,
                                    const std::vector<std::string>& markers,
                                    const std::vector<bool>& publish) {
  std::vector<std::pair<natsMsg*, size_t>> msgs;
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  for (size_t i = 0; i < items.size(); ++i) {
    if (!publish[i]) continue;
    const std::string& marker = markers[i];
    for (Job& job : items[i].jobs) {
      job.set_due_unix_ms(now_ms);
      const std::string body = job.SerializeAsString();
      natsMsg* msg = nullptr;
      if (natsMsg_Create(&msg, ReadySubject(job).c_str(), nullptr, body.data(),
                         static_cast<int>(body.size())) != NATS_OK) {
        for (auto& [m, item] : msgs) natsMsg_Destroy(m);
        std::move(pending->done)(absl::ResourceExhaustedError("JetStream: cannot create a message"));
        return;
      }
      if (!marker.empty()) {
        natsMsgHeader_Set(msg, "Nats-Msg-Id", JobMsgId(marker, job.destination_id()).c_str());
      }
      msgs.emplace_back(msg, i);
    }
  }
  // The events' index entries and profile deltas, acknowledged with the jobs.
  user_data_->AddAppendMessages(items, publish, &msgs, &pending->done);
  if (msgs.empty()) {
    PublishMarkers(pending->markers);
    std::move(pending->done)(std::move(pending->result));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    pending->outstanding = msgs.size();
    for (auto& [msg, item] : msgs) publishing_[msg] = Publishing{pending, item};
  }
  jsPubOptions wait = AsyncPublishOptions(options_.layout.request_timeout);
  for (auto& [msg, item] : msgs) {
    natsMsg* owned = msg;
    const natsStatus s = js_PublishMsgAsync(js_, &owned, &wait);
    if (s != NATS_OK) {
      // Not sent: no ack will come for it.
      if (owned != nullptr) natsMsg_Destroy(owned);
      Acked(msg, NatsError("publishing a job", s), false);
    }
  }
}

absl::StatusOr<std::vector<LeasedJob>> JetStreamJobStore::Lease(size_t max, absl::Duration) {
  std::vector<LeasedJob> out;
  if (max == 0) return out;
  absl::MutexLock fetch_lock(&fetch_mu_);
  const absl::Time now = clock_.Now();
  const int64_t now_ms = absl::ToUnixMillis(now);
  // Held jobs whose time has come first, then what the fetcher brought.
  std::vector<natsMsg*> msgs;
  std::vector<natsMsg*> stale;
  {
    absl::MutexLock lock(&mu_);
    while (!held_.empty() && held_.begin()->first <= now_ms && msgs.size() < max) {
      msgs.push_back(held_.begin()->second);
      held_.erase(held_.begin());
    }
    // A lease is the ack wait counted from the fetch: a job waiting here too long is handed
    // back rather than given to a deliverer with little of its lease left.
    const absl::Time fresh_after = absl::Now() - options_.layout.ack_wait / 4;
    while (!fetched_.empty() && msgs.size() < max) {
      auto [at, msg] = fetched_.front();
      fetched_.pop_front();
      (at < fresh_after ? stale : msgs).push_back(msg);
    }
    demand_ = max - msgs.size();
  }
  for (natsMsg* msg : stale) {
    natsMsg_Nak(msg, nullptr);  // Back to the consumer now, rather than when its lease ends.
    natsMsg_Destroy(msg);
  }
  if (msgs.size() < max) fetch_cv_.Signal();
  const absl::Time deadline = now + options_.layout.ack_wait;
  for (natsMsg* msg : msgs) {
    jsMsgMetaData* meta = nullptr;
    LeasedJob leased;
    if (natsMsg_GetMetaData(&meta, msg) != NATS_OK ||
        !leased.job.ParseFromArray(natsMsg_GetData(msg), natsMsg_GetDataLength(msg))) {
      natsMsg_Term(msg, nullptr);  // Unreadable: never deliverable.
      natsMsg_Destroy(msg);
      if (meta != nullptr) jsMsgMetaData_Destroy(meta);
      continue;
    }
    leased.job.set_id(meta->Sequence.Stream);
    jsMsgMetaData_Destroy(meta);
    if (user_data_->PurgedByDeletion(leased.job, leased.job.id())) {  // Purged while fetched.
      natsMsg_Ack(msg, nullptr);
      natsMsg_Destroy(msg);
      continue;
    }
    absl::MutexLock lock(&mu_);
    const int64_t due = leased.job.due_unix_ms();
    if (auto it = scheduled_due_.find(due); it != scheduled_due_.end()) scheduled_due_.erase(it);
    if (due > now_ms) {  // Early on this collector's clock: held until it is due.
      held_.emplace(due, msg);
      continue;
    }
    leased.deadline = deadline;
    leased.lease = next_lease_++;
    auto [it, inserted] = leased_.try_emplace(leased.job.id(), Leased{msg, leased.lease});
    if (!inserted) {  // Redelivered after its lease expired: the new lease wins.
      natsMsg_Destroy(it->second.msg);
      it->second = Leased{msg, leased.lease};
    }
    out.push_back(std::move(leased));
  }
  return out;
}

absl::StatusOr<natsMsg*> JetStreamJobStore::TakeLeased(uint64_t job_id, uint64_t lease) {
  absl::MutexLock lock(&mu_);
  auto it = leased_.find(job_id);
  if (it == leased_.end()) return absl::NotFoundError(absl::StrFormat("job %d not leased here", job_id));
  if (it->second.lease != lease) {
    return absl::FailedPreconditionError(
        absl::StrFormat("job %d: lease %d is not the job's current lease", job_id, lease));
  }
  natsMsg* msg = it->second.msg;
  leased_.erase(it);
  return msg;
}

absl::Status JetStreamJobStore::Complete(uint64_t job_id, uint64_t lease) {
  absl::StatusOr<natsMsg*> msg = TakeLeased(job_id, lease);
  if (!msg.ok()) return msg.status();
  std::vector<natsMsg*> burst;
  {
    absl::MutexLock lock(&ack_mu_);
    acks_.push_back(*msg);
    if (acks_.size() >= kAckBurstSize) burst.swap(acks_);
  }
  SendAcks(burst);
  return absl::OkStatus();
}

void JetStreamJobStore::AckLoop() {
  for (;;) {
    bool stopping = false;
    {
      absl::MutexLock lock(&ack_mu_);
      ack_mu_.Await(absl::Condition(
          +[](JetStreamJobStore* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->ack_mu_) {
            return self->acks_stopping_ || !self->acks_.empty();
          },
          this));
      stopping = acks_stopping_;
      if (stopping && acks_.empty()) return;
    }
    if (!stopping) absl::SleepFor(kAckBurstDelay);  // Let the burst gather.
    std::vector<natsMsg*> burst;
    {
      absl::MutexLock lock(&ack_mu_);
      burst.swap(acks_);
    }
    SendAcks(burst);
  }
}

void JetStreamJobStore::SendAcks(std::vector<natsMsg*>& msgs) {
  natsStatus failed = NATS_OK;
  size_t failures = 0;
  for (natsMsg* msg : msgs) {
    // Without options the ack is a publish (no round trip): it fails only when the connection
    // is closed or its buffer is full during a reconnect.
    if (const natsStatus s = natsMsg_Ack(msg, nullptr); s != NATS_OK) {
      failed = s;
      ++failures;
    }
    natsMsg_Destroy(msg);
  }
  msgs.clear();
  if (failures > 0) {
    static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 5);
    common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                           "acknowledging delivered jobs failed: they are handed out again when "
                           "their lease ends (delivered twice)",
                           {{"jobs", failures}, {"error", natsStatus_GetText(failed)}});
  }
}

absl::Status JetStreamJobStore::PublishSync(
    const std::string& subject, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, body.data(), static_cast<int>(body.size()));
  for (const auto& [k, v] : headers) {
    if (s == NATS_OK) s = natsMsgHeader_Set(msg, k.c_str(), v.c_str());
  }
  // A node that has just (re)joined may not know the stream yet ("no responders"), and a leader
  // election makes publishes time out: both pass within seconds, so they are retried.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (;;) {
    jsPubAck* ack = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    if (s == NATS_OK) s = js_PublishMsg(&ack, js_, msg, nullptr, &code);
    if (ack != nullptr) jsPubAck_Destroy(ack);
    if ((s != NATS_NO_RESPONDERS && s != NATS_TIMEOUT) || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(200));
    s = NATS_OK;
  }
  if (msg != nullptr) natsMsg_Destroy(msg);
  return s == NATS_OK ? absl::OkStatus() : NatsError(absl::StrCat("publishing to ", subject), s);
}

absl::Status JetStreamJobStore::PublishSettle(
    const std::string& subject, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers, natsMsg* leased) {
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, body.data(),
                                static_cast<int>(body.size()));
  for (const auto& [k, v] : headers) {
    if (s == NATS_OK) s = natsMsgHeader_Set(msg, k.c_str(), v.c_str());
  }
  if (s == NATS_OK) {
    absl::MutexLock lock(&mu_);
    settling_[msg] = Settling{leased};
  }
  natsMsg* owned = msg;
  jsPubOptions publish = AsyncPublishOptions(options_.layout.request_timeout);
  if (s == NATS_OK) s = js_PublishMsgAsync(js_, &owned, &publish);
  if (s == NATS_OK) return absl::OkStatus();  // Settled by OnPublishAck.
  if (msg != nullptr) {
    absl::MutexLock lock(&mu_);
    settling_.erase(msg);
  }
  if (owned != nullptr) natsMsg_Destroy(owned);
  natsMsg_Nak(leased, nullptr);  // Not rescheduled: it comes back now, attempt not counted.
  natsMsg_Destroy(leased);
  return NatsError(absl::StrCat("publishing to ", subject), s);
}

absl::Status JetStreamJobStore::Retry(uint64_t job_id, uint64_t lease, absl::Time not_before,
                                      const hookrelay::v1::Attempt& attempt) {
  absl::StatusOr<natsMsg*> msg = TakeLeased(job_id, lease);
  if (!msg.ok()) return msg.status();
  Job job;
  job.ParseFromArray(natsMsg_GetData(*msg), natsMsg_GetDataLength(*msg));
  job.set_id(job_id);
  if (user_data_->PurgedByDeletion(job, job_id)) {  // Deleted while leased: dropped.
    natsMsg_Ack(*msg, nullptr);
    natsMsg_Destroy(*msg);
    return absl::NotFoundError(absl::StrFormat("job %d was purged by a deletion", job_id));
  }
  const absl::Time now = clock_.Now();
  RecordAttempt(attempt, absl::ToUnixMillis(now), job);
  job.set_due_unix_ms(absl::ToUnixMillis(not_before));
  // The server fires schedules on its own (real) time, on whole seconds: the delay on the
  // store's clock is carried over to real time, rounded up, never early.
  const absl::Duration delay = std::min(not_before - now, options_.max_schedule_delay);
  const int64_t fire_s = (absl::ToUnixMillis(absl::Now() + delay) + 999) / 1000;
  // Deferrals do not count attempts: both numbers keep every put-back's id distinct.
  const std::string id = absl::StrCat("retry-", job_id, "-", job.attempts(), "-", job.deferrals());
  absl::Status st;
  if (delay <= absl::ZeroDuration()) {
    // Due now (or held here until due, with a manual clock).
    st = PublishSettle(ReadySubject(job), job.SerializeAsString(), {{"Nats-Msg-Id", id}}, *msg);
  } else {
    st = PublishSettle(
        absl::StrCat("hr.jobs.sched.", JobSubjectTail(job), ".", job_id), job.SerializeAsString(),
        {{"Nats-Msg-Id", id},
         {"Nats-Schedule",
          absl::StrCat("@at ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(fire_s),
                                                absl::UTCTimeZone()))},
         {"Nats-Schedule-Target", ReadySubject(job)}},
        *msg);
  }
  if (st.ok() && not_before > now) {
    absl::MutexLock lock(&mu_);
    // Bounded: entries of jobs leased by other collectors are forgotten after a while.
    if (scheduled_due_.size() >= 100'000) scheduled_due_.erase(scheduled_due_.begin());
    scheduled_due_.insert(job.due_unix_ms());
  }
  return st;
}

absl::Status JetStreamJobStore::Bury(uint64_t job_id, uint64_t lease, std::string_view reason,
                                     const hookrelay::v1::Attempt& attempt) {
  absl::StatusOr<natsMsg*> msg = TakeLeased(job_id, lease);
  if (!msg.ok()) return msg.status();
  Job job;
  job.ParseFromArray(natsMsg_GetData(*msg), natsMsg_GetDataLength(*msg));
  job.set_id(job_id);
  if (user_data_->PurgedByDeletion(job, job_id)) {  // Deleted while leased: dropped.
    natsMsg_Ack(*msg, nullptr);
    natsMsg_Destroy(*msg);
    return absl::NotFoundError(absl::StrFormat("job %d was purged by a deletion", job_id));
  }
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  RecordAttempt(attempt, now_ms, job);
  job.set_dead_reason(std::string(reason));
  job.set_dead_at_unix_ms(now_ms);
  return PublishSettle(
      absl::StrCat("hr.dead.", JetStreamToken(job.destination_id()), ".", JobSubjectTail(job)),
      job.SerializeAsString(), {{"Nats-Msg-Id", absl::StrCat("dead-", job_id)}}, *msg);
}

absl::Status JetStreamJobStore::WriteHealth() const {
  // A reconnect to another server within the grace period is invisible: publishes wait in the
  // client's buffer and are acknowledged once it is back.
  const int64_t since = events_->disconnected_since_ms;
  if (since == 0 || absl::Now() - absl::FromUnixMillis(since) < kWriteGrace) {
    return absl::OkStatus();
  }
  return absl::UnavailableError("cannot store events now: the JetStream cluster is unreachable; "
                                "retry later");
}

JobCounts JetStreamJobStore::Counts() {
  JobCounts counts;
  jsErrCode code = static_cast<jsErrCode>(0);
  jsConsumerInfo* ci = nullptr;
  if (js_GetConsumerInfo(&ci, js_, kJobsStream, kDispatchConsumer, nullptr, &code) == NATS_OK) {
    counts.ready = static_cast<int64_t>(ci->NumPending);
    counts.leased = ci->NumAckPending;
    jsConsumerInfo_Destroy(ci);
  }
  jsStreamInfo* si = nullptr;
  if (js_GetStreamInfo(&si, js_, kJobsStream, nullptr, &code) == NATS_OK) {
    counts.scheduled =
        std::max<int64_t>(0, static_cast<int64_t>(si->State.Msgs) - counts.ready - counts.leased);
    jsStreamInfo_Destroy(si);
  }
  if (js_GetStreamInfo(&si, js_, kDeadStream, nullptr, &code) == NATS_OK) {
    counts.dead = static_cast<int64_t>(si->State.Msgs);
    jsStreamInfo_Destroy(si);
  }
  {
    // Held jobs are ack-pending on the server but wait for their time here.
    absl::MutexLock lock(&mu_);
    const int64_t held = std::min<int64_t>(counts.leased, static_cast<int64_t>(held_.size()));
    counts.leased -= held;
    counts.scheduled += held;
    // Fetched ahead but not handed to a deliverer: ready, as far as anyone can tell.
    const int64_t fetched =
        std::min<int64_t>(counts.leased, static_cast<int64_t>(fetched_.size()));
    counts.leased -= fetched;
    counts.ready += fetched;
  }
  return counts;
}

absl::Time JetStreamJobStore::NextDue() {
  absl::MutexLock lock(&mu_);
  int64_t next = std::numeric_limits<int64_t>::max();
  if (!scheduled_due_.empty()) next = *scheduled_due_.begin();
  if (!held_.empty()) next = std::min(next, held_.begin()->first);
  return next == std::numeric_limits<int64_t>::max() ? absl::InfiniteFuture()
                                                     : absl::FromUnixMillis(next);
}

absl::StatusOr<std::optional<JetStreamJobStore::DeadLetter>> JetStreamJobStore::NextDead(
    uint64_t seq, const DeadFilter& filter) {
  const std::string subject = filter.destination_id.empty()
                                  ? std::string(kDeadSubjects)
                                  : absl::StrCat("hr.dead.", JetStreamToken(filter.destination_id), ".>");
  const std::string request =
      absl::StrCat(R"({"seq":)", seq, R"(,"next_by_subj":")", subject, R"("})");
  absl::StatusOr<JetStreamApiReply> reply;
  for (int attempt = 0; attempt < 50; ++attempt) {  // Passing failures: up to 10 s.
    reply = JetStreamApi(nc_, absl::StrCat("$JS.API.STREAM.MSG.GET.", kDeadStream), request,
                         options_.layout.request_timeout);
    if (reply.ok() || !absl::IsUnavailable(reply.status())) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  if (!reply.ok()) return reply.status();
  constexpr int64_t kNoMessageFound = 10037;
  if (reply->error_code == kNoMessageFound) return std::optional<DeadLetter>();
  if (reply->error_code != 0) {
    return absl::UnavailableError(absl::StrCat("JetStream: reading dead letters: ", reply->error));
  }
  simdjson::dom::parser parser;
  simdjson::dom::object message;
  uint64_t found = 0;
  std::string_view data64;
  if (parser.parse(reply->body)["message"].get_object().get(message) != simdjson::SUCCESS ||
      message["seq"].get_uint64().get(found) != simdjson::SUCCESS) {
    return absl::DataLossError("JetStream: an unreadable answer reading dead letters");
  }
  if (message["data"].get_string().get(data64) != simdjson::SUCCESS) data64 = "";
  std::string data;
  DeadLetter dead;
  dead.seq = found;
  if (!absl::Base64Unescape(absl::string_view(data64.data(), data64.size()), &data) ||
      !dead.job.ParseFromString(data)) {
    return absl::DataLossError(absl::StrCat("JetStream: dead letter ", found, " is unreadable"));
  }
  dead.job.set_id(found);
  return std::optional<DeadLetter>(std::move(dead));
}

namespace {
bool DeadInRange(const Job& job, const DeadFilter& filter) {
  const absl::Time at = absl::FromUnixMillis(job.dead_at_unix_ms());
  return at >= filter.from && at <= filter.to;
}
}  // namespace

absl::StatusOr<std::vector<Job>> JetStreamJobStore::ListDead(const DeadFilter& filter) {
  std::vector<Job> out;
  uint64_t seq = filter.after_id + 1;
  while (out.size() < filter.limit) {
    absl::StatusOr<std::optional<DeadLetter>> next = NextDead(seq, filter);
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    seq = (*next)->seq + 1;
    if (DeadInRange((*next)->job, filter)) out.push_back(std::move((*next)->job));
  }
  return out;
}

absl::StatusOr<size_t> JetStreamJobStore::Replay(const DeadFilter& filter) {
  size_t replayed = 0;
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  for (uint64_t seq = 1;;) {
    absl::StatusOr<std::optional<DeadLetter>> next = NextDead(seq, filter);
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    DeadLetter& dead = **next;
    seq = dead.seq + 1;
    if (!DeadInRange(dead.job, filter)) continue;
    // A fresh retry window; attempts and history stay for the record.
    Job job = std::move(dead.job);
    job.set_id(0);
    job.set_first_attempt_unix_ms(0);
    job.clear_dead_reason();
    job.set_dead_at_unix_ms(0);
    job.set_due_unix_ms(now_ms);
    RETURN_IF_ERROR(PublishSync(ReadySubject(job), job.SerializeAsString(),
                                {{"Nats-Msg-Id", absl::StrCat("replay-", dead.seq)}}));
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s =
        RetryPassing([&] { return js_DeleteMsg(js_, kDeadStream, dead.seq, nullptr, &code); });
    if (s != NATS_OK && s != NATS_NOT_FOUND) return NatsError("removing a replayed dead letter", s);
    ++replayed;
  }
  return replayed;
}
absl::StatusOr<std::vector<std::string>> JetStreamJobStore::SourcesSeen(std::string_view user_id) {
  return user_data_->SourcesSeen(user_id);
}
absl::StatusOr<DeletionOutcome> JetStreamJobStore::ApplyDeletion(DeletionPlan plan) {
  return user_data_->ApplyDeletion(std::move(plan));
}
absl::StatusOr<std::optional<hookrelay::v1::Deletion>> JetStreamJobStore::GetDeletion(
    std::string_view id) {
  return user_data_->GetDeletion(id);
}
absl::StatusOr<std::vector<hookrelay::v1::Deletion>> JetStreamJobStore::ListDeletions(
    std::string_view before_id, size_t limit) {
  return user_data_->ListDeletions(before_id, limit);
}
absl::StatusOr<AudienceSyncInput> JetStreamJobStore::BeginAudienceSync(
    std::string_view audience_id, const std::vector<std::string>& sources, absl::Time now) {
  return user_data_->BeginAudienceSync(audience_id, sources, now);
}
absl::StatusOr<std::vector<AudienceUser>> JetStreamJobStore::ReadAudienceUsers(
    std::string_view audience_id, const std::vector<std::string>& users,
    const std::vector<std::string>& sources) {
  return user_data_->ReadAudienceUsers(audience_id, users, sources);
}
absl::StatusOr<hookrelay::v1::AudienceState> JetStreamJobStore::CommitAudienceSync(
    AudienceSyncPlan plan) {
  return user_data_->CommitAudienceSync(std::move(plan));
}
absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> JetStreamJobStore::GetAudienceState(
    std::string_view audience_id) {
  return user_data_->GetAudienceState(audience_id);
}
absl::Status JetStreamJobStore::DropAudience(std::string_view audience_id) {
  return user_data_->DropAudience(audience_id);
}
absl::StatusOr<std::optional<std::string>> JetStreamJobStore::LoadConfig() {
  kvEntry* entry = nullptr;
  const natsStatus s = RetryPassing([&] { return kvStore_Get(&entry, config_kv_, kConfigKey); });
  if (s == NATS_NOT_FOUND) return std::optional<std::string>();
  if (s != NATS_OK) return NatsError("reading the stored configuration", s);
  std::string value(static_cast<const char*>(kvEntry_Value(entry)),
                    static_cast<size_t>(kvEntry_ValueLen(entry)));
  {
    absl::MutexLock lock(&mu_);
    config_revision_ = std::max(config_revision_, kvEntry_Revision(entry));
  }
  kvEntry_Destroy(entry);
  return std::optional<std::string>(std::move(value));
}

absl::Status JetStreamJobStore::SaveConfig(std::string_view bytes) {
  uint64_t last = 0;
  {
    absl::MutexLock lock(&mu_);
    last = config_revision_;
  }
  // Compare-and-set on the revision this collector knows: a save made through another
  // collector meanwhile is never overwritten unseen.
  uint64_t revision = 0;
  const natsStatus s = RetryPassing([&] {
    return last == 0 ? kvStore_Create(&revision, config_kv_, kConfigKey, bytes.data(),
                                      static_cast<int>(bytes.size()))
                     : kvStore_Update(&revision, config_kv_, kConfigKey, bytes.data(),
                                      static_cast<int>(bytes.size()), last);
  });
  if (s == NATS_OK) {
    absl::MutexLock lock(&mu_);
    config_revision_ = std::max(config_revision_, revision);
    return absl::OkStatus();
  }
  // Refused: someone else's save (wrong last revision), or ours landed and only its answer was
  // lost. The read may come from a replica a little behind, so any refusal that is not ours
  // counts as a conflict: the caller reads the configuration again and re-applies its change.
  const std::string error = nats_GetLastError(nullptr) != nullptr ? nats_GetLastError(nullptr) : "";
  if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_CLOSED) {
    return NatsError("writing the configuration", s);
  }
  kvEntry* entry = nullptr;
  if (RetryPassing([&] { return kvStore_Get(&entry, config_kv_, kConfigKey); }) == NATS_OK) {
    const bool ours = static_cast<size_t>(kvEntry_ValueLen(entry)) == bytes.size() &&
                      std::string_view(static_cast<const char*>(kvEntry_Value(entry)),
                                       bytes.size()) == bytes;
    const uint64_t now_revision = kvEntry_Revision(entry);
    kvEntry_Destroy(entry);
    if (ours) {
      absl::MutexLock lock(&mu_);
      config_revision_ = std::max(config_revision_, now_revision);
      return absl::OkStatus();
    }
  }
  return absl::AbortedError(absl::StrCat(
      "the configuration was changed through another collector meanwhile (", error, ")"));
}

void JetStreamJobStore::WatchConfig(ConfigChanged changed) {
  const bool start = changed != nullptr;
  {
    absl::MutexLock lock(&callback_mu_);  // Waits for a call in progress.
    config_changed_ = std::move(changed);
  }
  if (!start || config_watcher_ != nullptr) return;
  kvWatchOptions watch_options;
  kvWatchOptions_Init(&watch_options);
  watch_options.IncludeHistory = false;
  const natsStatus s = RetryPassing(
      [&] { return kvStore_Watch(&config_watcher_, config_kv_, kConfigKey, &watch_options); });
  if (s != NATS_OK) {
    config_watcher_ = nullptr;
    common::LogError("cannot watch the configuration bucket: changes made through other "
                     "collectors apply here only after a restart",
                     {{"bucket", kConfigBucket}, {"error", natsStatus_GetText(s)}});
    return;
  }
  watcher_ = std::thread([this] { WatchLoop(config_watcher_); });
}

void JetStreamJobStore::WatchLoop(kvWatcher* watcher) {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    kvEntry* entry = nullptr;
    const natsStatus s = kvWatcher_Next(&entry, watcher, 500);
    if (s == NATS_TIMEOUT) continue;
    if (s != NATS_OK) {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      absl::SleepFor(absl::Milliseconds(200));
      continue;
    }
    if (entry == nullptr) continue;  // The end of the initial values.
    if (kvEntry_Operation(entry) == kvOp_Put) {
      const uint64_t revision = kvEntry_Revision(entry);
      bool newer = false;
      {
        absl::MutexLock lock(&mu_);
        newer = revision > config_revision_;
      }
      if (newer) {
        std::string value(static_cast<const char*>(kvEntry_Value(entry)),
                          static_cast<size_t>(kvEntry_ValueLen(entry)));
        bool adopted = false;
        {
          absl::MutexLock lock(&callback_mu_);
          if (config_changed_ != nullptr) adopted = config_changed_(std::move(value));
        }
        // Only a configuration the collector holds may be the base of its next save: bumped
        // after the callback, so a save racing it is refused (ABORTED) and re-applied.
        if (adopted) {
          absl::MutexLock lock(&mu_);
          config_revision_ = std::max(config_revision_, revision);
        }
      }
    }
    kvEntry_Destroy(entry);
  }
}

void JetStreamJobStore::OnDisconnected(natsConnection*, void* closure) {
  auto* events = static_cast<ConnectionEvents*>(closure);
  if (events->store_closed) return;
  int64_t connected = 0;
  events->disconnected_since_ms.compare_exchange_strong(connected,
                                                        absl::ToUnixMillis(absl::Now()));
  common::LogInfo("lost the connection to a JetStream server; reconnecting (publishes are "
                  "buffered meanwhile)",
                  {{"nats_url", events->urls}});
}

void JetStreamJobStore::OnReconnected(natsConnection* nc, void* closure) {
  auto* events = static_cast<ConnectionEvents*>(closure);
  if (events->store_closed) return;
  events->disconnected_since_ms = 0;
  char url[256] = "";
  natsConnection_GetConnectedUrl(nc, url, sizeof(url));
  common::LogInfo("reconnected to the JetStream cluster", {{"server", url}});
  if (events->reported_down.exchange(false)) {
    if (events->writable != nullptr) events->writable->Set(1);
    if (events->on_write_health) events->on_write_health(true);
  }
}

void JetStreamJobStore::CheckConnection() {
  ConnectionEvents* events = events_;
  const int64_t since = events->disconnected_since_ms;
  if (since == 0 || absl::Now() - absl::FromUnixMillis(since) < kWriteGrace) return;
  if (events->reported_down.exchange(true)) return;
  common::LogWarning("the JetStream cluster is unreachable: events are refused (503) until it is "
                     "back",
                     {{"nats_url", events->urls},
                      {"disconnected_for", absl::FormatDuration(kWriteGrace)}});
  if (events->writable != nullptr) events->writable->Set(0);
  if (events->on_write_health) events->on_write_health(false);
}

void JetStreamJobStore::OnClosed(natsConnection*, void* closure) {
  delete static_cast<ConnectionEvents*>(closure);  // The connection's last callback.
}

}  // namespace hookrelay::collector
