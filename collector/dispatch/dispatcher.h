// The collector side of Collector.Subscribe: hands leased jobs to connected deliverers and
// applies the outcomes they send back. The core knows no gRPC: each deliverer's stream is a
// DeliveryStream, implemented by the gRPC reactor of collector/dispatch/subscribe_stream.h.
//
// Protocol (proto/hookrelay/v1/collector.proto): the deliverer opens the stream with a Hello
// granting credits; the dispatcher sends Delivery batches (each job leased for the store's
// lease duration, with its destination's current settings attached) while the stream
// has credits; every Outcome returns one credit, a Credit message grants more. Each OutcomeBatch
// is stored with one JobQueue::Settle: DELIVERED completes, RETRY retries at not_before, DEAD
// buries with the reason. An outcome whose lease is no longer current (it expired and the job
// went to someone else) is ignored.
//
// A job whose destination was removed or disabled since it was queued is dead-lettered here
// ("destination ... disabled"), never delivered: replay brings it back once the destination is
// enabled again.
//
// Per-destination protection (collector/dispatch/destination_governor.h): the store's queue is
// per destination, and each Lease carries every destination's headroom under its adaptive
// concurrency limit (with a fair share of the deliverers' credits while other destinations have
// work), its rate limit and its circuit breaker, so a destination at its limits is not asked and
// its jobs stay queued; a destination held back by time wakes the dispatcher when that time comes
// (a ReadySignal of its own, on the clock). Every customer job leased is then admitted; one
// refused all the same (see JobQueue::Lease) is put back in the store without counting an attempt
// (Retry with an empty Attempt), due when the destination can take it. A failed attempt whose every URL answered 410 Gone
// disables the destination through Options::on_destination_gone (the admin API's path).
//
// One dispatch thread leases for every stream, round robin, woken by Notify() only: the store's
// ready signal (JobQueue::SetReadyCallback: jobs stored, a retry falling due or a lease running
// out on the store's clock, so a ManualClock's Advance wakes it through the store), a new
// configuration, and the streams' credits, outcomes and connections. There is no poll.
//
// Shutdown stops leasing, waits up to Options::drain_timeout for the outcomes of jobs already
// sent, then ends every stream with UNAVAILABLE and waits (up to 10 s) until every stream is done,
// so that no gRPC callback uses the dispatcher or the store afterwards. Jobs still unsettled then simply return to
// the ready set when the store reopens (leases are not durable).
#ifndef HOOKRELAY_COLLECTOR_DISPATCH_DISPATCHER_H_
#define HOOKRELAY_COLLECTOR_DISPATCH_DISPATCHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/dispatch/destination_governor.h"
#include "collector/routing/routing.h"
#include "collector/store/job_queue.h"
#include "collector/store/ready_signal.h"
#include "common/clock.h"
#include "hookrelay/v1/collector.pb.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace hookrelay::collector {

// One deliverer's stream as the dispatcher sees it. Thread-safe. At most one response is
// reserved or being written at a time.
class DeliveryStream {
 public:
  virtual ~DeliveryStream() = default;

  // Dispatcher thread: reserves the write slot when the stream can take jobs now or has not
  // been told `routing`'s destinations yet (which are then put in the response). Returns false
  // when nothing is reserved; otherwise *want is how many jobs it may be sent (maybe 0).
  virtual bool Reserve(size_t max_batch, const std::shared_ptr<const Routing>& routing,
                       size_t* want) = 0;
  // The reserved response, to fill between Reserve and Send.
  virtual hookrelay::v1::SubscribeResponse& response() = 0;
  // Sends the reserved response (or releases the slot when it is empty).
  virtual void Send() = 0;
  // Credits granted: jobs held plus credits available (0 while draining).
  virtual int64_t capacity() const = 0;
  // Collectors the deliverer said it subscribes to (at least 1).
  virtual int collectors() const = 0;
  // Jobs sent and not yet settled.
  virtual int64_t held() const = 0;
  // The deliverer takes deliveries that name their destination (Hello.destinations_by_reference):
  // Reserve then puts the destinations themselves in the response that announces a routing, and
  // deliveries go without a copy of theirs.
  virtual bool destinations_by_reference() const { return false; }
  // Ends the stream with `status` once no write is reserved or in flight; nothing is sent after.
  virtual void RequestFinish(absl::Status status) = 0;
};

class Dispatcher {
 public:
  struct Options {
    // Jobs per SubscribeResponse at most.
    size_t max_batch = 256;
    // A pass starts at most this soon after the previous one (real time): the wakes that come
    // meanwhile (each commit of new jobs, each batch of outcomes) are served by one pass. At
    // 10,000 events/s there were ~2,600 passes a second, each a lease, a gRPC write, a wake of
    // the deliverer's stream thread. A first job after a quiet spell goes at once. 0: no pacing.
    absl::Duration min_pass_interval = absl::Milliseconds(1);
    // Credits one stream may hold at most, whatever it asks for.
    uint32_t max_credits = 20000;
    // Shutdown waits this long for outcomes of jobs already sent.
    absl::Duration drain_timeout = absl::Seconds(5);
    // The outcome of a test job (Job.test, Admin.TestDestination), on a gRPC thread. The job is
    // removed whatever the outcome: test jobs are never retried nor dead-lettered.
    std::function<void(const std::string& message_id, const hookrelay::v1::Outcome& outcome)>
        on_test_outcome;
    // Adaptive concurrency settings.
    DestinationGovernor::Options governor;
    // Disables a destination whose receiver answered 410 Gone (durably, as the admin API
    // does), on a gRPC thread. Not called again for the destination while a call is running
    // or while the destination is disabled. Null: only logged.
    std::function<absl::Status(const std::string& destination_id, const std::string& reason)>
        on_destination_gone;
    // At least this many collectors share each destination's rate limit (each paces rate / n);
    // deliverers' Hello.collectors can raise it.
    int rate_limit_share = 1;
  };

  // Outcomes of a destination's jobs reported to this collector since it started, and the last
  // failed attempt (for the admin API's destination stats).
  struct DestinationStats {
    int64_t delivered = 0;
    int64_t retried = 0;
    int64_t dead = 0;
    std::string last_error;  // "HTTP 503 from host" / "timeout from host"
    absl::Time last_error_at = absl::InfinitePast();
    // Protection state (DestinationGovernor::State).
    int64_t concurrency_limit = 0;
    int64_t in_flight = 0;
    std::string circuit = "closed";
  };

  // References must outlive the dispatcher. `registry` may be null.
  Dispatcher(Options options, JobQueue& store, const RoutingHolder& routing,
             const common::Clock& clock, prometheus::Registry* registry);
  ~Dispatcher();

  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Starts the dispatch thread.
  void Start();
  // New jobs may be ready: wake the dispatch thread. Cheap; any thread.
  void Notify();
  // Counts streams not yet done. Shared with every stream, so a stream's last step (the
  // decrement, after its last use of the dispatcher) never touches freed memory, and Shutdown can
  // wait for it.
  struct Lifeline {
    absl::Mutex mu;
    int open ABSL_GUARDED_BY(mu) = 0;
  };

  // For stream adapters (subscribe_stream.h). A stream counts itself in lifeline() from its
  // creation until its last callback.
  const std::shared_ptr<Lifeline>& lifeline() const { return lifeline_; }
  // Starts handing jobs to `stream`; false (nothing registered) once Shutdown has begun.
  bool Register(std::shared_ptr<DeliveryStream> stream);
  // Stops using `stream`; its adapter calls this in its last callback, its last use of the
  // dispatcher.
  void Unregister(DeliveryStream* stream);
  // A deliverer's outcomes for jobs it was sent (one OutcomeBatch): stored with one
  // JobQueue::Settle. Returns how many jobs they name (an outcome may settle several:
  // Outcome.also_job_ids), one credit each.
  size_t ApplyOutcomes(const google::protobuf::RepeatedPtrField<hookrelay::v1::Outcome>& outcomes,
                       std::string_view deliverer_id);
  // Credits one stream may hold at most (Options::max_credits).
  uint32_t max_credits() const { return options_.max_credits; }
  // Drains and ends every stream, then joins the thread. New streams are refused from then on.
  // Idempotent.
  void Shutdown();

  DestinationStats Stats(const std::string& destination_id) const;

  // Streams currently open.
  int stream_count() const;
  // Dispatch passes started so far (each after a Notify). Tests wait for it
  // to grow to know the loop has looked at the store after they moved a manual clock.
  int64_t passes() const;

 private:
  struct Metrics {
    prometheus::Counter* sent = nullptr;
    prometheus::Counter* delivered = nullptr;
    prometheus::Counter* retried = nullptr;
    prometheus::Counter* dead = nullptr;
    prometheus::Counter* stale = nullptr;
    prometheus::Counter* undeliverable = nullptr;
    prometheus::Gauge* streams = nullptr;
    prometheus::Counter* deferred_concurrency = nullptr;
    prometheus::Counter* deferred_rate = nullptr;
    prometheus::Counter* deferred_circuit = nullptr;
    prometheus::Counter* disabled_gone = nullptr;
    prometheus::Counter* extended = nullptr;
    // Receipt → handed to a deliverer's stream, first attempts never held back (the collector's
    // part of the deliverer's hookrelay_delivery_pickup_seconds).
    prometheus::Histogram* dispatch_latency = nullptr;
  };

  void Run();
  // Leases and sends one batch to `stream` if it can take one. Returns how many jobs were sent.
  size_t FillStream(DeliveryStream& stream);
  // Protection bookkeeping for a customer job's outcome: the governor, the breaker's log line,
  // 410 Gone.
  void GovernOutcome(const std::string& destination_id, uint64_t job_id,
                     const hookrelay::v1::Outcome& outcome);
  // Adds a customer job's outcome to its destination's stats.
  void CountOutcomeLocked(const std::string& destination_id, const hookrelay::v1::Outcome& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stats_mu_);
  bool WakeOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Extends the leases of jobs in flight at connected deliverers that end within a quarter of
  // the lease duration (JobQueue::ExtendLeases), and holds until the next one does.
  void ExtendRunningLeases();
  // A destination with jobs waiting may take some at `at` (its circuit's pause or its rate
  // limit): the hold signal wakes the dispatch thread then, on the injected clock.
  void HoldUntil(absl::Time at);
  absl::Time HoldWake();

  const Options options_;
  JobQueue& store_;
  const RoutingHolder& routing_;
  // The routing whose destinations the store was last told of (ExpectDestinations); held so that
  // a new one is never taken for it. Dispatcher thread only.
  std::shared_ptr<const Routing> expected_for_;
  const common::Clock& clock_;
  Metrics metrics_;
  DestinationGovernor governor_;
  // Credits of all streams (held + available), refreshed each pass: the governor's fair share.
  std::atomic<int64_t> capacity_{0};
  // The most collectors any stream's deliverer subscribes to (Hello.collectors), at least
  // Options::rate_limit_share: each destination's rate limit is divided by it.
  std::atomic<int> rate_share_{1};

  mutable absl::Mutex mu_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  int64_t passes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_pass_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // real time
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<DeliveryStream*, std::shared_ptr<DeliveryStream>> streams_
      ABSL_GUARDED_BY(mu_);
  const std::shared_ptr<Lifeline> lifeline_ = std::make_shared<Lifeline>();

  // Jobs sent and not yet settled: their destination, and whether they are test jobs.
  struct InFlight {
    std::string destination_id;
    bool test = false;
    std::string message_id;  // test jobs only
    uint64_t lease = 0;
    absl::Time deadline;
    // The stream it went to; null once that stream is gone (its lease is left to run out).
    DeliveryStream* stream = nullptr;
  };
  mutable absl::Mutex stats_mu_;
  absl::flat_hash_map<uint64_t, InFlight> in_flight_ ABSL_GUARDED_BY(stats_mu_);
  // (deadline, job id) of the in-flight jobs of connected streams: the leases to extend.
  absl::btree_set<std::pair<absl::Time, uint64_t>> lease_ends_ ABSL_GUARDED_BY(stats_mu_);
  absl::flat_hash_map<std::string, DestinationStats> stats_ ABSL_GUARDED_BY(stats_mu_);
  // Destinations being disabled after a 410 Gone.
  absl::flat_hash_set<std::string> disabling_ ABSL_GUARDED_BY(stats_mu_);
  // Destinations held back by time: the earliest time one may take jobs again, and the signal
  // whose timer (on clock_) calls Notify then.
  absl::Mutex hold_mu_;
  absl::Time hold_until_ ABSL_GUARDED_BY(hold_mu_) = absl::InfiniteFuture();
  ReadySignal hold_signal_{clock_, [this] { return HoldWake(); }};
  std::thread thread_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_DISPATCH_DISPATCHER_H_
