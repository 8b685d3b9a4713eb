// The JetStream engine's user data, requests: pipelined exchanges with the cluster (direct gets,
// reads from the stream leader, publishes acknowledged one by one, the JSON API), passing
// failures sent again.
#include "collector/store/jetstream/jetstream_user_data.h"

#include <simdjson.h>

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
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

// JetStream's error codes.
constexpr int64_t kNoMessageFound = 10037;
constexpr int64_t kTemporarilyUnavailable = 10008;
// "wrong last sequence: N" and, for an expected last subject sequence, "wrong last sequence".
constexpr int64_t kWrongLastSequence = 10071;
constexpr int64_t kWrongLastSequenceConstant = 10164;
// An atomic batch holding a message id the stream has seen within its duplicate window.
constexpr int64_t kAtomicBatchDuplicateMsgId = 10201;

// Requests in flight at once in one exchange.
constexpr size_t kWindow = 2048;

}  // namespace

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
        const std::string status = NatsHeader(msg, "Status");
        if (!status.empty()) {
          a.status = status;
          const std::string description = NatsHeader(msg, "Description");
          if (!description.empty()) last_problem = absl::StrCat(status, " ", description);
          it->second = true;
          --remaining;
        } else {
          Stored& m = a.messages.emplace_back();
          m.data.assign(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
          if (batch) {
            m.subject = NatsHeader(msg, "Nats-Subject");
            (void)absl::SimpleAtoi(NatsHeader(msg, "Nats-Sequence"), &m.seq);
            (void)absl::SimpleAtoi(NatsHeader(msg, "Nats-Num-Pending"), &m.pending);
            m.full_profile = NatsHeader(msg, "Hr-Profile") == "full";
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

absl::StatusOr<std::vector<std::pair<std::string, uint64_t>>> JetStreamUserData::SubjectCounts(
    const char* stream, const std::string& filter) {
  std::vector<std::pair<std::string, uint64_t>> out;
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
        uint64_t messages = 0;
        if (field.value.get_uint64().get(messages) != simdjson::SUCCESS) messages = 0;
        out.emplace_back(std::string(field.key), messages);
        ++page;
      }
    }
    uint64_t total = 0;
    if (doc["total"].get_uint64().get(total) != simdjson::SUCCESS) total = 0;
    if (page == 0 || out.size() >= total) break;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> JetStreamUserData::Subjects(const char* stream,
                                                                     const std::string& filter) {
  ASSIGN_OR_RETURN(auto counts, SubjectCounts(stream, filter));
  std::vector<std::string> out;
  out.reserve(counts.size());
  for (auto& [subject, messages] : counts) out.push_back(std::move(subject));
  return out;
}

absl::StatusOr<uint64_t> JetStreamUserData::CountMessages(const char* stream,
                                                          const std::string& filter) {
  ASSIGN_OR_RETURN(auto counts, SubjectCounts(stream, filter));
  uint64_t total = 0;
  for (const auto& [subject, messages] : counts) total += messages;
  return total;
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
      out.headers = std::move(headers);
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

absl::StatusOr<bool> JetStreamUserData::DeleteMessage(const char* stream, uint64_t seq) {
  ASSIGN_OR_RETURN(JetStreamApiReply reply, Api(absl::StrCat("$JS.API.STREAM.MSG.DELETE.", stream),
                                                absl::StrCat(R"({"seq":)", seq, "}")));
  if (reply.error_code == kNoMessageFound) return false;  // Consumed or deleted meanwhile.
  if (reply.error_code != 0) {
    return absl::UnavailableError(
        absl::StrCat("JetStream: deleting message ", seq, " of ", stream, ": ", reply.error));
  }
  return true;
}

absl::Status JetStreamUserData::PublishAtomic(const std::vector<Request>& requests) {
  if (requests.empty()) return absl::OkStatus();
  if (requests.size() > kMaxAtomicBatch) {
    return absl::InvalidArgumentError(absl::StrCat("an atomic batch of ", requests.size(),
                                                   " messages; at most ", kMaxAtomicBatch));
  }
  // Every message but the last is a plain publish (the server answers only the commit); a batch
  // that fails in passing (a leader change drops it whole) is sent again under a new id.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  std::string problem;
  for (;;) {
    const std::string batch_id = absl::StrCat(owner_, "-b", next_publish_.fetch_add(1));
    natsStatus s = NATS_OK;
    for (size_t i = 0; i + 1 < requests.size() && s == NATS_OK; ++i) {
      const Request& r = requests[i];
      natsMsg* msg = nullptr;
      s = natsMsg_Create(&msg, r.subject.c_str(), nullptr, r.body.data(),
                         static_cast<int>(r.body.size()));
      for (const auto& [key, value] : r.headers) {
        if (s == NATS_OK) s = natsMsgHeader_Set(msg, key.c_str(), value.c_str());
      }
      if (s == NATS_OK) s = natsMsgHeader_Set(msg, "Nats-Batch-Id", batch_id.c_str());
      if (s == NATS_OK) {
        s = natsMsgHeader_Set(msg, "Nats-Batch-Sequence", absl::StrCat(i + 1).c_str());
      }
      if (s == NATS_OK) s = natsConnection_PublishMsg(nc_, msg);
      if (msg != nullptr) natsMsg_Destroy(msg);
    }
    if (s == NATS_OK) {
      Request commit = requests.back();
      commit.headers.emplace_back("Nats-Batch-Id", batch_id);
      commit.headers.emplace_back("Nats-Batch-Sequence", absl::StrCat(requests.size()));
      commit.headers.emplace_back("Nats-Batch-Commit", "1");
      ASSIGN_OR_RETURN(std::vector<Answer> answers, Exchange({commit}, false));
      const PubAck ack =
          ParsePubAck(answers[0].messages.empty() ? "" : answers[0].messages[0].data);
      if (ack.error_code == 0) return absl::OkStatus();
      if (ack.error_code == kWrongLastSequence || ack.error_code == kWrongLastSequenceConstant ||
          absl::StartsWith(ack.error, "wrong last sequence")) {
        return absl::FailedPreconditionError(absl::StrCat(
            "an atomic batch to ", requests[0].subject, ": a subject changed meanwhile"));
      }
      if (ack.error_code == kAtomicBatchDuplicateMsgId) {
        return absl::AlreadyExistsError(absl::StrCat(
            "an atomic batch to ", requests[0].subject, ": ", ack.error));
      }
      problem = ack.error;
      if (ack.error_code != kTemporarilyUnavailable && ack.error_code != -1) {
        return absl::UnavailableError(absl::StrCat("JetStream: an atomic batch to ",
                                                   requests[0].subject, ": ", ack.error));
      }
    } else {
      problem = natsStatus_GetText(s);
    }
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(
          absl::StrCat("JetStream: an atomic batch to ", requests[0].subject, ": ", problem));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
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

}  // namespace hookrelay::collector
