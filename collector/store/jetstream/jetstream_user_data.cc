#include "collector/store/jetstream/jetstream_user_data.h"

#include <simdjson.h>
#include <pthread.h>
#include <string.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collector/audiences/audience_eval.h"
#include "collector/store/jetstream/jetstream_job_store.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::AudienceState;
using hookrelay::v1::Deletion;
using hookrelay::v1::Job;

// JetStream's error codes.
constexpr int64_t kNoMessageFound = 10037;
constexpr int64_t kTemporarilyUnavailable = 10008;
// "wrong last sequence: N" and, for an expected last subject sequence, "wrong last sequence".
constexpr int64_t kWrongLastSequence = 10071;
constexpr int64_t kWrongLastSequenceConstant = 10164;

// Requests in flight at once in one exchange.
constexpr size_t kWindow = 2048;
// Messages per direct batch request.
constexpr int kBatch = 256;
// A profile read folding this many deltas rolls them up.
constexpr int kRollupAfter = 16;
// A profile this collector published this many deltas to is rolled up in the background.
constexpr int kCompactAfter = 32;
constexpr size_t kMaxCompactQueue = 10'000;
// How long a purge mark (a deletion's HR_JOBS sequence) is kept for leased jobs: well past a
// lease (the consumer's ack wait).
constexpr absl::Duration kPurgeMarkFor = absl::Minutes(10);
// An audience lock not refreshed for this long is free for another collector.
constexpr absl::Duration kLockFor = absl::Minutes(5);
constexpr absl::Duration kLockRefresh = absl::Minutes(1);

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
std::string ClaimSubject(std::string_view request_id) {
  return absl::StrCat("hr.del.req.", Tok(request_id));
}
std::string StateSubject(std::string_view audience) {
  return absl::StrCat("hr.aud.state.", Tok(audience));
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

absl::Status NatsError(std::string_view what, natsStatus s) {
  return absl::UnavailableError(
      absl::StrCat("JetStream: ", std::string(what), ": ", natsStatus_GetText(s)));
}

// A publish ack: {"stream":..,"seq":N} or {"error":{..}}.
struct PubAck {
  uint64_t seq = 0;
  int64_t error_code = 0;
  std::string error;
};
PubAck ParsePubAck(const std::string& body) {
  PubAck ack;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body).get(doc) != simdjson::SUCCESS) {
    ack.error_code = -1;
    ack.error = "unreadable publish ack";
    return ack;
  }
  simdjson::dom::object error;
  if (doc["error"].get_object().get(error) == simdjson::SUCCESS) {
    int64_t code = -1;
    if (error["err_code"].get_int64().get(code) != simdjson::SUCCESS) code = -1;
    ack.error_code = code;
    std::string_view description;
    if (error["description"].get_string().get(description) != simdjson::SUCCESS) {
      description = "(no description)";
    }
    ack.error = std::string(description);
    return ack;
  }
  uint64_t seq = 0;
  if (doc["seq"].get_uint64().get(seq) != simdjson::SUCCESS) {
    ack.error_code = -1;
    ack.error = "publish ack without a sequence";
  }
  ack.seq = seq;
  return ack;
}

std::string Header(natsMsg* msg, const char* key) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, key, &value) != NATS_OK || value == nullptr) return "";
  return value;
}

// The tokens of a subject.
std::vector<std::string> Tokens(std::string_view subject) {
  return absl::StrSplit(absl::string_view(subject.data(), subject.size()), '.');
}

}  // namespace

uint64_t UserSourceHash(std::string_view user, std::string_view source) {
  const uint64_t h = absl::HashOf(user, source);
  return h == 0 ? 1 : h;
}

struct JetStreamUserData::SeenCache {
  std::unique_ptr<std::atomic<uint64_t>[]> slots;
  std::atomic<uint64_t> generation{0};
};

JetStreamUserData::JetStreamUserData(natsConnection* nc, const JetStreamLayout& layout,
                                     const common::Clock& clock)
    : nc_(nc),
      layout_(layout),
      clock_(clock),
      owner_(absl::StrCat(absl::Hex(absl::ToUnixNanos(absl::Now())), "-",
                          absl::Hex(reinterpret_cast<uintptr_t>(this)))),
      seen_(std::make_shared<SeenCache>()) {
  seen_->slots = std::make_unique<std::atomic<uint64_t>[]>(kSeenCacheSlots);
  for (size_t i = 0; i < kSeenCacheSlots; ++i) seen_->slots[i].store(0);
}

absl::StatusOr<std::unique_ptr<JetStreamUserData>> JetStreamUserData::Start(
    natsConnection* nc, const JetStreamLayout& layout, const common::Clock& clock) {
  auto data = std::unique_ptr<JetStreamUserData>(new JetStreamUserData(nc, layout, clock));
  natsInbox* inbox = nullptr;
  natsStatus s = natsInbox_Create(&inbox);
  if (s != NATS_OK) return NatsError("creating an inbox", s);
  data->inbox_ = inbox;
  natsInbox_Destroy(inbox);
  s = natsConnection_Subscribe(&data->records_, nc, "hr.del.rec.>", &JetStreamUserData::OnRecord,
                               data.get());
  if (s != NATS_OK) return NatsError("subscribing to deletion records", s);
  data->compactor_ = std::thread([raw = data.get()] { raw->CompactLoop(); });
  return data;
}

JetStreamUserData::~JetStreamUserData() {
  {
    absl::MutexLock lock(&compact_mu_);
    stopping_ = true;
  }
  if (compactor_.joinable()) compactor_.join();
  if (records_ != nullptr) {
    if (natsSubscription_Drain(records_) == NATS_OK) {
      natsSubscription_WaitForDrainCompletion(records_, 2000);
    }
    natsSubscription_Destroy(records_);
  }
}

// ---------------------------------------------------------------------------------------------
// Requests.

absl::StatusOr<std::vector<JetStreamUserData::Answer>> JetStreamUserData::Exchange(
    const std::vector<Request>& requests, bool batch) {
  std::vector<Answer> answers(requests.size());
  if (requests.empty()) return answers;
  const std::string prefix = absl::StrCat(inbox_, ".", next_exchange_.fetch_add(1));
  natsSubscription* sub = nullptr;
  natsStatus s = natsConnection_SubscribeSync(&sub, nc_, absl::StrCat(prefix, ".>").c_str());
  if (s != NATS_OK) return NatsError("subscribing to answers", s);
  natsSubscription_SetPendingLimits(sub, -1, -1);
  std::vector<size_t> todo(requests.size());
  for (size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  std::string last_problem;
  for (int attempt = 0; !todo.empty(); ++attempt) {
    std::vector<size_t> again;
    for (size_t w = 0; w < todo.size(); w += kWindow) {
      const size_t end = std::min(todo.size(), w + kWindow);
      absl::flat_hash_map<size_t, bool> open;  // request → answered
      for (size_t k = w; k < end; ++k) {
        const size_t i = todo[k];
        answers[i] = Answer();
        const Request& r = requests[i];
        const std::string reply = absl::StrCat(prefix, ".", attempt, ".", i);
        natsMsg* msg = nullptr;
        s = natsMsg_Create(&msg, r.subject.c_str(), reply.c_str(), r.body.data(),
                           static_cast<int>(r.body.size()));
        for (const auto& [key, value] : r.headers) {
          if (s == NATS_OK) s = natsMsgHeader_Set(msg, key.c_str(), value.c_str());
        }
        if (s == NATS_OK) s = natsConnection_PublishMsg(nc_, msg);
        if (msg != nullptr) natsMsg_Destroy(msg);
        if (s != NATS_OK) {
          last_problem = natsStatus_GetText(s);
          again.push_back(i);
          continue;
        }
        open.emplace(i, false);
      }
      size_t remaining = open.size();
      const absl::Time deadline = absl::Now() + layout_.request_timeout;
      while (remaining > 0) {
        natsMsg* msg = nullptr;
        const int64_t wait_ms =
            std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now()));
        s = natsSubscription_NextMsg(&msg, sub, wait_ms);
        if (s != NATS_OK) {
          last_problem = natsStatus_GetText(s);
          break;
        }
        // <prefix>.<attempt>.<request>
        std::vector<std::string> parts = Tokens(natsMsg_GetSubject(msg));
        int msg_attempt = -1;
        size_t i = 0;
        auto it = open.end();
        if (parts.size() >= 2 &&
            absl::SimpleAtoi(parts[parts.size() - 2], &msg_attempt) && msg_attempt == attempt &&
            absl::SimpleAtoi(parts.back(), &i)) {
          it = open.find(i);
        }
        if (it == open.end() || it->second) {
          natsMsg_Destroy(msg);
          continue;
        }
        Answer& a = answers[i];
        const std::string status = Header(msg, "Status");
        if (!status.empty()) {
          a.status = status;
          const std::string description = Header(msg, "Description");
          if (!description.empty()) last_problem = absl::StrCat(status, " ", description);
          it->second = true;
          --remaining;
        } else {
          Stored& m = a.messages.emplace_back();
          m.data.assign(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
          if (batch) {
            m.subject = Header(msg, "Nats-Subject");
            (void)absl::SimpleAtoi(Header(msg, "Nats-Sequence"), &m.seq);
            (void)absl::SimpleAtoi(Header(msg, "Nats-Num-Pending"), &m.pending);
            m.full_profile = Header(msg, "Hr-Profile") == "full";
          } else {
            it->second = true;
            --remaining;
          }
        }
        natsMsg_Destroy(msg);
      }
      for (const auto& [i, answered] : open) {
        const Answer& a = answers[i];
        // Passing: no answer, no responders (a node rejoining), a busy or stopping server. A
        // direct get's normal ends: 204 (end of batch), 404 (nothing).
        const bool passing =
            !answered || a.status == "503" || a.status == "408" ||
            (batch && !a.status.empty() && a.status != "204" && a.status != "404") ||
            (!batch && !a.status.empty());
        if (passing) {
          if (!answered) last_problem = "no answer in time";
          again.push_back(i);
        }
      }
    }
    todo.swap(again);
    if (todo.empty()) break;
    if (absl::Now() >= give_up) {
      natsSubscription_Unsubscribe(sub);
      natsSubscription_Destroy(sub);
      return absl::UnavailableError(absl::StrCat("JetStream: ", todo.size(), " of ",
                                                 requests.size(), " requests to ",
                                                 requests[todo[0]].subject,
                                                 " unanswered: ", last_problem));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  natsSubscription_Unsubscribe(sub);
  natsSubscription_Destroy(sub);
  return answers;
}

absl::StatusOr<JetStreamApiReply> JetStreamUserData::Api(const std::string& subject,
                                                          const std::string& body) {
  absl::StatusOr<JetStreamApiReply> reply;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  for (;;) {
    reply = JetStreamApi(nc_, subject, body, layout_.request_timeout);
    // Passing: nothing answered, or "JetStream system temporarily unavailable" (an election).
    const bool passing = reply.ok() ? reply->error_code == kTemporarilyUnavailable
                                    : absl::IsUnavailable(reply.status());
    if (!passing || absl::Now() >= give_up) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return reply;
}

absl::StatusOr<uint64_t> JetStreamUserData::LastSeq(const char* stream) {
  ASSIGN_OR_RETURN(JetStreamApiReply reply, Api(absl::StrCat("$JS.API.STREAM.INFO.", stream), ""));
  if (reply.error_code != 0) {
    return absl::UnavailableError(absl::StrCat("JetStream: stream ", stream, ": ", reply.error));
  }
  simdjson::dom::parser parser;
  uint64_t last = 0;
  if (parser.parse(reply.body)["state"]["last_seq"].get_uint64().get(last) != simdjson::SUCCESS) {
    return absl::UnavailableError(absl::StrCat("JetStream: stream ", stream, ": no last_seq"));
  }
  return last;
}

absl::StatusOr<std::vector<std::string>> JetStreamUserData::Subjects(const char* stream,
                                                                     const std::string& filter) {
  std::vector<std::string> out;
  for (;;) {
    ASSIGN_OR_RETURN(
        JetStreamApiReply reply,
        Api(absl::StrCat("$JS.API.STREAM.INFO.", stream),
            absl::StrCat(R"({"subjects_filter":")", filter, R"(","offset":)", out.size(), "}")));
    if (reply.error_code != 0) {
      return absl::UnavailableError(
          absl::StrCat("JetStream: listing ", filter, " in ", stream, ": ", reply.error));
    }
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    if (parser.parse(reply.body).get(doc) != simdjson::SUCCESS) {
      return absl::UnavailableError("JetStream: an unreadable stream info");
    }
    simdjson::dom::object subjects;
    size_t page = 0;
    if (doc["state"]["subjects"].get_object().get(subjects) == simdjson::SUCCESS) {
      for (auto field : subjects) {
        out.emplace_back(field.key);
        ++page;
      }
    }
    uint64_t total = 0;
    if (doc["total"].get_uint64().get(total) != simdjson::SUCCESS) total = 0;
    if (page == 0 || out.size() >= total) break;
  }
  return out;
}

absl::StatusOr<uint64_t> JetStreamUserData::Purge(const char* stream, const std::string& filter,
                                                  uint64_t below_seq) {
  std::string body = absl::StrCat(R"({"filter":")", filter, "\"");
  if (below_seq > 0) absl::StrAppend(&body, R"(,"seq":)", below_seq);
  body.push_back('}');
  ASSIGN_OR_RETURN(JetStreamApiReply reply,
                   Api(absl::StrCat("$JS.API.STREAM.PURGE.", stream), body));
  if (reply.error_code != 0) {
    return absl::UnavailableError(
        absl::StrCat("JetStream: purging ", filter, " from ", stream, ": ", reply.error));
  }
  simdjson::dom::parser parser;
  uint64_t purged = 0;
  if (parser.parse(reply.body)["purged"].get_uint64().get(purged) != simdjson::SUCCESS) purged = 0;
  return purged;
}

namespace {

// A STREAM.MSG.GET answer: the message, nullopt when there is none.
absl::StatusOr<std::optional<JetStreamUserData::Stored>> ParseMsgGet(const std::string& body,
                                                                     std::string_view what) {
  using Stored = JetStreamUserData::Stored;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body).get(doc) != simdjson::SUCCESS) {
    return absl::UnavailableError(absl::StrCat("JetStream: an unreadable answer reading ",
                                               std::string(what)));
  }
  simdjson::dom::object error;
  if (doc["error"].get_object().get(error) == simdjson::SUCCESS) {
    int64_t code = -1;
    if (error["err_code"].get_int64().get(code) != simdjson::SUCCESS) code = -1;
    if (code == kNoMessageFound) return std::optional<Stored>();
    std::string_view description;
    if (error["description"].get_string().get(description) != simdjson::SUCCESS) {
      description = "(no description)";
    }
    return absl::UnavailableError(absl::StrCat("JetStream: reading ", std::string(what), ": ",
                                               std::string(description)));
  }
  simdjson::dom::object message;
  Stored out;
  std::string_view data64;
  std::string_view subject;
  if (doc["message"].get_object().get(message) != simdjson::SUCCESS ||
      message["seq"].get_uint64().get(out.seq) != simdjson::SUCCESS ||
      message["subject"].get_string().get(subject) != simdjson::SUCCESS) {
    return absl::DataLossError(absl::StrCat("JetStream: an unreadable answer reading ",
                                            std::string(what)));
  }
  out.subject = std::string(subject);
  if (message["data"].get_string().get(data64) != simdjson::SUCCESS) data64 = "";
  if (!absl::Base64Unescape(absl::string_view(data64.data(), data64.size()), &out.data)) {
    return absl::DataLossError(absl::StrCat("JetStream: ", out.subject, " is unreadable"));
  }
  std::string_view headers64;
  if (message["hdrs"].get_string().get(headers64) == simdjson::SUCCESS) {
    std::string headers;
    if (absl::Base64Unescape(absl::string_view(headers64.data(), headers64.size()), &headers)) {
      out.full_profile = headers.find("\r\nHr-Profile: full\r\n") != std::string::npos;
    }
  }
  return std::optional<Stored>(std::move(out));
}

}  // namespace

absl::StatusOr<std::optional<JetStreamUserData::Stored>> JetStreamUserData::GetLast(
    const char* stream, const std::string& subject) {
  ASSIGN_OR_RETURN(std::vector<std::optional<Stored>> got,
                   LeaderGets(stream, {absl::StrCat(R"({"last_by_subj":")", subject, R"("})")}));
  return std::move(got[0]);
}

absl::StatusOr<std::vector<std::optional<JetStreamUserData::Stored>>>
JetStreamUserData::LeaderGets(const char* stream, const std::vector<std::string>& bodies) {
  std::vector<Request> requests;
  requests.reserve(bodies.size());
  const std::string api = absl::StrCat("$JS.API.STREAM.MSG.GET.", stream);
  for (const std::string& body : bodies) requests.push_back({api, body, {}});
  ASSIGN_OR_RETURN(std::vector<Answer> answers, Exchange(requests, false));
  std::vector<std::optional<Stored>> out;
  out.reserve(answers.size());
  for (size_t i = 0; i < answers.size(); ++i) {
    ASSIGN_OR_RETURN(
        std::optional<Stored> got,
        ParseMsgGet(answers[i].messages.empty() ? "" : answers[i].messages[0].data, stream));
    out.push_back(std::move(got));
  }
  return out;
}

absl::StatusOr<std::vector<JetStreamUserData::Stored>> JetStreamUserData::LastOf(
    const char* stream, const std::vector<std::string>& subjects) {
  std::vector<std::string> bodies;
  bodies.reserve(subjects.size());
  for (const std::string& subject : subjects) {
    bodies.push_back(absl::StrCat(R"({"last_by_subj":")", subject, R"("})"));
  }
  ASSIGN_OR_RETURN(std::vector<std::optional<Stored>> got, LeaderGets(stream, bodies));
  std::vector<Stored> out;
  for (std::optional<Stored>& m : got) {
    if (m.has_value()) out.push_back(*std::move(m));
  }
  return out;
}

absl::StatusOr<uint64_t> JetStreamUserData::Publish(Request request) {
  const bool conditional =
      std::any_of(request.headers.begin(), request.headers.end(),
                  [](const auto& h) { return h.first == "Nats-Expected-Last-Subject-Sequence"; });
  if (conditional) {
    // A compare-and-set sent again after a lost ack is acknowledged as a duplicate (with its
    // sequence) instead of being refused as a change made meanwhile.
    request.headers.emplace_back("Nats-Msg-Id",
                                 absl::StrCat("cas-", owner_, "-", next_publish_.fetch_add(1)));
  }
  ASSIGN_OR_RETURN(std::vector<Answer> answers, Exchange({request}, false));
  const PubAck ack = ParsePubAck(answers[0].messages.empty() ? "" : answers[0].messages[0].data);
  if (ack.error_code == kWrongLastSequence || ack.error_code == kWrongLastSequenceConstant ||
      absl::StartsWith(ack.error, "wrong last sequence")) {
    return absl::FailedPreconditionError(absl::StrCat(request.subject, " changed meanwhile"));
  }
  if (ack.error_code != 0) {
    return absl::UnavailableError(
        absl::StrCat("JetStream: publishing to ", request.subject, ": ", ack.error));
  }
  return ack.seq;
}

absl::Status JetStreamUserData::PublishAll(const std::vector<Request>& requests) {
  ASSIGN_OR_RETURN(std::vector<Answer> answers, Exchange(requests, false));
  for (size_t i = 0; i < answers.size(); ++i) {
    const PubAck ack =
        ParsePubAck(answers[i].messages.empty() ? "" : answers[i].messages[0].data);
    if (ack.error_code != 0) {
      return absl::UnavailableError(
          absl::StrCat("JetStream: publishing to ", requests[i].subject, ": ", ack.error));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<JetStreamUserData::Stored>>> JetStreamUserData::ReadAll(
    const char* stream, const std::vector<std::string>& filters) {
  // A direct batch per filter (pipelined, any replica), then the leader confirms that nothing
  // follows what the replica answered (a replica answers the stream as it was when it last
  // applied: a prefix of it); when something does, it is taken and the filter read on from it.
  std::vector<std::vector<Stored>> out(filters.size());
  std::vector<uint64_t> from(filters.size(), 1);
  std::vector<size_t> open(filters.size());
  for (size_t f = 0; f < filters.size(); ++f) open[f] = f;
  const std::string direct = absl::StrCat("$JS.API.DIRECT.GET.", stream);
  while (!open.empty()) {
    std::vector<Request> requests;
    requests.reserve(open.size());
    for (size_t f : open) {
      requests.push_back({direct,
                          absl::StrCat(R"({"seq":)", from[f], R"(,"next_by_subj":")", filters[f],
                                       R"(","batch":)", kBatch, "}"),
                          {}});
    }
    ASSIGN_OR_RETURN(std::vector<Answer> answers, Exchange(requests, true));
    std::vector<size_t> more;
    std::vector<size_t> confirm;
    for (size_t k = 0; k < open.size(); ++k) {
      const size_t f = open[k];
      std::vector<Stored>& messages = answers[k].messages;
      const bool full =
          !messages.empty() &&
          (messages.back().pending > 0 || messages.size() >= static_cast<size_t>(kBatch));
      for (Stored& m : messages) {
        if (m.seq < from[f]) continue;
        from[f] = m.seq + 1;
        out[f].push_back(std::move(m));
      }
      (full ? more : confirm).push_back(f);
    }
    std::vector<std::string> bodies;
    bodies.reserve(confirm.size());
    for (size_t f : confirm) {
      bodies.push_back(absl::StrCat(R"({"seq":)", from[f], R"(,"next_by_subj":")", filters[f],
                                    R"("})"));
    }
    ASSIGN_OR_RETURN(std::vector<std::optional<Stored>> next, LeaderGets(stream, bodies));
    for (size_t k = 0; k < confirm.size(); ++k) {
      if (!next[k].has_value()) continue;  // Complete.
      const size_t f = confirm[k];
      from[f] = next[k]->seq + 1;
      out[f].push_back(*std::move(next[k]));
      more.push_back(f);
    }
    open.swap(more);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Ingest: the index and profiles.

void JetStreamUserData::AddAppendMessages(const std::vector<AppendItem>& items,
                                          const std::vector<bool>& publish,
                                          std::vector<std::pair<natsMsg*, size_t>>* out,
                                          JobStore::AppendCallback* done) {
  std::vector<uint64_t> new_pairs;
  std::vector<std::string> profile_subjects;
  for (size_t i = 0; i < items.size(); ++i) {
    const AppendItem& item = items[i];
    if (!publish[i] || item.user_id.empty()) continue;
    const std::string user = Tok(item.user_id);
    const std::string source = Tok(item.source_id);
    const uint64_t pair = UserSourceHash(item.user_id, item.source_id);
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

// ---------------------------------------------------------------------------------------------
// Deletions.

void JetStreamUserData::OnRecord(natsConnection*, natsSubscription*, natsMsg* msg, void* self) {
  auto* data = static_cast<JetStreamUserData*>(self);
  Deletion record;
  uint64_t upto = 0;
  if (record.ParseFromArray(natsMsg_GetData(msg), natsMsg_GetDataLength(msg)) &&
      absl::SimpleAtoi(Header(msg, "Hr-Jobs-Upto"), &upto)) {
    data->NotePurge(record, upto);
  }
  natsMsg_Destroy(msg);
}

void JetStreamUserData::NotePurge(const Deletion& record, uint64_t jobs_upto) {
  // Index entries may be purged: the cache forgets every pair (deletions are rare; it refills).
  seen_->generation.fetch_add(1);
  for (size_t i = 0; i < kSeenCacheSlots; ++i) {
    seen_->slots[i].store(0, std::memory_order_relaxed);
  }
  const absl::Time now = absl::Now();
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
  // Interrupted: finished now under its own id (its notifications keep their message ids).
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

absl::Status JetStreamUserData::RemoveMembership(const std::string& audience,
                                                 const std::string& user, bool* removed) {
  ASSIGN_OR_RETURN(uint64_t purged, Purge(kAudiencesStream, MemberSubject(audience, user)));
  *removed = purged > 0;
  if (purged == 0) return absl::OkStatus();
  return UpdateState(audience, [](std::optional<AudienceState>& state) -> absl::StatusOr<bool> {
           if (!state.has_value() || !state->computed() || state->members() == 0) return false;
           state->set_members(state->members() - 1);
           return true;
         }).status();
}

absl::StatusOr<DeletionOutcome> JetStreamUserData::Apply(DeletionPlan& plan) {
  DeletionOutcome outcome;
  size_t& touched = outcome.keys_touched;
  Deletion& record = plan.record;
  const std::string user = Tok(record.user_id());

  // Jobs stored up to L are purged; L travels with the record so that every collector drops the
  // outcome of a purged job it has leased (PurgedByDeletion).
  ASSIGN_OR_RETURN(const uint64_t jobs_upto, LastSeq(kJobsStream));
  const std::string upto = absl::StrCat(jobs_upto);
  ++touched;
  RETURN_IF_ERROR(Publish({RecordSubject(record.id()), record.SerializeAsString(),
                           {{"Hr-Jobs-Upto", upto}}})
                      .status());
  NotePurge(record, jobs_upto);
  ++touched;

  uint64_t jobs = 0;
  uint64_t dead = 0;
  bool profile = false;
  for (const std::string& source_id : record.source_ids()) {
    const std::string source = Tok(source_id);
    const std::string tail = absl::StrCat(source, ".", user);
    ASSIGN_OR_RETURN(uint64_t n, Purge(kJobsStream, absl::StrCat("hr.jobs.ready.", tail),
                                       jobs_upto + 1));
    jobs += n;
    ASSIGN_OR_RETURN(n, Purge(kJobsStream, absl::StrCat("hr.jobs.sched.", tail, ".*"),
                              jobs_upto + 1));
    jobs += n;
    ASSIGN_OR_RETURN(n, Purge(kDeadStream, absl::StrCat("hr.dead.*.", tail)));
    dead += n;
    ASSIGN_OR_RETURN(n, Purge(kUsersStream, absl::StrCat("hr.users.", user, ".", source)));
    ASSIGN_OR_RETURN(n, Purge(kProfilesStream, absl::StrCat("hr.prof.", tail)));
    profile = profile || n > 0;
    touched += 5;
  }
  for (const std::string& audience : plan.audience_ids) {
    bool removed = false;
    RETURN_IF_ERROR(RemoveMembership(audience, record.user_id(), &removed));
    touched += removed ? 3 : 1;
  }

  // The notifications, due now; their message ids make a resumed deletion store them once
  // (within the stream's duplicate window).
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  std::vector<Request> notifications;
  for (size_t n = 0; n < plan.notifications.size(); ++n) {
    Job& job = plan.notifications[n];
    job.set_id(0);
    job.set_due_unix_ms(now_ms);
    notifications.push_back({absl::StrCat("hr.jobs.ready.", JobSubjectTail(job)),
                             job.SerializeAsString(),
                             {{"Nats-Msg-Id", absl::StrCat("del-", record.id(), "-", n)}}});
  }
  RETURN_IF_ERROR(PublishAll(notifications));
  touched += notifications.size();

  record.set_state(Deletion::COMPLETED);
  record.set_notifications(notifications.size());
  record.set_purged_jobs(jobs);
  record.set_purged_dead_letters(dead);
  record.set_purged_profile(profile);
  RETURN_IF_ERROR(
      Publish({RecordSubject(record.id()), record.SerializeAsString(), {{"Hr-Jobs-Upto", upto}}})
          .status());
  ++touched;
  // Appends that hit the cache between the purge and here wrote no index entry: forget again.
  NotePurge(record, jobs_upto);
  outcome.record = record;
  outcome.created = true;
  return outcome;
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

// ---------------------------------------------------------------------------------------------
// Audiences.

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
  // One collector at a time syncs an audience: a lock with an expiry (real time), taken by
  // compare-and-set.
  const std::string lock_subject = LockSubject(audience);
  ASSIGN_OR_RETURN(std::optional<Stored> lock, GetLast(kAudiencesStream, lock_subject));
  if (lock.has_value()) {
    std::pair<std::string, std::string> held = absl::StrSplit(lock->data, ' ');
    int64_t until_ms = 0;
    if (held.first != owner_ && absl::SimpleAtoi(held.second, &until_ms) &&
        absl::FromUnixMillis(until_ms) > absl::Now()) {
      return absl::AbortedError(absl::StrCat("audience ", audience,
                                             " is being synced by another collector"));
    }
  }
  absl::StatusOr<uint64_t> lock_seq = Publish(
      {lock_subject, absl::StrCat(owner_, " ", absl::ToUnixMillis(absl::Now() + kLockFor)),
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
  seen.lock_refreshed = absl::Now();
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
      if (it != syncs_.end() && absl::Now() - it->second.lock_refreshed > kLockRefresh) {
        seen = it->second;
      }
    }
    if (seen.has_value()) {
      absl::StatusOr<uint64_t> lock_seq = Publish(
          {LockSubject(audience),
           absl::StrCat(owner_, " ", absl::ToUnixMillis(absl::Now() + kLockFor)),
           {{"Nats-Expected-Last-Subject-Sequence", absl::StrCat(seen->lock_seq)}}});
      if (absl::IsFailedPrecondition(lock_seq.status())) {
        return absl::AbortedError(absl::StrCat("audience ", audience,
                                               ": another collector took over its sync"));
      }
      if (!lock_seq.ok()) return lock_seq.status();
      absl::MutexLock l(&mu_);
      syncs_[audience].lock_seq = *lock_seq;
      syncs_[audience].lock_refreshed = absl::Now();
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

  // 1. The identify jobs. A re-run of this commit (the same state read by its sync) gives each
  // the same message id, so the stream stores it once within its duplicate window.
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
    jobs.push_back({absl::StrCat("hr.jobs.ready.", JobSubjectTail(job)), job.SerializeAsString(),
                    {{"Nats-Msg-Id", absl::StrCat("aud-", id.substr(sizeof("hr.dedup.") - 1))}}});
  }
  RETURN_IF_ERROR(PublishAll(jobs));

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
