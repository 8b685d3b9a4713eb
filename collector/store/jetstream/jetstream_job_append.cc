// The JetStream engine's job queue, appends: dedup lookups, the jobs' asynchronous publishes and
// their acks, the dedup markers, and publishes sent again after a passing failure.
#include "collector/store/jetstream/jetstream_job_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/jetstream_subjects.h"
#include "collector/store/jetstream/jetstream_user_data.h"
#include "collector/store/jetstream/nats_request.h"
#include "common/log.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;

constexpr absl::Duration kRepublishFor = absl::Seconds(10);

// The most dedup markers one lookup request asks for.
constexpr size_t kMarkersPerLookup = 256;
constexpr absl::Duration kLookupTimeout = absl::Seconds(5);

}  // namespace

void JetStreamJobStore::RepublishLoop() {
  for (;;) {
    natsMsg* msg = nullptr;
    // Lookups that got no answer in time: their appends go on without the check.
    std::vector<std::shared_ptr<Lookup>> expired;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      for (auto it = lookups_.begin(); it != lookups_.end();) {
        if (it->second->deadline <= now) {
          it->second->failed = true;
          expired.push_back(it->second);
          lookups_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    for (const std::shared_ptr<Lookup>& lookup : expired) FinishLookup(lookup);
    CheckConnection();
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!republish_.empty() && republish_.front().first <= absl::Now());
      };
      const absl::Time next = republish_.empty() ? absl::Now() + absl::Milliseconds(250)
                                                 : republish_.front().first;
      mu_.AwaitWithDeadline(absl::Condition(&ready), next);
      if (stopping_) return;
      if (republish_.empty() || republish_.front().first > absl::Now()) continue;
      msg = republish_.front().second;
      republish_.pop_front();
    }
    natsMsg* owned = msg;
    jsPubOptions publish = AsyncPublishOptions(options_.layout.request_timeout);
    const natsStatus s = js_PublishMsgAsync(js_, &owned, &publish);
    if (s != NATS_OK) {
      natsMsg* leased = nullptr;
      {
        absl::MutexLock lock(&mu_);
        if (auto it = settling_.find(msg); it != settling_.end()) {
          leased = it->second.leased;
          settling_.erase(it);
        }
      }
      if (leased != nullptr) {  // A retry or dead letter not stored: the job comes back now.
        JsNak(nc_, leased);
        natsMsg_Destroy(leased);
      } else {
        Acked(msg, NatsError("publishing a job", s), false, StoreErrorKind(s, jsErrCode{}, ""));
      }
      if (owned != nullptr) natsMsg_Destroy(owned);
    }
  }
}

void JetStreamJobStore::OnPublishAck(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae,
                                     void* self) {
  auto* store = static_cast<JetStreamJobStore*>(self);
  natsMsg* leased = nullptr;
  {
    const bool passing = pa == nullptr && pae != nullptr &&
                         (pae->Err == NATS_NO_RESPONDERS || pae->Err == NATS_TIMEOUT);
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&store->mu_);
    if (auto it = store->settling_.find(msg); it != store->settling_.end()) {
      // Passing (a node rejoining, an election): sent again after a pause, within a bound.
      if (passing && !store->stopping_) {
        if (it->second.first_failure == absl::InfiniteFuture()) it->second.first_failure = now;
        if (now - it->second.first_failure < kRepublishFor) {
          store->republish_.emplace_back(now + absl::Milliseconds(200), msg);
          return;  // The message stays ours until it is sent again.
        }
      }
      leased = it->second.leased;
      store->settling_.erase(it);
    }
  }
  if (leased != nullptr) {
    // A retry or dead letter stored: the leased message is done. Not stored: it comes back now
    // (the attempt is not counted) rather than when its lease ends.
    if (pa != nullptr) {
      JsAck(store->nc_, leased);
    } else {
      JsNak(store->nc_, leased);
      store->CountStoreError(StoreErrorKind(pae));
      common::LogWarning("a retry or dead letter was not stored; the job is handed out again",
                         {{"subject", natsMsg_GetSubject(msg)},
                          {"error", pae != nullptr && pae->ErrText != nullptr ? pae->ErrText
                                                                               : "no answer"}});
    }
    natsMsg_Destroy(leased);
    natsMsg_Destroy(msg);
    return;
  }
  absl::Status status;
  if (pa == nullptr && pae != nullptr &&
      (pae->Err == NATS_NO_RESPONDERS || pae->Err == NATS_TIMEOUT)) {
    // Passing (a node rejoining, an election): sent again after a pause, within a bound.
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&store->mu_);
    auto it = store->publishing_.find(msg);
    if (it != store->publishing_.end() && !store->stopping_) {
      if (it->second.first_failure == absl::InfiniteFuture()) it->second.first_failure = now;
      if (now - it->second.first_failure < kRepublishFor) {
        store->republish_.emplace_back(now + absl::Milliseconds(200), msg);
        return;  // The message stays ours until it is sent again.
      }
    }
  }
  if (pa == nullptr) {
    status = absl::UnavailableError(absl::StrCat(
        "JetStream publish not acknowledged: ",
        pae != nullptr && pae->ErrText != nullptr ? pae->ErrText : "no answer"));
  }
  store->Acked(msg, status, pa != nullptr && pa->Duplicate,
               pa != nullptr ? "" : StoreErrorKind(pae));
  natsMsg_Destroy(msg);
}

void JetStreamJobStore::Acked(natsMsg* msg, const absl::Status& status, bool duplicate,
                              const char* error_kind) {
  std::shared_ptr<PendingAppend> finished;
  {
    absl::MutexLock lock(&mu_);
    auto it = publishing_.find(msg);
    if (it == publishing_.end()) return;
    PendingAppend& p = *it->second.append;
    if (!status.ok() && p.status.ok()) {
      p.status = status;
      p.error_kind = error_kind;
    }
    // Not a job (an index entry or profile delta, JetStreamUserData::kNotAJob): no stored flag.
    if (duplicate && it->second.item < p.result.stored.size() && p.result.stored[it->second.item]) {
      p.result.stored[it->second.item] = false;  // A racing copy of the event was stored first.
      if (duplicates_ != nullptr) duplicates_->Increment();
    }
    if (--p.outstanding == 0) finished = it->second.append;
    publishing_.erase(it);
  }
  if (finished != nullptr) {
    if (finished->status.ok()) {
      if (commit_duration_ != nullptr) {
        commit_duration_->Observe(absl::ToDoubleSeconds(absl::Now() - finished->published));
        commit_batch_items_->Observe(static_cast<double>(finished->messages));
      }
      PublishMarkers(finished->markers);
      std::move(finished->done)(std::move(finished->result));
    } else {
      CountStoreError(*finished->error_kind != '\0' ? finished->error_kind : "other");
      std::move(finished->done)(finished->status);
    }
  }
}

void JetStreamJobStore::Append(std::vector<AppendItem> items, AppendCallback done) {
  if (absl::Status health = WriteHealth(); !health.ok()) {
    std::move(done)(health);
    return;
  }
  auto pending = std::make_shared<PendingAppend>();
  pending->result.stored.assign(items.size(), true);
  pending->done = std::move(done);
  // De-duplication over the dedup window: the markers of earlier events are looked up first
  // (batched direct gets on HR_DEDUP); only events not seen get their jobs published; their
  // markers are written once the jobs are acknowledged (never before: a marker for an event not
  // stored would refuse the client's retry of it). Two copies racing each other are caught by
  // the jobs' Nats-Msg-Id within the stream's duplicate window.
  auto lookup = std::make_shared<Lookup>();
  lookup->markers.resize(items.size());
  std::vector<std::string> subjects;
  absl::flat_hash_set<std::string> asked;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].dedup_key.empty()) continue;
    lookup->markers[i] = DedupMarkerSubject(items[i].dedup_key);
    if (asked.insert(lookup->markers[i]).second) subjects.push_back(lookup->markers[i]);
  }
  lookup->append = pending;
  lookup->items = std::move(items);
  if (subjects.empty()) {
    FinishLookup(lookup);
    return;
  }
  uint64_t token = 0;
  const int requests =
      static_cast<int>((subjects.size() + kMarkersPerLookup - 1) / kMarkersPerLookup);
  {
    absl::MutexLock lock(&mu_);
    token = next_lookup_++;
    lookup->outstanding = requests;
    lookup->deadline = absl::Now() + kLookupTimeout;
    lookups_[token] = lookup;
  }
  const std::string reply = absl::StrCat(lookup_inbox_, ".", token);
  const std::string api = absl::StrCat("$JS.API.DIRECT.GET.", kDedupStream);
  for (size_t first = 0; first < subjects.size(); first += kMarkersPerLookup) {
    const size_t n = std::min(kMarkersPerLookup, subjects.size() - first);
    std::string body = R"({"multi_last":[)";
    for (size_t i = 0; i < n; ++i) {
      absl::StrAppend(&body, i == 0 ? "\"" : ",\"", subjects[first + i], "\"");
    }
    absl::StrAppend(&body, R"(],"batch":)", n, "}");
    const natsStatus s = natsConnection_PublishRequest(nc_, api.c_str(), reply.c_str(),
                                                       body.data(), static_cast<int>(body.size()));
    if (s != NATS_OK) {
      std::shared_ptr<Lookup> done_lookup;
      {
        absl::MutexLock lock(&mu_);
        lookup->failed = true;
        if (--lookup->outstanding == 0 && lookups_.erase(token) > 0) done_lookup = lookup;
      }
      if (done_lookup != nullptr) FinishLookup(done_lookup);
    }
  }
}

void JetStreamJobStore::OnLookupReply(natsConnection*, natsSubscription*, natsMsg* msg,
                                      void* self) {
  auto* store = static_cast<JetStreamJobStore*>(self);
  const char* subject = natsMsg_GetSubject(msg);
  const char* dot = subject == nullptr ? nullptr : strrchr(subject, '.');
  uint64_t token = 0;
  if (dot == nullptr || !absl::SimpleAtoi(dot + 1, &token)) {
    natsMsg_Destroy(msg);
    return;
  }
  const char* status = nullptr;
  const bool has_status = natsMsgHeader_Get(msg, "Status", &status) == NATS_OK && status != nullptr;
  const char* found = nullptr;
  if (!has_status) natsMsgHeader_Get(msg, "Nats-Subject", &found);
  std::shared_ptr<Lookup> finished;
  {
    absl::MutexLock lock(&store->mu_);
    auto it = store->lookups_.find(token);
    if (it != store->lookups_.end()) {
      Lookup& lookup = *it->second;
      if (!has_status) {
        if (found != nullptr) lookup.found.insert(found);
      } else {
        // 204: the end of a batch; 404: none of the markers exists; anything else (no
        // responders while a node rejoins, a timeout) fails the lookup.
        if (strcmp(status, "204") != 0 && strcmp(status, "404") != 0) lookup.failed = true;
        if (--lookup.outstanding == 0) {
          finished = it->second;
          store->lookups_.erase(it);
        }
      }
    }
  }
  natsMsg_Destroy(msg);
  if (finished != nullptr) store->FinishLookup(finished);
}

void JetStreamJobStore::FinishLookup(const std::shared_ptr<Lookup>& lookup) {
  if (lookup->failed) {
    // Availability first: the event is stored, and the stream's duplicate window still catches
    // a retry within minutes. Counted and logged: a retry later than that may be delivered twice.
    // Rate-limited: with --nats_dedup_replicas=1 and that server down, every append fails its
    // lookup until the server is back.
    if (dedup_lookup_failures_ != nullptr) dedup_lookup_failures_->Increment();
    static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 5);
    common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                           "de-duplication lookup failed (the cluster is changing leaders or a "
                           "node is rejoining): events stored without their 24 h duplicate check",
                           {{"events", lookup->items.size()}});
  }
  std::vector<bool> publish(lookup->items.size(), true);
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < lookup->items.size(); ++i) {
    const std::string& marker = lookup->markers[i];
    if (marker.empty()) continue;
    if (lookup->found.contains(marker) || !seen.insert(marker).second) {
      publish[i] = false;
      lookup->append->result.stored[i] = false;
      if (duplicates_ != nullptr) duplicates_->Increment();
      continue;
    }
    lookup->append->markers.push_back(marker);
  }
  PublishJobs(lookup->append, lookup->items, lookup->markers, publish);
}

void JetStreamJobStore::PublishMarkers(const std::vector<std::string>& markers) {
  // Core publishes: no ack to wait for. A marker lost with a node is a duplicate check missed
  // (at-least-once), never an event lost.
  for (const std::string& marker : markers) {
    natsConnection_Publish(nc_, marker.c_str(), nullptr, 0);
  }
}

void JetStreamJobStore::PublishJobs(const std::shared_ptr<PendingAppend>& pending,
                                    std::vector<AppendItem>& items,
                                    const std::vector<std::string>& markers,
                                    const std::vector<bool>& publish) {
  std::vector<std::pair<natsMsg*, size_t>> msgs;
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  std::optional<std::string> noted;  // The destination last noted for its consumer.
  for (size_t i = 0; i < items.size(); ++i) {
    if (!publish[i]) continue;
    const std::string& marker = markers[i];
    for (const NewJob& new_job : items[i].jobs) {
      // The stream's sequence is the job's id: none is written in the message.
      const std::string body = new_job.Serialized(/*id=*/0, now_ms);
      const Job job = new_job.ToJobWithoutEvent();  // for its subject
      natsMsg* msg = nullptr;
      if (natsMsg_Create(&msg, ReadySubject(job).c_str(), nullptr, body.data(),
                         static_cast<int>(body.size())) != NATS_OK) {
        for (auto& [m, item] : msgs) natsMsg_Destroy(m);
        std::move(pending->done)(absl::ResourceExhaustedError("JetStream: cannot create a message"));
        return;
      }
      if (!marker.empty()) {
        natsMsgHeader_Set(msg, "Nats-Msg-Id", JobMsgId(marker, job.destination_id()).c_str());
      }
      if (noted != job.destination_id()) {  // Consecutive jobs mostly share it.
        pulls_->NoteDestination(job.destination_id());
        noted = job.destination_id();
      }
      msgs.emplace_back(msg, i);
    }
  }
  // The events' index entries and profile deltas, acknowledged with the jobs.
  user_data_->AddAppendMessages(items, publish, &msgs, &pending->done);
  if (msgs.empty()) {
    PublishMarkers(pending->markers);
    std::move(pending->done)(std::move(pending->result));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    pending->outstanding = msgs.size();
    pending->messages = msgs.size();
    pending->published = absl::Now();
    for (auto& [msg, item] : msgs) publishing_[msg] = Publishing{pending, item};
  }
  jsPubOptions wait = AsyncPublishOptions(options_.layout.request_timeout);
  for (auto& [msg, item] : msgs) {
    natsMsg* owned = msg;
    const natsStatus s = js_PublishMsgAsync(js_, &owned, &wait);
    if (s != NATS_OK) {
      // Not sent: no ack will come for it.
      if (owned != nullptr) natsMsg_Destroy(owned);
      Acked(msg, NatsError("publishing a job", s), false, StoreErrorKind(s, jsErrCode{}, ""));
    }
  }
}

}  // namespace hookrelay::collector
