// The JetStream engine (--store=jetstream; docs/DESIGN.md, "The JetStream engine"): jobs as
// messages of HR_JOBS, leased through one durable pull consumer per destination
// (collector/store/jetstream/jetstream_pulls.h), retried through message
// schedules, dead-lettered to HR_DEAD, de-duplicated through markers in HR_DEDUP, configuration
// in the KV bucket hr_config. Streams and subjects: collector/store/jetstream/jetstream_layout.h.
//
// - Append completes when every job of the batch has its publish ack from the stream at the
//   configured replication (asynchronous, pipelined publishes). Before publishing, the events'
//   dedup markers are looked up (one batched direct get per 256 events); an event whose marker
//   exists is a duplicate (stored = false, no job published). The markers of stored events are
//   written after their jobs are acknowledged. Each job carries a Nats-Msg-Id (marker +
//   destination), so a publish retried, or two copies of an event racing each other, are stored
//   once within the stream's duplicate window.
// - A lease is the consumer's ack wait (JetStreamLayout::ack_wait). A job leased by a collector that dies returns to the others when it expires.
// - Complete acks the leased message in a burst with others (at most 20 ms later; see AckLoop).
// - Retry publishes the job with the attempt recorded to hr.jobs.sched.<S>.<U>.<job id> as a
//   one-shot schedule for not_before (rounded up to a whole second); Bury publishes it to
//   hr.dead.<D>.<S>.<U>. Both return without waiting: the publish ack, on the client's ack
//   thread, acks the leased message (or naks it when the publish failed: the job comes back
//   now, the attempt not counted). The job waits in the stream, outside the consumer's
//   ack-pending window, and the server makes it ready at its time. A crash between the publish
//   and the ack re-delivers (at-least-once).
// - Job ids are the stream sequence of the message leased (a retried job gets a new one); a
//   dead letter's id is its HR_DEAD sequence.
// - Deletions, the per-user index, profiles and audiences: JetStreamUserData
//   (collector/store/jetstream/jetstream_user_data.h), which this store owns; an event's index entry and profile
//   delta are published and acknowledged with its jobs.
#ifndef HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_JOB_STORE_H_
#define HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_JOB_STORE_H_

#include <nats/nats.h>

#include <cstdint>
#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collector/store/jetstream/jetstream_health.h"
#include "collector/store/jetstream/jetstream_layout.h"
#include "collector/store/jetstream/jetstream_pulls.h"
#include "collector/store/jetstream/nats_connect.h"
// The streams' subjects (JetStreamToken, DedupMarkerSubject, ...), for the store's callers too.
#include "collector/store/jetstream/jetstream_subjects.h"
#include "collector/store/ready_signal.h"
#include "collector/store/store.h"
#include "common/clock.h"
#include "common/worker_pool.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace hookrelay::collector {

class JetStreamUserData;

class JetStreamJobStore final : public Store {
 public:
  struct Options {
    // --nats_url: comma-separated nats:// URLs.
    std::string urls;
    // Credentials and TLS (--nats_creds_file, --nats_tls_ca_file, ...): nats_connect.h.
    NatsConnectOptions connect;
    JetStreamLayout layout;
    // Time for attempt stamps, retry due times and held jobs (the server owns when a schedule
    // fires), and for the user data's audience locks. Waits for the cluster (passing failures
    // retried, request and lookup timeouts, the connection's grace, ack bursts, fetched jobs
    // handed back within the server's ack wait) and the purge marks that outlast its
    // redeliveries stay in real time: they measure the network and the servers, which do not
    // follow this clock. Not owned;
    // nullptr = real time.
    const common::Clock* clock = nullptr;
    // How long to wait for the cluster at start (streams created or checked).
    absl::Duration connect_timeout = absl::Seconds(30);
    // Called with false when the connection to the cluster is lost (or refused: credentials or
    // certificates no longer accepted at a reconnect) and true when it is back.
    std::function<void(bool writable)> on_write_health;
    // Called once if the client closes the connection by itself (a server refused the same
    // credentials twice in a row): nothing reconnects after that, a restart is needed.
    std::function<void()> on_gave_up;
    // Optional: hookrelay_store_writable, hookrelay_ingest_duplicates_total and
    // hookrelay_jetstream_dedup_lookup_failures_total are registered in it.
    prometheus::Registry* registry = nullptr;
    // Tests with a manual clock (JobStoreOptions::max_schedule_delay).
    absl::Duration max_schedule_delay = absl::InfiniteDuration();
    // Tests: true for a step of a user deletion stops it right after that step, as a crash
    // would (JetStreamUserData::Start).
    std::function<bool(std::string_view step)> stop_deletion_after;
  };

  static absl::StatusOr<std::unique_ptr<JetStreamJobStore>> Open(Options options);
  ~JetStreamJobStore() override;

  void Append(std::vector<AppendItem> items, AppendCallback done) override;
  // Never waits for the cluster: returns held jobs now due and what was fetched ahead from the
  // destinations' consumers (JetStreamPulls::Take), each within its budget; a destination whose
  // budget is larger than what was fetched gets a pull opened. A destination without budget is
  // not fetched from: its jobs stay on the servers.
  using JobQueue::Lease;
  // InProgress on each message: its ack wait starts again on the servers.
  std::vector<absl::StatusOr<absl::Time>> ExtendLeases(
      const std::vector<std::pair<uint64_t, uint64_t>>& leases) override;
  absl::StatusOr<std::vector<LeasedJob>> Lease(size_t max, LeaseBudget budget) override;
  // Each destination's consumer is created if missing (on the pulls' background thread).
  void ExpectDestinations(const std::vector<std::string>& destination_ids) override {
    for (const std::string& id : destination_ids) pulls_->NoteDestination(id);
  }
  // The consumer's ack wait.
  absl::Duration lease_duration() const override { return options_.layout.ack_wait; }
  // One job of a (destination, key) handed out at a time, checked against the stream: a job goes
  // out only while it is its key's first in HR_JOBS (work-queue retention: a settled job is gone).
  // A retry of such a job stays in place (nak with a delay) and records its attempts beside it.
  bool KeepsPerKeyOrder() const override { return true; }
  void SetReadyCallback(std::function<void()> ready) override;
  // Settles each job in turn (CompleteJob, RetryJob, BuryJob) and runs `done` before returning.
  void Settle(std::vector<Settlement> batch, SettleCallback done) override;
  absl::Status WriteHealth() const override;
  // The configuration managed at run time, in the KV bucket hr_config (key "config"), replicated
  // like the jobs: every collector of the cluster reads the same one; WatchConfig below follows
  // saves made through another collector.
  absl::StatusOr<std::optional<std::string>> LoadConfig() override;
  // ABORTED when another collector saved since this one last loaded, saved or watched it.
  absl::Status SaveConfig(std::string_view bytes) override;
  // Watches the KV key: a save made through any collector reaches the others within the
  // cluster's propagation time (milliseconds).
  void WatchConfig(ConfigChanged changed) override;
  JobCounts Counts() override;
  // The earliest due time among the retries this collector scheduled and the jobs it holds
  // (see Options::max_schedule_delay); InfiniteFuture when none.
  absl::Time NextDue() override;

  // Dead letters are messages of HR_DEAD (subject hr.dead.<destination>); a dead letter's id
  // here is its HR_DEAD sequence. Listing reads from after_id on, one message per request.
  absl::StatusOr<std::vector<hookrelay::v1::Job>> ListDead(const DeadFilter& filter) override;
  // Publishes each matching dead letter as a ready job (a fresh retry window), then deletes it
  // from HR_DEAD. A crash in between replays it again at most once more (at-least-once).
  absl::StatusOr<size_t> Replay(const DeadFilter& filter) override;

  // Delegated to JetStreamUserData.
  absl::StatusOr<std::vector<std::string>> SourcesSeen(std::string_view user_id) override;
  absl::StatusOr<DeletionOutcome> ApplyDeletion(DeletionPlan plan) override;
  absl::StatusOr<std::optional<hookrelay::v1::Deletion>> GetDeletion(std::string_view id) override;
  absl::StatusOr<std::vector<hookrelay::v1::Deletion>> ListDeletions(std::string_view before_id,
                                                                     size_t limit) override;
  absl::StatusOr<AudienceSyncInput> BeginAudienceSync(std::string_view audience_id,
                                                      const std::vector<std::string>& sources,
                                                      absl::Time now) override;
  absl::StatusOr<std::vector<AudienceUser>> ReadAudienceUsers(
      std::string_view audience_id, const std::vector<std::string>& users,
      const std::vector<std::string>& sources) override;
  absl::StatusOr<hookrelay::v1::AudienceState> CommitAudienceSync(AudienceSyncPlan plan) override;
  absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> GetAudienceState(
      std::string_view audience_id) override;
  absl::Status DropAudience(std::string_view audience_id) override;

 private:
  // The due time (ms) of the first ready job on `filter` at or after stream sequence `from_seq`:
  // a consumer's next pending one. nullopt when there is none or the cluster does not answer.
  std::optional<int64_t> NextPendingDue(const std::string& filter, uint64_t from_seq);
  // One settlement each (Settle).
  absl::Status CompleteJob(uint64_t job_id, uint64_t lease);
  // OK when a new message carrying the job may be stored now; else the leased message is
  // released (nak'ed and freed) and the error says why.
  absl::Status SettleableHere(uint64_t job_id, natsMsg* leased);
  absl::Status RetryJob(uint64_t job_id, uint64_t lease, absl::Time not_before,
                        const hookrelay::v1::Attempt& attempt);
  absl::Status BuryJob(uint64_t job_id, uint64_t lease, std::string_view reason,
                       const hookrelay::v1::Attempt& attempt);
  // One Append waiting for its publish acks.
  struct PendingAppend {
    size_t outstanding = 0;
    absl::Status status;
    AppendResult result;
    AppendCallback done;
    // Dedup markers of the stored events, published once every job is acknowledged.
    std::vector<std::string> markers;
    // hookrelay_store_errors_total's kind of the first failure ("" while none).
    const char* error_kind = "";
    // When its messages were published (real time: the cluster's answer), and how many.
    absl::Time published;
    size_t messages = 0;
  };
  // An Append waiting for its dedup markers to be looked up (HR_DEDUP, batched direct gets).
  struct Lookup {
    std::shared_ptr<PendingAppend> append;
    std::vector<AppendItem> items;
    std::vector<std::string> markers;  // per item; "" = no dedup key
    absl::flat_hash_set<std::string> found;
    int outstanding = 0;  // requests not yet answered
    bool failed = false;
    absl::Time deadline;
  };
  static void OnLookupReply(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* self);
  // Publishes the jobs of the items not found as duplicates.
  void FinishLookup(const std::shared_ptr<Lookup>& lookup);
  // `markers`: each item's dedup marker subject ("" without a dedup key), for the Nats-Msg-Id.
  void PublishJobs(const std::shared_ptr<PendingAppend>& pending, std::vector<AppendItem>& items,
                   const std::vector<std::string>& markers, const std::vector<bool>& publish);
  void PublishMarkers(const std::vector<std::string>& markers);
  struct Leased {
    natsMsg* msg = nullptr;
    uint64_t lease = 0;
    // A job kept in per-user order that retried before: its attempts record's subject, and the
    // job as that record has it (the message keeps the job as appended).
    std::string order_record;
    std::string recorded_job;
  };
  // Per-user order (Job.ordering_key): whether the job (stream sequence `seq`) is its key's
  // first in the stream, merging its attempts record into it when it has one. When it is not
  // (or the cluster does not answer), how long to wait before it is handed out again.
  struct OrderCheck {
    bool head = false;
    int64_t retry_in_ms = 1000;
    std::string record_subject;  // Its attempts record, when one exists.
  };
  // `legacy`: the job was stored in the layout before per-destination consumers (its subject has
  // no destination token); its key's earlier jobs are looked for in that layout.
  // `first`: the direct read of the key's first job already made by the caller, or null.
  OrderCheck CheckOrder(hookrelay::v1::Job& job, uint64_t seq, uint64_t delivered, bool legacy,
                        const absl::StatusOr<std::optional<JetStreamMessage>>* first = nullptr);
  // Removes an ordered job's attempts record once the job is settled.
  void DropOrderRecord(const std::string& subject);
  // A dead letter read from HR_DEAD.
  struct DeadLetter {
    uint64_t seq = 0;
    hookrelay::v1::Job job;
  };
  // The next dead letter at or after `seq` matching the filter's destination; nullopt at the end.
  absl::StatusOr<std::optional<DeadLetter>> NextDead(uint64_t seq, const DeadFilter& filter);
  // What the connection's callbacks use: it lives until the connection's last callback (closed),
  // which may run after the store is gone.
  struct ConnectionEvents {
    std::atomic<bool> store_closed{false};
    std::string urls;
    std::function<void(bool writable)> on_write_health;
    std::function<void()> on_gave_up;
    prometheus::Gauge* writable = nullptr;
    // When the connection was lost (ms since the epoch), 0 while connected.
    std::atomic<int64_t> disconnected_since_ms{0};
    // Whether the store was reported unwritable (on_write_health(false)).
    std::atomic<bool> reported_down{false};
    // The store and the connection each hold one; the last to let go deletes (the connection's
    // closed callback can run before or after the store is gone: a connection closed by the
    // client itself, after a reconnect refused for its credentials, outlives nothing).
    std::atomic<int> refs{2};
    // Why the connection is down (the client's last error: "Authorization Violation", a TLS
    // verification failure, ...): for WriteHealth and the logs. Never a secret.
    mutable absl::Mutex reason_mu;
    std::string reason ABSL_GUARDED_BY(reason_mu);
    // The client gave up reconnecting (closed the connection): the store stays unwritable.
    std::atomic<bool> connection_closed{false};
    // The user data's NoteConnection, called by the disconnected and reconnected callbacks;
    // cleared (under hook_mu) before the user data goes.
    absl::Mutex hook_mu;
    std::function<void(bool connected)> on_connection ABSL_GUARDED_BY(hook_mu);
    void NoteConnection(bool connected) {
      absl::MutexLock lock(&hook_mu);
      if (on_connection) on_connection(connected);
    }
    // When an asynchronous error was last logged (ms since the epoch): one line per 10 s, not
    // one per refused publish.
    std::atomic<int64_t> error_logged_ms{0};
    void SetReason(std::string text) {
      absl::MutexLock lock(&reason_mu);
      reason = std::move(text);
    }
    std::string Reason() const {
      absl::MutexLock lock(&reason_mu);
      return reason;
    }
    // Drops one reference; deletes on the last.
    static void Release(ConnectionEvents* events) {
      if (events->refs.fetch_sub(1) == 1) delete events;
    }
  };
  // Reports the store unwritable once the connection has been lost for longer than the grace
  // period (from the republisher thread).
  void CheckConnection();
  static void OnDisconnected(natsConnection* nc, void* events);
  static void OnReconnected(natsConnection* nc, void* events);
  static void OnClosed(natsConnection* nc, void* events);
  static void OnAsyncError(natsConnection* nc, natsSubscription* sub, natsStatus s, void* events);
  ConnectionEvents* events_ = nullptr;
  // hookrelay_store_errors_total{kind}: failed job writes (appends, retries, dead letters).
  static constexpr const char* kStoreErrorKinds[] = {"no_space", "io_error", "unavailable",
                                                     "other"};
  static const char* StoreErrorKind(natsStatus status, jsErrCode code, std::string_view text);
  // A publish not acknowledged (nullptr: no answer at all).
  static const char* StoreErrorKind(const jsPubAckErr* pae) {
    return pae == nullptr ? "unavailable"
                          : StoreErrorKind(pae->Err, pae->ErrCode,
                                           pae->ErrText != nullptr ? pae->ErrText : "");
  }
  void CountStoreError(const char* kind);
  std::array<prometheus::Counter*, 4> store_errors_{};
  prometheus::Histogram* commit_duration_ = nullptr;
  prometheus::Histogram* commit_batch_items_ = nullptr;
  prometheus::Counter* duplicates_ = nullptr;
  prometheus::Counter* dedup_lookup_failures_ = nullptr;
  void WatchLoop(kvWatcher* watcher);

  JetStreamJobStore(Options options, const common::Clock& clock);
  static void OnPublishAck(jsCtx* js, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* self);
  // `error_kind`: hookrelay_store_errors_total's kind when `status` is a failure.
  void Acked(natsMsg* msg, const absl::Status& status, bool duplicate,
             const char* error_kind = "");
  // Takes the leased message of (job_id, lease) out of the map, or says why not.
  // `taken` (optional) receives the whole entry.
  absl::StatusOr<natsMsg*> TakeLeased(uint64_t job_id, uint64_t lease, Leased* taken = nullptr);
  absl::Status PublishSync(const std::string& subject, const std::string& body,
                           const std::vector<std::pair<std::string, std::string>>& headers);
  // Publishes a retry or dead letter asynchronously; its ack settles `leased` (ack when stored,
  // nak when not). Takes `leased`. An error here means nothing was sent (leased nak'ed).
  absl::Status PublishSettle(const std::string& subject, const std::string& body,
                             const std::vector<std::pair<std::string, std::string>>& headers,
                             natsMsg* leased);
  // Retry and dead-letter publishes in flight → the leased message each settles.
  struct Settling {
    natsMsg* leased = nullptr;
    absl::Time first_failure = absl::InfiniteFuture();
  };
  absl::flat_hash_map<natsMsg*, Settling> settling_ ABSL_GUARDED_BY(mu_);

  const Options options_;
  const common::Clock& clock_;
  natsOptions* nats_options_ = nullptr;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
  kvStore* config_kv_ = nullptr;
  std::unique_ptr<JetStreamUserData> user_data_;
  // The cluster's health as metrics (with a registry only).
  std::unique_ptr<JetStreamClusterHealth> health_;

  absl::Mutex mu_;
  // Retries scheduled through the server by this collector, by due time (ms of the store's
  // clock), until they come back; and jobs fetched before their due time on the store's clock,
  // held until it (only with a manual clock or a clock behind the server's).
  std::multiset<int64_t> scheduled_due_ ABSL_GUARDED_BY(mu_);
  std::multimap<int64_t, natsMsg*> held_ ABSL_GUARDED_BY(mu_);
  // The KV revision of the configuration this collector last loaded, saved or saw.
  uint64_t config_revision_ ABSL_GUARDED_BY(mu_) = 0;
  // The config watch: its callback (replaced or cleared under callback_mu_) and thread.
  absl::Mutex callback_mu_;
  ConfigChanged config_changed_ ABSL_GUARDED_BY(callback_mu_);
  kvWatcher* config_watcher_ = nullptr;
  std::thread watcher_;
  struct Publishing {
    std::shared_ptr<PendingAppend> append;
    size_t item = 0;
    absl::Time first_failure = absl::InfiniteFuture();
  };
  absl::flat_hash_map<natsMsg*, Publishing> publishing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Leased> leased_ ABSL_GUARDED_BY(mu_);
  natsSubscription* lookup_sub_ = nullptr;
  std::string lookup_inbox_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Lookup>> lookups_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lookup_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  // Lease() runs one at a time.
  absl::Mutex fetch_mu_;
  // The threads making a Lease call's per-user order checks side by side (made at the first).
  std::unique_ptr<common::WorkerPool> order_checks_ ABSL_GUARDED_BY(fetch_mu_);
  // The destinations' consumers, fetched from asynchronously; raises the ready signal when jobs
  // arrive.
  std::unique_ptr<JetStreamPulls> pulls_;
  // The ready signal: raised when fetched jobs arrive, and by its timer on the store's
  // clock when a held job falls due (NextDue). Created by Open, stopped first by the destructor.
  std::unique_ptr<ReadySignal> ready_signal_;
  // Publishes refused for a moment (no responders while a node rejoins, a leader election) are
  // sent again after a pause, for up to kRepublishFor, by this thread.
  void RepublishLoop();
  std::deque<std::pair<absl::Time, natsMsg*>> republish_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread republisher_;

  // Acks of delivered jobs go out in bursts: kAckBurstDelay after the first ack of a burst, or
  // at once when kAckBurstSize are waiting. The consumer's leader replicates the acks it has
  // received in one consensus round, so acks that arrive together cost the servers less than
  // the same acks one by one. An ack held back here when the collector dies is a redelivery,
  // never a loss; the destructor sends what is waiting before the connection closes.
  void AckLoop();
  void SendAcks(std::vector<natsMsg*>& msgs);
  absl::Mutex ack_mu_;
  std::vector<natsMsg*> acks_ ABSL_GUARDED_BY(ack_mu_);
  bool acks_stopping_ ABSL_GUARDED_BY(ack_mu_) = false;
  std::thread acker_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_JOB_STORE_H_
