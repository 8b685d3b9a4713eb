// The JetStream engine's user data, deletions: applying a deletion plan (claim, record, purges,
// memberships, notifications), resuming one, reading the records, and the purge marks that drop
// jobs leased while their subject was purged.
#include "collector/store/jetstream/jetstream_user_data.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/jetstream_subjects.h"
#include "collector/store/jetstream/nats_request.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::AudienceState;
using hookrelay::v1::Deletion;
using hookrelay::v1::DeletionProgress;
using hookrelay::v1::Job;

// How long a purge mark (a deletion's HR_JOBS sequence) is kept for leased jobs: well past a
// lease (the consumer's ack wait). Real time, not the store's clock: what a mark covers is the
// server redelivering jobs fetched before the deletion, which runs on the servers' time (a test's
// manual clock moved hours ahead must not let a purged job through).
constexpr absl::Duration kPurgeMarkFor = absl::Minutes(10);

// How long the "applying" record takes to reach every connected collector, with a margin: the
// sweep waits this long after publishing it (core NATS delivers it in milliseconds).
constexpr absl::Duration kMarkSpread = absl::Seconds(2);

// The counted-out deletions an audience's state remembers.
constexpr int kCountedOutKept = 16;

// A deletion's notifications go in atomic batches of at most this many, each with its marker.
constexpr size_t kNotificationsPerBatch = 999;

// The value of `key` in a header block ("NATS/1.0\r\nKey: value\r\n..."), "" when absent.
std::string HeaderValue(const std::string& block, std::string_view key) {
  const std::string needle = absl::StrCat("\r\n", std::string(key), ": ");
  const size_t at = block.find(needle);
  if (at == std::string::npos) return "";
  const size_t start = at + needle.size();
  const size_t end = block.find("\r\n", start);
  return block.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// The markers of a deletion's notification batches.
std::string NotificationMarkers(std::string_view deletion_id) {
  return absl::StrCat(NotificationMarkerPrefix(), Tok(deletion_id), ".*");
}

}  // namespace

// The fault tests' stops (tests/jetstream_deletion_crash_test.cc kills the process,
// tests/jetstream_user_data_test.cc stops the call), right after a step of a deletion: planned,
// fenced (profiles purged, fences published, L read), recorded, counted (a source's subjects
// counted), purging (its purges done, its counts not yet noted), purged, membership (one
// removed, its count not yet changed), memberships, notifying (published, not yet noted),
// notified, swept, completed. And of an audience sync's commit: sync-checked (its users'
// profiles checked, nothing stored), sync-jobs-stored (its identify jobs stored, nothing else).
bool JetStreamUserData::StopAfter(std::string_view step) {
  static const char* const at = std::getenv("HOOKRELAY_CRASH_IN_DELETION");
  if (at != nullptr && step == at) raise(SIGKILL);
  return stop_deletion_after_ && stop_deletion_after_(step);
}

namespace {
absl::Status Stopped(std::string_view step) {
  return absl::UnavailableError(
      absl::StrCat("deletion stopped after step ", std::string(step), " (test)"));
}
}  // namespace

#define HR_STOP_AFTER(step) \
  if (StopAfter(step)) return Stopped(step)

void JetStreamUserData::OnRecord(natsConnection*, natsSubscription*, natsMsg* msg, void* self) {
  auto* data = static_cast<JetStreamUserData*>(self);
  Deletion record;
  uint64_t upto = 0;
  if (record.ParseFromArray(natsMsg_GetData(msg), natsMsg_GetDataLength(msg)) &&
      absl::SimpleAtoi(NatsHeader(msg, "Hr-Jobs-Upto"), &upto)) {
    int64_t planned_ms = 0;
    if (!absl::SimpleAtoi(NatsHeader(msg, "Hr-Planned-Ms"), &planned_ms)) planned_ms = 0;
    data->NotePurge(record, upto, planned_ms);
  }
  natsMsg_Destroy(msg);
}

void JetStreamUserData::NotePurge(const Deletion& record, uint64_t jobs_upto,
                                  int64_t planned_ms) {
  const absl::Time now = absl::Now();
  const std::string user = Tok(record.user_id());
  std::vector<std::string> rewrite;  // Index entries to write again (COMPLETED).
  {
    absl::MutexLock lock(&mu_);
    if (record.state() != Deletion::COMPLETED) {
      // Applying: watch its pairs; one appended here since the deletion read L, before its
      // record arrived (possibly after the purge of its index entry, with no entry written
      // because the pair was cached), counts. Real time across machines: within their skew.
      // A record without the time (an earlier release) watches from now on only.
      absl::erase_if(index_watch_,
                     [&](const auto& e) { return now - e.second.since > kPurgeMarkFor; });
      for (const std::string& source : record.source_ids()) {
        const uint64_t pair = UserSourceHash(record.user_id(), source);
        const size_t slot = pair & (kSeenCacheSlots - 1);
        const bool recent =
            planned_ms > 0 && seen_->recent_pairs[slot].load(std::memory_order_relaxed) == pair &&
            seen_->recent_ms[slot].load(std::memory_order_relaxed) >= planned_ms;
        auto [it, added] = index_watch_.try_emplace(pair);
        if (added) it->second = IndexWatch{user, Tok(source), false, now};
        it->second.appended = it->second.appended || recent;
      }
      any_index_watch_.store(true, std::memory_order_relaxed);
    } else {
      for (const std::string& source : record.source_ids()) {
        auto it = index_watch_.find(UserSourceHash(record.user_id(), source));
        if (it == index_watch_.end()) continue;
        if (it->second.appended) {
          rewrite.push_back(
              absl::StrCat("hr.users.", it->second.user_token, ".", it->second.source_token));
        }
        index_watch_.erase(it);
      }
      any_index_watch_.store(!index_watch_.empty(), std::memory_order_relaxed);
    }
  }
  // Written without waiting (this may be the client's callback thread): one message per subject.
  for (const std::string& subject : rewrite) {
    natsConnection_Publish(nc_, subject.c_str(), nullptr, 0);
  }
  // Index entries may be purged: the cache forgets every pair (deletions are rare; it refills).
  seen_->generation.fetch_add(1);
  for (size_t i = 0; i < kSeenCacheSlots; ++i) {
    seen_->slots[i].store(0, std::memory_order_relaxed);
  }
  any_purges_.store(true, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  if (purged_.size() > 100'000) {
    absl::erase_if(purged_, [&](const auto& e) { return now - e.second.second > kPurgeMarkFor; });
  }
  for (const std::string& source : record.source_ids()) {
    auto& mark = purged_[UserSourceHash(record.user_id(), source)];
    mark.first = std::max(mark.first, jobs_upto);
    mark.second = now;
  }
}

bool JetStreamUserData::PurgedByDeletion(const Job& job, uint64_t job_id) {
  if (!any_purges_.load(std::memory_order_relaxed)) return false;  // The dispatch path's case.
  if (job.type() == hookrelay::v1::DELETE || job.test() || job.user_id().empty()) return false;
  absl::MutexLock lock(&mu_);
  auto it = purged_.find(UserSourceHash(job.user_id(), job.source_id()));
  if (it == purged_.end() || absl::Now() - it->second.second > kPurgeMarkFor) return false;
  return job_id <= it->second.first;
}

absl::StatusOr<DeletionOutcome> JetStreamUserData::ApplyDeletion(DeletionPlan plan) {
  if (plan.record.id().empty() || plan.record.user_id().empty()) {
    return absl::InvalidArgumentError("job store: a deletion needs an id and a user id");
  }
  plan.record.clear_state();
  const std::string& request_id = plan.record.request_id();
  if (request_id.empty()) return Apply(plan);
  // The request id is claimed once, by its first deletion (the claim holds that record).
  Request claim;
  claim.subject = ClaimSubject(request_id);
  claim.body = plan.record.SerializeAsString();
  claim.headers = {{"Nats-Expected-Last-Subject-Sequence", "0"}};
  absl::StatusOr<uint64_t> claimed = Publish(claim);
  if (claimed.ok()) return Apply(plan);
  if (!absl::IsFailedPrecondition(claimed.status())) return claimed.status();
  ASSIGN_OR_RETURN(std::optional<Stored> earlier, GetLast(kDeletionsStream, claim.subject));
  Deletion first;
  if (!earlier.has_value() || !first.ParseFromString(earlier->data)) {
    return absl::DataLossError("JetStream: an unreadable deletion claim");
  }
  return Resume(plan, first.id() == plan.record.id() ? plan.record.id() : first.id());
}

absl::StatusOr<DeletionOutcome> JetStreamUserData::Resume(DeletionPlan& plan,
                                                          const std::string& earlier_id) {
  DeletionOutcome outcome;
  ASSIGN_OR_RETURN(std::optional<Stored> stored,
                   GetLast(kDeletionsStream, RecordSubject(earlier_id)));
  Deletion earlier;
  if (stored.has_value() && !earlier.ParseFromString(stored->data)) {
    return absl::DataLossError("JetStream: an unreadable deletion record");
  }
  if (stored.has_value() && earlier.state() == Deletion::COMPLETED) {
    outcome.record = std::move(earlier);
    outcome.keys_touched = 3;
    return outcome;
  }
  if (!stored.has_value()) {
    // Claimed, then interrupted before its record: the claim holds it.
    ASSIGN_OR_RETURN(std::optional<Stored> claim,
                     GetLast(kDeletionsStream, ClaimSubject(plan.record.request_id())));
    if (!claim.has_value() || !earlier.ParseFromString(claim->data)) {
      return absl::DataLossError("JetStream: an unreadable deletion claim");
    }
  }
  if (earlier.user_id() != plan.record.user_id()) {
    outcome.record = std::move(earlier);
    return outcome;
  }
  // Interrupted: finished from where it stopped when its progress was written (its counts and
  // notifications as they were), else again from the start under its own id.
  ASSIGN_OR_RETURN(std::optional<Stored> progress,
                   GetLast(kDeletionsStream, ProgressSubject(earlier.id())));
  if (progress.has_value()) {
    DeletionProgress p;
    if (!p.ParseFromString(progress->data)) {
      return absl::DataLossError("JetStream: an unreadable deletion progress");
    }
    return FinishOrAwait(p, progress->seq);
  }
  const std::string new_id = plan.record.id();
  if (new_id != earlier.id()) {
    for (Job& job : plan.notifications) {
      if (absl::StartsWith(job.message_id(), new_id)) {
        job.set_message_id(absl::StrCat(earlier.id(), job.message_id().substr(new_id.size())));
      }
    }
    plan.record.set_id(earlier.id());
    *plan.record.mutable_create_time() = earlier.create_time();
  }
  return Apply(plan);
}

absl::Status JetStreamUserData::RemoveMembership(DeletionProgress& p, uint64_t& seq,
                                                 size_t* touched) {
  const std::string& audience = p.audience_ids(static_cast<int>(p.audiences_done()));
  const std::string& user = p.record().user_id();
  const std::string subject = MemberSubject(audience, user);
  // Whether the user is a member, noted before the membership goes: a crash between the purge
  // and the count leaves no other trace of it.
  if (!p.has_removing()) {
    ASSIGN_OR_RETURN(std::optional<Stored> member, GetLast(kAudiencesStream, subject));
    p.mutable_removing()->set_was_member(member.has_value());
    ASSIGN_OR_RETURN(seq, SaveProgress(p, seq));
    *touched += 2;
  }
  ASSIGN_OR_RETURN(uint64_t purged, Purge(kAudiencesStream, subject));
  ++*touched;
  HR_STOP_AFTER("membership");
  if (purged > 0 || p.removing().was_member()) {
    // Counted out once per deletion, whoever finishes it.
    RETURN_IF_ERROR(CountOut(audience, p.record().id()));
    *touched += 2;
  }
  p.clear_removing();
  p.set_audiences_done(p.audiences_done() + 1);
  ASSIGN_OR_RETURN(seq, SaveProgress(p, seq));
  ++*touched;
  return absl::OkStatus();
}

absl::Status JetStreamUserData::CountOut(const std::string& audience, const std::string& key) {
  return UpdateState(audience, [&key](std::optional<AudienceState>& state) -> absl::StatusOr<bool> {
           if (!state.has_value() || !state->computed() || state->members() == 0) return false;
           for (const std::string& done : state->counted_out_by()) {
             if (done == key) return false;
           }
           state->set_members(state->members() - 1);
           state->add_counted_out_by(key);
           if (state->counted_out_by_size() > kCountedOutKept) {
             state->mutable_counted_out_by()->DeleteSubrange(
                 0, state->counted_out_by_size() - kCountedOutKept);
           }
           return true;
         })
      .status();
}

absl::Status JetStreamUserData::SweepPurgedJobs(const Deletion& record, uint64_t upto,
                                                uint64_t* jobs, uint64_t* dead,
                                                size_t* touched) {
  const std::string user = Tok(record.user_id());
  // A message is swept when it carries a job the deletion purged: its id (the job's first
  // HR_JOBS sequence) at or below jobs_upto. The user's new events (id 0 in their first
  // message, or a sequence above jobs_upto) stay.
  // The user's messages are read one by one from the stream leader (HR_JOBS and HR_DEAD have
  // no direct gets): a few per user.
  auto swept = [&](const char* stream, const std::vector<std::string>& filters,
                   uint64_t* count) -> absl::Status {
    for (const std::string& filter : filters) {
      for (uint64_t from = 1;;) {
        const std::string next =
            absl::StrCat(R"({"seq":)", from, R"(,"next_by_subj":")", filter, R"("})");
        ASSIGN_OR_RETURN(std::vector<std::optional<Stored>> got, LeaderGets(stream, {next}));
        ++*touched;
        if (!got[0].has_value()) break;
        const Stored& m = *got[0];
        from = m.seq + 1;
        Job job;
        if (!job.ParseFromString(m.data) || job.id() == 0 || job.id() > upto) continue;
        ASSIGN_OR_RETURN(bool deleted, DeleteMessage(stream, m.seq));
        if (deleted) ++*count;
      }
    }
    return absl::OkStatus();
  };
  for (const std::string& source_id : record.source_ids()) {
    const std::string tail = absl::StrCat(Tok(source_id), ".", user);
    RETURN_IF_ERROR(swept(kJobsStream,
                          {absl::StrCat("hr.jobs.ready.*.", tail),
                           absl::StrCat("hr.jobs.ready.", tail),
                           absl::StrCat("hr.jobs.sched.", tail, ".*")},
                          jobs));
    RETURN_IF_ERROR(swept(kDeadStream, {absl::StrCat("hr.dead.*.", tail)}, dead));
  }
  return absl::OkStatus();
}

absl::Status JetStreamUserData::Sweep(DeletionProgress& p, absl::Time recorded_at,
                                      size_t* touched) {
  const absl::Duration wait = recorded_at + kMarkSpread - absl::Now();
  if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
  Deletion& record = *p.mutable_record();
  uint64_t jobs = 0;
  uint64_t dead = 0;
  RETURN_IF_ERROR(SweepPurgedJobs(record, p.jobs_upto(), &jobs, &dead, touched));
  record.set_purged_jobs(record.purged_jobs() + jobs);
  record.set_purged_dead_letters(record.purged_dead_letters() + dead);
  // A membership committed by a sync that read the profile just before it was purged.
  for (const std::string& audience : p.audience_ids()) {
    const std::string subject = MemberSubject(audience, record.user_id());
    ASSIGN_OR_RETURN(uint64_t purged, Purge(kAudiencesStream, subject));
    ++*touched;
    if (purged > 0) RETURN_IF_ERROR(CountOut(audience, absl::StrCat(record.id(), "+")));
  }
  if (jobs + dead > 0) {
    common::LogInfo("a deletion swept what collectors stored for the user after its purges",
                    {{"deletion", record.id()},
                     {"jobs", static_cast<int64_t>(jobs)},
                     {"dead_letters", static_cast<int64_t>(dead)}});
  }
  return absl::OkStatus();
}

absl::Status JetStreamUserData::PublishNotifications(const DeletionProgress& p) {
  // Each batch: its marker first, published only if it is new (expected last subject sequence
  // 0), then its notifications; stored together or not at all. A batch whose marker is there
  // was sent before this collector (or an earlier attempt of it) crashed.
  const std::string id = Tok(p.record().id());
  for (size_t from = 0, chunk = 0; from < static_cast<size_t>(p.notifications_size());
       from += kNotificationsPerBatch, ++chunk) {
    const size_t end =
        std::min(static_cast<size_t>(p.notifications_size()), from + kNotificationsPerBatch);
    std::vector<Request> batch;
    batch.reserve(end - from + 1);
    batch.push_back({absl::StrCat(NotificationMarkerPrefix(), id, ".", chunk),
                     "",
                     {{"Nats-Expected-Last-Subject-Sequence", "0"}}});
    for (size_t n = from; n < end; ++n) {
      const Job& job = p.notifications(static_cast<int>(n));
      if (ready_jobs_hook_) ready_jobs_hook_(job.destination_id());
      batch.push_back({ReadySubject(job), job.SerializeAsString(), {}});
    }
    absl::Status sent = PublishAtomic(batch);
    if (absl::IsFailedPrecondition(sent)) {
      common::LogInfo("a resumed deletion's notifications were already sent",
                      {{"deletion", p.record().id()}, {"batch", static_cast<int64_t>(chunk)}});
      continue;
    }
    RETURN_IF_ERROR(sent);
  }
  return absl::OkStatus();
}

absl::StatusOr<DeletionOutcome> JetStreamUserData::Apply(DeletionPlan& plan) {
  // Appends of the user from here on are its new events (their index entries are kept).
  const int64_t planned_ms = absl::ToUnixMillis(absl::Now());
  // The plan first, notifications made once (ids, due times): from here on a crash leaves a
  // deletion any collector finishes (ResumeLoop), whether or not the caller gave a request id.
  // L (jobs_upto) is read by its first step (Fence).
  DeletionProgress p;
  *p.mutable_record() = plan.record;
  p.set_planned_unix_ms(planned_ms);
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  for (Job& job : plan.notifications) {
    job.set_id(0);
    job.set_due_unix_ms(now_ms);
    *p.add_notifications() = std::move(job);
  }
  for (const std::string& audience : plan.audience_ids) p.add_audience_ids(audience);
  ASSIGN_OR_RETURN(const uint64_t seq,
                   Publish({ProgressSubject(plan.record.id()), p.SerializeAsString(),
                            {{"Nats-Expected-Last-Subject-Sequence", "0"}}}));
  HR_STOP_AFTER("planned");
  return FinishOrAwait(p, seq);
}

absl::StatusOr<DeletionOutcome> JetStreamUserData::FinishOrAwait(DeletionProgress& p,
                                                                 uint64_t seq) {
  absl::StatusOr<DeletionOutcome> finished = Finish(p, seq);
  if (!absl::IsAborted(finished.status())) return finished;
  // Another collector took it over (this one was too slow): its record, once COMPLETED.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    ASSIGN_OR_RETURN(std::optional<Deletion> done, GetDeletion(p.record().id()));
    if (done.has_value()) {
      DeletionOutcome outcome;
      outcome.record = *std::move(done);
      outcome.created = true;
      return outcome;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  return finished.status();
}

absl::StatusOr<uint64_t> JetStreamUserData::SaveProgress(const DeletionProgress& p,
                                                         uint64_t seq) {
  absl::StatusOr<uint64_t> saved =
      Publish({ProgressSubject(p.record().id()), p.SerializeAsString(),
               {{"Nats-Expected-Last-Subject-Sequence", absl::StrCat(seq)}}});
  if (absl::IsFailedPrecondition(saved.status())) {
    return absl::AbortedError(absl::StrCat("deletion ", p.record().id(),
                                           " is being finished by another collector"));
  }
  return saved;
}

absl::Status JetStreamUserData::Fence(DeletionProgress& p, uint64_t& seq, size_t* touched) {
  Deletion& record = *p.mutable_record();
  // The profiles counted before they go (a resumed deletion counts what is left: nothing).
  if (!p.profiles_counted()) {
    bool had = false;
    for (const std::string& source : record.source_ids()) {
      ASSIGN_OR_RETURN(uint64_t n,
                       CountMessages(kProfilesStream, ProfileSubject(source, record.user_id())));
      had = had || n > 0;
      ++*touched;
    }
    p.set_had_profile(had);
    p.set_profiles_counted(true);
    ASSIGN_OR_RETURN(seq, SaveProgress(p, seq));
    ++*touched;
  }
  for (const std::string& source : record.source_ids()) {
    RETURN_IF_ERROR(Purge(kProfilesStream, ProfileSubject(source, record.user_id())).status());
    ++*touched;
  }
  // Each audience's fence, after the profiles are gone: a sync that read one of them before
  // stores its identify jobs before the fence (below L, read next: purged) or not at all.
  for (const std::string& audience : p.audience_ids()) {
    const std::string subject = FenceSubject(audience);
    ASSIGN_OR_RETURN(uint64_t fence,
                     Publish({subject, absl::StrCat("deletion ", record.id()), {}}));
    RETURN_IF_ERROR(Purge(kJobsStream, subject, fence).status());  // The earlier ones.
    *touched += 2;
  }
  // A progress of an earlier release read L when it was planned (its profiles purged with each
  // source's jobs); it keeps it.
  if (p.jobs_upto() == 0) {
    ASSIGN_OR_RETURN(const uint64_t jobs_upto, LastSeq(kJobsStream));
    p.set_jobs_upto(jobs_upto);
  }
  record.set_purged_profile(record.purged_profile() || p.had_profile());
  p.set_fenced(true);
  ASSIGN_OR_RETURN(seq, SaveProgress(p, seq));
  ++*touched;
  HR_STOP_AFTER("fenced");
  return absl::OkStatus();
}

absl::StatusOr<DeletionOutcome> JetStreamUserData::Finish(DeletionProgress& p, uint64_t seq) {
  DeletionOutcome outcome;
  size_t& touched = outcome.keys_touched;
  Deletion& record = *p.mutable_record();
  const std::string user = Tok(record.user_id());
  ASSIGN_OR_RETURN(std::optional<Stored> stored, GetLast(kDeletionsStream, RecordSubject(record.id())));
  ++touched;
  Deletion done;
  if (stored.has_value() && done.ParseFromString(stored->data) &&
      done.state() == Deletion::COMPLETED) {
    // Finished, and interrupted before its progress was removed.
    RETURN_IF_ERROR(Purge(kJobsStream, NotificationMarkers(record.id())).status());
    RETURN_IF_ERROR(Purge(kDeletionsStream, ProgressSubject(record.id())).status());
    outcome.record = std::move(done);
    return outcome;
  }
  if (!p.fenced()) RETURN_IF_ERROR(Fence(p, seq, &touched));
  const std::string upto = absl::StrCat(p.jobs_upto());
  // "Applying", with L: every collector drops the outcomes of purged jobs it has leased.
  record.clear_state();
  const std::string planned = absl::StrCat(p.planned_unix_ms());
  RETURN_IF_ERROR(Publish({RecordSubject(record.id()), record.SerializeAsString(),
                           {{"Hr-Jobs-Upto", upto}, {"Hr-Planned-Ms", planned}}})
                      .status());
  NotePurge(record, p.jobs_upto(), p.planned_unix_ms());
  const absl::Time recorded_at = absl::Now();
  ++touched;
  HR_STOP_AFTER("recorded");

  // Each source: what its subjects hold, noted; its purges; its counts in the progress. The
  // purges' own counts are exact; a deletion resumed after a crash in the middle of a source's
  // purges records what was noted just before them instead (the purges run again find only
  // what the crash left).
  for (int i = static_cast<int>(p.sources_done()); i < record.source_ids_size(); ++i) {
    const std::string source = Tok(record.source_ids(i));
    const std::string tail = absl::StrCat(source, ".", user);
    // Per-destination subjects, and those of the layout before them.
    const std::string ready_filter = absl::StrCat("hr.jobs.ready.*.", tail);
    const std::string ready_before_filter = absl::StrCat("hr.jobs.ready.", tail);
    const std::string scheduled_filter = absl::StrCat("hr.jobs.sched.", tail, ".*");
    const std::string dead_filter = absl::StrCat("hr.dead.*.", tail);
    const bool resumed = p.has_purging();
    if (!resumed) {
      hookrelay::v1::SourceCounts& noted = *p.mutable_purging();
      uint64_t jobs = 0;
      for (const std::string* filter : {&ready_filter, &ready_before_filter, &scheduled_filter}) {
        ASSIGN_OR_RETURN(uint64_t n, CountMessages(kJobsStream, *filter));
        jobs += n;
      }
      noted.set_jobs(jobs);
      ASSIGN_OR_RETURN(uint64_t dead, CountMessages(kDeadStream, dead_filter));
      noted.set_dead_letters(dead);
      ASSIGN_OR_RETURN(seq, SaveProgress(p, seq));
      touched += 5;
      HR_STOP_AFTER("counted");
    }
    ASSIGN_OR_RETURN(uint64_t ready, Purge(kJobsStream, ready_filter, p.jobs_upto() + 1));
    ASSIGN_OR_RETURN(uint64_t ready_before,
                     Purge(kJobsStream, ready_before_filter, p.jobs_upto() + 1));
    ready += ready_before;
    ASSIGN_OR_RETURN(uint64_t scheduled,
                     Purge(kJobsStream, scheduled_filter, p.jobs_upto() + 1));
    ASSIGN_OR_RETURN(uint64_t dead, Purge(kDeadStream, dead_filter));
    RETURN_IF_ERROR(Purge(kUsersStream, absl::StrCat("hr.users.", user, ".", source)).status());
    touched += 4;
    HR_STOP_AFTER("purging");
    if (resumed) {
      record.set_purged_jobs(record.purged_jobs() + p.purging().jobs());
      record.set_purged_dead_letters(record.purged_dead_letters() + p.purging().dead_letters());
      // A progress of an earlier release, which purged the profile here.
      record.set_purged_profile(record.purged_profile() || p.purging().profile());
    } else {
      record.set_purged_jobs(record.purged_jobs() + ready + scheduled);
      record.set_purged_dead_letters(record.purged_dead_letters() + dead);
    }
    p.clear_purging();
    p.set_sources_done(static_cast<uint32_t>(i + 1));
    ASSIGN_OR_RETURN(seq, SaveProgress(p, seq));
    HR_STOP_AFTER("purged");
  }
  if (!p.memberships_done()) {
    while (p.audiences_done() < static_cast<uint32_t>(p.audience_ids_size())) {
      RETURN_IF_ERROR(RemoveMembership(p, seq, &touched));
    }
    p.set_memberships_done(true);
    ASSIGN_OR_RETURN(seq, SaveProgress(p, seq));
    HR_STOP_AFTER("memberships");
  }
  // The notifications, exactly once whenever the deletion is resumed (PublishNotifications).
  if (!p.notified()) {
    RETURN_IF_ERROR(PublishNotifications(p));
    touched += p.notifications_size() + 1;
    HR_STOP_AFTER("notifying");
    p.set_notified(true);
    ASSIGN_OR_RETURN(seq, SaveProgress(p, seq));
    HR_STOP_AFTER("notified");
  }
  if (!p.swept()) {
    RETURN_IF_ERROR(Sweep(p, recorded_at, &touched));
    p.set_swept(true);
    ASSIGN_OR_RETURN(seq, SaveProgress(p, seq));
    HR_STOP_AFTER("swept");
  }

  record.set_state(Deletion::COMPLETED);
  record.set_notifications(static_cast<uint64_t>(p.notifications_size()));
  RETURN_IF_ERROR(
      Publish({RecordSubject(record.id()), record.SerializeAsString(),
               {{"Hr-Jobs-Upto", upto}, {"Hr-Planned-Ms", planned}}})
          .status());
  ++touched;
  HR_STOP_AFTER("completed");
  RETURN_IF_ERROR(Purge(kJobsStream, NotificationMarkers(record.id())).status());
  RETURN_IF_ERROR(Purge(kDeletionsStream, ProgressSubject(record.id())).status());
  // Appends that hit the cache between the purge and here wrote no index entry: forget again,
  // and write again the entries of this collector's appends during the deletion.
  NotePurge(record, p.jobs_upto(), p.planned_unix_ms());
  outcome.record = record;
  outcome.created = true;
  return outcome;
}

void JetStreamUserData::ResumeLoop() {
  pthread_setname_np(pthread_self(), "deletion-resume");
  const absl::Duration every =
      std::clamp(layout_.deletion_resume_after / 2, absl::Milliseconds(100), absl::Seconds(10));
  for (bool first = true;; first = false) {
    {
      absl::MutexLock lock(&compact_mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(compact_mu_) {
        return stopping_ || catch_up_wanted_;
      };
      // Cut off: the catch-up is tried again every second until it succeeds.
      compact_mu_.AwaitWithTimeout(absl::Condition(&wake),
                                   first ? absl::ZeroDuration()
                                   : cut_off_.load() ? absl::Seconds(1)
                                                     : every);
      if (stopping_) return;
      catch_up_wanted_ = false;
    }
    if (cut_off_.load(std::memory_order_acquire)) {
      const uint64_t generation = disconnects_.load();
      if (absl::Status st = CatchUp(); !st.ok()) {
        static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.1, 2);
        common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                               "reading back the deletions made while cut off from the cluster "
                               "failed; jobs are handed out once it succeeds (retried every "
                               "second)",
                               {{"error", st.ToString()}});
        continue;
      }
      {
        // Not if the connection dropped again since the reading began.
        absl::MutexLock lock(&connection_mu_);
        if (disconnects_.load() != generation) continue;
        cut_off_.store(false, std::memory_order_release);
      }
      if (caught_up_hook_) caught_up_hook_();
    }
    ResumeStale();
  }
}

void JetStreamUserData::NoteConnection(bool connected) {
  if (!connected) {
    absl::MutexLock lock(&connection_mu_);
    disconnects_.fetch_add(1);
    cut_off_.store(true, std::memory_order_release);
    return;
  }
  absl::MutexLock lock(&compact_mu_);
  catch_up_wanted_ = true;
}

absl::Status JetStreamUserData::CatchUp() {
  const uint64_t generation = disconnects_.load();
  struct Missed {
    Deletion record;
    uint64_t upto = 0;
  };
  std::vector<Missed> missed;
  uint64_t from = records_seen_upto_.load() + 1;
  for (;;) {
    const std::string next =
        absl::StrCat(R"({"seq":)", from, R"(,"next_by_subj":"hr.del.rec.>"})");
    ASSIGN_OR_RETURN(std::vector<std::optional<Stored>> got,
                     LeaderGets(kDeletionsStream, {next}));
    if (!got[0].has_value()) break;
    const Stored& m = *got[0];
    from = m.seq + 1;
    Missed one;
    if (!one.record.ParseFromString(m.data) ||
        !absl::SimpleAtoi(HeaderValue(m.headers, "Hr-Jobs-Upto"), &one.upto)) {
      continue;
    }
    int64_t planned_ms = 0;
    if (!absl::SimpleAtoi(HeaderValue(m.headers, "Hr-Planned-Ms"), &planned_ms)) planned_ms = 0;
    NotePurge(one.record, one.upto, planned_ms);
    missed.push_back(std::move(one));
  }
  if (!missed.empty()) {
    // What this collector settled while cut off (buffered, sent at the reconnect) has landed.
    absl::SleepFor(kMarkSpread);
    uint64_t jobs = 0;
    uint64_t dead = 0;
    size_t touched = 0;
    for (const Missed& m : missed) {
      RETURN_IF_ERROR(SweepPurgedJobs(m.record, m.upto, &jobs, &dead, &touched));
    }
    common::LogInfo("read back the deletions made while cut off from the cluster",
                    {{"deletions", static_cast<int64_t>(missed.size())},
                     {"swept_jobs", static_cast<int64_t>(jobs)},
                     {"swept_dead_letters", static_cast<int64_t>(dead)}});
  }
  // Up to here, unless the connection dropped again meanwhile: then it is read again (and no
  // job handed out until then).
  if (disconnects_.load() != generation) {
    return absl::UnavailableError("the connection dropped again while reading back");
  }
  records_seen_upto_.store(from - 1);
  return absl::OkStatus();
}

void JetStreamUserData::ResumeStale() {
  // Records up to the stream's last sequence reached this collector if it stayed connected
  // from before reading it until after.
  {
    const uint64_t generation = disconnects_.load();
    absl::StatusOr<uint64_t> last = LastSeq(kDeletionsStream);
    if (last.ok() && !cut_off_.load() && disconnects_.load() == generation) {
      records_seen_upto_.store(std::max(records_seen_upto_.load(), *last));
    }
  }
  absl::StatusOr<std::vector<std::string>> subjects = Subjects(kDeletionsStream, "hr.del.plan.*");
  if (!subjects.ok()) return;  // The cluster is away: the next round looks again.
  const absl::Time now = absl::Now();
  absl::flat_hash_map<std::string, std::pair<uint64_t, absl::Time>> seen;
  for (const std::string& subject : *subjects) {
    absl::StatusOr<std::optional<Stored>> stored = GetLast(kDeletionsStream, subject);
    if (!stored.ok() || !stored->has_value()) continue;
    const uint64_t seq = (*stored)->seq;
    // Stale: the same progress for resume_after (this process's own watch: no clocks compared).
    auto earlier = progress_seen_.find(subject);
    const bool stale = earlier != progress_seen_.end() && earlier->second.first == seq &&
                       now - earlier->second.second >= layout_.deletion_resume_after;
    seen[subject] = earlier != progress_seen_.end() && earlier->second.first == seq
                        ? earlier->second
                        : std::make_pair(seq, now);
    if (!stale) continue;
    DeletionProgress p;
    if (!p.ParseFromString((*stored)->data)) continue;
    common::LogWarning("finishing an interrupted deletion",
                       {{"deletion", p.record().id()},
                        {"sources_done", static_cast<int64_t>(p.sources_done())},
                        {"memberships_done", p.memberships_done()},
                        {"notified", p.notified()}});
    absl::StatusOr<DeletionOutcome> finished = Finish(p, seq);
    if (finished.ok()) {
      common::LogInfo("finished an interrupted deletion",
                      {{"deletion", finished->record.id()},
                       {"purged_jobs", static_cast<int64_t>(finished->record.purged_jobs())},
                       {"notifications", static_cast<int64_t>(finished->record.notifications())}});
      seen.erase(subject);
    } else if (!absl::IsAborted(finished.status())) {
      common::LogWarning("an interrupted deletion could not be finished yet; trying again",
                         {{"deletion", p.record().id()}, {"error", finished.status().ToString()}});
    }
  }
  progress_seen_ = std::move(seen);
}

absl::StatusOr<std::optional<Deletion>> JetStreamUserData::GetDeletion(std::string_view id) {
  ASSIGN_OR_RETURN(std::optional<Stored> stored, GetLast(kDeletionsStream, RecordSubject(id)));
  if (!stored.has_value()) return std::optional<Deletion>();
  Deletion record;
  if (!record.ParseFromString(stored->data)) {
    return absl::DataLossError("JetStream: an unreadable deletion record");
  }
  // Only completed deletions exist for callers (as on the embedded engine).
  if (record.state() != Deletion::COMPLETED) return std::optional<Deletion>();
  return std::optional<Deletion>(std::move(record));
}

absl::StatusOr<std::vector<Deletion>> JetStreamUserData::ListDeletions(std::string_view before_id,
                                                                       size_t limit) {
  std::vector<Deletion> out;
  if (limit == 0) return out;
  // Every record's subject (one per deletion), sorted by id here: ids sort by creation time.
  ASSIGN_OR_RETURN(std::vector<std::string> subjects, Subjects(kDeletionsStream, "hr.del.rec.*"));
  std::vector<std::string> ids;
  constexpr std::string_view kPrefix = "hr.del.rec.";
  for (const std::string& subject : subjects) {
    std::optional<std::string> id = Untok(std::string_view(subject).substr(kPrefix.size()));
    if (!id.has_value()) continue;
    if (!before_id.empty() && *id >= before_id) continue;
    ids.push_back(*std::move(id));
  }
  std::sort(ids.begin(), ids.end(), std::greater<>());
  for (const std::string& id : ids) {
    ASSIGN_OR_RETURN(std::optional<Deletion> record, GetDeletion(id));
    if (!record.has_value()) continue;
    out.push_back(*std::move(record));
    if (out.size() >= limit) break;
  }
  return out;
}

#undef HR_STOP_AFTER

}  // namespace hookrelay::collector
