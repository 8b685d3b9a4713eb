// The JetStream engine's job queue, dead letters: listing HR_DEAD and replaying from it.
#include "collector/store/jetstream/jetstream_job_store.h"


#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/jetstream_subjects.h"
#include "collector/store/jetstream/nats_request.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
using hookrelay::v1::Job;

absl::Status JetStreamJobStore::PublishSync(
    const std::string& subject, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, body.data(), static_cast<int>(body.size()));
  for (const auto& [k, v] : headers) {
    if (s == NATS_OK) s = natsMsgHeader_Set(msg, k.c_str(), v.c_str());
  }
  // A node that has just (re)joined may not know the stream yet ("no responders"), and a leader
  // election makes publishes time out: both pass within seconds, so they are retried.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (;;) {
    jsPubAck* ack = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    if (s == NATS_OK) s = js_PublishMsg(&ack, js_, msg, nullptr, &code);
    if (ack != nullptr) jsPubAck_Destroy(ack);
    if ((s != NATS_NO_RESPONDERS && s != NATS_TIMEOUT) || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(200));
    s = NATS_OK;
  }
  if (msg != nullptr) natsMsg_Destroy(msg);
  return s == NATS_OK ? absl::OkStatus() : NatsError(absl::StrCat("publishing to ", subject), s);
}


absl::StatusOr<std::optional<JetStreamJobStore::DeadLetter>> JetStreamJobStore::NextDead(
    uint64_t seq, const DeadFilter& filter) {
  const std::string subject = filter.destination_id.empty()
                                  ? std::string(kDeadSubjects)
                                  : absl::StrCat("hr.dead.", JetStreamToken(filter.destination_id), ".>");
  absl::StatusOr<std::optional<JetStreamMessage>> next = JetStreamNextMessage(
      nc_, kDeadStream, seq, subject, options_.layout.request_timeout,
      /*retry_for=*/absl::Seconds(10));
  if (!next.ok()) return next.status();
  if (!next->has_value()) return std::optional<DeadLetter>();
  DeadLetter dead;
  dead.seq = (*next)->seq;
  if (!dead.job.ParseFromString((*next)->data)) {
    return absl::DataLossError(absl::StrCat("JetStream: dead letter ", dead.seq, " is unreadable"));
  }
  dead.job.set_id(dead.seq);
  return std::optional<DeadLetter>(std::move(dead));
}

namespace {
bool DeadInRange(const Job& job, const DeadFilter& filter) {
  const absl::Time at = absl::FromUnixMillis(job.dead_at_unix_ms());
  return at >= filter.from && at < filter.to;
}
}  // namespace

absl::StatusOr<std::vector<Job>> JetStreamJobStore::ListDead(const DeadFilter& filter) {
  std::vector<Job> out;
  uint64_t seq = filter.after_id + 1;
  while (out.size() < filter.limit) {
    absl::StatusOr<std::optional<DeadLetter>> next = NextDead(seq, filter);
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    seq = (*next)->seq + 1;
    if (DeadInRange((*next)->job, filter)) out.push_back(std::move((*next)->job));
  }
  return out;
}

absl::StatusOr<size_t> JetStreamJobStore::Replay(const DeadFilter& filter) {
  size_t replayed = 0;
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  for (uint64_t seq = 1;;) {
    absl::StatusOr<std::optional<DeadLetter>> next = NextDead(seq, filter);
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    DeadLetter& dead = **next;
    seq = dead.seq + 1;
    if (!DeadInRange(dead.job, filter)) continue;
    // A fresh retry window; attempts and history stay for the record.
    Job job = std::move(dead.job);
    job.set_id(0);
    job.set_first_attempt_unix_ms(0);
    job.clear_dead_reason();
    job.set_dead_at_unix_ms(0);
    job.set_due_unix_ms(now_ms);
    pulls_->NoteDestination(job.destination_id());
    RETURN_IF_ERROR(PublishSync(ReadySubject(job), job.SerializeAsString(),
                                {{"Nats-Msg-Id", absl::StrCat("replay-", dead.seq)}}));
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s =
        RetryPassing([&] { return js_DeleteMsg(js_, kDeadStream, dead.seq, nullptr, &code); });
    if (s != NATS_OK && s != NATS_NOT_FOUND) return NatsError("removing a replayed dead letter", s);
    ++replayed;
  }
  return replayed;
}

}  // namespace hookrelay::collector
