// The JetStream engine's job queue (collector/store/jetstream/jetstream_job_store.h): connecting
// to the cluster and closing, the connection's health, counts, and the calls handed to the user
// data. Appends: jetstream_job_append.cc; leases: jetstream_job_lease.cc; dead letters:
// jetstream_dead_letters.cc; the configuration: jetstream_config_kv.cc.
#include "collector/store/jetstream/jetstream_job_store.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/jetstream_user_data.h"
#include "collector/store/jetstream/nats_connect.h"
#include "collector/store/jetstream/nats_request.h"
#include "common/log.h"
#include "common/strings.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {
namespace {

// A connection lost for longer than this makes the store unwritable (503, not ready); shorter
// (a reconnect to another server of the cluster) is absorbed by the client's buffer.
constexpr absl::Duration kWriteGrace = absl::Seconds(2);

}  // namespace

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
  if (s != NATS_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nats_url ", RedactNatsUrls(o.urls), ": ", natsStatus_GetText(s)));
  }
  if (absl::Status st = ApplyNatsConnectOptions(o.connect, store->nats_options_); !st.ok()) {
    return st;
  }
  store->events_ = new ConnectionEvents;
  store->events_->urls = RedactNatsUrls(o.urls);
  store->events_->on_write_health = o.on_write_health;
  store->events_->on_gave_up = o.on_gave_up;
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
      store->commit_duration_ =
          &prometheus::BuildHistogram()
               .Name("hookrelay_store_commit_duration_seconds")
               .Help("Time to store one append of the job store: on JetStream, from its "
                     "publishes to the last of their acknowledgements")
               .Register(*o.registry)
               .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.002, 0.005, 0.01,
                                                                0.02, 0.05, 0.1, 0.2, 0.5, 1});
      store->commit_batch_items_ =
          &prometheus::BuildHistogram()
               .Name("hookrelay_store_commit_batch_items")
               .Help("Messages (jobs, index entries, profile deltas) of one append of the job "
                     "store")
               .Register(*o.registry)
               .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 5, 10, 20, 50, 100, 200,
                                                                500, 1000, 2000, 5000, 10000,
                                                                20000});
      auto& errors = prometheus::BuildCounter()
                         .Name("hookrelay_store_errors_total")
                         .Help("Failed writes of the job store, by kind (JetStream: no_space, "
                               "io_error, unavailable, other)")
                         .Register(*o.registry);
      for (size_t k = 0; k < store->store_errors_.size(); ++k) {
        store->store_errors_[k] = &errors.Add({{"kind", kStoreErrorKinds[k]}});  // 0 from start
      }
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
  if (s == NATS_OK) {
    s = natsOptions_SetErrorHandler(store->nats_options_, &JetStreamJobStore::OnAsyncError,
                                    store->events_);
  }
  if (s != NATS_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nats_url ", RedactNatsUrls(o.urls), ": ", natsStatus_GetText(s)));
  }
  s = ConnectNats(&store->nc_, store->nats_options_, o.connect);
  // Refused credentials, a certificate that does not verify: said in the flags' terms.
  if (s != NATS_OK) return NatsConnectError(o.urls, o.connect, s);

  const absl::Time deadline = absl::Now() + o.connect_timeout;
  absl::Status layout = EnsureJobAndUserLayout(store->nc_, o.layout);
  while (absl::IsUnavailable(layout) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(300));
    layout = EnsureJobAndUserLayout(store->nc_, o.layout);
  }
  if (!layout.ok()) return layout;
  // The markers last. With one copy (the default) their server may be down — a NATS pod
  // restarting: the collector starts anyway once the connect timeout is spent, each lookup
  // failing fast and counted until the server is back (appends go on, duplicates possible).
  absl::Status dedup = EnsureDedupStream(store->nc_, o.layout);
  while (absl::IsUnavailable(dedup) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(300));
    dedup = EnsureDedupStream(store->nc_, o.layout);
  }
  if (absl::IsUnavailable(dedup) && o.layout.DedupReplicas() == 1) {
    common::LogWarning("starting without the 24 h de-duplication check until HR_DEDUP answers",
                       {{"stream", kDedupStream}, {"error", std::string(dedup.message())}});
  } else if (!dedup.ok()) {
    return dedup;
  }

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
  store->ready_signal_ = std::make_unique<ReadySignal>(
      store->clock_, [raw = store.get()] { return raw->NextDue(); });
  store->republisher_ = std::thread([raw = store.get()] { raw->RepublishLoop(); });
  store->acker_ = std::thread([raw = store.get()] { raw->AckLoop(); });
  absl::StatusOr<std::unique_ptr<JetStreamUserData>> user_data =
      JetStreamUserData::Start(store->nc_, o.layout, clock, o.stop_deletion_after);
  if (!user_data.ok()) return user_data.status();
  store->user_data_ = *std::move(user_data);
  store->user_data_->SetCaughtUpHook([raw = store.get()] { raw->ready_signal_->Raise(); });
  {
    absl::MutexLock lock(&store->events_->hook_mu);
    store->events_->on_connection = [data = store->user_data_.get()](bool connected) {
      data->NoteConnection(connected);
    };
  }
  if (o.registry != nullptr) {
    absl::StatusOr<std::unique_ptr<JetStreamClusterHealth>> health =
        JetStreamClusterHealth::Start(store->js_, *o.registry);
    if (!health.ok()) return health.status();
    store->health_ = *std::move(health);
  }

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

  // The destinations' consumers (and the dispatch consumer of the layout before them).
  JetStreamPulls::Options pull_options;
  pull_options.nc = store->nc_;
  pull_options.layout = o.layout;
  pull_options.on_jobs = [raw = store.get()] { raw->ready_signal_->Raise(); };
  absl::StatusOr<std::unique_ptr<JetStreamPulls>> pulls = JetStreamPulls::Start(pull_options);
  if (!pulls.ok()) return pulls.status();
  store->pulls_ = *std::move(pulls);
  // Delete notifications and audience jobs are published by the user data: their destinations'
  // consumers too.
  store->user_data_->SetReadyJobsHook(
      [raw = store.get()](std::string_view destination) { raw->pulls_->NoteDestination(destination); });
  return store;
}

JetStreamJobStore::~JetStreamJobStore() {
  if (ready_signal_) ready_signal_->Stop();  // No ready call and no timer from here on.
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  {
    absl::MutexLock lock(&ack_mu_);
    acks_stopping_ = true;
  }
  if (acker_.joinable()) acker_.join();  // Sends the acks still waiting.
  pulls_.reset();  // Jobs fetched and not leased go back to their consumers.
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
    for (auto& [msg, settling] : settling_) natsMsg_Destroy(settling.leased);  // Leases expire.
    settling_.clear();
  }
  if (config_kv_ != nullptr) kvStore_Destroy(config_kv_);
  if (lookup_sub_ != nullptr) natsSubscription_Destroy(lookup_sub_);
  health_.reset();  // Before the JetStream context goes.
  if (js_ != nullptr) jsCtx_Destroy(js_);
  if (events_ != nullptr) {
    absl::MutexLock lock(&events_->hook_mu);
    events_->on_connection = nullptr;
  }
  user_data_.reset();  // Before the connection goes.
  if (events_ != nullptr) events_->store_closed = true;
  if (nc_ != nullptr) {
    natsConnection_Close(nc_);  // The closed callback releases the connection's reference.
    natsConnection_Destroy(nc_);
    ConnectionEvents::Release(events_);
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

absl::Status JetStreamJobStore::WriteHealth() const {
  // A reconnect to another server within the grace period is invisible: publishes wait in the
  // client's buffer and are acknowledged once it is back.
  const int64_t since = events_->disconnected_since_ms;
  if (since == 0 || absl::Now() - absl::FromUnixMillis(since) < kWriteGrace) {
    return absl::OkStatus();
  }
  // The reason (refused credentials, a certificate that no longer verifies) is the client's
  // error text: never a secret.
  const std::string reason = events_->Reason();
  return absl::UnavailableError(absl::StrCat(
      "cannot store events now: the JetStream cluster is unreachable",
      reason.empty() ? "" : " (", reason, reason.empty() ? "" : ")",
      events_->connection_closed ? "; the NATS client gave up reconnecting: restart the collector"
                                 : "; retry later"));
}

JobCounts JetStreamJobStore::Counts() {
  JobCounts counts;
  counts.cluster.shared = true;
  jsErrCode code = static_cast<jsErrCode>(0);
  // Each consumer's pending and unacknowledged jobs: one per destination, and the dispatch
  // consumer of the layout before. `next` per consumer with pending jobs: its filter and the
  // stream sequence it hands out next, for the oldest ready job.
  std::vector<std::pair<std::string, uint64_t>> next;
  for (const JetStreamPulls::Consumer& consumer : pulls_->Consumers()) {
    jsConsumerInfo* ci = nullptr;
    if (js_GetConsumerInfo(&ci, js_, kJobsStream, consumer.name.c_str(), nullptr, &code) !=
        NATS_OK) {
      continue;  // Gone meanwhile, or the cluster does not answer: counted at the next scrape.
    }
    counts.ready += static_cast<int64_t>(ci->NumPending);
    counts.leased += ci->NumAckPending;
    if (ci->NumPending > 0) next.emplace_back(consumer.filter, ci->Delivered.Stream + 1);
    jsConsumerInfo_Destroy(ci);
  }
  // Two readings, not one: a schedule firing or a job settled in between makes them disagree
  // by that job for one reading (the total stays right; `scheduled` never goes below 0).
  // The stream's messages that are not jobs (under "hr.jobs.sched.~."): the markers of a
  // deletion's notifications and the audiences' fences, listed with the stream's state.
  jsStreamInfo* si = nullptr;
  jsOptions info_options;
  jsOptions_Init(&info_options);
  info_options.Stream.Info.SubjectsFilter = "hr.jobs.sched.~.>";
  if (js_GetStreamInfo(&si, js_, kJobsStream, &info_options, &code) == NATS_OK) {
    int64_t not_jobs = 0;
    if (si->State.Subjects != nullptr) {
      for (int i = 0; i < si->State.Subjects->Count; ++i) {
        not_jobs += static_cast<int64_t>(si->State.Subjects->List[i].Msgs);
      }
    }
    counts.scheduled = std::max<int64_t>(
        0, static_cast<int64_t>(si->State.Msgs) - not_jobs - counts.ready - counts.leased);
    jsStreamInfo_Destroy(si);
  }
  if (js_GetStreamInfo(&si, js_, kDeadStream, nullptr, &code) == NATS_OK) {
    counts.dead = static_cast<int64_t>(si->State.Msgs);
    jsStreamInfo_Destroy(si);
  }
  // The cluster's part; what the consumers handed out (ack pending) is in some collector's
  // hands, and each collector counts its own below.
  counts.cluster.ready = counts.ready;
  counts.cluster.scheduled = counts.scheduled;
  counts.cluster.dead = counts.dead;
  // The oldest ready job: the earliest among the consumers' next pending ones, or one this
  // collector fetched ahead or holds past its time, whichever became due first (due_unix_ms:
  // when it was stored, or when its retry fell due).
  for (const auto& [filter, from_seq] : next) {
    if (std::optional<int64_t> due = NextPendingDue(filter, from_seq); due.has_value()) {
      counts.oldest_ready_due = std::min(counts.oldest_ready_due, absl::FromUnixMillis(*due));
    }
  }
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  const JetStreamPulls::Buffered buffered = pulls_->BufferedJobs(now_ms);
  {
    absl::MutexLock lock(&mu_);
    // This collector's own: fetched ahead but not handed to a deliverer (ready, as far as anyone
    // can tell), held until their time on its clock (scheduled), leased to its deliverers or
    // being settled (leased_here). All are ack-pending on the servers; the rest of that count
    // (other collectors' jobs, settlements on their way) stays `leased`.
    const int64_t held = std::min<int64_t>(counts.leased, static_cast<int64_t>(held_.size()));
    counts.leased -= held;
    counts.scheduled += held;
    const int64_t fetched = std::min<int64_t>(counts.leased, buffered.count);
    counts.leased -= fetched;
    counts.ready += fetched;
    counts.cluster.leased_here = static_cast<int64_t>(leased_.size() + settling_.size());
    if (buffered.oldest_due_ms.has_value()) {
      counts.oldest_ready_due =
          std::min(counts.oldest_ready_due, absl::FromUnixMillis(*buffered.oldest_due_ms));
    }
    if (!held_.empty() && held_.begin()->first <= now_ms) {
      counts.oldest_ready_due =
          std::min(counts.oldest_ready_due, absl::FromUnixMillis(held_.begin()->first));
    }
  }
  return counts;
}

std::optional<int64_t> JetStreamJobStore::NextPendingDue(const std::string& filter,
                                                         uint64_t from_seq) {
  // Not retried: a scrape is no place to wait for the cluster.
  absl::StatusOr<std::optional<JetStreamMessage>> next = JetStreamNextMessage(
      nc_, kJobsStream, from_seq, filter, options_.layout.request_timeout,
      /*retry_for=*/absl::ZeroDuration());
  if (!next.ok() || !next->has_value()) return std::nullopt;  // Settled meanwhile, or down.
  return SerializedJobDue((*next)->data);
}

const char* JetStreamJobStore::StoreErrorKind(natsStatus status, jsErrCode code,
                                              std::string_view text) {
  if (status == NATS_NO_RESPONDERS || status == NATS_TIMEOUT || status == NATS_CONNECTION_CLOSED ||
      status == NATS_CONNECTION_DISCONNECTED || status == NATS_NOT_YET_CONNECTED) {
    return "unavailable";
  }
  // The stream's servers out of storage, or the stream at its max_bytes / max_msgs limit.
  if (code == JSInsufficientResourcesErr || code == JSStorageResourcesExceededErr ||
      absl::StrContains(common::ToAbsl(text), "maximum bytes exceeded") ||
      absl::StrContains(common::ToAbsl(text), "maximum messages exceeded") ||
      absl::StrContains(common::ToAbsl(text), "insufficient")) {
    return "no_space";
  }
  if (code == JSStreamStoreFailedErr) return "io_error";
  return "other";
}

void JetStreamJobStore::CountStoreError(const char* kind) {
  for (size_t k = 0; k < store_errors_.size(); ++k) {
    if (store_errors_[k] != nullptr && std::string_view(kStoreErrorKinds[k]) == kind) {
      store_errors_[k]->Increment();
    }
  }
}

absl::Time JetStreamJobStore::NextDue() {
  absl::MutexLock lock(&mu_);
  int64_t next = std::numeric_limits<int64_t>::max();
  if (!scheduled_due_.empty()) next = *scheduled_due_.begin();
  if (!held_.empty()) next = std::min(next, held_.begin()->first);
  return next == std::numeric_limits<int64_t>::max() ? absl::InfiniteFuture()
                                                     : absl::FromUnixMillis(next);
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
void JetStreamJobStore::OnDisconnected(natsConnection* nc, void* closure) {
  auto* events = static_cast<ConnectionEvents*>(closure);
  if (events->store_closed) return;
  int64_t connected = 0;
  events->disconnected_since_ms.compare_exchange_strong(connected,
                                                        absl::ToUnixMillis(absl::Now()));
  // The client clears its error as it starts reconnecting: keep what the error handler saw.
  if (std::string reason = NatsLastError(nc); !reason.empty()) events->SetReason(std::move(reason));
  events->NoteConnection(false);  // Deletion records may be missed from here on.
  common::LogInfo("lost the connection to a JetStream server; reconnecting (publishes are "
                  "buffered meanwhile)",
                  {{"nats_url", events->urls}, {"error", events->Reason()}});
}

void JetStreamJobStore::OnReconnected(natsConnection* nc, void* closure) {
  auto* events = static_cast<ConnectionEvents*>(closure);
  if (events->store_closed) return;
  events->disconnected_since_ms = 0;
  events->SetReason("");
  events->NoteConnection(true);  // Read back the deletion records missed.
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
  if (since == 0) return;
  // While reconnecting, the client keeps the error of its last refused attempt (credentials
  // refused, a certificate that does not verify); a server that cannot be reached at all
  // leaves none, and the previous reason stays.
  if (std::string reason = NatsLastError(nc_); !reason.empty()) events->SetReason(std::move(reason));
  if (absl::Now() - absl::FromUnixMillis(since) < kWriteGrace) return;
  if (events->reported_down.exchange(true)) return;
  common::LogWarning("the JetStream cluster is unreachable: events are refused (503) until it is "
                     "back",
                     {{"nats_url", events->urls},
                      {"disconnected_for", absl::FormatDuration(kWriteGrace)},
                      {"error", events->Reason()}});
  if (events->writable != nullptr) events->writable->Set(0);
  if (events->on_write_health) events->on_write_health(false);
}

void JetStreamJobStore::OnClosed(natsConnection* nc, void* closure) {
  auto* events = static_cast<ConnectionEvents*>(closure);
  if (!events->store_closed) {
    // The client closed the connection by itself: it stops reconnecting when a server refuses
    // the same credentials twice in a row. Nothing reconnects from here on; the store reports
    // itself unwritable (CheckConnection) with the reason.
    events->connection_closed = true;
    if (std::string reason = NatsLastError(nc); !reason.empty()) events->SetReason(reason);
    int64_t connected = 0;
    events->disconnected_since_ms.compare_exchange_strong(connected,
                                                          absl::ToUnixMillis(absl::Now()));
    common::LogError("the NATS client closed the connection to the JetStream cluster and stopped "
                     "reconnecting: the collector cannot store events until it is restarted",
                     {{"nats_url", events->urls}, {"error", events->Reason()}});
    if (events->on_gave_up) events->on_gave_up();
  }
  ConnectionEvents::Release(events);  // The connection's last callback.
}

void JetStreamJobStore::OnAsyncError(natsConnection* nc, natsSubscription* sub, natsStatus s,
                                     void* closure) {
  auto* events = static_cast<ConnectionEvents*>(closure);
  if (events->store_closed || sub != nullptr) return;  // A subscription's (slow consumer).
  // A server's -ERR on the connection (a permission violation, an authorization expired): the
  // connection drops and reconnects next; keep why.
  std::string reason = NatsLastError(nc);
  if (reason.empty()) reason = natsStatus_GetText(s);
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  int64_t logged = events->error_logged_ms;
  if (now_ms - logged >= 10'000 &&
      events->error_logged_ms.compare_exchange_strong(logged, now_ms)) {
    common::LogWarning("NATS error on the JetStream connection (logged at most every 10 s)",
                       {{"nats_url", events->urls}, {"error", reason}});
  }
  // A permission violation leaves the connection up: not a reason for it to be down.
  if (s != NATS_NOT_PERMITTED) events->SetReason(std::move(reason));
}

}  // namespace hookrelay::collector
