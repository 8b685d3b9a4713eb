// The JetStream engine's streams and consumer (issue 12; docs/DESIGN.md, "The JetStream
// engine"): created when missing, checked when present. A setting that matters and differs is a
// start-up error naming the stream, the setting, what is there and what hookrelay needs — never
// a silent change of someone's stream.
//
//   HR_JOBS   subjects hr.jobs.ready.<D>.<S>.<U> (due now) and hr.jobs.sched.<S>.<U>.<job id>
//             (retries: one message-schedule definition per job), where <D>, <S> and <U> are the
//             job's destination, source and user id in unpadded base64url ("_" when empty; <S>
//             is "~" for delete notifications and test jobs, which a deletion never purges): a
//             deletion purges a user's jobs by subject. hr.jobs.ready.<S>.<U> (no <D>): the
//             layout before per-destination consumers, still read. Work-queue retention, file storage, `replicas`
//             copies, message schedules allowed, `duplicate_window` for Nats-Msg-Id.
//   HR_DEAD   subjects hr.dead.<destination>.<S>.<U>; limits retention, file storage.
//   HR_DEDUP  subjects hr.dedup.<128-bit hash of the dedup key>: one marker per accepted event,
//             kept `dedup_window` (max age), one per subject, direct gets allowed (the
//             de-duplication lookup reads them in batches).
//   HR_USERS, HR_PROFILES, HR_DELETIONS, HR_AUDIENCES: deletions and audiences
//             (collector/store/jetstream/jetstream_user_data.h): limits retention, file storage, `replicas`
//             copies; one message per subject except HR_PROFILES (deltas, rolled up; direct
//             gets allowed for batched reads).
//   consumers HR_JOBS/dest-<D>: one durable pull consumer per destination on
//             hr.jobs.ready.<D>.*.* (created by the first collector that publishes a job for it),
//             explicit acks, ack wait = the lease, no delivery limit (retries are hookrelay's,
//             by schedule). HR_JOBS/dispatch: the same on hr.jobs.ready.*.* (the layout
//             before; a dispatch consumer on hr.jobs.ready.> is narrowed to it at start, since
//             a work-queue stream's consumers must not overlap).
//
// Streams and consumers are created through the JSON API: cnats 3.4 (Debian) predates
// `allow_msg_schedules`.
#ifndef HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_LAYOUT_H_
#define HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_LAYOUT_H_

#include <nats/nats.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace hookrelay::collector {

// The oldest nats-server release hookrelay supports, and the one its tests run (message
// schedules came in 2.12, batched direct gets in 2.11; tools/bootstrap.sh pins this one).
inline constexpr char kMinNatsServerVersion[] = "2.14.9";

inline constexpr char kJobsStream[] = "HR_JOBS";
inline constexpr char kDeadStream[] = "HR_DEAD";
inline constexpr char kDispatchConsumer[] = "dispatch";
inline constexpr char kDedupStream[] = "HR_DEDUP";
inline constexpr char kReadySubjects[] = "hr.jobs.ready.>";
// What the dispatch consumer takes: ready jobs of the layout without the destination token.
inline constexpr char kLegacyReadySubjects[] = "hr.jobs.ready.*.*";
// The per-destination consumers' names begin with it.
inline constexpr char kDestinationConsumerPrefix[] = "dest-";
inline constexpr char kScheduleSubjects[] = "hr.jobs.sched.>";
inline constexpr char kDeadSubjects[] = "hr.dead.>";
inline constexpr char kDedupSubjects[] = "hr.dedup.*";
inline constexpr char kUsersStream[] = "HR_USERS";
inline constexpr char kUsersSubjects[] = "hr.users.*.*";
inline constexpr char kProfilesStream[] = "HR_PROFILES";
inline constexpr char kProfilesSubjects[] = "hr.prof.*.*";
inline constexpr char kDeletionsStream[] = "HR_DELETIONS";
inline constexpr char kDeletionsSubjects[] = "hr.del.>";
inline constexpr char kAudiencesStream[] = "HR_AUDIENCES";
inline constexpr char kAudiencesSubjects[] = "hr.aud.>";
// The configuration managed at run time: a KV bucket (created by the job store, replicated like
// the jobs) and its one key.
inline constexpr char kConfigBucket[] = "hr_config";
inline constexpr char kConfigKey[] = "config";

struct JetStreamLayout {
  int DedupReplicas() const { return dedup_replicas == 0 ? replicas : dedup_replicas; }

  // --nats_replicas: copies of every stream (1, 3 or 5).
  int replicas = 3;
  // --nats_dedup_replicas: copies of HR_DEDUP (0 = `replicas`). Markers are best-effort (a
  // lost marker is a duplicate check missed, never an event lost), so one copy is the default:
  // each event costs one replicated write instead of two; a node's loss forgets its markers.
  int dedup_replicas = 1;
  // The lease of a dispatched job (the consumer's ack wait).
  absl::Duration ack_wait = absl::Seconds(90);
  // Jobs dispatched and not yet settled, across every collector.
  int max_ack_pending = 100'000;
  // Nats-Msg-Id de-duplication of HR_JOBS (publishes retried within it are stored once).
  absl::Duration duplicate_window = absl::Minutes(2);
  // How long an event's dedup marker is kept (--dedup_window, SPEC: 24 h).
  absl::Duration dedup_window = absl::Hours(24);
  // How long one API request may take (leader elections make the first ones slow).
  absl::Duration request_timeout = absl::Seconds(5);
  // --nats_deletion_resume_after: a deletion whose progress has not moved for this long (the
  // collector applying it died) is finished by any collector that sees it (every collector looks
  // at start and then every few seconds). Far longer than a live deletion's step takes.
  absl::Duration deletion_resume_after = absl::Seconds(30);
};

// Creates what is missing and checks what exists; idempotent. Errors: INVALID_ARGUMENT for bad
// options, FAILED_PRECONDITION for a mismatch (the message says what to change), UNAVAILABLE
// when the cluster does not answer (the caller retries). EnsureJetStreamLayout is the other two
// in turn: every stream and consumer but HR_DEDUP, then HR_DEDUP (apart, since with one replica
// a collector may start while the server holding it is down; JetStreamJobStore::Open).
absl::Status EnsureJetStreamLayout(natsConnection* nc, const JetStreamLayout& layout);
absl::Status EnsureJobAndUserLayout(natsConnection* nc, const JetStreamLayout& layout);
absl::Status EnsureDedupStream(natsConnection* nc, const JetStreamLayout& layout);

// The consumer of a destination's jobs, and its filter subject.
std::string DestinationConsumerName(std::string_view destination_id);
std::string DestinationReadyFilter(std::string_view destination_id);
// The destination whose consumer `name` is; nullopt when it is not a destination's consumer.
std::optional<std::string> DestinationOfConsumer(std::string_view name);
// Creates the consumer of a destination (or updates it to the layout's settings: the ack wait is
// the same on every collector, the dispatch consumer's check at start makes sure of it).
absl::Status EnsureDestinationConsumer(natsConnection* nc, const JetStreamLayout& layout,
                                       std::string_view destination_id);
// The names of the consumers of `stream` (CONSUMER.NAMES, every page).
absl::StatusOr<std::vector<std::string>> JetStreamConsumerNames(natsConnection* nc,
                                                               const char* stream,
                                                               absl::Duration timeout);

// One JetStream JSON API request ($JS.API.…): the answer's body, and its error when it has one.
// UNAVAILABLE when nothing answered in time.
struct JetStreamApiReply {
  std::string body;
  int64_t error_code = 0;  // JetStream's err_code, 0 when none.
  std::string error;
};
absl::StatusOr<JetStreamApiReply> JetStreamApi(natsConnection* nc, const std::string& subject,
                                               const std::string& body, absl::Duration timeout);

// The first message of `stream` at or after sequence `seq` whose subject matches `subject`
// (STREAM.MSG.GET with next_by_subj, answered by the stream's leader): its sequence and data, or
// nullopt when there is none. A request nothing answered is sent again every 200 ms for up to
// `retry_for` (real time), then UNAVAILABLE; an error answer is not retried.
struct JetStreamMessage {
  uint64_t seq = 0;
  std::string data;
};
absl::StatusOr<std::optional<JetStreamMessage>> JetStreamNextMessage(natsConnection* nc,
                                                                    const char* stream,
                                                                    uint64_t seq,
                                                                    std::string_view subject,
                                                                    absl::Duration timeout,
                                                                    absl::Duration retry_for);

// The same read as a direct get (DIRECT.GET; the stream needs allow_direct), answered by any
// replica: the stream as that replica last applied it, a prefix of what its leader holds. One
// request, not retried; UNAVAILABLE when nothing answers or the answer is an error status.
absl::StatusOr<std::optional<JetStreamMessage>> JetStreamDirectNextMessage(
    natsConnection* nc, const char* stream, uint64_t seq, std::string_view subject,
    absl::Duration timeout);
// Several such reads, (sequence, subject) each, sent together and answered within `timeout`:
// one answer per read, in their order, each as above.
std::vector<absl::StatusOr<std::optional<JetStreamMessage>>> JetStreamDirectNextMessages(
    natsConnection* nc, const char* stream,
    const std::vector<std::pair<uint64_t, std::string>>& reads, absl::Duration timeout);

// The last message of `stream` whose subject is `subject` (last_by_subj), as above.
absl::StatusOr<std::optional<JetStreamMessage>> JetStreamLastMessage(natsConnection* nc,
                                                                    const char* stream,
                                                                    std::string_view subject,
                                                                    absl::Duration timeout,
                                                                    absl::Duration retry_for);

namespace internal {
// The JSON configs sent to the API (for tests and docs).
std::string JobsStreamConfig(const JetStreamLayout& layout);
std::string DeadStreamConfig(const JetStreamLayout& layout);
std::string DedupStreamConfig(const JetStreamLayout& layout);
std::string UsersStreamConfig(const JetStreamLayout& layout);
std::string ProfilesStreamConfig(const JetStreamLayout& layout);
std::string DeletionsStreamConfig(const JetStreamLayout& layout);
std::string AudiencesStreamConfig(const JetStreamLayout& layout);
std::string DispatchConsumerConfig(const JetStreamLayout& layout);
std::string DestinationConsumerConfig(const JetStreamLayout& layout, std::string_view destination_id);
}  // namespace internal

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_LAYOUT_H_
