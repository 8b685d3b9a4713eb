// Pre-built ingest request bodies whose only per-request work is stamping unique messageIds.
//
// A template is built once: `events` track events of about `event_bytes` bytes of JSON each, every
// one carrying a fixed-width placeholder messageId. Stamp() writes the ids of one request into a
// copy of the bytes at known offsets, so a load generator spends nothing on JSON or protobuf
// encoding per request. The fixed width keeps the encoding valid (JSON string lengths and
// protobuf length prefixes do not change).
//
// Immutable after construction, so safe to share between threads; each thread stamps its own
// copy of bytes().
#ifndef HOOKRELAY_TOOLS_BENCH_BATCH_TEMPLATE_H_
#define HOOKRELAY_TOOLS_BENCH_BATCH_TEMPLATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hookrelay::bench {

class BatchTemplate {
 public:
  // messageId = run_id + "-" + 20-digit zero-padded event sequence number.
  static constexpr size_t kSequenceDigits = 20;

  enum class Format {
    kJson,   // {"batch":[...]} for POST /v1/batch
    kProto,  // a serialized hookrelay.v1.IngestRequest
  };

  // Whether each event carries its own `timestamp`. kOmit leaves it out, so the collector stamps
  // the event with its receipt time (end-to-end latency can then be read off the webhook body).
  enum class Timestamp { kInclude, kOmit };

  // REQUIRES: events >= 1; run_id non-empty, made of [a-z0-9] and starting with a letter that is
  // not a hex digit (so it cannot occur by chance elsewhere in the body).
  // `users` > 0: Stamp also gives event sequence number n the userId of user n % users
  // ("user-%06d", so at most 1,000,000); 0: event i of every request is user i.
  BatchTemplate(Format format, int events, int event_bytes, std::string_view run_id,
                Timestamp timestamp = Timestamp::kInclude, int users = 0);

  // The body with placeholder ids.
  const std::string& bytes() const { return bytes_; }
  int events() const { return static_cast<int>(id_offsets_.size()); }
  // Average size of one event as JSON (the collector's measure), including the batch separators.
  size_t json_event_bytes() const { return json_event_bytes_; }

  // Writes the messageIds of request `request_seq` into `body`, a copy of bytes() (possibly
  // already stamped): event i gets sequence number request_seq * events() + i, so ids are
  // unique across requests and threads as long as request_seq is.
  void Stamp(uint64_t request_seq, char* body) const;

  // The messageId of event `event_seq` (for tests and logs).
  std::string MessageId(uint64_t event_seq) const;

 private:
  std::string run_id_;
  std::string bytes_;
  // Offset in bytes_ of each event's sequence digits.
  std::vector<size_t> id_offsets_;
  // With users_ > 0: offset in bytes_ of each event's six userId digits.
  int users_ = 0;
  std::vector<size_t> user_offsets_;
  size_t json_event_bytes_ = 0;
};

}  // namespace hookrelay::bench

#endif  // HOOKRELAY_TOOLS_BENCH_BATCH_TEMPLATE_H_
