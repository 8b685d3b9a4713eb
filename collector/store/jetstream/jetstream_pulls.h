// The JetStream engine's job queues as the servers keep them (issue 23): one durable pull
// consumer per destination on HR_JOBS, "dest-<D>" filtered on hr.jobs.ready.<D>.*.*, so that a
// destination that is throttled is simply not fetched from and its jobs stay on the servers,
// unleased and untouched, while the others' flow. The consumer of the layout before it
// ("dispatch", hr.jobs.ready.*.*: jobs published by an older collector, or stored before an
// upgrade) is fetched from too, without a budget (jobs whose destination is not known before
// they are read: JobQueue::Lease), until nothing is left on it.
//
// Fetching is asynchronous: a pull request (CONSUMER.MSG.NEXT, up to kPullBatch jobs, held by the
// server for up to kPullExpiry) per consumer at most, answered on one inbox subscription; the
// jobs wait in the consumer's buffer until Take hands them out. A pull is opened when Take finds a
// destination's budget larger than what its buffer holds, and again when one ends while the last
// budget still wants more; a throttled destination (budget 0) has none open. Jobs buffered longer
// than a quarter of the ack wait go back to their consumer (nak): a lease never runs out unseen.
//
// Consumers are found three ways: listed at start (CONSUMER.NAMES), created by this collector the
// first time it publishes a job for a destination (NoteDestination: on a background thread, the
// publish does not wait; a work-queue stream keeps the jobs until the consumer exists and
// starts from the first), and listed again every kRescanEvery for those other collectors made.
//
// Messages arrive on a plain subscription: cnats' natsMsg_Ack family needs a JetStream
// subscription, so acknowledgements go through JsAck and its siblings below, published to the
// message's reply subject as the JetStream protocol defines them.
#ifndef HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_PULLS_H_
#define HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_PULLS_H_

#include <nats/nats.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/store/jetstream/jetstream_layout.h"
#include "collector/store/job_queue.h"

namespace hookrelay::collector {

// Acknowledgements of a message fetched from a consumer (see above). An error means the
// connection is down: the message comes back when its ack wait ends.
natsStatus JsAck(natsConnection* nc, natsMsg* msg);
// Back to the consumer now, or after `delay_ms`.
natsStatus JsNak(natsConnection* nc, natsMsg* msg, int64_t delay_ms = 0);
// Never to be delivered again (an unreadable message).
natsStatus JsTerm(natsConnection* nc, natsMsg* msg);
// The ack wait starts again.
natsStatus JsInProgress(natsConnection* nc, natsMsg* msg);

class JetStreamPulls {
 public:
  // Jobs asked for per pull request, and how long the server holds one open (at most).
  static constexpr int kPullBatch = 256;
  static constexpr absl::Duration kPullExpiry = absl::Seconds(10);
  static constexpr absl::Duration kRescanEvery = absl::Seconds(2);

  struct Options {
    // Not owned; outlives this object.
    natsConnection* nc = nullptr;
    JetStreamLayout layout;
    // Jobs arrived, or a consumer was found (the engine's ready signal). Called on the client's
    // threads without any lock of this class held; must not block.
    std::function<void()> on_jobs;
  };
  // Subscribes to the pulls' answers, lists the consumers and starts the background thread.
  static absl::StatusOr<std::unique_ptr<JetStreamPulls>> Start(Options options);
  // Stops fetching; jobs buffered and not taken come back to their consumers when their ack
  // wait ends (or at once: they are nak'ed when the connection is still up).
  ~JetStreamPulls();

  JetStreamPulls(const JetStreamPulls&) = delete;
  JetStreamPulls& operator=(const JetStreamPulls&) = delete;

  // A job of `destination_id` is being published: its consumer is created if this collector has
  // not seen it yet (on the background thread; returns at once). Cheap when known.
  void NoteDestination(std::string_view destination_id);

  // Up to `max` buffered jobs, each destination within its budget (asked at most once per
  // consumer, and only of consumers that may have jobs: some buffered, or no pull open), the
  // oldest due first across destinations and in order within one. Buffered jobs older than
  // `fresh_after` are returned in `stale` instead (to go back to their consumer). Opens the pulls
  // the budgets want. The caller owns the messages returned.
  //
  // A destination kept in per-user order hands out every job it holds (up to `max`): most are
  // not their key's first and go back to wait, so the budget applies to what the caller leases
  // after its order checks (`ordered_budget`, per consumer name), not to what it examines; the
  // heads beyond the budget come back through PutBack.
  struct Taken {
    std::vector<natsMsg*> jobs;
    std::vector<absl::Time> fetched_at;  // parallel to jobs
    std::vector<natsMsg*> stale;
    absl::flat_hash_map<std::string, size_t> ordered_budget;
  };
  Taken Take(size_t max, JobQueue::LeaseBudget budget, absl::Time fresh_after);

  // Jobs that Take handed out and the caller sent back to their consumer unleased (per-user
  // order: a job waiting behind its key's job in flight), per consumer name: the demand they
  // took stands again, and pulls open for it.
  void Return(const absl::flat_hash_map<std::string, size_t>& sent_back);

  // A job Take handed out that the caller does not lease now (beyond its destination's budget):
  // back to the front of its consumer's buffer, as fetched at `fetched_at`.
  void PutBack(std::string_view consumer, natsMsg* msg, absl::Time fetched_at);

  // Jobs buffered and not taken, and the earliest due time (ms) among those due by `now_ms`.
  struct Buffered {
    int64_t count = 0;
    std::optional<int64_t> oldest_due_ms;
  };
  Buffered BufferedJobs(int64_t now_ms);

  // The consumers known: name and filter subject (the engine's counts read each one's state).
  struct Consumer {
    std::string name;
    std::string filter;
  };
  std::vector<Consumer> Consumers();

 private:
  // A job fetched and not taken yet.
  struct Fetched {
    absl::Time at;   // when it arrived
    int64_t due = 0; // its due_unix_ms
    uint64_t seq = 0;  // its stream sequence
    natsMsg* msg = nullptr;
  };
  struct Queue {
    size_t index = 0;
    std::string name;
    std::string filter;
    std::string destination;
    bool legacy = false;  // The dispatch consumer: no budget, jobs of any destination.
    bool created = false;  // Exists on the servers (as far as this collector knows).
    std::deque<Fetched> buffer;
    // The pull request open on it: jobs it may still bring, and when the server lets it go.
    bool pull_open = false;
    int pull_left = 0;
    absl::Time pull_expires;
    // No pull before then (after the server refused one).
    absl::Time retry_after = absl::InfinitePast();
    // What the last Take's budget (within its max) wanted of it and did not get: pulls bring up
    // to that many (the demand stands until a Take changes it, or its jobs go stale).
    size_t wanted = 0;
    // The last budget was the whole of the Take's max: pulls fetch full batches.
    bool unlimited = false;
    // Its jobs carry ordering keys (per-user order): pulls fetch full batches while it has budget.
    bool ordered = false;
    // No Take has asked for it yet (this collector has no deliverers), or its fetched jobs went
    // stale with no Take asking since: no pull until a Take asks (a collector without deliverers
    // must not take jobs that another collector's deliverers are waiting for).
    bool idle = true;
  };

  explicit JetStreamPulls(Options options);
  static void OnMessage(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* self);
  void HandleMessage(natsMsg* msg);
  // Marks a pull open on `q` for up to `batch` jobs; the request to send (after unlocking).
  struct PullRequest {
    std::string subject;
    std::string reply;
    std::string body;
  };
  PullRequest OpenPull(Queue& q, int batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pull `q` wants now, if any (budget left, none open, not backing off).
  std::optional<PullRequest> WantedPull(Queue& q, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendPulls(const std::vector<PullRequest>& pulls);
  // Moves `q`'s jobs fetched before `fresh_after` to `stale`; whether there were any (the queue's
  // demand is then dropped, unless a Take came since `fresh_after`).
  bool TakeStale(Queue& q, absl::Time fresh_after, std::vector<natsMsg*>* stale)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a queue (unknown names only); returns it.
  Queue& AddQueue(std::string name, std::string filter, std::string destination, bool legacy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lists the consumers of HR_JOBS and adds those not known yet. Whether the listing answered.
  bool Rescan();
  // Creates the consumers of the destinations waiting in to_create_.
  void CreateWaiting();
  void BackgroundLoop();

  const Options options_;
  // kPullExpiry, or an eighth of the ack wait when that is shorter: a pull left open by a
  // collector whose deliverers went away ends well before its jobs go stale (a quarter of the
  // ack wait), so that the jobs it hands back go to other collectors, not into it again.
  const absl::Duration pull_expiry_;
  natsSubscription* sub_ = nullptr;
  std::string inbox_;

  absl::Mutex mu_;
  // Indexed by Queue::index (the pull's reply subject names it); never shrinks.
  std::vector<std::unique_ptr<Queue>> queues_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Queue*> by_name_ ABSL_GUARDED_BY(mu_);
  // Destinations whose consumer this collector knows exists (or is being created).
  absl::flat_hash_set<std::string> noted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> to_create_ ABSL_GUARDED_BY(mu_);
  // Creations that failed: tried again a second later.
  std::vector<std::string> failed_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // When Take was last called.
  absl::Time last_take_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::CondVar wake_;
  std::thread background_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_PULLS_H_
