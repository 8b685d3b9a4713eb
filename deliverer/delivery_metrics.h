// The deliverer's Prometheus metrics (SPEC §8 names):
//   hookrelay_delivery_attempts_total{destination,outcome}   one per job attempt; outcome =
//                                                             delivered | retry | dead
//   hookrelay_delivery_requests_total{destination,result}    one per POST to one URL; result =
//       2xx | 3xx | 4xx | 5xx | other_status | timeout | connect_error | tls_error |
//       forbidden_address | transport_error
//   hookrelay_delivery_attempt_duration_seconds              histogram, per POST: the receiver's
//                                                             time (connect to response)
//   hookrelay_delivery_queue_seconds                         histogram, per POST: the wait for a
//                                                             connection slot to its host
//   hookrelay_delivery_end_to_end_seconds                    histogram, collector receipt →
//                                                             delivered
//   hookrelay_delivery_pickup_seconds                        histogram, collector receipt →
//                                                             this deliverer's receipt (first
//                                                             attempts)
//   hookrelay_delivery_retries_total{destination}            attempts that ended in a retry
//   hookrelay_delivery_in_flight_requests                    POSTs sent, not yet answered
//   hookrelay_delivery_jobs_in_flight                        jobs received, outcome not yet sent
// Thread-safe. Children per label set are created on first use and cached.
#ifndef HOOKRELAY_DELIVERER_DELIVERY_METRICS_H_
#define HOOKRELAY_DELIVERER_DELIVERY_METRICS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/synchronization/mutex.h"
#include "deliverer/outcome_policy.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace hookrelay::deliverer {

class DeliveryMetrics {
 public:
  explicit DeliveryMetrics(prometheus::Registry& registry);

  // Exports hookrelay_delivery_attempts_total{destination, outcome} for every outcome, and
  // hookrelay_delivery_retries_total{destination}, at 0 for destinations not seen yet (the
  // collectors announce their destinations on Subscribe), so rate() sees the first increment.
  void DeclareDestinations(const std::vector<std::string>& ids);
  // `n` attempts of one destination with the same outcome (a batch's members: n at once).
  void CountAttempt(std::string_view destination, DecisionKind outcome, int64_t n = 1);
  void CountRequest(std::string_view destination, const UrlResult& result, double seconds);
  void ObserveEndToEnd(double seconds) { end_to_end_.Observe(seconds); }
  void ObservePickup(double seconds) { pickup_.Observe(seconds); }
  // The time one POST waited in the sender's per-host queue (HttpResult::queued).
  void ObserveQueue(double seconds) { queue_.Observe(seconds); }
  void ObserveBatch(size_t members) { batch_events_.Observe(static_cast<double>(members)); }
  void RequestStarted() { in_flight_requests_.Increment(); }
  void RequestFinished() { in_flight_requests_.Decrement(); }
  void JobStarted() { jobs_in_flight_.Increment(); }
  void JobFinished(int64_t n = 1) { jobs_in_flight_.Decrement(static_cast<double>(n)); }

  // The `result` label of a POST.
  static std::string_view ResultLabel(const UrlResult& result);

 private:
  prometheus::Counter& Child(prometheus::Family<prometheus::Counter>& family,
                             std::string_view label, std::string_view destination,
                             std::string_view value) ABSL_LOCKS_EXCLUDED(mu_);

  prometheus::Family<prometheus::Counter>& attempts_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& retries_;
  prometheus::Histogram& attempt_duration_;
  prometheus::Histogram& end_to_end_;
  prometheus::Histogram& pickup_;
  prometheus::Histogram& queue_;
  prometheus::Histogram& batch_events_;
  prometheus::Gauge& in_flight_requests_;
  prometheus::Gauge& jobs_in_flight_;

  // Children by (family address, destination, label value), looked up without building a key.
  struct ChildKey {
    const void* family;
    std::string destination;
    std::string value;
  };
  struct ChildKeyView {
    const void* family;
    std::string_view destination;
    std::string_view value;
  };
  struct ChildHash {
    using is_transparent = void;
    size_t operator()(const ChildKey& k) const {
      return (*this)(ChildKeyView{k.family, k.destination, k.value});
    }
    size_t operator()(const ChildKeyView& k) const {
      return absl::HashOf(k.family, absl::string_view(k.destination.data(), k.destination.size()),
                          absl::string_view(k.value.data(), k.value.size()));
    }
  };
  struct ChildEq {
    using is_transparent = void;
    static ChildKeyView View(const ChildKey& k) { return {k.family, k.destination, k.value}; }
    static ChildKeyView View(const ChildKeyView& k) { return k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const ChildKeyView x = View(a);
      const ChildKeyView y = View(b);
      return x.family == y.family && x.destination == y.destination && x.value == y.value;
    }
  };
  absl::Mutex mu_;
  absl::flat_hash_map<ChildKey, prometheus::Counter*, ChildHash, ChildEq> children_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_DELIVERY_METRICS_H_
