// The JetStream engine's user data (collector/store/jetstream/jetstream_user_data.h): starting and
// stopping, and what ingest adds: the per-user index and profile deltas, profiles rolled up in the
// background. Requests: jetstream_user_requests.cc; deletions: jetstream_user_deletions.cc;
// audiences: jetstream_user_audiences.cc.
#include "collector/store/jetstream/jetstream_user_data.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/jetstream_subjects.h"
#include "collector/store/jetstream/nats_request.h"
#include "collector/store/profile_delta.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

// A profile this collector published this many deltas to is rolled up in the background.
constexpr int kCompactAfter = 32;
constexpr size_t kMaxCompactQueue = 10'000;

}  // namespace

uint64_t UserSourceHash(std::string_view user, std::string_view source) {
  const uint64_t h = absl::HashOf(user, source);
  return h == 0 ? 1 : h;
}

JetStreamUserData::JetStreamUserData(natsConnection* nc, const JetStreamLayout& layout,
                                     const common::Clock& clock)
    : nc_(nc),
      layout_(layout),
      clock_(clock),
      owner_(absl::StrCat(absl::Hex(absl::ToUnixNanos(absl::Now())), "-",
                          absl::Hex(reinterpret_cast<uintptr_t>(this)))),
      seen_(std::make_shared<SeenCache>()) {
  seen_->slots = std::make_unique<std::atomic<uint64_t>[]>(kSeenCacheSlots);
  seen_->recent_pairs = std::make_unique<std::atomic<uint64_t>[]>(kSeenCacheSlots);
  seen_->recent_ms = std::make_unique<std::atomic<int64_t>[]>(kSeenCacheSlots);
  for (size_t i = 0; i < kSeenCacheSlots; ++i) {
    seen_->slots[i].store(0);
    seen_->recent_pairs[i].store(0);
    seen_->recent_ms[i].store(0);
  }
}

absl::StatusOr<std::unique_ptr<JetStreamUserData>> JetStreamUserData::Start(
    natsConnection* nc, const JetStreamLayout& layout, const common::Clock& clock,
    std::function<bool(std::string_view step)> stop_deletion_after) {
  auto data = std::unique_ptr<JetStreamUserData>(new JetStreamUserData(nc, layout, clock));
  data->stop_deletion_after_ = std::move(stop_deletion_after);
  natsInbox* inbox = nullptr;
  natsStatus s = natsInbox_Create(&inbox);
  if (s != NATS_OK) return NatsError("creating an inbox", s);
  data->inbox_ = inbox;
  natsInbox_Destroy(inbox);
  s = natsConnection_Subscribe(&data->records_, nc, "hr.del.rec.>", &JetStreamUserData::OnRecord,
                               data.get());
  if (s != NATS_OK) return NatsError("subscribing to deletion records", s);
  // Records published from here on reach this collector while it stays connected.
  absl::StatusOr<uint64_t> records = data->LastSeq(kDeletionsStream);
  if (!records.ok()) return records.status();
  data->records_seen_upto_.store(*records);
  data->compactor_ = std::thread([raw = data.get()] { raw->CompactLoop(); });
  data->resumer_ = std::thread([raw = data.get()] { raw->ResumeLoop(); });
  return data;
}

JetStreamUserData::~JetStreamUserData() {
  {
    absl::MutexLock lock(&compact_mu_);
    stopping_ = true;
  }
  if (compactor_.joinable()) compactor_.join();
  if (resumer_.joinable()) resumer_.join();
  if (records_ != nullptr) {
    if (natsSubscription_Drain(records_) == NATS_OK) {
      natsSubscription_WaitForDrainCompletion(records_, 2000);
    }
    natsSubscription_Destroy(records_);
  }
}

void JetStreamUserData::AddAppendMessages(const std::vector<AppendItem>& items,
                                          const std::vector<bool>& publish,
                                          std::vector<std::pair<natsMsg*, size_t>>* out,
                                          Store::AppendCallback* done) {
  std::vector<uint64_t> new_pairs;
  std::vector<std::string> profile_subjects;
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  const bool watching = any_index_watch_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < items.size(); ++i) {
    const AppendItem& item = items[i];
    if (!publish[i] || item.user_id.empty()) continue;
    const std::string user = Tok(item.user_id);
    const std::string source = Tok(item.source_id);
    const uint64_t pair = UserSourceHash(item.user_id, item.source_id);
    const size_t slot = pair & (kSeenCacheSlots - 1);
    seen_->recent_pairs[slot].store(pair, std::memory_order_relaxed);
    seen_->recent_ms[slot].store(now_ms, std::memory_order_relaxed);
    if (watching) {  // A deletion of this user is under way somewhere (rare).
      absl::MutexLock lock(&mu_);
      auto it = index_watch_.find(pair);
      if (it != index_watch_.end()) it->second.appended = true;
    }
    natsMsg* msg = nullptr;
    if (seen_->slots[pair & (kSeenCacheSlots - 1)].load(std::memory_order_relaxed) != pair &&
        natsMsg_Create(&msg, absl::StrCat("hr.users.", user, ".", source).c_str(), nullptr,
                       nullptr, 0) == NATS_OK) {
      out->emplace_back(msg, kNotAJob);
      new_pairs.push_back(pair);
    }
    if (!item.profile_delta.empty() &&
        natsMsg_Create(&msg, absl::StrCat("hr.prof.", source, ".", user).c_str(), nullptr,
                       item.profile_delta.data(),
                       static_cast<int>(item.profile_delta.size())) == NATS_OK) {
      if (!item.dedup_key.empty()) {
        // A publish sent again, or the same event racing itself, is folded once.
        const std::string marker = DedupMarkerSubject(item.dedup_key);
        natsMsgHeader_Set(msg, "Nats-Msg-Id",
                          absl::StrCat("prof-", marker.substr(sizeof("hr.dedup.") - 1)).c_str());
      }
      out->emplace_back(msg, kNotAJob);
      profile_subjects.push_back(natsMsg_GetSubject(msg));
    }
  }
  if (!profile_subjects.empty()) {
    absl::MutexLock lock(&compact_mu_);
    if (deltas_published_.size() > 200'000) deltas_published_.clear();  // Bounded; counts restart.
    for (std::string& subject : profile_subjects) {
      int& n = deltas_published_[subject];
      if (++n < kCompactAfter) continue;
      deltas_published_.erase(subject);
      if (compact_queue_.size() < kMaxCompactQueue) compact_queue_.push_back(std::move(subject));
    }
  }
  if (new_pairs.empty()) return;
  // The pairs enter the cache once their entries are acknowledged, unless a deletion was seen
  // meanwhile (it may have purged them).
  const uint64_t generation = seen_->generation.load();
  *done = [seen = seen_, generation, pairs = std::move(new_pairs),
           inner = std::move(*done)](absl::StatusOr<AppendResult> result) mutable {
    if (result.ok() && seen->generation.load() == generation) {
      for (uint64_t pair : pairs) {
        seen->slots[pair & (kSeenCacheSlots - 1)].store(pair, std::memory_order_relaxed);
      }
    }
    std::move(inner)(std::move(result));
  };
}

void JetStreamUserData::CompactLoop() {
  pthread_setname_np(pthread_self(), "profile-rollup");
  for (;;) {
    std::string subject;
    {
      absl::MutexLock lock(&compact_mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(compact_mu_) {
        return stopping_ || !compact_queue_.empty();
      };
      compact_mu_.Await(absl::Condition(&wake));
      if (stopping_) return;
      subject = std::move(compact_queue_.front());
      compact_queue_.pop_front();
    }
    if (absl::Status st = RollUp(subject); !st.ok()) {
      common::LogDebug("rolling up a profile failed (its deltas are folded on read meanwhile)",
                       {{"error", st.message()}});
    }
  }
}

absl::Status JetStreamUserData::RollUp(const std::string& subject) {
  // A delta arriving between the read and the rollup refuses it: read again, a few times.
  // The pause grows (50 ms to 0.8 s): a replica a little behind answers the read with an older
  // last sequence, and a burst of deltas passes.
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (attempt > 0) absl::SleepFor(absl::Milliseconds(50 << (attempt - 1)));
    absl::StatusOr<bool> rolled = TryRollUp(subject);
    if (!rolled.ok() || *rolled) return rolled.status();
  }
  return absl::OkStatus();  // A busy profile: rolled up once its deltas pause.
}

absl::StatusOr<bool> JetStreamUserData::TryRollUp(const std::string& subject) {
  ASSIGN_OR_RETURN(std::vector<std::vector<Stored>> read, ReadAll(kProfilesStream, {subject}));
  const std::vector<Stored>& messages = read[0];
  if (messages.size() < 2) return true;
  hookrelay::v1::Profile profile;
  for (const Stored& m : messages) {
    if (m.full_profile) {
      if (!profile.ParseFromString(m.data)) profile.Clear();
      continue;
    }
    hookrelay::v1::ProfileDelta delta;
    if (delta.ParseFromString(m.data)) ApplyProfileDelta(delta, profile);
  }
  // Refused when a delta came meanwhile, or the profile was deleted: it is rolled up later.
  absl::StatusOr<uint64_t> published =
      Publish({subject, profile.SerializeAsString(),
               {{"Nats-Rollup", "sub"},
                {"Hr-Profile", "full"},
                {"Nats-Expected-Last-Subject-Sequence", absl::StrCat(messages.back().seq)}}});
  if (absl::IsFailedPrecondition(published.status())) return false;
  if (!published.ok()) return published.status();
  return true;
}

absl::StatusOr<std::vector<std::string>> JetStreamUserData::SourcesSeen(std::string_view user_id) {
  std::vector<std::string> sources;
  if (user_id.empty()) return sources;
  const std::string prefix = absl::StrCat("hr.users.", Tok(user_id), ".");
  ASSIGN_OR_RETURN(std::vector<std::string> subjects,
                   Subjects(kUsersStream, absl::StrCat(prefix, "*")));
  for (const std::string& subject : subjects) {
    std::optional<std::string> source = Untok(std::string_view(subject).substr(prefix.size()));
    if (!source.has_value()) {
      return absl::DataLossError(absl::StrCat("JetStream: an unreadable index subject ", subject));
    }
    sources.push_back(*std::move(source));
  }
  std::sort(sources.begin(), sources.end());
  return sources;
}

}  // namespace hookrelay::collector
