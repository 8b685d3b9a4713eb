// User data: the per-user index, deletions, profiles and audience memberships (SPEC §6). One
// part of what an engine provides (collector/store/store.h); the admin core (deletions) and the
// audience syncer use it. Profiles and index entries are written by JobQueue::Append, in the
// append's own write (AppendItem::user_id, source_id, profile_delta).
#ifndef HOOKRELAY_COLLECTOR_STORE_USER_DATA_H_
#define HOOKRELAY_COLLECTOR_STORE_USER_DATA_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {

// A deletion request to apply (SPEC §6.1), prepared by the admin core.
struct DeletionPlan {
  // id, user_id, source_ids (the affected sources, already resolved), sources_from_index,
  // request_id and create_time set; the store fills state and the counts.
  hookrelay::v1::Deletion record;
  // The `delete` jobs, one per (affected source, enabled webhook destination); the store assigns
  // `id` and `due_unix_ms` as for appended jobs.
  std::vector<hookrelay::v1::Job> notifications;
  // Audiences reading any affected source: the user's membership in them is removed (no
  // identify follows).
  std::vector<std::string> audience_ids;
};

struct DeletionOutcome {
  hookrelay::v1::Deletion record;
  // False when the request id had been applied already: nothing was done and `record` is the
  // earlier one (whose user may differ: the caller decides what that means).
  bool created = false;
  // Store keys read or written to apply it: proportional to the user's jobs and dead letters,
  // never to the store's size (tests assert it).
  size_t keys_touched = 0;
};

// Audience syncs (SPEC §6.2). A sync reads what changed, evaluates outside the store, and commits
// memberships, rechecks and identify jobs in one atomic write.
struct AudienceSyncInput {
  // nullopt before the first computation: `users` is then every user with a profile in the
  // audience's sources.
  std::optional<hookrelay::v1::AudienceState> state;
  // The profile change log position this sync covers (its new cursor).
  uint64_t log_position = 0;
  // Users to evaluate, each once: profile in one of the audience's sources changed since the
  // cursor, or a recheck due by `now`. An engine may also list users whose change was in another
  // source only (the embedded engine's change log holds user ids, not sources); the caller reads
  // them and finds no profile of the audience's sources.
  std::vector<std::string> users;
  // The due rechecks read (opaque keys), removed by the commit.
  std::vector<std::string> rechecks_due;
};

// One user as a sync sees it.
struct AudienceUser {
  std::string user_id;
  bool member = false;  // as last sent
  std::vector<hookrelay::v1::Profile> profiles;  // of the audience's sources that have one
};

struct AudienceSyncPlan {
  std::string audience_id;
  // The audience's sources (a change of a user deleted since the evaluation is dropped at commit:
  // an entry needs a profile in one of them, an exit a membership still recorded).
  std::vector<std::string> sources;
  uint64_t log_position = 0;
  // Membership changes: user → member now. The store adjusts the member count.
  std::vector<std::pair<std::string, bool>> changes;
  // When to evaluate a user again without a new event (a window edge).
  std::vector<std::pair<std::string, absl::Time>> rechecks;
  std::vector<std::string> rechecks_done;
  // The identify calls; ids and due times are assigned as for appended jobs.
  std::vector<hookrelay::v1::Job> jobs;
  // Stats for the state: evaluated users, entered/exited, duration, first computation.
  hookrelay::v1::AudienceState stats;
  // Change log entries at or below this position are no longer needed by any audience.
  uint64_t log_needed_after = 0;
};

// Thread-safe: every method may be called from any thread.
class UserDataStore {
 public:
  virtual ~UserDataStore() = default;

  // The sources `user_id` was seen in (AppendItem::user_id/source_id), sorted, from the per-user
  // index: cost proportional to the answer.
  virtual absl::StatusOr<std::vector<std::string>> SourcesSeen(std::string_view user_id) = 0;
  // Applies a deletion in one atomic, durable write: enqueues the notifications; removes the
  // user's not-yet-delivered jobs of the record's sources (except `delete` and test jobs; a job
  // leased now finishes its attempt and is dropped instead of retried), their dead letters, their
  // sources-seen entries (and profile, SPEC §6.2); records the deletion. A request id already
  // applied does nothing. Appends keep flowing meanwhile: the cost is proportional to the user's
  // data, never to the store's size.
  virtual absl::StatusOr<DeletionOutcome> ApplyDeletion(DeletionPlan plan) = 0;
  // nullopt when unknown.
  virtual absl::StatusOr<std::optional<hookrelay::v1::Deletion>> GetDeletion(
      std::string_view id) = 0;
  // Newest first: at most `limit` deletions with an id below `before_id` (empty = from the
  // newest).
  virtual absl::StatusOr<std::vector<hookrelay::v1::Deletion>> ListDeletions(
      std::string_view before_id, size_t limit) = 0;

  // Audiences (SPEC §6.2); see AudienceSyncInput. Syncs of one audience must not overlap (the
  // caller serialises them).
  virtual absl::StatusOr<AudienceSyncInput> BeginAudienceSync(
      std::string_view audience_id, const std::vector<std::string>& sources, absl::Time now) = 0;
  virtual absl::StatusOr<std::vector<AudienceUser>> ReadAudienceUsers(
      std::string_view audience_id, const std::vector<std::string>& users,
      const std::vector<std::string>& sources) = 0;
  // Durable when it returns: the new state.
  virtual absl::StatusOr<hookrelay::v1::AudienceState> CommitAudienceSync(
      AudienceSyncPlan plan) = 0;
  virtual absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> GetAudienceState(
      std::string_view audience_id) = 0;
  // Forgets an audience's memberships and state (nothing is sent).
  virtual absl::Status DropAudience(std::string_view audience_id) = 0;
};

}  // namespace hookrelay::collector

#endif  // HOOKRELAY_COLLECTOR_STORE_USER_DATA_H_
