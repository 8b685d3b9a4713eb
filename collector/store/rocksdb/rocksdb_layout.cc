#include "collector/store/rocksdb/rocksdb_layout.h"

#include "collector/store/job_queue.h"

#include <functional>

#include "collector/store/profile_delta.h"

namespace hookrelay::collector::rocksdb_internal {

using hookrelay::v1::Job;

void AppendLengthPrefixed(std::string_view s, std::string* out) {
  char length[4];
  const auto n = static_cast<uint32_t>(s.size());
  length[0] = static_cast<char>(n >> 24);
  length[1] = static_cast<char>((n >> 16) & 0xff);
  length[2] = static_cast<char>((n >> 8) & 0xff);
  length[3] = static_cast<char>(n & 0xff);
  out->append(length, 4);
  out->append(s);
}

void SeenPrefix(std::string_view user, std::string* out) {
  out->clear();  // not assign("s"): GCC 12 -O2 warns falsely (-Wrestrict) on that inlined copy
  out->push_back('s');
  AppendLengthPrefixed(user, out);
}
void SeenKey(std::string_view user, std::string_view source, std::string* out) {
  SeenPrefix(user, out);
  AppendLengthPrefixed(source, out);
}
void DeadIndexPrefix(std::string_view user, std::string_view source, std::string* out) {
  out->clear();  // as in SeenPrefix
  out->push_back('d');
  AppendLengthPrefixed(user, out);
  AppendLengthPrefixed(source, out);
}
std::string DeadIndexKey(std::string_view user, std::string_view source, uint64_t id) {
  std::string key;
  DeadIndexPrefix(user, source, &key);
  const size_t at = key.size();
  key.resize(at + 8);
  EncodeU64(id, key.data() + at);
  return key;
}

uint64_t SeenHash(std::string_view user, std::string_view source) {
  const uint64_t h = std::hash<std::string_view>()(user) * 0x9e3779b97f4a7c15ULL;
  return (h ^ std::hash<std::string_view>()(source)) | 1;
}

std::string DueCountKey(int64_t second) {
  std::string key("h");
  key.resize(9);
  EncodeU64(static_cast<uint64_t>(std::max<int64_t>(second, 0)), key.data() + 1);
  return key;
}

bool Int64Add::Merge(const rocksdb::Slice& key, const rocksdb::Slice* existing,
                     const rocksdb::Slice& value, std::string* new_value,
                     rocksdb::Logger* logger) const {
  uint64_t sum = existing != nullptr && existing->size() == 8 ? DecodeU64(existing->data()) : 0;
  if (value.size() == 8) sum += DecodeU64(value.data());
  new_value->resize(8);
  EncodeU64(sum, new_value->data());
  return true;
}

std::string ProfileKey(std::string_view user, std::string_view source) {
  std::string key;
  AppendLengthPrefixed(user, &key);
  AppendLengthPrefixed(source, &key);
  return key;
}
std::string AudienceKey(char kind, std::string_view audience) {
  std::string key(1, kind);
  AppendLengthPrefixed(audience, &key);
  return key;
}
std::string MemberKey(std::string_view audience, std::string_view user) {
  std::string key = AudienceKey('m', audience);
  AppendLengthPrefixed(user, &key);
  return key;
}
std::string RecheckKey(std::string_view audience, int64_t at_ms, std::string_view user) {
  std::string key = AudienceKey('x', audience);
  const size_t at = key.size();
  key.resize(at + 8);
  EncodeU64(static_cast<uint64_t>(std::max<int64_t>(at_ms, 0)), key.data() + at);
  AppendLengthPrefixed(user, &key);
  return key;
}
std::string LogKey(uint64_t position) {
  std::string key("c");
  key.resize(9);
  EncodeU64(position, key.data() + 1);
  return key;
}
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}
bool ReadLengthPrefixed(rocksdb::Slice s, size_t* pos, std::string* out) {
  if (s.size() < *pos + 4) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + *pos);
  const size_t n = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
  if (s.size() < *pos + 4 + n) return false;
  out->assign(s.data() + *pos + 4, n);
  *pos += 4 + n;
  return true;
}

bool ProfileMerge::FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const {
  hookrelay::v1::Profile profile;
  if (in.existing_value != nullptr &&
      !profile.ParseFromArray(in.existing_value->data(),
                              static_cast<int>(in.existing_value->size()))) {
    profile.Clear();  // Unreadable: rebuilt from what follows rather than failing every read.
  }
  hookrelay::v1::ProfileDelta delta;
  for (const rocksdb::Slice& operand : in.operand_list) {
    if (delta.ParseFromArray(operand.data(), static_cast<int>(operand.size()))) {
      ApplyProfileDelta(delta, profile);
    }
  }
  return profile.SerializeToString(&out->new_value);
}

std::string DeletionKey(std::string_view id) { return std::string("d").append(id); }
std::string RequestKey(std::string_view request_id) { return std::string("r").append(request_id); }

void EncodeJobHeader(int64_t due_ms, uint64_t user_hash, bool fresh, char out[kUserHeaderSize]) {
  EncodeU64(static_cast<uint64_t>(due_ms) | kUserHashFlag | (fresh ? kFreshFlag : 0), out);
  EncodeU64(user_hash, out + 8);
}

void EncodeJobValue(const Job& job, std::string* out, bool fresh) {
  out->resize(kUserHeaderSize);
  EncodeJobHeader(job.due_unix_ms(), UserHash(job.user_id()), fresh, out->data());
  job.AppendToString(out);
}

bool ParseJobValue(rocksdb::Slice value, Job* job) {
  const size_t header = HeaderSize(value);
  return header != 0 && job->ParseFromArray(value.data() + header,
                                            static_cast<int>(value.size() - header));
}

bool UserHashOf(rocksdb::Slice value, Job* scratch, uint64_t* hash) {
  const size_t header = HeaderSize(value);
  if (header == kUserHeaderSize) {
    *hash = DecodeU64(value.data() + 8);
    return true;
  }
  if (!ParseJobValue(value, scratch)) return false;
  *hash = UserHash(scratch->user_id());
  return true;
}

void DueValue(std::string_view destination, std::string_view ordering_key, std::string* out) {
  out->assign(destination);
  if (ordering_key.empty()) return;
  out->push_back('\0');
  out->append(ordering_key);
}

QueueFields SplitDueValue(std::string_view value) {
  const size_t nul = value.find('\0');
  if (nul == std::string_view::npos) return {value, {}};
  return {value.substr(0, nul), value.substr(nul + 1)};
}

QueueFields RecordQueueFields(rocksdb::Slice value) {
  const size_t header = HeaderSize(value);
  if (header == 0) return {};
  const std::optional<SerializedQueueFields> fields =
      SerializedJobQueueFields(std::string_view(value.data() + header, value.size() - header));
  if (!fields) return {};
  return {fields->destination, fields->ordering_key};
}

}  // namespace hookrelay::collector::rocksdb_internal
