// The subjects of the JetStream engine's messages (streams and subject spaces:
// collector/store/jetstream/jetstream_layout.h), shared by the job queue and the user data:
// ids as subject tokens, and the subject of each kind of message.
#ifndef HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_SUBJECTS_H_
#define HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_SUBJECTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

// Subject tokens (jetstream_layout.h): an id as unpadded base64url, "_" when empty.
std::string JetStreamToken(std::string_view id);
// The same, short, for the user data's subjects.
std::string Tok(std::string_view id);
// The id of a token; nullopt when it is not one.
std::optional<std::string> Untok(std::string_view token);
// The tokens of a subject.
std::vector<std::string> Tokens(std::string_view subject);

// Jobs (HR_JOBS, HR_DEDUP).
// "<S>.<U>" of a job's subjects: its source ("~" for delete notifications and test jobs, never
// purged by a deletion) and user.
std::string JobSubjectTail(const hookrelay::v1::Job& job);
// <U>: the user id's token; for a job kept in per-user order whose event had no userId, "%" and
// its ordering key's (anonymousId's) token, so that each anonymous user has subjects of its own.
std::string JobUserToken(const hookrelay::v1::Job& job);
// hr.jobs.sched.<S>.<U>.o<seq>: the attempts of an ordered job (stream sequence `seq`) while it
// retries in place (no schedule header: nothing fires; a deletion's purge of the user's
// schedules removes it too).
std::string OrderRecordSubject(const hookrelay::v1::Job& job, uint64_t seq);
// hr.dedup.<32 hex digits of SHA-256(dedup key)>.
std::string DedupMarkerSubject(std::string_view dedup_key);
// hr.jobs.ready.<D>.<S>.<U>: its destination's consumer takes it.
std::string ReadySubject(const hookrelay::v1::Job& job);
// A stable message id for a job: its event's dedup marker and its destination.
std::string JobMsgId(const std::string& marker, const std::string& destination);

// Deletions (HR_DELETIONS): a deletion's record and the claim of a request id.
std::string RecordSubject(std::string_view id);
// A deletion's progress while it is applied (v1::DeletionProgress).
std::string ProgressSubject(std::string_view id);
std::string ClaimSubject(std::string_view request_id);
// "hr.jobs.sched.~.~.": followed by <deletion id token>.<batch>, the marker stored with a batch of
// a deletion's notifications (HR_JOBS; no job has "~" as its user token, nothing consumes it,
// removed once the deletion is COMPLETED).
inline constexpr char kNotificationMarkerPrefix[] = "hr.jobs.sched.~.~.";
inline std::string NotificationMarkerPrefix() { return kNotificationMarkerPrefix; }
// "hr.jobs.sched.~.f.<audience token>" (HR_JOBS, nothing consumes it): an audience's fence. A
// deletion publishes on it, after purging the user's profiles and before reading the sequence
// its job purges reach; an audience sync stores its identify jobs in atomic batches whose first
// message expects the fence's sequence read before the sync checked its users' profiles.
std::string FenceSubject(std::string_view audience);
// Audiences (HR_AUDIENCES): state, sync lock, membership, recheck.
std::string StateSubject(std::string_view audience);
std::string LockSubject(std::string_view audience);
std::string MemberSubject(std::string_view audience, std::string_view user);
std::string RecheckSubject(std::string_view audience, int64_t at_ms, std::string_view user);
// Profiles (HR_PROFILES).
std::string ProfileSubject(std::string_view source, std::string_view user);

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_JETSTREAM_JETSTREAM_SUBJECTS_H_
