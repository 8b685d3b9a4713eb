#include "collector/store/jetstream/jetstream_pulls.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace hookrelay::collector {
namespace {

natsStatus Reply(natsConnection* nc, natsMsg* msg, std::string_view body) {
  const char* reply = natsMsg_GetReply(msg);
  if (reply == nullptr || *reply == '\0') return NATS_ILLEGAL_STATE;
  return natsConnection_Publish(nc, reply, body.data(), static_cast<int>(body.size()));
}

// A pull that the server should have ended by now (its 408 lost with a reconnect) is taken for
// ended this long after its expiry.
constexpr absl::Duration kPullGrace = absl::Seconds(2);
// After the server refused a pull (409: too many jobs unacknowledged, a leader change, ...).
constexpr absl::Duration kPullBackoff = absl::Milliseconds(250);
// Tries of the consumer listing when the store opens (each bounded by the request timeout).
constexpr int kOpenListAttempts = 3;

// The consumer named by an ack subject: $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.
// <consumer seq>.<time>.<pending>, or (servers 2.10 and later may use it) $JS.ACK.<domain>.
// <account hash>.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>.
// <random>. "" when it is neither.
std::string_view AckSubjectConsumer(std::string_view reply, uint64_t* stream_seq) {
  std::string_view tokens[12];
  size_t n = 0;
  size_t start = 0;
  while (n < 12) {
    const size_t dot = reply.find('.', start);
    tokens[n++] = reply.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  const size_t first = n == 9 ? 2 : n >= 11 ? 4 : 0;  // the stream's token
  if (first == 0) return {};
  const std::string_view seq = tokens[first + 3];
  if (!absl::SimpleAtoi(absl::string_view(seq.data(), seq.size()), stream_seq)) *stream_seq = 0;
  return tokens[first + 1];
}

}  // namespace

natsStatus JsAck(natsConnection* nc, natsMsg* msg) { return Reply(nc, msg, "+ACK"); }

natsStatus JsNak(natsConnection* nc, natsMsg* msg, int64_t delay_ms) {
  if (delay_ms <= 0) return Reply(nc, msg, "-NAK");
  return Reply(nc, msg, absl::StrCat(R"(-NAK {"delay":)", delay_ms * 1'000'000, "}"));
}

natsStatus JsTerm(natsConnection* nc, natsMsg* msg) { return Reply(nc, msg, "+TERM"); }

natsStatus JsInProgress(natsConnection* nc, natsMsg* msg) { return Reply(nc, msg, "+WPI"); }

JetStreamPulls::JetStreamPulls(Options options)
    : options_(std::move(options)),
      pull_expiry_(std::min(kPullExpiry, options_.layout.ack_wait / 8)) {}

absl::StatusOr<std::unique_ptr<JetStreamPulls>> JetStreamPulls::Start(Options options) {
  std::unique_ptr<JetStreamPulls> pulls(new JetStreamPulls(std::move(options)));
  natsInbox* inbox = nullptr;
  natsStatus s = natsInbox_Create(&inbox);
  if (s == NATS_OK) {
    pulls->inbox_ = inbox;
    natsInbox_Destroy(inbox);
    s = natsConnection_Subscribe(&pulls->sub_, pulls->options_.nc,
                                 absl::StrCat(pulls->inbox_, ".*").c_str(),
                                 &JetStreamPulls::OnMessage, pulls.get());
  }
  // Buffers are bounded by the pulls (kPullBatch per consumer): the client's own limit must not
  // drop what they bring.
  if (s == NATS_OK) s = natsSubscription_SetPendingLimits(pulls->sub_, -1, -1);
  if (s != NATS_OK) {
    return absl::UnavailableError(
        absl::StrCat("JetStream: subscribing to fetched jobs: ", natsStatus_GetText(s)));
  }
  {
    absl::MutexLock lock(&pulls->mu_);
    pulls->AddQueue(kDispatchConsumer, kLegacyReadySubjects, "", /*legacy=*/true);
  }
  // A cluster electing a new leader (a server just lost) drops API requests until it has one:
  // a few tries, each bounded by the request timeout, before the store refuses to open.
  bool listed = false;
  for (int attempt = 0; attempt < kOpenListAttempts && !listed; ++attempt) {
    listed = pulls->Rescan();
  }
  if (!listed) {
    return absl::UnavailableError(absl::StrCat(
        "JetStream: listing the consumers of HR_JOBS failed ", kOpenListAttempts, " times"));
  }
  pulls->background_ = std::thread([raw = pulls.get()] { raw->BackgroundLoop(); });
  return pulls;
}

JetStreamPulls::~JetStreamPulls() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  if (background_.joinable()) background_.join();
  if (sub_ != nullptr) {
    // Pulls still open may bring jobs until the server has the unsubscription: drained, then
    // handed back with the rest.
    if (natsSubscription_Drain(sub_) == NATS_OK) {
      natsSubscription_WaitForDrainCompletion(sub_, 2000);
    }
    natsSubscription_Destroy(sub_);
  }
  absl::MutexLock lock(&mu_);
  for (auto& q : queues_) {
    for (Fetched& f : q->buffer) {
      JsNak(options_.nc, f.msg);  // Back now rather than when the ack wait ends.
      natsMsg_Destroy(f.msg);
    }
    q->buffer.clear();
  }
}

JetStreamPulls::Queue& JetStreamPulls::AddQueue(std::string name, std::string filter,
                                                std::string destination, bool legacy) {
  auto q = std::make_unique<Queue>();
  q->index = queues_.size();
  q->name = std::move(name);
  q->filter = std::move(filter);
  q->destination = std::move(destination);
  q->legacy = legacy;
  q->created = true;
  Queue& out = *q;
  by_name_[out.name] = &out;
  queues_.push_back(std::move(q));
  return out;
}

void JetStreamPulls::NoteDestination(std::string_view destination_id) {
  absl::MutexLock lock(&mu_);
  const absl::string_view key(destination_id.data(), destination_id.size());
  if (noted_.contains(key)) return;
  noted_.insert(std::string(key));
  to_create_.emplace_back(key);
  wake_.Signal();
}

JetStreamPulls::PullRequest JetStreamPulls::OpenPull(Queue& q, int batch) {
  q.pull_open = true;
  q.pull_left = batch;
  q.pull_expires = absl::Now() + pull_expiry_;
  PullRequest r;
  r.subject = absl::StrCat("$JS.API.CONSUMER.MSG.NEXT.", kJobsStream, ".", q.name);
  r.reply = absl::StrCat(inbox_, ".", q.index);
  r.body = absl::StrCat(R"({"batch":)", batch, R"(,"expires":)",
                        absl::ToInt64Nanoseconds(pull_expiry_), "}");
  return r;
}

std::optional<JetStreamPulls::PullRequest> JetStreamPulls::WantedPull(Queue& q, absl::Time now) {
  if (stopping_ || !q.created || q.pull_open || now < q.retry_after) return std::nullopt;
  if (q.unlimited || (q.ordered && q.wanted > 0)) {
    // A destination kept in per-user order fetches full batches too, whatever its budget: most
    // of what it fetches is sent back to wait behind its key's job in flight, and the few jobs
    // that may go are found among many (a fetch of a few jobs at a time finds about one).
    // A destination without a limit keeps at least half a batch at hand (until its jobs go
    // stale: nobody leases them) and fetches full batches: the dispatcher then leases whole
    // batches at once rather than the few jobs that arrived since it last asked, and fewer,
    // larger fetches cost the servers less per job (docs/BENCHMARKS.md, "JetStream engine").
    if (q.buffer.size() >= std::max<size_t>(q.wanted, kPullBatch / 2)) {
      return std::nullopt;
    }
    return OpenPull(q, kPullBatch);
  }
  // A limited one fetches what its budget wants; with nothing at hand, at least one job. That
  // one open pull is how this collector learns that the destination has jobs again (a retry
  // of an ordered job coming back from its wait, a job appended through another collector, a
  // lease of a deliverer that died running out): its arrival wakes the dispatcher, which asks
  // the budget again. A throttled destination holds at most that one job here, handed back
  // when it goes stale. Not while the queue is idle (its jobs went stale with no Take asking:
  // this collector's deliverers are gone).
  if (q.buffer.size() >= q.wanted && (q.idle || !q.buffer.empty())) return std::nullopt;
  const int batch = static_cast<int>(
      std::clamp<size_t>(q.wanted > q.buffer.size() ? q.wanted - q.buffer.size() : 1, 1, kPullBatch));
  return OpenPull(q, batch);
}

void JetStreamPulls::SendPulls(const std::vector<PullRequest>& pulls) {
  for (const PullRequest& r : pulls) {
    const natsStatus s = natsConnection_PublishRequest(options_.nc, r.subject.c_str(),
                                                       r.reply.c_str(), r.body.data(),
                                                       static_cast<int>(r.body.size()));
    if (s != NATS_OK) {
      // The connection is down: the pull counts as open until its expiry and the grace, then
      // the background thread opens it again.
      static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.2, 3);
      common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                             "JetStream: asking a consumer for jobs failed; trying again shortly",
                             {{"subject", r.subject}, {"error", natsStatus_GetText(s)}});
    }
  }
}

void JetStreamPulls::OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* self) {
  static_cast<JetStreamPulls*>(self)->HandleMessage(msg);
}

void JetStreamPulls::HandleMessage(natsMsg* msg) {
  // A job carries its own subject; its reply subject names its consumer. A pull's status (408
  // at its expiry, 409, ...) comes on the pull's reply subject: <inbox>.<queue index>.
  const char* reply = natsMsg_GetReply(msg);
  const bool job = reply != nullptr && absl::StartsWith(reply, "$JS.ACK.");
  std::string_view consumer;
  uint64_t stream_seq = 0;
  size_t index = std::numeric_limits<size_t>::max();
  const char* status = nullptr;
  if (job) {
    consumer = AckSubjectConsumer(reply, &stream_seq);
  } else {
    natsMsgHeader_Get(msg, "Status", &status);
    const std::string_view subject = natsMsg_GetSubject(msg);
    const size_t dot = subject.rfind('.');
    if (dot != std::string_view::npos) {
      (void)absl::SimpleAtoi(
          absl::string_view(subject.data() + dot + 1, subject.size() - dot - 1), &index);
    }
  }
  std::optional<PullRequest> pull;
  bool arrived = false;
  bool recreate = false;
  {
    absl::MutexLock lock(&mu_);
    if (job) {
      auto it = by_name_.find(absl::string_view(consumer.data(), consumer.size()));
      if (it != by_name_.end()) index = it->second->index;
    }
    if (index >= queues_.size()) {
      // Not a consumer of this collector's (cannot happen), or an unreadable status: a job goes
      // back at once.
      if (job) JsNak(options_.nc, msg);
      natsMsg_Destroy(msg);
      return;
    }
    Queue& q = *queues_[index];
    const absl::Time now = absl::Now();
    if (job) {
      const int64_t due =
          SerializedJobDue(std::string_view(natsMsg_GetData(msg),
                                            static_cast<size_t>(natsMsg_GetDataLength(msg))))
              .value_or(0);
      if (!q.ordered) {
        const std::optional<SerializedQueueFields> fields = SerializedJobQueueFields(
            std::string_view(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg))));
        q.ordered = fields.has_value() && !fields->ordering_key.empty();
      }
      q.buffer.push_back({now, due, stream_seq, msg});
      msg = nullptr;
      arrived = true;
      if (--q.pull_left <= 0) q.pull_open = false;
    } else if (status != nullptr && std::string_view(status) == "100") {
      // An idle heartbeat: nothing ends.
    } else {
      // 404 / 408: the pull ended (nothing there, or it expired); 409: refused or cut short.
      q.pull_open = false;
      if (status != nullptr && std::string_view(status) == "409") {
        q.retry_after = now + kPullBackoff;
        const char* description = nullptr;
        natsMsgHeader_Get(msg, "Description", &description);
        if (description != nullptr && absl::StrContains(description, "Deleted") && !q.legacy) {
          // Removed by hand: made again (its jobs are still in the stream).
          q.created = false;
          recreate = true;
          to_create_.push_back(q.destination);
          wake_.Signal();
        }
      }
    }
    if (!recreate) pull = WantedPull(q, now);
  }
  if (msg != nullptr) natsMsg_Destroy(msg);
  if (pull.has_value()) SendPulls({*pull});
  if (arrived && options_.on_jobs) options_.on_jobs();
}

JetStreamPulls::Taken JetStreamPulls::Take(size_t max, JobQueue::LeaseBudget budget,
                                           absl::Time fresh_after) {
  Taken out;
  std::vector<PullRequest> pulls;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    last_take_ = now;
    struct Candidate {
      Queue* q;
      size_t allowed;  // within the budget and this call's max
      size_t taken = 0;
    };
    std::vector<Candidate> candidates;
    for (auto& owned : queues_) {
      Queue& q = *owned;
      if (TakeStale(q, fresh_after, &out.stale)) continue;
      // Waiting for the server with nothing at hand: no jobs known, no budget asked.
      if (!q.created || (q.buffer.empty() && q.pull_open)) continue;
      size_t allowed = std::min(
          max, q.legacy ? std::numeric_limits<size_t>::max() : budget(q.destination));
      q.unlimited = q.legacy || allowed == max;
      q.idle = false;
      if (q.ordered && !q.unlimited) {
        // Examined whole; the budget applies to what is leased (see Taken).
        out.ordered_budget[q.name] = allowed;
        q.wanted = allowed;
        allowed = allowed == 0 ? 0 : max;
      }
      candidates.push_back({&q, allowed});
    }
    // Oldest due first across destinations (each buffer is in its consumer's order; equal due
    // times in stream order).
    auto before = [](const Fetched& a, const Fetched& b) {
      return a.due != b.due ? a.due < b.due : a.seq < b.seq;
    };
    while (out.jobs.size() < max) {
      Candidate* best = nullptr;
      for (Candidate& c : candidates) {
        if (c.taken == c.allowed || c.q->buffer.empty()) continue;
        if (best == nullptr || before(c.q->buffer.front(), best->q->buffer.front())) best = &c;
      }
      if (best == nullptr) break;
      out.jobs.push_back(best->q->buffer.front().msg);
      out.fetched_at.push_back(best->q->buffer.front().at);
      best->q->buffer.pop_front();
      ++best->taken;
    }
    // What each destination's budget wanted and did not get: its pull brings up to that.
    for (Candidate& c : candidates) {
      if (!out.ordered_budget.contains(c.q->name)) c.q->wanted = c.allowed - c.taken;
    }
    for (auto& owned : queues_) {
      if (std::optional<PullRequest> p = WantedPull(*owned, now)) pulls.push_back(std::move(*p));
    }
  }
  SendPulls(pulls);
  return out;
}

bool JetStreamPulls::TakeStale(Queue& q, absl::Time fresh_after, std::vector<natsMsg*>* stale) {
  bool any = false;
  while (!q.buffer.empty() && q.buffer.front().at < fresh_after) {
    stale->push_back(q.buffer.front().msg);
    q.buffer.pop_front();
    any = true;
  }
  // Nobody took them for that long, and no Take asked since then (this collector's deliverers
  // are gone): no more for this queue until a Take asks again (a pull still open would take them
  // straight back from the consumer). While Takes come, the demand stands: the pull it keeps open
  // is what brings the jobs that come back later (a retry of an ordered job waiting in place).
  if (any && last_take_ < fresh_after) {
    q.wanted = 0;
    q.unlimited = false;
    q.idle = true;
  }
  return any;
}

void JetStreamPulls::Return(const absl::flat_hash_map<std::string, size_t>& sent_back) {
  std::vector<PullRequest> pulls;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const auto& [name, n] : sent_back) {
      auto it = by_name_.find(name);
      if (it == by_name_.end()) continue;
      Queue& q = *it->second;
      if (!q.unlimited && !q.ordered) q.wanted += n;
      if (std::optional<PullRequest> p = WantedPull(q, now)) pulls.push_back(std::move(*p));
    }
  }
  SendPulls(pulls);
}

void JetStreamPulls::PutBack(std::string_view consumer, natsMsg* msg, absl::Time fetched_at) {
  absl::MutexLock lock(&mu_);
  auto it = by_name_.find(absl::string_view(consumer.data(), consumer.size()));
  if (it == by_name_.end()) {
    JsNak(options_.nc, msg);
    natsMsg_Destroy(msg);
    return;
  }
  uint64_t seq = 0;
  if (const char* reply = natsMsg_GetReply(msg); reply != nullptr) AckSubjectConsumer(reply, &seq);
  const int64_t due =
      SerializedJobDue(std::string_view(natsMsg_GetData(msg),
                                        static_cast<size_t>(natsMsg_GetDataLength(msg))))
          .value_or(0);
  it->second->buffer.push_front({fetched_at, due, seq, msg});
}

JetStreamPulls::Buffered JetStreamPulls::BufferedJobs(int64_t now_ms) {
  Buffered out;
  absl::MutexLock lock(&mu_);
  for (const auto& q : queues_) {
    out.count += static_cast<int64_t>(q->buffer.size());
    for (const Fetched& f : q->buffer) {
      if (f.due <= now_ms) out.oldest_due_ms = std::min(out.oldest_due_ms.value_or(f.due), f.due);
    }
  }
  return out;
}

std::vector<JetStreamPulls::Consumer> JetStreamPulls::Consumers() {
  std::vector<Consumer> out;
  absl::MutexLock lock(&mu_);
  for (const auto& q : queues_) {
    if (q->created) out.push_back({q->name, q->filter});
  }
  return out;
}

bool JetStreamPulls::Rescan() {
  absl::StatusOr<std::vector<std::string>> names =
      JetStreamConsumerNames(options_.nc, kJobsStream, options_.layout.request_timeout);
  if (!names.ok()) {
    static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.1, 2);
    common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                           "JetStream: listing the job consumers failed; trying again shortly",
                           {{"error", names.status().ToString()}});
    return false;
  }
  bool found = false;
  {
    absl::MutexLock lock(&mu_);
    for (std::string& name : *names) {
      std::optional<std::string> destination = DestinationOfConsumer(name);
      if (!destination.has_value()) continue;
      auto it = by_name_.find(name);
      if (it != by_name_.end()) {
        if (!it->second->created) {
          it->second->created = true;  // Made again by another collector.
          found = true;
        }
        continue;
      }
      noted_.insert(*destination);
      AddQueue(name, DestinationReadyFilter(*destination), *std::move(destination), false);
      found = true;
    }
  }
  if (found && options_.on_jobs) options_.on_jobs();
  return true;
}

void JetStreamPulls::CreateWaiting() {
  std::vector<std::string> waiting;
  {
    absl::MutexLock lock(&mu_);
    waiting.swap(to_create_);
  }
  if (waiting.empty()) return;
  bool created = false;
  std::vector<std::string> failed;
  for (std::string& destination : waiting) {
    const absl::Status st = EnsureDestinationConsumer(options_.nc, options_.layout, destination);
    if (!st.ok()) {
      static common::LogRateLimiter* const limiter = new common::LogRateLimiter(0.1, 3);
      common::LogRateLimited(*limiter, common::LogLevel::kWarning,
                             "JetStream: creating a destination's consumer failed; its jobs wait "
                             "in the stream until it exists (trying again)",
                             {{"destination", destination}, {"error", st.ToString()}});
      failed.push_back(std::move(destination));
      continue;
    }
    absl::MutexLock lock(&mu_);
    const std::string name = DestinationConsumerName(destination);
    if (auto it = by_name_.find(name); it != by_name_.end()) {
      it->second->created = true;
      it->second->retry_after = absl::InfinitePast();
    } else {
      AddQueue(name, DestinationReadyFilter(destination), destination, false);
    }
    created = true;
  }
  if (!failed.empty()) {
    absl::MutexLock lock(&mu_);
    // Tried again with the next round of the background loop (a second later at most).
    failed_.insert(failed_.end(), std::make_move_iterator(failed.begin()),
                   std::make_move_iterator(failed.end()));
  }
  if (created && options_.on_jobs) options_.on_jobs();
}

void JetStreamPulls::BackgroundLoop() {
  absl::Time next_rescan = absl::Now() + kRescanEvery;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (to_create_.empty() && !stopping_) wake_.WaitWithTimeout(&mu_, absl::Seconds(1));
      if (stopping_) return;
      // Consumers whose creation failed last round: again now.
      to_create_.insert(to_create_.end(), std::make_move_iterator(failed_.begin()),
                        std::make_move_iterator(failed_.end()));
      failed_.clear();
    }
    CreateWaiting();
    if (absl::Now() >= next_rescan) {
      Rescan();
      next_rescan = absl::Now() + kRescanEvery;
    }
    std::vector<natsMsg*> stale;
    std::vector<PullRequest> pulls;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      const absl::Time fresh_after = now - options_.layout.ack_wait / 4;
      for (auto& owned : queues_) {
        Queue& q = *owned;
        // Nobody took them (this collector's deliverers are gone or busy): back to the consumer
        // long before their ack wait ends, for other collectors' deliverers.
        TakeStale(q, fresh_after, &stale);
        if (q.pull_open && now > q.pull_expires + kPullGrace) q.pull_open = false;
        if (std::optional<PullRequest> p = WantedPull(q, now)) pulls.push_back(std::move(*p));
      }
    }
    for (natsMsg* msg : stale) {
      JsNak(options_.nc, msg);
      natsMsg_Destroy(msg);
    }
    SendPulls(pulls);
  }
}

}  // namespace hookrelay::collector
