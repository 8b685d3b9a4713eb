#include "collector/jetstream_job_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/strings.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;

constexpr absl::Duration kRepublishFor = absl::Seconds(10);
constexpr char kConfigBucket[] = "hr_config";
constexpr char kConfigKey[] = "config";


absl::Status NotYet(std::string_view what) {
  return absl::UnimplementedError(absl::StrCat(
      std::string(what), " is not available on the JetStream engine yet (issue 12); use --store=embedded"));
}

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

// A stable message id for a job: its event's dedup key (hashed: it may hold any byte) and its
// destination.
std::string JobMsgId(const std::string& dedup_key, const std::string& destination) {
  return absl::StrFormat("%016x-%s", common::Fnv1a64(dedup_key), destination);
}


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

  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.PublishAsync.AckHandler = &JetStreamJobStore::OnPublishAck;
  js_options.PublishAsync.AckHandlerClosure = store.get();
  js_options.PublishAsync.MaxPending = 65536;
  s = natsConnection_JetStream(&store->js_, store->nc_, &js_options);
  if (s != NATS_OK) return NatsError("JetStream context", s);
  store->republisher_ = std::thread([raw = store.get()] { raw->RepublishLoop(); });

  // The configuration bucket: bound when it exists, created (replicated like the jobs) when not.
  s = RetryPassing([&] { return js_KeyValue(&store->config_kv_, store->js_, kConfigBucket); });
  if (s == NATS_NOT_FOUND) {
    kvConfig kv_config;
    kvConfig_Init(&kv_config);
    kv_config.Bucket = kConfigBucket;
    kv_config.History = 5;
    kv_config.StorageType = js_FileStorage;
    kv_config.Replicas = o.layout.replicas;
    s = RetryPassing([&] { return js_CreateKeyValue(&store->config_kv_, store->js_, &kv_config); });
  }
  if (s != NATS_OK) return NatsError("the configuration bucket hr_config", s);

  jsSubOptions sub_options;
  jsSubOptions_Init(&sub_options);
  sub_options.Stream = kJobsStream;
  sub_options.Consumer = kDispatchConsumer;
  sub_options.ManualAck = true;
  jsErrCode code = static_cast<jsErrCode>(0);
  s = js_PullSubscribe(&store->dispatch_, store->js_, kReadySubject, kDispatchConsumer, nullptr,
                       &sub_options, &code);
  if (s != NATS_OK) return NatsError("binding the dispatch consumer", s);
  return store;
}

void JetStreamJobStore::RepublishLoop() {
  for (;;) {
    natsMsg* msg = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!republish_.empty() && republish_.front().first <= absl::Now());
      };
      const absl::Time next =
          republish_.empty() ? absl::Now() + absl::Seconds(1) : republish_.front().first;
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
      if (owned != nullptr) natsMsg_Destroy(owned);
      Acked(msg, NatsError("publishing a job", s), false);
    }
  }
}

JetStreamJobStore::~JetStreamJobStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
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
  }
  if (config_kv_ != nullptr) kvStore_Destroy(config_kv_);
  if (dispatch_ != nullptr) natsSubscription_Destroy(dispatch_);
  if (js_ != nullptr) jsCtx_Destroy(js_);
  if (nc_ != nullptr) natsConnection_Destroy(nc_);
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
    if (duplicate) p.result.stored[it->second.item] = false;
    if (--p.outstanding == 0) finished = it->second.append;
    publishing_.erase(it);
  }
  if (finished != nullptr) {
    if (finished->status.ok()) {
      std::move(finished->done)(std::move(finished->result));
    } else {
      std::move(finished->done)(finished->status);
    }
  }
}

void JetStreamJobStore::Append(std::vector<AppendItem> items, AppendCallback done) {
  auto pending = std::make_shared<PendingAppend>();
  pending->result.stored.assign(items.size(), true);
  pending->done = std::move(done);
  std::vector<std::pair<natsMsg*, size_t>> msgs;
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  for (size_t i = 0; i < items.size(); ++i) {
    for (Job& job : items[i].jobs) {
      job.set_due_unix_ms(now_ms);
      const std::string body = job.SerializeAsString();
      natsMsg* msg = nullptr;
      if (natsMsg_Create(&msg, kReadySubject, nullptr, body.data(), static_cast<int>(body.size())) !=
          NATS_OK) {
        for (auto& [m, item] : msgs) natsMsg_Destroy(m);
        std::move(pending->done)(absl::ResourceExhaustedError("JetStream: cannot create a message"));
        return;
      }
      if (!items[i].dedup_key.empty()) {
        natsMsgHeader_Set(msg, "Nats-Msg-Id",
                          JobMsgId(items[i].dedup_key, job.destination_id()).c_str());
      }
      msgs.emplace_back(msg, i);
    }
  }
  if (msgs.empty()) {
    std::move(pending->done)(std::move(pending->result));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    pending->outstanding = msgs.size();
    for (auto& [msg, item] : msgs) publishing_[msg] = Publishing{pending, item};
  }
  jsPubOptions publish = AsyncPublishOptions(options_.layout.request_timeout);
  for (auto& [msg, item] : msgs) {
    natsMsg* owned = msg;
    const natsStatus s = js_PublishMsgAsync(js_, &owned, &publish);
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
  natsMsgList list{};
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s =
      natsSubscription_Fetch(&list, dispatch_, static_cast<int>(std::min<size_t>(max, 256)), 20, &code);
  // Nothing ready; or a node that has just (re)joined does not know the consumer yet: nothing
  // now, the caller asks again.
  if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS) return out;
  if (s != NATS_OK) return NatsError("fetching jobs", s);
  const absl::Time deadline = clock_.Now() + options_.layout.ack_wait;
  for (int i = 0; i < list.Count; ++i) {
    natsMsg* msg = list.Msgs[i];
    list.Msgs[i] = nullptr;
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
    leased.deadline = deadline;
    absl::MutexLock lock(&mu_);
    leased.lease = next_lease_++;
    auto [it, inserted] = leased_.try_emplace(leased.job.id(), Leased{msg, leased.lease});
    if (!inserted) {  // Redelivered after its lease expired: the new lease wins.
      natsMsg_Destroy(it->second.msg);
      it->second = Leased{msg, leased.lease};
    }
    out.push_back(std::move(leased));
  }
  natsMsgList_Destroy(&list);
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
  const natsStatus s = natsMsg_Ack(*msg, nullptr);
  natsMsg_Destroy(*msg);
  return s == NATS_OK ? absl::OkStatus() : NatsError("acknowledging a job", s);
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

absl::Status JetStreamJobStore::Retry(uint64_t job_id, uint64_t lease, absl::Time not_before,
                                      const hookrelay::v1::Attempt& attempt) {
  absl::StatusOr<natsMsg*> msg = TakeLeased(job_id, lease);
  if (!msg.ok()) return msg.status();
  Job job;
  job.ParseFromArray(natsMsg_GetData(*msg), natsMsg_GetDataLength(*msg));
  job.set_id(job_id);
  const absl::Time now = clock_.Now();
  RecordAttempt(attempt, absl::ToUnixMillis(now), job);
  // Schedules fire on whole seconds: round up, never early.
  const int64_t due_s = (absl::ToUnixMillis(not_before) + 999) / 1000;
  job.set_due_unix_ms(due_s * 1000);
  const std::string id = absl::StrCat("retry-", job_id, "-", job.attempts());
  absl::Status st;
  if (not_before <= now) {
    st = PublishSync(kReadySubject, job.SerializeAsString(), {{"Nats-Msg-Id", id}});
  } else {
    st = PublishSync(
        absl::StrCat("hr.jobs.sched.", job_id), job.SerializeAsString(),
        {{"Nats-Msg-Id", id},
         {"Nats-Schedule",
          absl::StrCat("@at ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(due_s),
                                                absl::UTCTimeZone()))},
         {"Nats-Schedule-Target", kReadySubject}});
  }
  if (st.ok()) {
    const natsStatus s = natsMsg_Ack(*msg, nullptr);
    if (s != NATS_OK) st = NatsError("acknowledging a retried job", s);
  } else {
    natsMsg_Nak(*msg, nullptr);  // Not rescheduled: it comes back now, attempt not counted.
  }
  natsMsg_Destroy(*msg);
  return st;
}

absl::Status JetStreamJobStore::Bury(uint64_t job_id, uint64_t lease, std::string_view reason,
                                     const hookrelay::v1::Attempt& attempt) {
  absl::StatusOr<natsMsg*> msg = TakeLeased(job_id, lease);
  if (!msg.ok()) return msg.status();
  Job job;
  job.ParseFromArray(natsMsg_GetData(*msg), natsMsg_GetDataLength(*msg));
  job.set_id(job_id);
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  RecordAttempt(attempt, now_ms, job);
  job.set_dead_reason(std::string(reason));
  job.set_dead_at_unix_ms(now_ms);
  absl::Status st = PublishSync(absl::StrCat("hr.dead.", job.destination_id()),
                                job.SerializeAsString(),
                                {{"Nats-Msg-Id", absl::StrCat("dead-", job_id)}});
  if (st.ok()) {
    const natsStatus s = natsMsg_Ack(*msg, nullptr);
    if (s != NATS_OK) st = NatsError("acknowledging a buried job", s);
  } else {
    natsMsg_Nak(*msg, nullptr);
  }
  natsMsg_Destroy(*msg);
  return st;
}

absl::Status JetStreamJobStore::WriteHealth() const {
  if (natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED) return absl::OkStatus();
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
  return counts;
}

absl::Time JetStreamJobStore::NextDue() { return absl::InfiniteFuture(); }  // The server's.

absl::StatusOr<std::vector<Job>> JetStreamJobStore::ListDead(const DeadFilter&) {
  return NotYet("listing dead letters");
}
absl::StatusOr<size_t> JetStreamJobStore::Replay(const DeadFilter&) {
  return NotYet("replaying dead letters");
}
absl::StatusOr<std::vector<std::string>> JetStreamJobStore::SourcesSeen(std::string_view) {
  return NotYet("the per-user index");
}
absl::StatusOr<DeletionOutcome> JetStreamJobStore::ApplyDeletion(DeletionPlan) {
  return NotYet("deletion requests");
}
absl::StatusOr<std::optional<hookrelay::v1::Deletion>> JetStreamJobStore::GetDeletion(
    std::string_view) {
  return NotYet("deletion requests");
}
absl::StatusOr<std::vector<hookrelay::v1::Deletion>> JetStreamJobStore::ListDeletions(
    std::string_view, size_t) {
  return NotYet("deletion requests");
}
absl::StatusOr<AudienceSyncInput> JetStreamJobStore::BeginAudienceSync(
    std::string_view, const std::vector<std::string>&, absl::Time) {
  return NotYet("audiences");
}
absl::StatusOr<std::vector<AudienceUser>> JetStreamJobStore::ReadAudienceUsers(
    std::string_view, const std::vector<std::string>&, const std::vector<std::string>&) {
  return NotYet("audiences");
}
absl::StatusOr<hookrelay::v1::AudienceState> JetStreamJobStore::CommitAudienceSync(
    AudienceSyncPlan) {
  return NotYet("audiences");
}
absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> JetStreamJobStore::GetAudienceState(
    std::string_view) {
  return NotYet("audiences");
}
absl::Status JetStreamJobStore::DropAudience(std::string_view) { return NotYet("audiences"); }
absl::StatusOr<std::optional<std::string>> JetStreamJobStore::LoadConfig() {
  kvEntry* entry = nullptr;
  const natsStatus s = RetryPassing([&] { return kvStore_Get(&entry, config_kv_, kConfigKey); });
  if (s == NATS_NOT_FOUND) return std::optional<std::string>();
  if (s != NATS_OK) return NatsError("reading the stored configuration", s);
  std::string value(static_cast<const char*>(kvEntry_Value(entry)),
                    static_cast<size_t>(kvEntry_ValueLen(entry)));
  kvEntry_Destroy(entry);
  return std::optional<std::string>(std::move(value));
}

absl::Status JetStreamJobStore::SaveConfig(std::string_view bytes) {
  uint64_t revision = 0;
  const natsStatus s = RetryPassing([&] {
    return kvStore_Put(&revision, config_kv_, kConfigKey, bytes.data(),
                       static_cast<int>(bytes.size()));
  });
  return s == NATS_OK ? absl::OkStatus() : NatsError("writing the configuration", s);
}

}  // namespace hookrelay::collector
