// The subjects of the JetStream engine's messages.
#include "collector/store/jetstream/jetstream_subjects.h"

#include <openssl/sha.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace hookrelay::collector {

using hookrelay::v1::Job;

std::string JetStreamToken(std::string_view id) {
  if (id.empty()) return "_";
  std::string out;
  absl::WebSafeBase64Escape(absl::string_view(id.data(), id.size()), &out);
  return out;
}

std::string JobUserToken(const Job& job) {
  if (job.user_id().empty() && !job.ordering_key().empty()) {
    return absl::StrCat("%", JetStreamToken(job.ordering_key()));
  }
  return JetStreamToken(job.user_id());
}

std::string JobSubjectTail(const Job& job) {
  const bool never_purged = job.type() == hookrelay::v1::DELETE || job.test();
  return absl::StrCat(never_purged ? std::string("~") : JetStreamToken(job.source_id()), ".",
                      JobUserToken(job));
}

std::string OrderRecordSubject(const Job& job, uint64_t seq) {
  return absl::StrCat("hr.jobs.sched.", JobSubjectTail(job), ".o", seq);
}

std::string DedupMarkerSubject(std::string_view dedup_key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(dedup_key.data()), dedup_key.size(), digest);
  std::string out = "hr.dedup.";
  absl::StrAppend(&out, absl::BytesToHexString(absl::string_view(
                            reinterpret_cast<const char*>(digest), 16)));
  return out;
}

std::string ReadySubject(const Job& job) {
  return absl::StrCat("hr.jobs.ready.", JetStreamToken(job.destination_id()), ".",
                      JobSubjectTail(job));
}

std::string JobMsgId(const std::string& marker, const std::string& destination) {
  return absl::StrCat(marker.substr(sizeof("hr.dedup.") - 1), "-", destination);
}

std::string Tok(std::string_view id) { return JetStreamToken(id); }

std::optional<std::string> Untok(std::string_view token) {
  if (token == "_") return std::string();
  std::string out;
  if (!absl::WebSafeBase64Unescape(absl::string_view(token.data(), token.size()), &out)) {
    return std::nullopt;
  }
  return out;
}

std::string RecordSubject(std::string_view id) { return absl::StrCat("hr.del.rec.", Tok(id)); }
std::string ProgressSubject(std::string_view id) { return absl::StrCat("hr.del.plan.", Tok(id)); }
std::string ClaimSubject(std::string_view request_id) {
  return absl::StrCat("hr.del.req.", Tok(request_id));
}
std::string StateSubject(std::string_view audience) {
  return absl::StrCat("hr.aud.state.", Tok(audience));
}
std::string FenceSubject(std::string_view audience) {
  return absl::StrCat("hr.jobs.sched.~.f.", Tok(audience));
}
std::string LockSubject(std::string_view audience) {
  return absl::StrCat("hr.aud.lock.", Tok(audience));
}
std::string MemberSubject(std::string_view audience, std::string_view user) {
  return absl::StrCat("hr.aud.m.", Tok(audience), ".", Tok(user));
}
std::string RecheckSubject(std::string_view audience, int64_t at_ms, std::string_view user) {
  return absl::StrCat("hr.aud.rx.", Tok(audience), ".", at_ms / 60'000, ".", at_ms, ".",
                      Tok(user));
}
std::string ProfileSubject(std::string_view source, std::string_view user) {
  return absl::StrCat("hr.prof.", Tok(source), ".", Tok(user));
}

std::vector<std::string> Tokens(std::string_view subject) {
  return absl::StrSplit(absl::string_view(subject.data(), subject.size()), '.');
}

}  // namespace hookrelay::collector
