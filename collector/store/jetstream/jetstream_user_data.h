// The JetStream engine's user data (issue 12; SPEC §6): the per-user index, deletions, profiles
// and audiences, owned by JetStreamJobStore and given its connection. docs/DESIGN.md ("The
// JetStream engine", "Deletions and audiences on JetStream") says why it is shaped this way.
//
// Streams (created and checked with the others, collector/store/jetstream/jetstream_layout.h):
//   HR_USERS      hr.users.<U>.<S>: the user was seen in the source (one message per subject).
//                 Published with the event's jobs when this collector's cache of pairs already
//                 written misses.
//   HR_PROFILES   hr.prof.<S>.<U>: one message per v1::ProfileDelta (published with the event's
//                 jobs, Nats-Msg-Id from the event's dedup marker), folded on read; a read that
//                 folds many, and a background thread for profiles this collector published
//                 many deltas to, roll them up into one v1::Profile (Nats-Rollup: sub, header
//                 Hr-Profile: full, refused if a delta arrived meanwhile). The stream sequence is
//                 the profile change log: a sync reads hr.prof.<S>.* from its cursor.
//   HR_DELETIONS  hr.del.rec.<deletion id>: the record (state unset while applying, COMPLETED
//                 once done; header Hr-Jobs-Upto); hr.del.req.<request id>: the claim of a
//                 request id (published with Nats-Expected-Last-Subject-Sequence 0).
//   HR_AUDIENCES  hr.aud.state.<A> (v1::AudienceState), hr.aud.m.<A>.<U> (a membership as last
//                 sent), hr.aud.rx.<A>.<minute>.<ms>.<U> (evaluate again then), hr.aud.lock.<A>
//                 (the collector syncing it, with an expiry). One message per subject.
// <U>, <S>, <A> are JetStreamToken()s.
//
// A deletion (ApplyDeletion) cannot be one atomic write across streams. It claims the request
// id (when it has one), writes its plan and progress (hr.del.plan.<id>: the HR_JOBS sequence L
// it purges up to, the notifications made once), records "applying" with L, counts then purges
// by subject (the user's ready and scheduled jobs of each source with a sequence <= L, dead
// letters, index entries, profiles), removes memberships (member counts by compare-and-set,
// once per deletion), publishes the notifications (atomic batches with a marker: once), sweeps
// what collectors that had not yet received the record stored for purged jobs, noting each
// step in the progress record (compare-and-set), records COMPLETED and removes the progress. Every
// step is safe to run again after a crash (docs/DESIGN.md). A collector that dies mid-way
// leaves the progress record: any collector finishes the deletion from there once it has not
// moved for --nats_deletion_resume_after (ResumeLoop). A re-run of the request id finishes an
// unfinished one at once, or answers the completed record. A job leased while its subject
// was purged finishes its attempt: Retry and Bury drop it (PurgedByDeletion), every collector
// learning L from the records it sees on hr.del.rec.>.
//
// An audience sync takes hr.aud.lock.<A> (compare-and-set; another collector syncing it makes
// BeginAudienceSync answer ABORTED), reads profile messages with batched direct gets confirmed
// by the stream leader (nothing newer than what a lagging replica answered is missed), reads
// memberships from the leader, and commits in an order safe to re-run: identify jobs (Nats-Msg-Id
// from the state's sequence, user, direction and destination), memberships, rechecks, then the
// state (compare-and-set, retried over deletions' count changes) and the lock's release.
//
// Thread-safe.
#ifndef HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_USER_DATA_H_
#define HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_USER_DATA_H_

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/store/jetstream/jetstream_layout.h"
#include "collector/store/store.h"
#include "common/clock.h"

namespace hookrelay::collector {

class JetStreamUserData {
 public:
  // Not owned; `nc` must outlive this object (destroy it before closing the connection).
  // `stop_deletion_after` (tests; may be empty): true for a step name stops a deletion right
  // after that step, as a crash of the collector would (the call answers UNAVAILABLE).
  static absl::StatusOr<std::unique_ptr<JetStreamUserData>> Start(
      natsConnection* nc, const JetStreamLayout& layout, const common::Clock& clock,
      std::function<bool(std::string_view step)> stop_deletion_after = nullptr);
  ~JetStreamUserData();

  // The append hook: for each item to publish (publish[i]), the messages that go with its jobs
  // (its index entry on a cache miss, its profile delta), appended to `out` with item index
  // kNotAJob. The caller publishes and acknowledges them like the jobs. `done` is wrapped so that
  // the index pairs of stored items enter the cache once the append succeeded.
  static constexpr size_t kNotAJob = ~size_t{0};
  void AddAppendMessages(const std::vector<AppendItem>& items, const std::vector<bool>& publish,
                         std::vector<std::pair<natsMsg*, size_t>>* out,
                         Store::AppendCallback* done);

  // Called with the destination of each job the user data publishes (delete notifications,
  // audience calls) before it is published: the job queue makes sure the destination's consumer
  // exists. Set once, before the first deletion or sync.
  void SetReadyJobsHook(std::function<void(std::string_view destination_id)> hook) {
    ready_jobs_hook_ = std::move(hook);
  }

  // The Lease / Retry / Bury hook: whether the job `job_id` (its HR_JOBS sequence), fetched or
  // leased by this collector, was purged by a deletion meanwhile: it is not handed out, or its
  // attempt's outcome is dropped.
  bool PurgedByDeletion(const hookrelay::v1::Job& job, uint64_t job_id);

  absl::StatusOr<std::vector<std::string>> SourcesSeen(std::string_view user_id);
  absl::StatusOr<DeletionOutcome> ApplyDeletion(DeletionPlan plan);
  absl::StatusOr<std::optional<hookrelay::v1::Deletion>> GetDeletion(std::string_view id);
  absl::StatusOr<std::vector<hookrelay::v1::Deletion>> ListDeletions(std::string_view before_id,
                                                                     size_t limit);
  absl::StatusOr<AudienceSyncInput> BeginAudienceSync(std::string_view audience_id,
                                                      const std::vector<std::string>& sources,
                                                      absl::Time now);
  absl::StatusOr<std::vector<AudienceUser>> ReadAudienceUsers(
      std::string_view audience_id, const std::vector<std::string>& users,
      const std::vector<std::string>& sources);
  absl::StatusOr<hookrelay::v1::AudienceState> CommitAudienceSync(AudienceSyncPlan plan);
  absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> GetAudienceState(
      std::string_view audience_id);
  absl::Status DropAudience(std::string_view audience_id);

  // One message of a stream as read back.
  struct Stored {
    uint64_t seq = 0;
    std::string subject;
    std::string data;
    bool full_profile = false;  // Hr-Profile: full
    uint64_t pending = 0;       // direct gets: matching messages after this one
    std::string headers;        // STREAM.MSG.GET: the header block ("NATS/1.0\r\nKey: v\r\n...")
  };

  // The connection's state, from its callbacks (JetStreamJobStore): a collector cut off from
  // the cluster misses the deletion records published meanwhile (core NATS). From the
  // disconnect until it has read them back (CatchUp) it hands out no job (CaughtUp false).
  void NoteConnection(bool connected);
  bool CaughtUp() const { return !cut_off_.load(std::memory_order_acquire); }
  // Called (resumer thread) once the records missed were read back: the job queue raises its
  // ready signal. Set once, before the first disconnect can happen.
  void SetCaughtUpHook(std::function<void()> hook) { caught_up_hook_ = std::move(hook); }

 private:
  std::function<void(std::string_view)> ready_jobs_hook_;
  // Messages per direct batch request.
  static constexpr int kBatch = 256;
  // Messages per atomic batch: the server's limit.
  static constexpr size_t kMaxAtomicBatch = 1000;

  JetStreamUserData(natsConnection* nc, const JetStreamLayout& layout, const common::Clock& clock);

  // A deletion's step done: true when it must stop here (a test's stop_deletion_after). With
  // HOOKRELAY_CRASH_IN_DELETION=<step> in the environment the process kills itself instead
  // (tests/jetstream_deletion_crash_test.cc).
  bool StopAfter(std::string_view step);
  std::function<bool(std::string_view)> stop_deletion_after_;

  // A request and its answers. A direct batch get answers several messages and a status.
  struct Request {
    std::string subject;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
  };
  struct Answer {
    std::vector<Stored> messages;  // direct gets: the messages; otherwise the body in [0].data
    std::string status;            // "" or the status of the last message (204, 404, ...)
  };
  // Sends the requests pipelined (a window at a time) and collects their answers; requests
  // answered by a passing failure (no responders, no answer) are
  // sent again for up to 10 s. `batch`: answers end with a status message (direct gets).
  absl::StatusOr<std::vector<Answer>> Exchange(const std::vector<Request>& requests, bool batch);

  // The JSON API with passing failures retried.
  absl::StatusOr<JetStreamApiReply> Api(const std::string& subject, const std::string& body);
  absl::StatusOr<uint64_t> LastSeq(const char* stream);
  // The subjects of `stream` matching `filter` (STREAM.INFO subjects_filter, paged).
  absl::StatusOr<std::vector<std::string>> Subjects(const char* stream, const std::string& filter);
  // The messages of `stream` on the subjects matching `filter` (the same listing, added up).
  absl::StatusOr<uint64_t> CountMessages(const char* stream, const std::string& filter);
  // Both: (subject, messages) pairs.
  absl::StatusOr<std::vector<std::pair<std::string, uint64_t>>> SubjectCounts(
      const char* stream, const std::string& filter);
  // Purges `filter`; below_seq > 0 keeps messages with a sequence >= below_seq. How many went.
  absl::StatusOr<uint64_t> Purge(const char* stream, const std::string& filter,
                                 uint64_t below_seq = 0);
  // The last message of `subject`, read from the stream leader.
  absl::StatusOr<std::optional<Stored>> GetLast(const char* stream, const std::string& subject);
  // Publishes one message and waits for its ack: the sequence, or FAILED_PRECONDITION when an
  // expected-last-subject-sequence header was not met.
  absl::StatusOr<uint64_t> Publish(Request request);
  // Publishes many (pipelined); every one acknowledged or an error.
  absl::Status PublishAll(const std::vector<Request>& requests);
  // Publishes `requests` (at most 1,000, one stream) as one atomic batch: all stored or none.
  // FAILED_PRECONDITION when a message's expected-last-subject-sequence header was not met
  // (then none was stored).
  absl::Status PublishAtomic(const std::vector<Request>& requests);
  // STREAM.MSG.GET requests (answered by the stream leader), pipelined: each body's message or
  // nullopt.
  absl::StatusOr<std::vector<std::optional<Stored>>> LeaderGets(
      const char* stream, const std::vector<std::string>& bodies);
  // Every message matching each filter, in order, none missed by a lagging replica.
  absl::StatusOr<std::vector<std::vector<Stored>>> ReadAll(const char* stream,
                                                           const std::vector<std::string>& filters);
  // The last message of each subject that has one, from the leader.
  absl::StatusOr<std::vector<Stored>> LastOf(const char* stream,
                                             const std::vector<std::string>& subjects);

  // Profiles rolled up off the ingest path: a subject this collector published kCompactAfter
  // deltas to since it last queued it is folded and rolled up by the compactor thread (so that
  // profiles no audience reads stay bounded too).
  void CompactLoop();
  absl::Status RollUp(const std::string& subject);
  absl::StatusOr<bool> TryRollUp(const std::string& subject);  // false: refused, a delta came

  // Deletion records published by any collector: cache invalidation and purge marks.
  static void OnRecord(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* self);
  // Also: the index watches of `record`'s pairs (IndexWatch), and, once it is COMPLETED, the
  // entries of the pairs appended meanwhile written again.
  // `planned_ms`: when the deletion read jobs_upto (real time; 0 unknown).
  void NotePurge(const hookrelay::v1::Deletion& record, uint64_t jobs_upto, int64_t planned_ms);
  absl::StatusOr<DeletionOutcome> Resume(DeletionPlan& plan, const std::string& earlier_id);
  // Writes the plan's progress record, then Finish.
  absl::StatusOr<DeletionOutcome> Apply(DeletionPlan& plan);
  // The steps not yet done by `p` (whose record is at HR_DELETIONS sequence `seq`), each noted
  // in the progress record; the record COMPLETED, the progress removed. ABORTED when another
  // collector moved the progress meanwhile (it is finishing the deletion).
  absl::StatusOr<DeletionOutcome> Finish(hookrelay::v1::DeletionProgress& p, uint64_t seq);
  // Finish for a caller waiting for the deletion: when another collector took it over, its
  // COMPLETED record (awaited up to 60 s).
  absl::StatusOr<DeletionOutcome> FinishOrAwait(hookrelay::v1::DeletionProgress& p, uint64_t seq);
  // Compare-and-set of the progress record: its new sequence, or ABORTED.
  absl::StatusOr<uint64_t> SaveProgress(const hookrelay::v1::DeletionProgress& p, uint64_t seq);
  // Deletions left unfinished by a collector that died: every progress record that has not
  // moved for layout_.deletion_resume_after is finished here. Run by the resumer thread, at
  // start and then periodically.
  void ResumeLoop();
  void ResumeStale();
  // Reads the deletion records published since records_seen_upto_ (those a disconnect may have
  // hidden), notes their purge marks, then, 2 s later (this collector's settlements buffered
  // while it was cut off have landed), sweeps the jobs they purged that it stored meanwhile.
  absl::Status CatchUp();
  // Both changed under connection_mu_ (a disconnect racing the end of a catch-up keeps the
  // collector cut off); cut_off_ read without it.
  absl::Mutex connection_mu_;
  std::atomic<bool> cut_off_{false};
  std::atomic<uint64_t> disconnects_{0};
  // HR_DELETIONS' last sequence, read while connected (no disconnect since): records up to it
  // reached this collector.
  std::atomic<uint64_t> records_seen_upto_{0};
  bool catch_up_wanted_ ABSL_GUARDED_BY(compact_mu_) = false;
  std::function<void()> caught_up_hook_;
  // A deletion's first step (DeletionProgress.fenced): the user's profiles counted and purged,
  // each audience's fence published, L read and saved with the progress (seq: its sequence).
  absl::Status Fence(hookrelay::v1::DeletionProgress& p, uint64_t& seq, size_t* touched);
  // An audience sync's identify jobs, stored unless the audience's fence moved past `fence`
  // (a deletion began): then Aborted, and nothing of the batch refused is stored.
  absl::Status PublishFenced(const std::string& audience, uint64_t lock_seq, uint64_t fence,
                             const std::vector<Request>& jobs);
  // The jobs and dead letters of `record`'s user carrying a job id <= upto, deleted (counted).
  absl::Status SweepPurgedJobs(const hookrelay::v1::Deletion& record, uint64_t upto,
                               uint64_t* jobs, uint64_t* dead, size_t* touched);
  // Progress records seen by ResumeStale: subject → (sequence, since when). Resumer thread only.
  absl::flat_hash_map<std::string, std::pair<uint64_t, absl::Time>> progress_seen_;
  std::thread resumer_;
  // The user's membership in audience p.audience_ids(p.audiences_done()) removed and, when
  // there was one, the member counted out once (noted in the state's counted_out_by).
  absl::Status RemoveMembership(hookrelay::v1::DeletionProgress& p, uint64_t& seq,
                                size_t* touched);
  // The count of `audience` one less, once per `key` (AudienceState.counted_out_by).
  absl::Status CountOut(const std::string& audience, const std::string& key);
  // The notifications of `p` published with a marker (hr.jobs.sched.~.~.<id>.<chunk>) in
  // atomic batches: a resumed deletion finds the marker and sends nothing twice, however long
  // after the crash it resumes.
  absl::Status PublishNotifications(const hookrelay::v1::DeletionProgress& p);
  // Once the "applying" record has had time to reach every collector (kMarkSpread after it was
  // published), removes what collectors that had not yet received it stored for the user after
  // the purges: a retry or dead letter of a job the deletion purged (its id <= jobs_upto), and
  // a membership an audience sync committed while the profile was being purged. Adds them to
  // the counts.
  absl::Status Sweep(hookrelay::v1::DeletionProgress& p, absl::Time recorded_at,
                     size_t* touched);
  // STREAM.MSG.DELETE: true when it was there.
  absl::StatusOr<bool> DeleteMessage(const char* stream, uint64_t seq);
  // Read-modify-write of an audience's state, retried on concurrent changes. `change` returns
  // false to give up (nothing written).
  absl::StatusOr<hookrelay::v1::AudienceState> UpdateState(
      const std::string& audience,
      absl::AnyInvocable<absl::StatusOr<bool>(std::optional<hookrelay::v1::AudienceState>&)>
          change);

  natsConnection* const nc_;
  const JetStreamLayout layout_;
  const common::Clock& clock_;
  const std::string owner_;  // This process, in audience locks.
  std::string inbox_;
  std::atomic<uint64_t> next_exchange_{1};
  std::atomic<uint64_t> next_publish_{1};
  natsSubscription* records_ = nullptr;

  // (user, source) pairs whose index entry is known written: a direct-mapped cache of pair
  // hashes (0 = empty), cleared by every deletion this collector sees.
  // Shared with the append callbacks it wraps, which may run after this object is gone.
  static constexpr size_t kSeenCacheSlots = size_t{1} << 16;
  struct SeenCache {
    std::unique_ptr<std::atomic<uint64_t>[]> slots;
    std::atomic<uint64_t> generation{0};
    // The pairs of the latest appends (direct-mapped like the cache, whatever the cache holds)
    // and when (real time, ms): a deletion's record tells whether the user was seen here in the
    // milliseconds between the purge of its index entry and the record's arrival.
    std::unique_ptr<std::atomic<uint64_t>[]> recent_pairs;
    std::unique_ptr<std::atomic<int64_t>[]> recent_ms;
  };
  std::shared_ptr<SeenCache> seen_;

  // Index entries kept across a deletion: from its "applying" record to its COMPLETED one, the
  // (user, source) pairs it purges are watched here; a pair this collector appended an event of
  // meanwhile (or just before the record came, after the purge) gets its index entry written
  // again once the deletion is COMPLETED (its purges done), since the entry that event wrote,
  // or did not write because the pair was cached, may have been purged. pair hash → watch.
  struct IndexWatch {
    std::string user_token;
    std::string source_token;
    bool appended = false;
    absl::Time since;
  };
  absl::flat_hash_map<uint64_t, IndexWatch> index_watch_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> any_index_watch_{false};

  absl::Mutex compact_mu_;
  absl::flat_hash_map<std::string, int> deltas_published_ ABSL_GUARDED_BY(compact_mu_);
  std::deque<std::string> compact_queue_ ABSL_GUARDED_BY(compact_mu_);
  bool stopping_ ABSL_GUARDED_BY(compact_mu_) = false;
  std::thread compactor_;

  std::atomic<bool> any_purges_{false};
  absl::Mutex mu_;
  // Purge marks: pair hash → (HR_JOBS sequence purged up to, when noted), kept kPurgeMarkFor.
  absl::flat_hash_map<uint64_t, std::pair<uint64_t, absl::Time>> purged_ ABSL_GUARDED_BY(mu_);
  // Per audience, what BeginAudienceSync saw: the state's sequence and last sync time.
  struct SyncSeen {
    uint64_t state_seq = 0;
    int64_t last_sync_ms = -1;
    uint64_t lock_seq = 0;
    absl::Time lock_refreshed;
  };
  absl::flat_hash_map<std::string, SyncSeen> syncs_ ABSL_GUARDED_BY(mu_);
};

// The 64-bit hash of a (user, source) pair used by the cache and the purge marks.
uint64_t UserSourceHash(std::string_view user, std::string_view source);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_USER_DATA_H_
