// RocksDbJobStore, audience data (SPEC §6.2; see the header): an audience sync reads the profiles
// changed since its last cursor (the profile change log) or all of them, the members and the
// rechecks due, and commits the memberships, rechecks and identify jobs as an exclusive op.
// Profiles are written by the group commit (rocksdb_group_commit.cc).

#include "collector/store/rocksdb/rocksdb_job_store.h"

#include <algorithm>

#include "rocksdb/iterator.h"
#include "collector/store/rocksdb/rocksdb_layout.h"
#include "collector/store/rocksdb/rocksdb_status.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;
using rocksdb_internal::AudienceKey;
using rocksdb_internal::FromRocks;
using rocksdb_internal::LogKey;
using rocksdb_internal::Malformed;
using rocksdb_internal::MemberKey;
using rocksdb_internal::PrefixEnd;
using rocksdb_internal::ProfileKey;
using rocksdb_internal::ReadLengthPrefixed;
using rocksdb_internal::RecheckKey;
using rocksdb_internal::kAudiencesCf;
using rocksdb_internal::kProfilesCf;

}  // namespace

absl::StatusOr<std::optional<hookrelay::v1::AudienceState>> RocksDbJobStore::GetAudienceState(
    std::string_view audience_id) {
  std::string value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), audiences_cf_, AudienceKey('a', audience_id), &value);
  if (s.IsNotFound()) return std::optional<hookrelay::v1::AudienceState>();
  RETURN_IF_ERROR(FromRocks(s, "reading an audience's state"));
  hookrelay::v1::AudienceState state;
  if (!state.ParseFromString(value)) return Malformed(kAudiencesCf, 0);
  return std::optional<hookrelay::v1::AudienceState>(std::move(state));
}

absl::StatusOr<AudienceSyncInput> RocksDbJobStore::BeginAudienceSync(
    std::string_view audience_id, const std::vector<std::string>& sources, absl::Time now) {
  AudienceSyncInput input;
  // Every change before this point is written and logged at or below the position; every later
  // one is logged above it (the per-user dedup restarts).
  RunExclusive([&] {
    input.log_position = next_log_seq_ - 1;
    logged_users_.clear();
  });
  ASSIGN_OR_RETURN(input.state, GetAudienceState(audience_id));
  RETURN_IF_ERROR(FlushAppendOnly(profiles_cf_, "flushing profiles"));
  absl::flat_hash_set<std::string> users;
  rocksdb::ReadOptions read;
  if (!input.state.has_value()) {
    // First computation: every profile of the audience's sources.
    const absl::flat_hash_set<std::string> wanted(sources.begin(), sources.end());
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, profiles_cf_));
    std::string user, source;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      size_t pos = 0;
      if (!ReadLengthPrefixed(it->key(), &pos, &user) ||
          !ReadLengthPrefixed(it->key(), &pos, &source)) {
        return Malformed(kProfilesCf, 0);
      }
      if (wanted.contains(source)) users.insert(user);
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scanning profiles"));
  } else {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, audiences_cf_));
    const std::string end = LogKey(input.log_position);
    for (it->Seek(LogKey(input.state->cursor() + 1));
         it->Valid() && it->key().size() == 9 && it->key()[0] == 'c' &&
         it->key().compare(end) <= 0;
         it->Next()) {
      users.emplace(it->value().data(), it->value().size());
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the profile change log"));
  }
  {
    // Rechecks due by now (window edges).
    const std::string prefix = AudienceKey('x', audience_id);
    const std::string end = RecheckKey(audience_id, absl::ToUnixMillis(now) + 1, "");
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, audiences_cf_));
    std::string user;
    for (it->Seek(prefix); it->Valid() && it->key().compare(end) < 0; it->Next()) {
      size_t pos = prefix.size() + 8;
      if (!it->key().starts_with(prefix) || !ReadLengthPrefixed(it->key(), &pos, &user)) {
        return Malformed(kAudiencesCf, 0);
      }
      users.insert(user);
      input.rechecks_due.push_back(it->key().ToString());
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading audience rechecks"));
  }
  input.users.assign(users.begin(), users.end());
  std::sort(input.users.begin(), input.users.end());
  return input;
}

absl::StatusOr<std::vector<AudienceUser>> RocksDbJobStore::ReadAudienceUsers(
    std::string_view audience_id, const std::vector<std::string>& users,
    const std::vector<std::string>& sources) {
  std::vector<AudienceUser> out(users.size());
  // One MultiGet: each user's profiles of the sources and membership.
  std::vector<std::string> keys;
  keys.reserve(users.size() * sources.size());
  for (const std::string& user : users) {
    for (const std::string& source : sources) keys.push_back(ProfileKey(user, source));
  }
  std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  if (!keys.empty()) {
    db_->MultiGet(rocksdb::ReadOptions(), profiles_cf_, keys.size(), slices.data(), values.data(),
                  statuses.data());
  }
  std::vector<std::string> member_keys;
  member_keys.reserve(users.size());
  for (const std::string& user : users) member_keys.push_back(MemberKey(audience_id, user));
  std::vector<rocksdb::Slice> member_slices(member_keys.begin(), member_keys.end());
  std::vector<rocksdb::PinnableSlice> member_values(member_keys.size());
  std::vector<rocksdb::Status> member_statuses(member_keys.size());
  if (!member_keys.empty()) {
    db_->MultiGet(rocksdb::ReadOptions(), audiences_cf_, member_keys.size(), member_slices.data(),
                  member_values.data(), member_statuses.data());
  }
  for (size_t u = 0; u < users.size(); ++u) {
    AudienceUser& user = out[u];
    user.user_id = users[u];
    if (!member_statuses[u].IsNotFound()) {
      RETURN_IF_ERROR(FromRocks(member_statuses[u], "reading memberships"));
      user.member = true;
    }
    for (size_t s = 0; s < sources.size(); ++s) {
      const size_t k = u * sources.size() + s;
      if (statuses[k].IsNotFound()) continue;
      RETURN_IF_ERROR(FromRocks(statuses[k], "reading profiles"));
      if (!user.profiles.emplace_back().ParseFromArray(values[k].data(),
                                                       static_cast<int>(values[k].size()))) {
        return Malformed(kProfilesCf, 0);
      }
    }
  }
  return out;
}

absl::StatusOr<hookrelay::v1::AudienceState> RocksDbJobStore::CommitAudienceSync(
    AudienceSyncPlan plan) {
  absl::StatusOr<hookrelay::v1::AudienceState> state;
  RunExclusive([&] { state = CommitAudienceSyncNow(plan); });
  return state;
}

absl::StatusOr<hookrelay::v1::AudienceState> RocksDbJobStore::CommitAudienceSyncNow(
    AudienceSyncPlan& plan) {
  // The member count is read here, between writes, so that deletions (which also adjust it) and
  // syncs never overwrite each other's counts.
  ASSIGN_OR_RETURN(std::optional<hookrelay::v1::AudienceState> previous,
                   GetAudienceState(plan.audience_id));
  hookrelay::v1::AudienceState state = plan.stats;
  int64_t members = previous.has_value() ? static_cast<int64_t>(previous->members()) : 0;
  // A user deleted after the evaluation (deletions run between writes, like this commit) gets no
  // identify: an entry needs a profile still, an exit a membership still recorded.
  if (!plan.changes.empty()) {
    RETURN_IF_ERROR(FlushAppendOnly(profiles_cf_, "flushing profiles"));
    absl::flat_hash_set<std::string> gone;
    for (const auto& [user, member] : plan.changes) {
      std::string ignored;
      bool present = false;
      if (member) {
        for (const std::string& source : plan.sources) {
          const rocksdb::Status s =
              db_->Get(rocksdb::ReadOptions(), profiles_cf_, ProfileKey(user, source), &ignored);
          if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "reading a profile");
          if (s.ok()) {
            present = true;
            break;
          }
        }
      } else {
        const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), audiences_cf_,
                                           MemberKey(plan.audience_id, user), &ignored);
        if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "reading a membership");
        present = s.ok();
      }
      if (!present) gone.insert(user);
    }
    if (!gone.empty()) {
      plan.changes.erase(std::remove_if(plan.changes.begin(), plan.changes.end(),
                                        [&](const auto& c) { return gone.contains(c.first); }),
                         plan.changes.end());
      plan.jobs.erase(std::remove_if(plan.jobs.begin(), plan.jobs.end(),
                                     [&](const Job& j) { return gone.contains(j.user_id()); }),
                      plan.jobs.end());
      plan.rechecks.erase(std::remove_if(plan.rechecks.begin(), plan.rechecks.end(),
                                         [&](const auto& r) { return gone.contains(r.first); }),
                          plan.rechecks.end());
    }
  }
  rocksdb::WriteBatch batch;
  for (const auto& [user, member] : plan.changes) {
    const std::string key = MemberKey(plan.audience_id, user);
    if (member) {
      batch.Put(audiences_cf_, key, rocksdb::Slice());
      ++members;
    } else {
      batch.Delete(audiences_cf_, key);
      --members;
    }
  }
  for (const std::string& key : plan.rechecks_done) batch.Delete(audiences_cf_, key);
  for (const auto& [user, at] : plan.rechecks) {
    batch.Put(audiences_cf_, RecheckKey(plan.audience_id, absl::ToUnixMillis(at), user),
              rocksdb::Slice());
  }
  state.set_cursor(plan.log_position);
  state.set_members(static_cast<uint64_t>(std::max<int64_t>(members, 0)));
  state.set_computed(true);
  batch.Put(audiences_cf_, AudienceKey('a', plan.audience_id), state.SerializeAsString());
  if (plan.log_needed_after > 0) {
    batch.DeleteRange(audiences_cf_, LogKey(0), LogKey(plan.log_needed_after + 1));
  }
  RETURN_IF_ERROR(WriteWithJobs(batch, plan.jobs, "committing an audience sync"));
  return state;
}

absl::Status RocksDbJobStore::DropAudience(std::string_view audience_id) {
  rocksdb::WriteBatch batch;
  for (char kind : {'m', 'x'}) {
    const std::string prefix = AudienceKey(kind, audience_id);
    batch.DeleteRange(audiences_cf_, prefix, PrefixEnd(prefix));
  }
  batch.Delete(audiences_cf_, AudienceKey('a', audience_id));
  absl::Status status;
  std::vector<Job> none;
  RunExclusive([&] { status = WriteWithJobs(batch, none, "dropping an audience"); });
  return status;
}

}  // namespace hookrelay::collector
