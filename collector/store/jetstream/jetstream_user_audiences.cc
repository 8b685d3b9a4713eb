// The JetStream engine's user data, audiences: the sync lock, profiles and memberships read for a
// sync, its commit (jobs, memberships, rechecks, state), audience states and dropping one.
#include "collector/store/jetstream/jetstream_user_data.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collector/store/jetstream/jetstream_subjects.h"
#include "collector/store/jetstream/nats_request.h"
#include "collector/store/profile_delta.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::AudienceState;
using hookrelay::v1::Job;

// A profile read folding this many deltas rolls them up.
constexpr int kRollupAfter = 16;
// An audience lock not refreshed for this long is free for another collector.
constexpr absl::Duration kLockFor = absl::Minutes(1);
constexpr absl::Duration kLockRefresh = absl::Seconds(15);

}  // namespace

absl::StatusOr<AudienceState> JetStreamUserData::UpdateState(
    const std::string& audience,
    absl::AnyInvocable<absl::StatusOr<bool>(std::optional<AudienceState>&)> change) {
  const std::string subject = StateSubject(audience);
  for (int attempt = 0;; ++attempt) {
    ASSIGN_OR_RETURN(std::optional<Stored> stored, GetLast(kAudiencesStream, subject));
    std::optional<AudienceState> state;
    if (stored.has_value()) {
      state.emplace();
      if (!state->ParseFromString(stored->data)) {
        return absl::DataLossError("JetStream: an unreadable audience state");
      }
    }
    ASSIGN_OR_RETURN(bool write, change(state));
    if (!write || !state.has_value()) return state.value_or(AudienceState());
    absl::StatusOr<uint64_t> published =
        Publish({subject, state->SerializeAsString(),
                 {{"Nats-Expected-Last-Subject-Sequence",
                   absl::StrCat(stored.has_value() ? stored->seq : 0)}}});
    if (published.ok()) return *state;
    if (!absl::IsFailedPrecondition(published.status()) || attempt >= 50) {
      return published.status();
    }
  }
}

absl::StatusOr<std::optional<AudienceState>> JetStreamUserData::GetAudienceState(
    std::string_view audience_id) {
  ASSIGN_OR_RETURN(std::optional<Stored> stored,
                   GetLast(kAudiencesStream, StateSubject(audience_id)));
  if (!stored.has_value()) return std::optional<AudienceState>();
  AudienceState state;
  if (!state.ParseFromString(stored->data)) {
    return absl::DataLossError("JetStream: an unreadable audience state");
  }
  if (!state.computed()) return std::optional<AudienceState>();  // Dropped.
  return std::optional<AudienceState>(std::move(state));
}

absl::StatusOr<AudienceSyncInput> JetStreamUserData::BeginAudienceSync(
    std::string_view audience_id, const std::vector<std::string>& sources, absl::Time now) {
  const std::string audience(audience_id);
  // One collector at a time syncs an audience: a lock with an expiry on the store's
  // clock (real time in production), taken by compare-and-set.
  const std::string lock_subject = LockSubject(audience);
  ASSIGN_OR_RETURN(std::optional<Stored> lock, GetLast(kAudiencesStream, lock_subject));
  if (lock.has_value()) {
    std::pair<std::string, std::string> held = absl::StrSplit(lock->data, ' ');
    int64_t until_ms = 0;
    if (held.first != owner_ && absl::SimpleAtoi(held.second, &until_ms) &&
        absl::FromUnixMillis(until_ms) > clock_.Now()) {
      return absl::AbortedError(absl::StrCat("audience ", audience,
                                             " is being synced by another collector"));
    }
  }
  absl::StatusOr<uint64_t> lock_seq = Publish(
      {lock_subject, absl::StrCat(owner_, " ", absl::ToUnixMillis(clock_.Now() + kLockFor)),
       {{"Nats-Expected-Last-Subject-Sequence", absl::StrCat(lock.has_value() ? lock->seq : 0)}}});
  if (absl::IsFailedPrecondition(lock_seq.status())) {
    return absl::AbortedError(absl::StrCat("audience ", audience,
                                           " is being synced by another collector"));
  }
  if (!lock_seq.ok()) return lock_seq.status();

  AudienceSyncInput input;
  ASSIGN_OR_RETURN(std::optional<Stored> stored,
                   GetLast(kAudiencesStream, StateSubject(audience)));
  SyncSeen seen;
  seen.lock_seq = *lock_seq;
  seen.lock_refreshed = clock_.Now();
  if (stored.has_value()) {
    seen.state_seq = stored->seq;
    AudienceState state;
    if (!state.ParseFromString(stored->data)) {
      return absl::DataLossError("JetStream: an unreadable audience state");
    }
    if (state.computed()) {  // Else dropped: computed afresh.
      seen.last_sync_ms = state.last_sync_ms();
      input.state = std::move(state);
    }
  }
  // The change log position: every profile message up to it is read by this sync.
  ASSIGN_OR_RETURN(input.log_position, LastSeq(kProfilesStream));
  absl::flat_hash_set<std::string> users;
  auto add_user = [&](std::string_view token) -> absl::Status {
    std::optional<std::string> user = Untok(token);
    if (!user.has_value()) return absl::DataLossError("JetStream: an unreadable profile subject");
    users.insert(*std::move(user));
    return absl::OkStatus();
  };
  if (!input.state.has_value()) {
    // First computation: every profile of the audience's sources.
    for (const std::string& source : sources) {
      const std::string prefix = absl::StrCat("hr.prof.", Tok(source), ".");
      ASSIGN_OR_RETURN(std::vector<std::string> subjects,
                       Subjects(kProfilesStream, absl::StrCat(prefix, "*")));
      for (const std::string& subject : subjects) {
        RETURN_IF_ERROR(add_user(std::string_view(subject).substr(prefix.size())));
      }
    }
  } else {
    // The profile messages of its sources after the cursor, up to the position: batched direct
    // gets (any replica), then the leader confirms that nothing follows what they answered (a
    // replica answers the stream as it was when it last applied: a prefix of what is asked).
    for (const std::string& source : sources) {
      const std::string prefix = absl::StrCat("hr.prof.", Tok(source), ".");
      uint64_t from = input.state->cursor() + 1;
      while (from <= input.log_position) {
        Request r;
        r.subject = absl::StrCat("$JS.API.DIRECT.GET.", kProfilesStream);
        r.body = absl::StrCat(R"({"seq":)", from, R"(,"next_by_subj":")", prefix, R"(*","batch":)",
                              kBatch, "}");
        ASSIGN_OR_RETURN(std::vector<Answer> answers, Exchange({r}, true));
        const std::vector<Stored>& messages = answers[0].messages;
        for (const Stored& m : messages) {
          if (m.seq > input.log_position) break;
          RETURN_IF_ERROR(add_user(std::string_view(m.subject).substr(prefix.size())));
        }
        if (!messages.empty()) from = messages.back().seq + 1;
        if (!messages.empty() &&
            (messages.back().pending > 0 || messages.size() >= static_cast<size_t>(kBatch))) {
          continue;
        }
        if (from > input.log_position) break;
        ASSIGN_OR_RETURN(std::vector<std::optional<Stored>> next,
                         LeaderGets(kProfilesStream,
                                    {absl::StrCat(R"({"seq":)", from, R"(,"next_by_subj":")",
                                                  prefix, R"(*"})")}));
        if (!next[0].has_value() || next[0]->seq > input.log_position) break;
        RETURN_IF_ERROR(add_user(std::string_view(next[0]->subject).substr(prefix.size())));
        from = next[0]->seq + 1;
      }
    }
    // Rechecks due by now: hr.aud.rx.<A>.<minute>.<ms>.<U>, from the minute of the last sync
    // (earlier ones were read by it) on.
    const int64_t now_ms = absl::ToUnixMillis(now);
    const int64_t first = std::max<int64_t>(0, input.state->last_sync_ms()) / 60'000;
    const int64_t last = now_ms / 60'000;
    std::vector<std::string> subjects;
    const std::string prefix = absl::StrCat("hr.aud.rx.", Tok(audience), ".");
    if (last - first <= 120) {
      for (int64_t minute = first; minute <= last; ++minute) {
        ASSIGN_OR_RETURN(std::vector<std::string> some,
                         Subjects(kAudiencesStream, absl::StrCat(prefix, minute, ".*.*")));
        subjects.insert(subjects.end(), some.begin(), some.end());
      }
    } else {
      ASSIGN_OR_RETURN(subjects, Subjects(kAudiencesStream, absl::StrCat(prefix, "*.*.*")));
    }
    for (const std::string& subject : subjects) {
      std::vector<std::string> parts = Tokens(subject);
      int64_t at_ms = 0;
      if (parts.size() != 7 || !absl::SimpleAtoi(parts[5], &at_ms)) {
        return absl::DataLossError("JetStream: an unreadable recheck subject");
      }
      if (at_ms > now_ms) continue;
      RETURN_IF_ERROR(add_user(parts[6]));
      input.rechecks_due.push_back(subject);
    }
  }
  input.users.assign(users.begin(), users.end());
  std::sort(input.users.begin(), input.users.end());
  absl::MutexLock l(&mu_);
  syncs_[audience] = seen;
  return input;
}

absl::StatusOr<std::vector<AudienceUser>> JetStreamUserData::ReadAudienceUsers(
    std::string_view audience_id, const std::vector<std::string>& users,
    const std::vector<std::string>& sources) {
  const std::string audience(audience_id);
  std::vector<AudienceUser> out(users.size());
  if (users.empty()) return out;
  {
    // A long sync keeps its lock.
    std::optional<SyncSeen> seen;
    {
      absl::MutexLock l(&mu_);
      auto it = syncs_.find(audience);
      if (it != syncs_.end() && clock_.Now() - it->second.lock_refreshed > kLockRefresh) {
        seen = it->second;
      }
    }
    if (seen.has_value()) {
      absl::StatusOr<uint64_t> lock_seq = Publish(
          {LockSubject(audience),
           absl::StrCat(owner_, " ", absl::ToUnixMillis(clock_.Now() + kLockFor)),
           {{"Nats-Expected-Last-Subject-Sequence", absl::StrCat(seen->lock_seq)}}});
      if (absl::IsFailedPrecondition(lock_seq.status())) {
        return absl::AbortedError(absl::StrCat("audience ", audience,
                                               ": another collector took over its sync"));
      }
      if (!lock_seq.ok()) return lock_seq.status();
      absl::MutexLock l(&mu_);
      syncs_[audience].lock_seq = *lock_seq;
      syncs_[audience].lock_refreshed = clock_.Now();
    }
  }
  absl::flat_hash_map<std::string, size_t> wanted;  // source token → index in `sources`
  for (size_t s = 0; s < sources.size(); ++s) wanted.emplace(Tok(sources[s]), s);

  // Each user's profile messages in every source, folded per source of the audience: a direct
  // batch per user (pipelined, any replica), then the leader confirms that nothing follows what
  // the replica answered (else that message is folded and the user read on from it).
  struct Folding {
    hookrelay::v1::Profile profile;
    bool present = false;
    int deltas = 0;  // since the last full profile
    uint64_t last_seq = 0;
  };
  std::vector<std::vector<Folding>> folds(users.size(), std::vector<Folding>(sources.size()));
  auto fold = [&](size_t u, const Stored& m) {
    std::vector<std::string> parts = Tokens(m.subject);
    if (parts.size() != 4) return;
    auto it = wanted.find(parts[2]);
    if (it == wanted.end()) return;
    Folding& f = folds[u][it->second];
    f.present = true;
    f.last_seq = m.seq;
    if (m.full_profile) {
      if (!f.profile.ParseFromString(m.data)) f.profile.Clear();
      f.deltas = 0;
    } else {
      hookrelay::v1::ProfileDelta delta;
      if (delta.ParseFromString(m.data)) ApplyProfileDelta(delta, f.profile);
      ++f.deltas;
    }
  };
  std::vector<std::string> filters;
  filters.reserve(users.size());
  for (const std::string& user : users) filters.push_back(absl::StrCat("hr.prof.*.", Tok(user)));
  ASSIGN_OR_RETURN(std::vector<std::vector<Stored>> messages, ReadAll(kProfilesStream, filters));
  for (size_t u = 0; u < users.size(); ++u) {
    for (const Stored& m : messages[u]) fold(u, m);
  }

  // Memberships as last sent.
  std::vector<std::string> member_subjects;
  member_subjects.reserve(users.size());
  for (const std::string& user : users) member_subjects.push_back(MemberSubject(audience, user));
  ASSIGN_OR_RETURN(std::vector<Stored> members, LastOf(kAudiencesStream, member_subjects));
  absl::flat_hash_set<std::string> member_set;
  for (Stored& m : members) member_set.insert(std::move(m.subject));

  std::vector<Request> rollups;
  for (size_t u = 0; u < users.size(); ++u) {
    AudienceUser& user = out[u];
    user.user_id = users[u];
    user.member = member_set.contains(member_subjects[u]);
    for (size_t s = 0; s < sources.size(); ++s) {
      Folding& f = folds[u][s];
      if (!f.present) continue;
      if (f.deltas >= kRollupAfter) {
        // Refused when another delta came meanwhile (or the profile was deleted): no harm.
        rollups.push_back({ProfileSubject(sources[s], users[u]), f.profile.SerializeAsString(),
                           {{"Nats-Rollup", "sub"},
                            {"Hr-Profile", "full"},
                            {"Nats-Expected-Last-Subject-Sequence", absl::StrCat(f.last_seq)}}});
      }
      user.profiles.push_back(std::move(f.profile));
    }
  }
  if (!rollups.empty()) {
    absl::StatusOr<std::vector<Answer>> rolled = Exchange(rollups, false);
    if (!rolled.ok()) {
      common::LogWarning("rolling up profiles failed (they are folded again next time)",
                         {{"error", rolled.status().message()}});
    }
  }
  return out;
}

absl::Status JetStreamUserData::PublishFenced(const std::string& audience, uint64_t lock_seq,
                                              uint64_t fence, const std::vector<Request>& jobs) {
  // Atomic batches, each led by a message on the fence that expects its last sequence: the
  // first expects what was read before the profiles were checked, each next one the previous
  // batch's. A deletion's fence in between refuses the rest; what was stored before it is below
  // that deletion's L, purged with the user's other jobs.
  const std::string subject = FenceSubject(audience);
  const absl::Status fenced_off = absl::AbortedError(absl::StrCat(
      "audience ", audience,
      ": a deletion of one of its users began during the sync; it is synced again next time"));
  // One batch: the fence message tagged `tag`, then `members`. Stored → true, the fence moved
  // to it; refused because one of its jobs' message ids was stored already (an earlier sync
  // from the same state stored it, within the stream's duplicate window) → false, nothing
  // stored; the fence moved by a deletion → Aborted.
  auto send = [&](const std::string& tag, const Request* members,
                  size_t count) -> absl::StatusOr<bool> {
    std::vector<Request> batch;
    batch.reserve(count + 1);
    batch.push_back({subject, tag, {{"Nats-Expected-Last-Subject-Sequence", absl::StrCat(fence)}}});
    batch.insert(batch.end(), members, members + count);
    const absl::Status sent = PublishAtomic(batch);
    if (!sent.ok() && !absl::IsFailedPrecondition(sent) && !absl::IsAlreadyExists(sent)) {
      return sent;
    }
    // Which it was (a batch sent again after a lost answer is refused either way, though stored):
    // the fence's last message says.
    ASSIGN_OR_RETURN(std::optional<Stored> last, GetLast(kJobsStream, subject));
    if (last.has_value() && last->data == tag) {
      fence = last->seq;
      return true;
    }
    if (absl::IsAlreadyExists(sent) && (last.has_value() ? last->seq : 0) == fence) return false;
    return fenced_off;
  };
  constexpr size_t kPerBatch = kMaxAtomicBatch - 1;
  for (size_t from = 0, chunk = 0; from < jobs.size(); from += kPerBatch, ++chunk) {
    const size_t count = std::min(jobs.size() - from, kPerBatch);
    const std::string tag = absl::StrCat("sync ", lock_seq, " ", chunk);
    ASSIGN_OR_RETURN(bool stored, send(tag, &jobs[from], count));
    if (stored) continue;
    // Some of these jobs were stored before (a sync that failed after storing them): one at a
    // time, each behind the fence; those stored already are refused and skipped.
    for (size_t n = 0; n < count; ++n) {
      ASSIGN_OR_RETURN(stored, send(absl::StrCat(tag, ".", n), &jobs[from + n], 1));
    }
  }
  // The fence's earlier messages are not needed any more.
  if (fence > 0) RETURN_IF_ERROR(Purge(kJobsStream, subject, fence).status());
  return absl::OkStatus();
}

absl::StatusOr<AudienceState> JetStreamUserData::CommitAudienceSync(AudienceSyncPlan plan) {
  const std::string& audience = plan.audience_id;
  SyncSeen seen;
  {
    absl::MutexLock l(&mu_);
    auto it = syncs_.find(audience);
    if (it == syncs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("audience ", audience, ": no sync begun here"));
    }
    seen = it->second;
  }
  // Still ours (a collector stalled past the lock's expiry must not commit over another's sync).
  ASSIGN_OR_RETURN(std::optional<Stored> lock, GetLast(kAudiencesStream, LockSubject(audience)));
  if (!lock.has_value() || lock->seq != seen.lock_seq) {
    return absl::AbortedError(
        absl::StrCat("audience ", audience, ": another collector took over its sync"));
  }

  // The audience's fence, read before the profiles: a deletion that purges one of the profiles
  // read below publishes on it afterwards, and the identify jobs are stored only if it has not
  // moved (PublishFenced).
  uint64_t fence = 0;
  if (!plan.jobs.empty()) {
    ASSIGN_OR_RETURN(std::optional<Stored> last, GetLast(kJobsStream, FenceSubject(audience)));
    if (last.has_value()) fence = last->seq;
  }

  // A user deleted since the evaluation gets no identify: an entry needs a profile still, an
  // exit a membership still recorded.
  if (!plan.changes.empty()) {
    std::vector<std::string> profile_subjects;
    std::vector<std::string> member_subjects;
    for (const auto& [user, member] : plan.changes) {
      if (member) {
        for (const std::string& source : plan.sources) {
          profile_subjects.push_back(ProfileSubject(source, user));
        }
      } else {
        member_subjects.push_back(MemberSubject(audience, user));
      }
    }
    absl::flat_hash_set<std::string> present;
    if (!profile_subjects.empty()) {
      ASSIGN_OR_RETURN(std::vector<Stored> found, LastOf(kProfilesStream, profile_subjects));
      for (const Stored& m : found) {
        std::vector<std::string> parts = Tokens(m.subject);
        if (parts.size() == 4) {
          if (std::optional<std::string> user = Untok(parts[3])) present.insert(*user);
        }
      }
    }
    absl::flat_hash_set<std::string> still_members;
    if (!member_subjects.empty()) {
      ASSIGN_OR_RETURN(std::vector<Stored> found, LastOf(kAudiencesStream, member_subjects));
      for (Stored& m : found) still_members.insert(std::move(m.subject));
    }
    absl::flat_hash_set<std::string> gone;
    for (const auto& [user, member] : plan.changes) {
      if (member ? !present.contains(user)
                 : !still_members.contains(MemberSubject(audience, user))) {
        gone.insert(user);
      }
    }
    if (!gone.empty()) {
      std::erase_if(plan.changes, [&](const auto& c) { return gone.contains(c.first); });
      std::erase_if(plan.jobs, [&](const Job& j) { return gone.contains(j.user_id()); });
      std::erase_if(plan.rechecks, [&](const auto& r) { return gone.contains(r.first); });
    }
  }

  // A test's stop: the users checked, nothing stored yet (tests/jetstream_user_data_test.cc runs
  // a deletion here).
  if (StopAfter("sync-checked")) {
    return absl::UnavailableError("audience sync stopped after checking its users (test)");
  }

  // 1. The identify jobs, behind the audience's fence (PublishFenced). A sync computed from the
  // same state as one that stored its jobs and stopped gives each the same message id: stored
  // once within the stream's duplicate window.
  absl::flat_hash_map<std::string, bool> direction(plan.changes.begin(), plan.changes.end());
  const absl::string_view kNul("\0", 1);
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  std::vector<Request> jobs;
  for (Job& job : plan.jobs) {
    job.set_id(0);
    job.set_due_unix_ms(now_ms);
    auto d = direction.find(job.user_id());
    const std::string id = DedupMarkerSubject(absl::StrCat(
        audience, kNul, seen.state_seq, kNul, job.user_id(), kNul,
        d != direction.end() && d->second ? "1" : "0", kNul, job.destination_id()));
    if (ready_jobs_hook_) ready_jobs_hook_(job.destination_id());
    jobs.push_back({ReadySubject(job), job.SerializeAsString(),
                    {{"Nats-Msg-Id", absl::StrCat("aud-", id.substr(sizeof("hr.dedup.") - 1))}}});
  }
  if (absl::Status fenced = PublishFenced(audience, seen.lock_seq, fence, jobs); !fenced.ok()) {
    if (absl::IsAborted(fenced)) {
      // Nothing committed: the lock goes now (the next sync need not wait for it to expire).
      absl::StatusOr<std::optional<Stored>> held = GetLast(kAudiencesStream, LockSubject(audience));
      if (held.ok() && held->has_value() && (*held)->seq == seen.lock_seq) {
        (void)Purge(kAudiencesStream, LockSubject(audience), seen.lock_seq + 1);
      }
      absl::MutexLock l(&mu_);
      syncs_.erase(audience);
    }
    return fenced;
  }
  if (StopAfter("sync-jobs-stored")) {
    return absl::UnavailableError("audience sync stopped after storing its jobs (test)");
  }

  // 2. Memberships.
  int64_t delta = 0;
  std::vector<Request> entries;
  for (const auto& [user, member] : plan.changes) {
    if (member) {
      entries.push_back({MemberSubject(audience, user), "1", {}});
      ++delta;
    } else {
      RETURN_IF_ERROR(Purge(kAudiencesStream, MemberSubject(audience, user)).status());
      --delta;
    }
  }
  RETURN_IF_ERROR(PublishAll(entries));

  // 3. Rechecks: the new ones, then the done ones go (unless written again just now).
  std::vector<Request> rechecks;
  absl::flat_hash_set<std::string> written;
  for (const auto& [user, at] : plan.rechecks) {
    std::string subject = RecheckSubject(audience, absl::ToUnixMillis(at), user);
    written.insert(subject);
    rechecks.push_back({std::move(subject), "", {}});
  }
  RETURN_IF_ERROR(PublishAll(rechecks));
  for (const std::string& subject : plan.rechecks_done) {
    if (written.contains(subject)) continue;
    RETURN_IF_ERROR(Purge(kAudiencesStream, subject).status());
  }

  // 4. The state, last: the cursor moves only once everything above is stored. Deletions change
  // the member count concurrently (compare-and-set, retried); another sync's commit meanwhile
  // aborts this one.
  ASSIGN_OR_RETURN(
      AudienceState state,
      UpdateState(audience, [&](std::optional<AudienceState>& state) -> absl::StatusOr<bool> {
        const bool computed = state.has_value() && state->computed();
        const int64_t last_sync = computed ? state->last_sync_ms() : -1;
        if (last_sync != seen.last_sync_ms) {
          return absl::AbortedError(
              absl::StrCat("audience ", audience, ": another sync committed meanwhile"));
        }
        const int64_t members = computed ? static_cast<int64_t>(state->members()) : 0;
        AudienceState next = plan.stats;
        next.set_cursor(plan.log_position);
        next.set_members(static_cast<uint64_t>(std::max<int64_t>(members + delta, 0)));
        next.set_computed(true);
        state = std::move(next);
        return true;
      }));
  // 5. The lock.
  RETURN_IF_ERROR(Purge(kAudiencesStream, LockSubject(audience)).status());
  absl::MutexLock l(&mu_);
  syncs_.erase(audience);
  return state;
}

absl::Status JetStreamUserData::DropAudience(std::string_view audience_id) {
  const std::string audience = Tok(audience_id);
  for (const std::string& filter :
       {absl::StrCat("hr.aud.m.", audience, ".*"), absl::StrCat("hr.aud.rx.", audience, ".>"),
        absl::StrCat("hr.aud.lock.", audience)}) {
    RETURN_IF_ERROR(Purge(kAudiencesStream, filter).status());
  }
  // The state becomes "not computed" rather than nothing: its new sequence keeps the identify
  // jobs' message ids of a later first computation apart from the last one's.
  RETURN_IF_ERROR(
      Publish({StateSubject(audience_id), AudienceState().SerializeAsString(), {}}).status());
  absl::MutexLock l(&mu_);
  syncs_.erase(std::string(audience_id));
  return absl::OkStatus();
}

}  // namespace hookrelay::collector
