// Batched webhooks (SPEC §5.4, DeliveryOptions.batch): gathers the rendered jobs of batched
// destinations and hands each batch to a send function once it is full (max_events, or one more
// member would pass max_bytes) or due (max_wait_ms after its first member arrived, on the
// injected clock). Jobs are grouped by a key the caller computes: the destination and everything
// that decides how its requests are made (URLs, headers, secrets, options), so that a batch never
// mixes jobs leased before and after a change of the destination.
//
// Thread-safe. One thread waits for due batches; `send` is called without the lock held, on
// that thread or on the caller of Add (a full batch). Destruction drops what is pending: the
// owner flushes first (FlushAll); a job dropped anyway is handed out again when its lease ends.
#ifndef HOOKRELAY_DELIVERER_BATCHER_H_
#define HOOKRELAY_DELIVERER_BATCHER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::deliverer {

// One member of a batch: the caller's job, handed back as is, and its rendered body.
struct BatchItem {
  std::shared_ptr<void> job;
  std::string body;
};

// The bytes a batch's request body takes around and between its members' bodies:
// {"batch":[ … , … ]}.
inline constexpr size_t kBatchEnvelopeBytes = 12;  // {"batch":[ and ]}
inline size_t BatchBodySize(size_t members_bytes, size_t members) {
  return kBatchEnvelopeBytes + members_bytes + (members > 0 ? members - 1 : 0);
}
// The request body of `items`: {"batch":[body,body,…]}.
std::string BatchBody(const std::vector<BatchItem>& items);

// What decides how a batched destination's requests are made: jobs with the same key can share a
// request. Leased before and after a change of the destination, two jobs do not.
std::string BatchKey(const hookrelay::v1::Destination& destination,
                     const hookrelay::v1::DeliveryOptions& options);

// A batch request's Idempotency-Key (and Standard Webhooks webhook-id): "batch_" and 32 hex
// digits of SHA-256 over the members' message ids, whatever their order. The same members give
// the same key on a retry, whichever deliverer sends it.
std::string BatchIdempotencyKey(std::vector<std::string_view> message_ids);

class Batcher {
 public:
  using Send = std::function<void(std::vector<BatchItem>)>;

  Batcher(const common::Clock& clock, Send send);
  ~Batcher();

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Adds `item` to the batch of `key`, whose limits are `options` (effective: none is 0). A
  // member whose body alone passes max_bytes goes at once, in a batch of its own; one that would
  // make the pending batch pass it first sends the pending batch. `expected` > 0: the batch is
  // complete with that many members (a retried batch coming back) and goes as soon as it is.
  void Add(const std::string& key, const hookrelay::v1::BatchOptions& options, BatchItem item,
           size_t expected = 0);

  // Sends every pending batch now (shutdown drains).
  void FlushAll();

  // Members waiting, over all batches.
  int64_t pending() const;

 private:
  struct Pending {
    std::vector<BatchItem> items;
    size_t bytes = 0;  // the members' bodies
    absl::Time due;
  };

  void Loop();

  const common::Clock& clock_;
  const Send send_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);
  int64_t members_ ABSL_GUARDED_BY(mu_) = 0;
  // Bumped when a batch starts due before the loop's next wake-up: wakes the loop. Batches due
  // later wake nobody (the loop finds them when it wakes): with one destination's batches filling
  // one after another, the loop sleeps through them instead of waking once per batch.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time loop_wakes_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_BATCHER_H_
