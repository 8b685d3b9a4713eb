// The JetStream engine's job queue, leases: handing out what the destinations' consumers brought
// (jetstream_pulls.h), acks in bursts (Complete), and the retries and dead letters that settle a
// lease.
#include "collector/store/jetstream/jetstream_job_store.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/jetstream_subjects.h"
#include "collector/store/jetstream/jetstream_user_data.h"
#include "collector/store/jetstream/nats_request.h"
#include "common/log.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;

// Acks of delivered jobs wait at most this long, or until this many are waiting (see AckLoop).
constexpr absl::Duration kAckBurstDelay = absl::Milliseconds(20);
constexpr size_t kAckBurstSize = 256;
// Per-user order checks made at once by one Lease call (each a request to a server).
constexpr size_t kOrderCheckThreads = 16;

// The subjects of the job's user's ready jobs of its destination (of every destination in the
// layout before per-destination consumers: `legacy`).
std::string UserReadyJobs(const Job& job, bool legacy) {
  return legacy ? absl::StrCat("hr.jobs.ready.*.", JobUserToken(job))
                : absl::StrCat("hr.jobs.ready.", JetStreamToken(job.destination_id()), ".*.",
                               JobUserToken(job));
}

// The job a settlement starts from: as its attempts record had it (an ordered job that retried
// in place), else as its message carries it.
Job SettlingJob(const std::string& recorded_job, natsMsg* msg) {
  Job job;
  if (!recorded_job.empty()) {
    job.ParseFromString(recorded_job);
  } else {
    job.ParseFromArray(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
  }
  return job;
}

}  // namespace

void JetStreamJobStore::SetReadyCallback(std::function<void()> ready) {
  ready_signal_->Set(std::move(ready));
}

absl::StatusOr<std::vector<LeasedJob>> JetStreamJobStore::Lease(size_t max, LeaseBudget budget) {
  std::vector<LeasedJob> out;
  if (max == 0) return out;
  // Cut off from the cluster, or back and not yet caught up with the deletions made meanwhile:
  // nothing handed out (a job purged meanwhile would be delivered). The ready signal is raised
  // once caught up.
  if (!user_data_->CaughtUp()) return out;
  absl::MutexLock fetch_lock(&fetch_mu_);
  const absl::Time now = clock_.Now();
  const int64_t now_ms = absl::ToUnixMillis(now);
  // Held jobs whose time has come first, then what the destinations' consumers brought.
  std::vector<natsMsg*> msgs;
  {
    absl::MutexLock lock(&mu_);
    while (!held_.empty() && held_.begin()->first <= now_ms && msgs.size() < max) {
      msgs.push_back(held_.begin()->second);
      held_.erase(held_.begin());
    }
  }
  // A lease is the ack wait counted from the fetch: a job waiting here too long is handed back
  // rather than given to a deliverer with little of its lease left.
  JetStreamPulls::Taken taken =
      pulls_->Take(max - msgs.size(), budget, absl::Now() - options_.layout.ack_wait / 4);
  msgs.insert(msgs.end(), taken.jobs.begin(), taken.jobs.end());
  // When each job taken was fetched (a head of an ordered destination beyond its budget goes
  // back to the buffer as it was).
  absl::flat_hash_map<natsMsg*, absl::Time> fetched_at;
  for (size_t i = 0; i < taken.jobs.size(); ++i) fetched_at[taken.jobs[i]] = taken.fetched_at[i];
  for (natsMsg* msg : taken.stale) {
    JsNak(nc_, msg);  // Back to the consumer now, rather than when its lease ends.
    natsMsg_Destroy(msg);
  }
  const absl::Time deadline = now + options_.layout.ack_wait;
  // Read every message first; then the per-user order checks, one request each to the servers,
  // are made together (kOrderCheckThreads at a time) for the oldest job of each key in this
  // call; the key's other jobs here wait without asking again.
  struct Item {
    natsMsg* msg = nullptr;
    LeasedJob leased;
    uint64_t delivered = 0;
    std::string consumer;  // the consumer it came from
    std::string key;  // destination, ordering key ("" when the job keeps no order)
    bool legacy = false;  // stored in the layout without the destination token
    std::optional<OrderCheck> order;
  };
  std::vector<Item> items;
  items.reserve(msgs.size());
  for (natsMsg* msg : msgs) {
    jsMsgMetaData* meta = nullptr;
    Item item;
    item.msg = msg;
    if (natsMsg_GetMetaData(&meta, msg) != NATS_OK ||
        !item.leased.job.ParseFromArray(natsMsg_GetData(msg), natsMsg_GetDataLength(msg))) {
      JsTerm(nc_, msg);  // Unreadable: never deliverable.
      natsMsg_Destroy(msg);
      if (meta != nullptr) jsMsgMetaData_Destroy(meta);
      continue;
    }
    // A retry carries the id its job had when it was leased (0 in a job's first message): a
    // retry of a job a deletion purged, stored by a collector that did not know of the deletion
    // yet, is dropped like the job itself (the deletion's sweep removes it from the stream).
    const uint64_t earlier_id = item.leased.job.id();
    item.leased.job.set_id(meta->Sequence.Stream);
    item.delivered = meta->NumDelivered;
    if (meta->Consumer != nullptr) item.consumer = meta->Consumer;
    jsMsgMetaData_Destroy(meta);
    if (user_data_->PurgedByDeletion(item.leased.job, item.leased.job.id()) ||
        (earlier_id != 0 && user_data_->PurgedByDeletion(item.leased.job, earlier_id))) {
      JsAck(nc_, msg);  // Purged while fetched.
      natsMsg_Destroy(msg);
      continue;
    }
    item.legacy = Tokens(natsMsg_GetSubject(msg)).size() == 5;  // hr.jobs.ready.<S>.<U>
    if (!item.leased.job.ordering_key().empty()) {
      item.key = absl::StrCat(item.leased.job.destination_id(), "\x1f",
                              item.leased.job.ordering_key());
    }
    items.push_back(std::move(item));
  }
  absl::flat_hash_map<std::string_view, Item*> oldest_of_key;
  for (Item& item : items) {
    if (item.key.empty()) continue;
    auto [it, inserted] = oldest_of_key.try_emplace(item.key, &item);
    if (!inserted && item.leased.job.id() < it->second->leased.job.id()) it->second = &item;
  }
  {
    std::vector<Item*> to_check;
    to_check.reserve(oldest_of_key.size());
    for (const auto& [key, item] : oldest_of_key) to_check.push_back(item);
    // The common case settled in one round: every key's first ready job read at once (direct
    // gets, pipelined); a job handed out for the first time that is its key's first goes. The
    // rest (an earlier job of the key there, a job that may have retried in place, another
    // destination's job first, no answer) get the whole check, side by side on the pool.
    std::vector<std::pair<uint64_t, std::string>> reads;
    reads.reserve(to_check.size());
    for (const Item* item : to_check) {
      reads.emplace_back(1, UserReadyJobs(item->leased.job, item->legacy));
    }
    const std::vector<absl::StatusOr<std::optional<JetStreamMessage>>> firsts =
        JetStreamDirectNextMessages(nc_, kJobsStream, reads, options_.layout.request_timeout);
    std::vector<size_t> whole;  // in to_check
    for (size_t i = 0; i < to_check.size(); ++i) {
      Item& item = *to_check[i];
      if (item.delivered <= 1 && firsts[i].ok() && firsts[i]->has_value() &&
          (*firsts[i])->seq == item.leased.job.id()) {
        item.order = OrderCheck{.head = true};
      } else {
        whole.push_back(i);
      }
    }
    // The pool's threads are made at the first whole check (fetch_mu_ held).
    if (!whole.empty() && order_checks_ == nullptr) {
      order_checks_ = std::make_unique<common::WorkerPool>(kOrderCheckThreads - 1);
    }
    if (!whole.empty()) {
      order_checks_->ForEach(whole.size(), [&](size_t w) {
        Item& item = *to_check[whole[w]];
        item.order = CheckOrder(item.leased.job, item.leased.job.id(), item.delivered,
                                item.legacy, &firsts[whole[w]]);
      });
    }
  }
  // Jobs sent back to wait for their key's earlier job, per consumer: the demand they took
  // stands, so that the consumer's pull brings what else is there (and these again, after their
  // wait).
  absl::flat_hash_map<std::string, size_t> sent_back;
  std::vector<Item*> put_back;  // heads beyond their destination's budget
  for (Item& item : items) {
    natsMsg* msg = item.msg;
    LeasedJob& leased = item.leased;
    Leased entry{msg, 0, {}, {}};
    if (!item.key.empty()) {
      // Per-user order: only its key's first job goes; a later one comes back after a while
      // (behind a job leased now: soon; behind one elsewhere: as its check said).
      const Item& oldest = *oldest_of_key.at(item.key);
      const OrderCheck& order = *oldest.order;
      if (&item != &oldest || !order.head) {
        JsNak(nc_, msg, &item != &oldest && order.head ? 100 : order.retry_in_ms);
        ++sent_back[item.consumer];
        natsMsg_Destroy(msg);
        continue;
      }
      // Its key's first, and within its destination's budget (taken whole: JetStreamPulls::Take).
      if (auto b = taken.ordered_budget.find(item.consumer); b != taken.ordered_budget.end()) {
        if (b->second == 0) {
          put_back.push_back(&item);
          continue;
        }
        --b->second;
      }
      if (!order.record_subject.empty()) {
        entry.order_record = order.record_subject;
        leased.job.SerializeToString(&entry.recorded_job);
      }
    }
    absl::MutexLock lock(&mu_);
    // A retry of an ordered job holds it in place until its time (on this collector's clock).
    const int64_t due = std::max(leased.job.due_unix_ms(), leased.job.hold_until_unix_ms());
    if (auto it = scheduled_due_.find(due); it != scheduled_due_.end()) scheduled_due_.erase(it);
    if (due > now_ms) {  // Early on this collector's clock: held until it is due.
      held_.emplace(due, msg);
      continue;
    }
    leased.deadline = deadline;
    leased.lease = next_lease_++;
    entry.lease = leased.lease;
    auto [it, inserted] = leased_.try_emplace(leased.job.id(), entry);
    if (!inserted) {  // Redelivered after its lease expired: the new lease wins.
      natsMsg_Destroy(it->second.msg);
      it->second = std::move(entry);
    }
    out.push_back(std::move(leased));
  }
  if (!sent_back.empty()) pulls_->Return(sent_back);
  // In reverse, each to the front of its buffer: they keep their order.
  for (auto it = put_back.rbegin(); it != put_back.rend(); ++it) {
    auto at = fetched_at.find((*it)->msg);
    pulls_->PutBack((*it)->consumer, (*it)->msg, at != fetched_at.end() ? at->second : absl::Now());
  }
  // Jobs held or leased: the ready signal's timer looks at NextDue again (an empty Lease, the
  // common case while idle, changed nothing and wakes no thread).
  if (!msgs.empty()) ready_signal_->Reschedule();
  return out;
}

std::vector<absl::StatusOr<absl::Time>> JetStreamJobStore::ExtendLeases(
    const std::vector<std::pair<uint64_t, uint64_t>>& leases) {
  std::vector<absl::StatusOr<absl::Time>> out;
  out.reserve(leases.size());
  const absl::Time deadline = clock_.Now() + options_.layout.ack_wait;
  absl::MutexLock lock(&mu_);
  for (const auto& [job_id, lease] : leases) {
    auto it = leased_.find(job_id);
    if (it == leased_.end()) {
      out.push_back(absl::NotFoundError(absl::StrFormat("job %d not leased here", job_id)));
      continue;
    }
    if (it->second.lease != lease) {
      out.push_back(absl::FailedPreconditionError(
          absl::StrFormat("job %d: lease %d is not the job's current lease", job_id, lease)));
      continue;
    }
    // A publish to the server, not waited for (as acks are): the ack wait restarts when it
    // arrives. An error means the connection is down; the lease then runs out as it would.
    const natsStatus s = JsInProgress(nc_, it->second.msg);
    if (s != NATS_OK) {
      out.push_back(absl::UnavailableError(
          absl::StrCat("extending the lease of job ", job_id, ": ", natsStatus_GetText(s))));
      continue;
    }
    out.push_back(deadline);
  }
  return out;
}

absl::StatusOr<natsMsg*> JetStreamJobStore::TakeLeased(uint64_t job_id, uint64_t lease,
                                                       Leased* taken) {
  absl::MutexLock lock(&mu_);
  auto it = leased_.find(job_id);
  if (it == leased_.end()) return absl::NotFoundError(absl::StrFormat("job %d not leased here", job_id));
  if (it->second.lease != lease) {
    return absl::FailedPreconditionError(
        absl::StrFormat("job %d: lease %d is not the job's current lease", job_id, lease));
  }
  natsMsg* msg = it->second.msg;
  if (taken != nullptr) *taken = std::move(it->second);
  leased_.erase(it);
  return msg;
}

JetStreamJobStore::OrderCheck JetStreamJobStore::CheckOrder(
    Job& job, uint64_t seq, uint64_t delivered, bool legacy,
    const absl::StatusOr<std::optional<JetStreamMessage>>* first) {
  OrderCheck out;
  const absl::Duration timeout = options_.layout.request_timeout;
  // Handed out before: it may have retried in place, with its attempts recorded beside it.
  if (delivered > 1) {
    const std::string subject = OrderRecordSubject(job, seq);
    absl::StatusOr<std::optional<JetStreamMessage>> record =
        JetStreamLastMessage(nc_, kJobsStream, subject, timeout, absl::ZeroDuration());
    if (!record.ok()) return out;  // Not known: try again in a while.
    Job recorded;
    if (record->has_value() && recorded.ParseFromString((*record)->data)) {
      recorded.set_id(seq);
      job = std::move(recorded);
      out.record_subject = subject;
    }
  }
  // Its key's first job: the user's ready jobs of its destination in stream order (a settled job
  // is gone from the work-queue stream), passing those without the key. A job of the layout
  // before per-destination consumers looks among that layout's jobs (every destination's): after
  // an upgrade the key's jobs of that layout go out first, then the new ones, each in order.
  // Read with direct gets, which any replica answers: a replica holds a prefix of the leader's
  // stream, and a key's jobs only ever leave it (acks, purges; a retry keeps its message, a
  // replay is a new one), so a replica that shows this job first is right, and one that lags
  // shows an earlier job still there (this one waits a little longer) or not this job yet (then
  // the leader is asked).
  const std::string user_jobs = UserReadyJobs(job, legacy);
  // A later job of a key comes back after 100 ms, doubling to 1 s while it keeps waiting (its
  // key's job in flight takes one attempt; a retrying one says how long it waits, below).
  const int64_t backoff_ms = std::min<int64_t>(
      1000, int64_t{100} << std::min<uint64_t>(delivered > 0 ? delivered - 1 : 0, 4));
  uint64_t from = 1;
  for (int step = 0; step < 1000; ++step) {
    absl::StatusOr<std::optional<JetStreamMessage>> next =
        step == 0 && first != nullptr
            ? *first  // The same read, made already.
            : JetStreamDirectNextMessage(nc_, kJobsStream, from, user_jobs, timeout);
    // Nothing from a replica (one behind the leader may not hold the job yet; one catching up
    // answers an error status): the leader says.
    if (!next.ok() || !next->has_value()) {
      next = JetStreamNextMessage(nc_, kJobsStream, from, user_jobs, timeout, absl::ZeroDuration());
    }
    if (!next.ok() || !next->has_value()) return out;  // Not known, or gone: later.
    const JetStreamMessage& m = **next;
    if (m.seq == seq) {
      out.head = true;
      return out;
    }
    std::optional<SerializedQueueFields> fields = SerializedJobQueueFields(m.data);
    if (fields && fields->destination == job.destination_id() &&
        fields->ordering_key == job.ordering_key()) {
      // An earlier job of the key is still there. When it retries, wait for its time.
      out.retry_in_ms = backoff_ms;
      Job earlier;
      if (earlier.ParseFromString(m.data)) {
        absl::StatusOr<std::optional<JetStreamMessage>> record = JetStreamLastMessage(
            nc_, kJobsStream, OrderRecordSubject(earlier, m.seq), timeout, absl::ZeroDuration());
        Job recorded;
        if (record.ok() && record->has_value() && recorded.ParseFromString((*record)->data)) {
          const absl::Duration wait =
              std::min(absl::FromUnixMillis(recorded.hold_until_unix_ms()) - clock_.Now(),
                       options_.max_schedule_delay);
          out.retry_in_ms = std::max(out.retry_in_ms, absl::ToInt64Milliseconds(wait) + 100);
        }
      }
      return out;
    }
    from = m.seq + 1;
  }
  return out;  // More than a thousand of the user's jobs ahead: later.
}

void JetStreamJobStore::DropOrderRecord(const std::string& subject) {
  absl::StatusOr<JetStreamApiReply> reply =
      JetStreamApi(nc_, absl::StrCat("$JS.API.STREAM.PURGE.", kJobsStream),
                   absl::StrCat(R"({"filter":")", subject, R"("})"),
                   options_.layout.request_timeout);
  if (!reply.ok() || reply->error_code != 0) {
    // Left behind: a few hundred bytes until the user's next deletion purges it.
    common::LogWarning("JetStream: removing an ordered job's attempts record failed",
                       {{"error", reply.ok() ? reply->error : std::string(reply.status().message())}});
  }
}

absl::Status JetStreamJobStore::CompleteJob(uint64_t job_id, uint64_t lease) {
  Leased taken;
  absl::StatusOr<natsMsg*> msg = TakeLeased(job_id, lease, &taken);
  if (!msg.ok()) return msg.status();
  if (!taken.order_record.empty()) DropOrderRecord(taken.order_record);
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
    if (const natsStatus s = JsAck(nc_, msg); s != NATS_OK) {
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
  JsNak(nc_, leased);  // Not rescheduled: it comes back now, attempt not counted.
  natsMsg_Destroy(leased);
  return NatsError(absl::StrCat("publishing to ", subject), s);
}

absl::Status JetStreamJobStore::SettleableHere(uint64_t job_id, natsMsg* leased) {
  // A retry or a dead letter stores a new message carrying the job. Cut off from the cluster
  // (or not yet caught up with the deletions made meanwhile), the client would buffer it and
  // send it at the reconnect, when a deletion may have purged the job: another collector
  // without that deletion's purge mark (started since, or its mark expired) would hand it out
  // before this one's catch-up sweeps it. So nothing is stored: the job's message stays on the
  // server and comes back after its ack wait, unless a deletion purged it (the nak below is
  // buffered like the rest, and is harmless either way).
  if (natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED && user_data_->CaughtUp()) {
    return absl::OkStatus();
  }
  JsNak(nc_, leased);
  natsMsg_Destroy(leased);
  return absl::UnavailableError(absl::StrFormat(
      "job %d: not settled while cut off from the NATS cluster (it is handed out again)",
      job_id));
}

absl::Status JetStreamJobStore::RetryJob(uint64_t job_id, uint64_t lease, absl::Time not_before,
                                         const hookrelay::v1::Attempt& attempt) {
  Leased taken;
  absl::StatusOr<natsMsg*> msg = TakeLeased(job_id, lease, &taken);
  if (!msg.ok()) return msg.status();
  if (absl::Status st = SettleableHere(job_id, *msg); !st.ok()) return st;
  Job job = SettlingJob(taken.recorded_job, *msg);
  job.set_id(job_id);
  if (user_data_->PurgedByDeletion(job, job_id)) {  // Deleted while leased: dropped.
    JsAck(nc_, *msg);
    natsMsg_Destroy(*msg);
    return absl::NotFoundError(absl::StrFormat("job %d was purged by a deletion", job_id));
  }
  const absl::Time now = clock_.Now();
  RecordAttempt(attempt, absl::ToUnixMillis(now), job);
  if (!job.ordering_key().empty()) {
    // Per-user order: the job keeps its place (its message is nak'ed with a delay, not
    // replaced), and its attempts and time are recorded beside it for whoever leases it next.
    job.set_hold_until_unix_ms(not_before > now ? absl::ToUnixMillis(not_before) : 0);
    absl::Status recorded = PublishSync(
        OrderRecordSubject(job, job_id), job.SerializeAsString(),
        {{"Nats-Msg-Id", absl::StrCat("order-", job_id, "-", job.attempts(), "-", job.deferrals())}});
    if (!recorded.ok()) {
      JsNak(nc_, *msg);  // Back now, the attempt not counted.
      natsMsg_Destroy(*msg);
      return recorded;
    }
    const absl::Duration delay =
        std::max(absl::ZeroDuration(), std::min(not_before - now, options_.max_schedule_delay));
    JsNak(nc_, *msg, absl::ToInt64Milliseconds(delay));
    natsMsg_Destroy(*msg);
    ready_signal_->Reschedule();
    return absl::OkStatus();
  }
  job.set_due_unix_ms(absl::ToUnixMillis(not_before));
  // A job of the layout before per-destination consumers comes back in the new one.
  pulls_->NoteDestination(job.destination_id());
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
  ready_signal_->Reschedule();
  return st;
}

absl::Status JetStreamJobStore::BuryJob(uint64_t job_id, uint64_t lease, std::string_view reason,
                                        const hookrelay::v1::Attempt& attempt) {
  Leased taken;
  absl::StatusOr<natsMsg*> msg = TakeLeased(job_id, lease, &taken);
  if (!msg.ok()) return msg.status();
  if (absl::Status st = SettleableHere(job_id, *msg); !st.ok()) return st;
  Job job = SettlingJob(taken.recorded_job, *msg);
  job.set_hold_until_unix_ms(0);
  if (!taken.order_record.empty()) DropOrderRecord(taken.order_record);
  job.set_id(job_id);
  if (user_data_->PurgedByDeletion(job, job_id)) {  // Deleted while leased: dropped.
    JsAck(nc_, *msg);
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

void JetStreamJobStore::Settle(std::vector<Settlement> batch, SettleCallback done) {
  std::vector<absl::Status> statuses;
  statuses.reserve(batch.size());
  for (Settlement& s : batch) {
    switch (s.kind) {
      case Settlement::Kind::kComplete:
        statuses.push_back(CompleteJob(s.job_id, s.lease));
        break;
      case Settlement::Kind::kRetry:
        statuses.push_back(RetryJob(s.job_id, s.lease, s.not_before, s.attempt));
        break;
      case Settlement::Kind::kBury:
        statuses.push_back(BuryJob(s.job_id, s.lease, s.reason, s.attempt));
        break;
    }
  }
  std::move(done)(std::move(statuses));
}

}  // namespace hookrelay::collector
