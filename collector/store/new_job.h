// A job to append, serialized once where it is made. The ingest path writes each job's wire
// bytes straight from the event (no v1::Job object is built, copied or freed on another thread);
// the engines store those bytes with the two fields only they know, the id and the due time,
// gathered in at their place, so the stored record is exactly what v1::Job serialization gives.
#ifndef HOOKRELAY_COLLECTOR_STORE_NEW_JOB_H_
#define HOOKRELAY_COLLECTOR_STORE_NEW_JOB_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

class NewJob {
 public:
  // What an ingested event's job carries (the fields of v1::Job that ingest sets).
  struct Fields {
    std::string_view source_id;
    std::string_view destination_id;
    hookrelay::v1::EventType type = hookrelay::v1::EVENT_TYPE_UNSPECIFIED;
    std::string_view message_id;
    std::string_view user_id;
    std::string_view event_json;
    int64_t received_at_unix_ms = 0;
    int64_t received_at_unix_us = 0;
    std::string_view traceparent;
    std::string_view tracestate;
    std::string_view ordering_key;
  };

  NewJob() = default;
  explicit NewJob(const Fields& fields);
  // Any job (delete notifications, test events, tests): serialized without its id and due time,
  // which the store assigns.
  NewJob(const hookrelay::v1::Job& job);  // NOLINT(google-explicit-constructor)

  std::string_view destination_id() const { return View(destination_); }
  std::string_view ordering_key() const { return View(ordering_key_); }
  std::string_view user_id() const { return View(user_id_); }

  // The serialized v1::Job with `id` and `due_unix_ms` set (each omitted when 0) is
  //   IdField(id) + head() + DueField(due) + tail()
  // (fields in number order: id is field 1, due field 11).
  std::string_view head() const { return std::string_view(bytes_).substr(0, split_); }
  std::string_view tail() const { return std::string_view(bytes_).substr(split_); }
  // Room for either field's bytes (a tag and a 64-bit varint).
  static constexpr size_t kFieldBytes = 11;
  // Writes the field into `out` (at least kFieldBytes) and returns its size, 0 for a zero value.
  static size_t IdField(uint64_t id, char* out);
  static size_t DueField(int64_t due_unix_ms, char* out);

  // The serialized job, and the job itself, with those two fields.
  std::string Serialized(uint64_t id, int64_t due_unix_ms) const;
  hookrelay::v1::Job ToJob(uint64_t id, int64_t due_unix_ms) const;
  // Every field but event_json (which is not copied): what names and routes the job.
  hookrelay::v1::Job ToJobWithoutEvent() const;

 private:
  struct Span {
    uint32_t pos = 0;
    uint32_t len = 0;
  };
  std::string_view View(Span s) const { return std::string_view(bytes_).substr(s.pos, s.len); }
  // Finds the split and the three fields' spans in bytes_.
  void Index();

  std::string bytes_;
  size_t split_ = 0;
  Span destination_;
  Span ordering_key_;
  Span user_id_;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_NEW_JOB_H_
