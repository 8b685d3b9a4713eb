// The deliverer's state per job and per batch request, shared by its files (deliverer.cc takes
// jobs in and sends them; outcomes.cc turns answers into outcomes). Internal to the deliverer.
#ifndef HOOKRELAY_DELIVERER_DELIVERER_STATE_H_
#define HOOKRELAY_DELIVERER_DELIVERER_STATE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/time/time.h"
#include "deliverer/deliverer.h"
#include "google/protobuf/arena.h"
#include "hookrelay/v1/collector.pb.h"

namespace hookrelay::deliverer {

inline absl::BitGen& ThreadBitGen() {
  thread_local absl::BitGen gen;
  return gen;
}

// One read of a Subscribe stream, parsed into its own arena: the jobs of a read share a few
// blocks of memory instead of a heap allocation per message and string each, allocated on the
// gRPC thread and freed on a sender thread. Kept alive by its jobs (JobState::delivery points
// into it); the blocks are freed when the last of them ends.
struct Deliverer::Read {
  static google::protobuf::ArenaOptions Options() {
    google::protobuf::ArenaOptions options;
    options.start_block_size = 16 * 1024;
    options.max_block_size = 256 * 1024;
    return options;
  }

  Read() : arena(Options()) {}
  Read(const Read&) = delete;
  Read& operator=(const Read&) = delete;

  google::protobuf::Arena arena;
  hookrelay::v1::SubscribeResponse* const response =
      google::protobuf::Arena::CreateMessage<hookrelay::v1::SubscribeResponse>(&arena);
};

// A destination the stream sent once for many jobs (Hello.destinations_by_reference), with what
// each of its jobs needs worked out once: its effective options and, when batched, its batch
// key (a DeliveryOptions copy and a hash over secrets, URLs and headers per job before).
struct Deliverer::StreamDestination {
  explicit StreamDestination(const hookrelay::v1::Destination& d);

  hookrelay::v1::Destination destination;
  hookrelay::v1::DeliveryOptions options;  // effective
  std::string batch_key;                   // BatchKey(destination, options) when batched
};

// One job between its arrival and its outcome.
struct Deliverer::JobState {
  // Into its Read (an aliasing pointer that keeps the read's arena alive).
  std::shared_ptr<const hookrelay::v1::Delivery> delivery;
  // The destination the stream sent once for many jobs (Hello.destinations_by_reference); null
  // when the delivery carries its own.
  std::shared_ptr<const StreamDestination> shared_destination;
  std::shared_ptr<Call> call;
  hookrelay::v1::DeliveryOptions own_options;  // effective, when the delivery carries its own
  absl::Time started;
  PerUrl<UrlResult> results;
  PerUrl<std::string> details;  // error_detail per URL
  PerUrl<absl::Duration> durations;  // per URL
  std::atomic<size_t> remaining{0};

  const hookrelay::v1::Destination& destination() const {
    return shared_destination != nullptr ? shared_destination->destination
                                         : delivery->destination();
  }
  const hookrelay::v1::DeliveryOptions& options() const {
    return shared_destination != nullptr ? shared_destination->options : own_options;
  }
};

// One batch request (SPEC §5.4): its members, and the answers of the destination's URLs, which
// become every member's attempt.
struct Deliverer::BatchState {
  std::vector<std::shared_ptr<JobState>> members;
  std::string key;  // Idempotency-Key
  absl::Time sent;  // when the request started
  PerUrl<UrlResult> results;
  PerUrl<std::string> details;
  PerUrl<absl::Duration> durations;
  std::atomic<size_t> remaining{0};
};

}  // namespace hookrelay::deliverer

#endif  // HOOKRELAY_DELIVERER_DELIVERER_STATE_H_
