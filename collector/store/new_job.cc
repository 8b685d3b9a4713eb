#include "collector/store/new_job.h"

#include <google/protobuf/io/coded_stream.h>

#include <cstring>

#include "collector/store/wire_fields.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;
using google::protobuf::io::CodedOutputStream;

// v1::Job's field numbers that this file writes or reads.
constexpr uint32_t kIdField = Job::kIdFieldNumber;
constexpr uint32_t kSourceField = Job::kSourceIdFieldNumber;
constexpr uint32_t kDestinationField = Job::kDestinationIdFieldNumber;
constexpr uint32_t kTypeField = Job::kTypeFieldNumber;
constexpr uint32_t kMessageIdField = Job::kMessageIdFieldNumber;
constexpr uint32_t kUserIdField = Job::kUserIdFieldNumber;
constexpr uint32_t kEventJsonField = Job::kEventJsonFieldNumber;
constexpr uint32_t kReceivedMsField = Job::kReceivedAtUnixMsFieldNumber;
constexpr uint32_t kDueField = Job::kDueUnixMsFieldNumber;
constexpr uint32_t kReceivedUsField = Job::kReceivedAtUnixUsFieldNumber;
constexpr uint32_t kTraceparentField = Job::kTraceparentFieldNumber;
constexpr uint32_t kTracestateField = Job::kTracestateFieldNumber;
constexpr uint32_t kOrderingKeyField = Job::kOrderingKeyFieldNumber;

constexpr uint32_t kVarintType = 0;
constexpr uint32_t kBytesType = 2;

size_t PutVarint(uint64_t v, char* out) {
  auto* const begin = reinterpret_cast<uint8_t*>(out);
  return static_cast<size_t>(CodedOutputStream::WriteVarint64ToArray(v, begin) - begin);
}

size_t VarintSize(uint64_t v) { return CodedOutputStream::VarintSize64(v); }

// Proto3: a zero or empty field is not written.
size_t VarintFieldSize(uint32_t field, uint64_t v) {
  return v == 0 ? 0 : VarintSize((field << 3) | kVarintType) + VarintSize(v);
}

size_t BytesFieldSize(uint32_t field, std::string_view v) {
  return v.empty() ? 0 : VarintSize((field << 3) | kBytesType) + VarintSize(v.size()) + v.size();
}

size_t VarintFieldAt(uint32_t field, uint64_t v, char* out) {
  if (v == 0) return 0;
  const size_t n = PutVarint((field << 3) | kVarintType, out);
  return n + PutVarint(v, out + n);
}

}  // namespace

NewJob::NewJob(const Fields& f) {
  // Sized once, then written in place (fields in number order, the due time's place before the
  // first field numbered above it), each span noted as it is written.
  const size_t size =
      BytesFieldSize(kSourceField, f.source_id) +
      BytesFieldSize(kDestinationField, f.destination_id) +
      VarintFieldSize(kTypeField, static_cast<uint64_t>(f.type)) +
      BytesFieldSize(kMessageIdField, f.message_id) + BytesFieldSize(kUserIdField, f.user_id) +
      BytesFieldSize(kEventJsonField, f.event_json) +
      VarintFieldSize(kReceivedMsField, static_cast<uint64_t>(f.received_at_unix_ms)) +
      VarintFieldSize(kReceivedUsField, static_cast<uint64_t>(f.received_at_unix_us)) +
      BytesFieldSize(kTraceparentField, f.traceparent) +
      BytesFieldSize(kTracestateField, f.tracestate) +
      BytesFieldSize(kOrderingKeyField, f.ordering_key);
  bytes_.resize(size);
  char* const begin = bytes_.data();
  char* p = begin;
  auto put = [&](uint32_t field, std::string_view v, Span* span) {
    if (v.empty()) return;
    p += PutVarint((field << 3) | kBytesType, p);
    p += PutVarint(v.size(), p);
    if (span != nullptr) {
      *span = Span{static_cast<uint32_t>(p - begin), static_cast<uint32_t>(v.size())};
    }
    std::memcpy(p, v.data(), v.size());
    p += v.size();
  };
  put(kSourceField, f.source_id, nullptr);
  put(kDestinationField, f.destination_id, &destination_);
  p += VarintFieldAt(kTypeField, static_cast<uint64_t>(f.type), p);
  put(kMessageIdField, f.message_id, nullptr);
  put(kUserIdField, f.user_id, &user_id_);
  put(kEventJsonField, f.event_json, nullptr);
  p += VarintFieldAt(kReceivedMsField, static_cast<uint64_t>(f.received_at_unix_ms), p);
  split_ = static_cast<size_t>(p - begin);
  p += VarintFieldAt(kReceivedUsField, static_cast<uint64_t>(f.received_at_unix_us), p);
  put(kTraceparentField, f.traceparent, nullptr);
  put(kTracestateField, f.tracestate, nullptr);
  put(kOrderingKeyField, f.ordering_key, &ordering_key_);
}

NewJob::NewJob(const Job& job) {
  if (job.id() == 0 && job.due_unix_ms() == 0) {
    job.SerializeToString(&bytes_);
  } else {
    Job copy = job;
    copy.clear_id();
    copy.clear_due_unix_ms();
    copy.SerializeToString(&bytes_);
  }
  Index();
}

void NewJob::Index() {
  // Serialization writes fields in number order, so the due time's place is before the first
  // field numbered above it.
  split_ = bytes_.size();
  const char* const begin = bytes_.data();
  const char* p = begin;
  const char* const end = begin + bytes_.size();
  wire::Field field;
  while (p < end) {
    const char* const start = p;
    if (!wire::NextField(p, end, field)) break;  // Not reached: the bytes were just written.
    if (field.number > kDueField && split_ == bytes_.size()) {
      split_ = static_cast<size_t>(start - begin);
    }
    if (field.bytes.data() == nullptr) continue;  // A varint field.
    const Span span{static_cast<uint32_t>(field.bytes.data() - begin),
                    static_cast<uint32_t>(field.bytes.size())};
    if (field.number == kDestinationField) destination_ = span;
    if (field.number == kUserIdField) user_id_ = span;
    if (field.number == kOrderingKeyField) ordering_key_ = span;
  }
}

size_t NewJob::IdField(uint64_t id, char* out) { return VarintFieldAt(kIdField, id, out); }

size_t NewJob::DueField(int64_t due_unix_ms, char* out) {
  return VarintFieldAt(kDueField, static_cast<uint64_t>(due_unix_ms), out);
}

std::string NewJob::Serialized(uint64_t id, int64_t due_unix_ms) const {
  char id_field[kFieldBytes];
  char due_field[kFieldBytes];
  const size_t id_size = IdField(id, id_field);
  const size_t due_size = DueField(due_unix_ms, due_field);
  std::string out;
  out.reserve(bytes_.size() + id_size + due_size);
  out.append(id_field, id_size);
  out.append(head());
  out.append(due_field, due_size);
  out.append(tail());
  return out;
}

Job NewJob::ToJob(uint64_t id, int64_t due_unix_ms) const {
  Job job;
  job.ParseFromString(bytes_);
  job.set_id(id);
  job.set_due_unix_ms(due_unix_ms);
  return job;
}

Job NewJob::ToJobWithoutEvent() const {
  std::string rest;
  rest.reserve(bytes_.size());
  const char* const begin = bytes_.data();
  const char* p = begin;
  const char* const end = begin + bytes_.size();
  wire::Field field;
  while (p < end) {
    const char* const start = p;
    if (!wire::NextField(p, end, field)) break;  // Not reached: the bytes were written here.
    if (field.number != kEventJsonField) rest.append(start, static_cast<size_t>(p - start));
  }
  Job job;
  job.ParseFromString(rest);
  return job;
}

}  // namespace hookrelay::collector
