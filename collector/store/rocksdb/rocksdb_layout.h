// The embedded job store's on-disk format (collector/store/rocksdb): column family names, meta
// keys, the encodings of keys and job records, and the merge operators of the persisted counters
// and profiles. Internal to the engine. A data dir holds this format: a change that an older
// data dir cannot be read with needs a conversion at Open (RocksDbJobStore::MigrateLayout) and a
// new kLayoutVersion.
//
// On-disk layout (column families):
//   default  meta: "next_id" -> u64 BE (every id below it may have been used),
//                  "lease_epoch" -> u64 BE (bumped on every Open),
//                  "layout" -> u64 BE 2 once the `due` family and the counters exist (a data dir
//                  without it is converted by one scan at Open),
//                  "count_jobs", "count_dead" -> i64 BE, the numbers of job records and dead
//                  letters: merge operands (Int64Add) in the batch of every change.
//                  "h" ++ u64 BE unix second -> i64 BE: how many job records are due in that
//                  second (same merge operands; deleted when back to zero).
//   default  also "fresh_due" -> u64 BE: the due time of the newest fresh record written, and
//            "fresh_floor" -> u64 BE: no fresh record has a lower id (Open's pager starts there).
//   jobs     u64 BE job id -> header ++ serialized v1::Job. Header: u64 BE due_unix_ms with bit 63
//            set, then u64 BE UserHash(user_id); records written before the user index have
//            only the due time (bit 63 clear). Bit 62 (with bit 63) marks a *fresh* record: a job
//            as appended, with no `due` key; fresh records are in (due, id) order by id, so this
//            family is their order. A retry or a replay rewrites the record without the bit.
//   dedup    dedup key -> u64 BE unix ms the key was stored. Expired entries are dropped by a
//            compaction filter; until then the window is also checked on lookup.
//   dead     u64 BE job id -> serialized v1::Job (dead_reason, dead_at, history set).
//   users    the per-user index. "s" ++ lp(user) ++ lp(source) -> "" (the user was seen in the
//            source); "d" ++ lp(user) ++ lp(source) ++ u64 BE job id -> "" (a dead letter of the
//            user). lp(x) = u32 BE length ++ x, so any byte may appear in ids.
//   deletions "d" ++ deletion id -> serialized v1::Deletion; "r" ++ request id -> deletion id.
//   profiles  lp(user) ++ lp(source) -> serialized v1::Profile, written as v1::ProfileDelta merge
//            operands (ProfileMerge) at ingest.
//   audiences "c" ++ u64 BE position -> user: the profile change log.
//            "a" ++ lp(audience) -> serialized v1::AudienceState.
//            "m" ++ lp(audience) ++ lp(user) -> "": the user's membership as last sent (true).
//            "x" ++ lp(audience) ++ u64 BE unix ms ++ lp(user) -> "": evaluate the user again then.
//   due      u64 BE due_unix_ms ++ u64 BE job id -> the destination id [++ "\0" ++ ordering key]
//            (DueValue): every job with a record that is not fresh (retried, replayed,
//            notifications, or appended after the clock went back), in the order Lease takes
//            them. Written and deleted with the record. The pager merges it with the fresh
//            records.
//   users    also "p" ++ u64 BE user hash ++ u64 BE job id -> "": the user's pending jobs.
// Big-endian ids sort numerically, so new jobs are appended at the end of `jobs` and `dead` scans
// are in id order (ListDead's pagination).
//
// Thread safety: pure functions and stateless types only.
#ifndef HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_LAYOUT_H_
#define HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_LAYOUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "hookrelay/v1/job.pb.h"
#include "rocksdb/merge_operator.h"
#include "rocksdb/slice.h"
#include "common/strings.h"

namespace hookrelay::collector::rocksdb_internal {

inline constexpr char kJobsCf[] = "jobs";
inline constexpr char kDedupCf[] = "dedup";
inline constexpr char kDeadCf[] = "dead";
inline constexpr char kUsersCf[] = "users";
inline constexpr char kDeletionsCf[] = "deletions";
inline constexpr char kProfilesCf[] = "profiles";
inline constexpr char kAudiencesCf[] = "audiences";
inline constexpr char kDueCf[] = "due";
inline constexpr char kLayoutKey[] = "layout";
inline constexpr uint64_t kLayoutVersion = 2;
inline constexpr char kJobCountKey[] = "count_jobs";
inline constexpr char kDeadCountKey[] = "count_dead";
inline constexpr char kNextIdKey[] = "next_id";
inline constexpr char kFreshDueKey[] = "fresh_due";
inline constexpr char kFreshFloorKey[] = "fresh_floor";
inline constexpr char kLeaseEpochKey[] = "lease_epoch";
inline constexpr char kConfigKey[] = "config";
// Written (synced) by the recovery thread to prove the store can write again.
inline constexpr char kProbeKey[] = "write_probe";

inline constexpr size_t kDueHeaderSize = 8;
// Bit 63 of the due field: a user hash follows it (due times are positive, so it is free).
inline constexpr uint64_t kUserHashFlag = uint64_t{1} << 63;
// Bit 62 (with bit 63): a fresh record, as appended, with no `due` key: its place in the due
// order is its id's (fresh records are in (due, id) order by id).
inline constexpr uint64_t kFreshFlag = uint64_t{1} << 62;
inline constexpr size_t kUserHeaderSize = 16;
// Writes outside the group commit (Replay, the conversion at Open) go in chunks of this many jobs.
inline constexpr size_t kAdminChunk = 1024;

inline void EncodeU64(uint64_t v, char* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

inline uint64_t DecodeU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// An 8-byte big-endian key or value, kept on the stack.
class U64Bytes {
 public:
  explicit U64Bytes(uint64_t v) { EncodeU64(v, data_); }
  rocksdb::Slice slice() const { return rocksdb::Slice(data_, sizeof(data_)); }

 private:
  char data_[8];
};

inline int64_t ToMillis(absl::Time t) { return absl::ToUnixMillis(t); }

void AppendLengthPrefixed(std::string_view s, std::string* out);

// Keys of the users family (see the layout above).
void SeenPrefix(std::string_view user, std::string* out);
void SeenKey(std::string_view user, std::string_view source, std::string* out);
void DeadIndexPrefix(std::string_view user, std::string_view source, std::string* out);
std::string DeadIndexKey(std::string_view user, std::string_view source, uint64_t id);

// The user hash of the per-user index, stored in job headers: FNV-1a, stable across builds and
// processes; 0 means "no user".
inline uint64_t UserHash(std::string_view user) {
  return user.empty() ? 0 : common::Fnv1a64(user) | 1;
}
// The hash of a (user, source) pair in the store's cache of sources-seen keys written (not
// stored; never 0).
uint64_t SeenHash(std::string_view user, std::string_view source);

// The `due` key of a job, and the pending-index key ("p" ++ user hash ++ id).
class DueKeyBytes {
 public:
  DueKeyBytes(int64_t due_ms, uint64_t id) {
    EncodeU64(static_cast<uint64_t>(std::max<int64_t>(due_ms, 0)), data_);
    EncodeU64(id, data_ + 8);
  }
  rocksdb::Slice slice() const { return rocksdb::Slice(data_, sizeof(data_)); }

 private:
  char data_[16];
};
class PendingKeyBytes {
 public:
  PendingKeyBytes(uint64_t user_hash, uint64_t id) {
    data_[0] = 'p';
    EncodeU64(user_hash, data_ + 1);
    EncodeU64(id, data_ + 9);
  }
  rocksdb::Slice slice() const { return rocksdb::Slice(data_, sizeof(data_)); }

 private:
  char data_[17];
};

// The unix second of a due time, rounded down.
inline int64_t SecondOf(int64_t due_ms) {
  return due_ms >= 0 ? due_ms / 1000 : (due_ms - 999) / 1000;
}
// The meta key of the due-time count of a second.
std::string DueCountKey(int64_t second);

// The persisted counters: signed 64-bit sums (absent = 0).
class Int64Add : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice& key, const rocksdb::Slice* existing,
             const rocksdb::Slice& value, std::string* new_value,
             rocksdb::Logger* logger) const override;
  const char* Name() const override { return "hookrelay.Int64Add.v1"; }
};

// Keys of the profiles and audiences families (see the layout above).
std::string ProfileKey(std::string_view user, std::string_view source);
std::string AudienceKey(char kind, std::string_view audience);
std::string MemberKey(std::string_view audience, std::string_view user);
std::string RecheckKey(std::string_view audience, int64_t at_ms, std::string_view user);
std::string LogKey(uint64_t position);
// The smallest key above every key starting with `prefix` (prefix is never all 0xff here).
std::string PrefixEnd(std::string prefix);
// Reads one length-prefixed string at `*pos`; false when malformed.
bool ReadLengthPrefixed(rocksdb::Slice s, size_t* pos, std::string* out);

// Profiles are written as ProfileDelta operands and folded into a Profile on reads and
// compactions, so ingest never reads a profile.
class ProfileMerge : public rocksdb::MergeOperator {
 public:
  bool FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const override;
  const char* Name() const override { return "hookrelay.ProfileMerge.v1"; }
};

// Keys of the deletions family.
std::string DeletionKey(std::string_view id);
std::string RequestKey(std::string_view request_id);

// A job record of the `jobs` family: the header (due time, flags, user hash), then the job.
void EncodeJobValue(const hookrelay::v1::Job& job, std::string* out, bool fresh = false);
// The header alone, for records gathered from parts (an appended NewJob).
void EncodeJobHeader(int64_t due_ms, uint64_t user_hash, bool fresh, char out[kUserHeaderSize]);

// The size of a record's header; 0 when malformed.
inline size_t HeaderSize(rocksdb::Slice value) {
  if (value.size() < kDueHeaderSize) return 0;
  if ((DecodeU64(value.data()) & kUserHashFlag) == 0) return kDueHeaderSize;
  return value.size() >= kUserHeaderSize ? kUserHeaderSize : 0;
}

// The due time of a record (0 when malformed).
inline int64_t DueOf(rocksdb::Slice value) {
  if (HeaderSize(value) == 0) return 0;
  return static_cast<int64_t>(DecodeU64(value.data()) & ~(kUserHashFlag | kFreshFlag));
}

// Whether a record is fresh (no `due` key).
inline bool IsFresh(rocksdb::Slice value) {
  return HeaderSize(value) == kUserHeaderSize && (DecodeU64(value.data()) & kFreshFlag) != 0;
}

bool ParseJobValue(rocksdb::Slice value, hookrelay::v1::Job* job);

// The user hash of a record: from the header, or by parsing an old record. False when malformed.
bool UserHashOf(rocksdb::Slice value, hookrelay::v1::Job* scratch, uint64_t* hash);


// What the pager queues a job by: its destination id and its ordering key ("" when the
// destination keeps no order). The value of a `due` key holds the two as DueValue writes them:
// the destination id, then, when the job has an ordering key, "\0" and the key (destination ids
// never hold a NUL; values written before ordering existed are the destination id alone).
struct QueueFields {
  std::string_view destination;
  std::string_view ordering_key;
};
void DueValue(std::string_view destination, std::string_view ordering_key, std::string* out);
QueueFields SplitDueValue(std::string_view value);
// From a job record ({} when malformed).
QueueFields RecordQueueFields(rocksdb::Slice value);

}  // namespace hookrelay::collector::rocksdb_internal

#endif  // HOOKRELAY_COLLECTOR_STORE_ROCKSDB_ROCKSDB_LAYOUT_H_
