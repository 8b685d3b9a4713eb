#include "collector/store/job_queue.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "collector/store/wire_fields.h"

namespace hookrelay::collector {

namespace {

// Settles one job and waits for its status.
absl::Status SettleOne(JobQueue& queue, Settlement settlement) {
  absl::Notification done;
  absl::Status status = absl::InternalError("the settlement's callback did not run");
  std::vector<Settlement> batch;
  batch.push_back(std::move(settlement));
  queue.Settle(std::move(batch), [&](std::vector<absl::Status> statuses) {
    if (statuses.size() == 1) status = std::move(statuses[0]);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

}  // namespace

absl::Status JobQueue::Complete(uint64_t job_id, uint64_t lease) {
  return SettleOne(*this, Settlement::Complete(job_id, lease));
}

absl::Status JobQueue::Retry(uint64_t job_id, uint64_t lease, absl::Time not_before,
                             const hookrelay::v1::Attempt& attempt) {
  return SettleOne(*this, Settlement::Retry(job_id, lease, not_before, attempt));
}

absl::Status JobQueue::Bury(uint64_t job_id, uint64_t lease, std::string_view reason,
                            const hookrelay::v1::Attempt& attempt) {
  return SettleOne(*this, Settlement::Bury(job_id, lease, std::string(reason), attempt));
}

void RecordAttempt(const hookrelay::v1::Attempt& attempt, int64_t now_ms,
                   hookrelay::v1::Job& job) {
  if (attempt.urls_size() == 0 && attempt.at_unix_ms() == 0) {
    // A deferral (an empty Attempt): no request was sent, so neither the attempt count nor the
    // retry window moves.
    job.set_deferrals(job.deferrals() + 1);
    return;
  }
  job.set_attempts(job.attempts() + 1);
  if (job.first_attempt_unix_ms() == 0) {
    job.set_first_attempt_unix_ms(attempt.at_unix_ms() != 0 ? attempt.at_unix_ms() : now_ms);
  }
  *job.add_history() = attempt;
  if (job.history_size() > kMaxJobHistory) {
    job.mutable_history()->DeleteSubrange(0, job.history_size() - kMaxJobHistory);
  }
}

namespace {

// Walks the top-level fields of a serialized message: `visit(field, varint, bytes)` gets each
// varint field's value or each length-delimited field's bytes and returns true to stop there.
// False when the bytes are not a message.
template <typename Visit>
bool WalkFields(std::string_view serialized, Visit visit) {
  const char* p = serialized.data();
  const char* const end = p + serialized.size();
  wire::Field field;
  while (p < end) {
    if (!wire::NextField(p, end, field)) return false;
    if (visit(field.number, field.varint, field.bytes)) return true;
  }
  return true;
}

}  // namespace

std::optional<std::string_view> SerializedJobDestination(std::string_view serialized) {
  constexpr uint64_t kDestinationField = hookrelay::v1::Job::kDestinationIdFieldNumber;
  std::string_view destination;
  if (!WalkFields(serialized, [&](uint64_t field, uint64_t, std::string_view bytes) {
        if (field != kDestinationField) return false;
        destination = bytes;
        return true;
      })) {
    return std::nullopt;
  }
  return destination;
}

std::optional<SerializedQueueFields> SerializedJobQueueFields(std::string_view serialized) {
  constexpr uint64_t kDestinationField = hookrelay::v1::Job::kDestinationIdFieldNumber;
  constexpr uint64_t kOrderingKeyField = hookrelay::v1::Job::kOrderingKeyFieldNumber;
  SerializedQueueFields fields;
  if (!WalkFields(serialized, [&](uint64_t field, uint64_t, std::string_view bytes) {
        if (field == kDestinationField) fields.destination = bytes;
        if (field == kOrderingKeyField) fields.ordering_key = bytes;
        // Fields are written in number order: nothing after the ordering key matters.
        return field >= kOrderingKeyField;
      })) {
    return std::nullopt;
  }
  return fields;
}

std::optional<int64_t> SerializedJobDue(std::string_view serialized) {
  constexpr uint64_t kDueField = hookrelay::v1::Job::kDueUnixMsFieldNumber;
  int64_t due = 0;
  if (!WalkFields(serialized, [&](uint64_t field, uint64_t value, std::string_view) {
        if (field != kDueField) return false;
        due = static_cast<int64_t>(value);
        return true;
      })) {
    return std::nullopt;
  }
  return due;
}

}  // namespace hookrelay::collector
