#include "tools/bench/batch_template.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/struct.pb.h"
#include "hookrelay/v1/collector.pb.h"
#include "hookrelay/v1/event.pb.h"

namespace hookrelay::bench {
namespace {

constexpr char kEventName[] = "Order Completed";
constexpr char kTimestamp[] = "2024-05-01T12:00:00.000Z";
constexpr int64_t kTimestampSeconds = 1714564800;

std::string UserId(int i) { return absl::StrFormat("user-%06d", i); }
std::string OrderId(int i) { return absl::StrFormat("ord-%08d", i); }

// One event as the HTTP API carries it; `pad` is the filler that brings it to size.
std::string JsonEvent(int i, const std::string& message_id, const std::string& pad,
                      bool with_timestamp) {
  return absl::StrCat(R"({"type":"track","userId":")", UserId(i), R"(","event":")", kEventName,
                      R"(","messageId":")", message_id,
                      with_timestamp ? absl::StrCat(R"(","timestamp":")", kTimestamp) : "",
                      R"(","properties":{"orderId":")", OrderId(i),
                      R"(","revenue":42.5,"currency":"EUR","plan":"pro","pad":")", pad, R"("}})");
}

void FillProtoEvent(int i, const std::string& message_id, const std::string& pad,
                    bool with_timestamp, hookrelay::v1::Event* e) {
  e->set_type(hookrelay::v1::TRACK);
  e->set_message_id(message_id);
  e->set_user_id(UserId(i));
  e->set_event(kEventName);
  if (with_timestamp) e->mutable_timestamp()->set_seconds(kTimestampSeconds);
  auto& fields = *e->mutable_properties()->mutable_fields();
  fields["orderId"].set_string_value(OrderId(i));
  fields["revenue"].set_number_value(42.5);
  fields["currency"].set_string_value("EUR");
  fields["plan"].set_string_value("pro");
  fields["pad"].set_string_value(pad);
}

void Check(bool condition, const char* message) {
  if (!condition) {
    std::fprintf(stderr, "BatchTemplate: %s\n", message);
    std::abort();
  }
}

}  // namespace

BatchTemplate::BatchTemplate(Format format, int events, int event_bytes, std::string_view run_id,
                             Timestamp timestamp, int users)
    : run_id_(run_id), users_(users) {
  Check(users >= 0 && users <= 1000000, "users must be 0..1000000");
  const bool with_timestamp = timestamp == Timestamp::kInclude;
  Check(events >= 1, "events must be >= 1");
  Check(!run_id_.empty() && run_id_[0] >= 'g' && run_id_[0] <= 'z', "bad run id");
  const std::string placeholder = MessageId(0);
  const size_t base = JsonEvent(0, placeholder, "", with_timestamp).size();
  const std::string pad(event_bytes > static_cast<int>(base) ? event_bytes - base : 0, 'x');

  if (format == Format::kJson) {
    bytes_ = R"({"batch":[)";
    for (int i = 0; i < events; ++i) {
      if (i > 0) bytes_.push_back(',');
      absl::StrAppend(&bytes_, JsonEvent(i, placeholder, pad, with_timestamp));
    }
    bytes_.append("]}");
    json_event_bytes_ = bytes_.size() / events;
  } else {
    hookrelay::v1::IngestRequest request;
    for (int i = 0; i < events; ++i) {
      FillProtoEvent(i, placeholder, pad, with_timestamp, request.add_events());
    }
    Check(request.SerializeToString(&bytes_), "cannot serialize the request");
    json_event_bytes_ = JsonEvent(0, placeholder, pad, with_timestamp).size() + 1;
  }

  // The run id begins with a letter that is not a hex digit and nothing else in the body contains
  // "<run_id>-", so its occurrences are exactly the messageIds, in event order.
  const std::string needle = run_id_ + "-";
  size_t from = 0;
  while (true) {
    const size_t at = bytes_.find(needle, from);
    if (at == std::string::npos) break;
    id_offsets_.push_back(at + needle.size());
    from = at + needle.size() + kSequenceDigits;
  }
  Check(id_offsets_.size() == static_cast<size_t>(events), "run id occurs outside messageIds");
  if (users_ > 0) {
    // "user-" occurs only in the userIds (orders are "ord-", the pad is 'x's), in event order.
    for (size_t at = bytes_.find("user-"); at != std::string::npos;
         at = bytes_.find("user-", at + 11)) {
      user_offsets_.push_back(at + 5);
    }
    Check(user_offsets_.size() == static_cast<size_t>(events), "userId not found per event");
  }
}

void BatchTemplate::Stamp(uint64_t request_seq, char* body) const {
  uint64_t seq = request_seq * id_offsets_.size();
  for (size_t offset : id_offsets_) {
    uint64_t v = seq++;
    char* digit = body + offset + kSequenceDigits;
    for (size_t d = 0; d < kSequenceDigits; ++d) {
      *--digit = static_cast<char>('0' + v % 10);
      v /= 10;
    }
  }
  uint64_t event = request_seq * user_offsets_.size();
  for (size_t offset : user_offsets_) {
    uint64_t v = event++ % static_cast<uint64_t>(users_);
    char* digit = body + offset + 6;
    for (int d = 0; d < 6; ++d) {
      *--digit = static_cast<char>('0' + v % 10);
      v /= 10;
    }
  }
}

std::string BatchTemplate::MessageId(uint64_t event_seq) const {
  return absl::StrFormat("%s-%020u", run_id_, event_seq);
}

}  // namespace hookrelay::bench
