#include "collector/store/jetstream/jetstream_layout.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/jetstream_subjects.h"
#include "common/log.h"

namespace hookrelay::collector {
namespace {

// JetStream's "not found" API error codes.
constexpr int64_t kStreamNotFound = 10059;
constexpr int64_t kConsumerNotFound = 10014;

// The setting `key` of the config object in `body` ("config" of a stream or consumer info) as
// compact text; "" when absent.
std::string Setting(simdjson::dom::object config, std::string_view key) {
  simdjson::dom::element e;
  if (config[key].get(e) != simdjson::SUCCESS) return "";
  if (e.is_string()) return std::string(e.get_string().value());
  if (e.is_array()) {
    std::vector<std::string> items;
    for (simdjson::dom::element item : e.get_array()) {
      std::string_view s;
      if (item.get_string().get(s) == simdjson::SUCCESS) items.emplace_back(s);
    }
    std::sort(items.begin(), items.end());
    return absl::StrJoin(items, ",");
  }
  return simdjson::minify(e);
}

struct Wanted {
  std::string key;
  std::string value;
  std::string why;
  // A setting hookrelay changes itself in a stream an earlier release created: a switch a later
  // release needs, or the markers' replication (its flag's default changed).
  bool adjust = false;
};

// The settings of `info_body` that differ from `wanted`, as "key is X, hookrelay needs Y (why)".
absl::StatusOr<std::vector<std::string>> Differences(const std::string& what,
                                                     const std::string& info_body,
                                                     const std::vector<Wanted>& wanted) {
  simdjson::dom::parser parser;
  simdjson::dom::object config;
  if (parser.parse(info_body)["config"].get_object().get(config) != simdjson::SUCCESS) {
    return absl::UnavailableError(absl::StrCat(what, ": the info answer has no config"));
  }
  std::vector<std::string> problems;
  for (const Wanted& w : wanted) {
    const std::string found = Setting(config, w.key);
    if (found != w.value) {
      problems.push_back(absl::StrCat(w.key, " is ", found.empty() ? "unset" : found,
                                      ", hookrelay needs ", w.value, " (", w.why, ")"));
    }
  }
  return problems;
}

absl::Status Check(const std::string& what, const std::string& info_body,
                   const std::vector<Wanted>& wanted) {
  absl::StatusOr<std::vector<std::string>> problems = Differences(what, info_body, wanted);
  if (!problems.ok()) return problems.status();
  if (problems->empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, " exists with other settings: ", absl::StrJoin(*problems, "; "),
      ". Change it (nats stream/consumer edit) or remove it so hookrelay creates it."));
}

// When the stream's only differences from `wanted` are settings hookrelay adjusts, changes them
// (STREAM.UPDATE with the stream's own config plus those settings) and answers the update's
// info; otherwise "" (Check then reports the differences).
absl::StatusOr<std::string> Adjust(natsConnection* nc, const JetStreamLayout& layout,
                                   const std::string& what, const std::string& name,
                                   const std::string& info_body,
                                   const std::vector<Wanted>& wanted) {
  simdjson::dom::parser parser;
  simdjson::dom::object config;
  if (parser.parse(info_body)["config"].get_object().get(config) != simdjson::SUCCESS) return "";
  std::vector<const Wanted*> changes;
  for (const Wanted& w : wanted) {
    if (Setting(config, w.key) == w.value) continue;
    if (!w.adjust) return "";
    changes.push_back(&w);
  }
  if (changes.empty()) return "";
  // A key repeated at the end wins (the server's JSON decoding keeps the last).
  std::string body = simdjson::minify(config);
  body.pop_back();
  std::vector<std::string> names;
  for (const Wanted* w : changes) {
    absl::StrAppend(&body, ",\"", w->key, "\":", w->value);
    names.push_back(absl::StrCat(w->key, " to ", w->value, " (", w->why, ")"));
  }
  body.push_back('}');
  absl::StatusOr<JetStreamApiReply> reply = JetStreamApi(
      nc, absl::StrCat("$JS.API.STREAM.UPDATE.", name), body, layout.request_timeout);
  if (!reply.ok()) return reply.status();
  if (reply->error_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": changing ", absl::StrJoin(names, ", "), " was refused (",
                     reply->error, "); change it by hand (nats stream edit) or remove the "
                     "stream; hookrelay needs nats-server ", kMinNatsServerVersion, " or later"));
  }
  common::LogInfo("changed settings of an existing JetStream stream",
                  {{"stream", name}, {"settings", absl::StrJoin(names, ", ")}});
  return reply->body;
}

absl::Status EnsureStream(natsConnection* nc, const JetStreamLayout& layout,
                          const std::string& name, const std::string& config,
                          const std::vector<Wanted>& wanted) {
  absl::StatusOr<JetStreamApiReply> info =
      JetStreamApi(nc, absl::StrCat("$JS.API.STREAM.INFO.", name), "", layout.request_timeout);
  if (!info.ok()) return info.status();
  const std::string what = absl::StrCat("JetStream stream ", name);
  if (info->error_code == 0) {
    absl::StatusOr<std::string> updated = Adjust(nc, layout, what, name, info->body, wanted);
    if (!updated.ok()) return updated.status();
    return Check(what, updated->empty() ? info->body : *updated, wanted);
  }
  if (info->error_code != kStreamNotFound) {
    return absl::UnavailableError(absl::StrCat(what, ": ", info->error));
  }
  absl::StatusOr<JetStreamApiReply> created =
      JetStreamApi(nc, absl::StrCat("$JS.API.STREAM.CREATE.", name), config, layout.request_timeout);
  if (!created.ok()) return created.status();
  if (created->error_code != 0) {
    return absl::UnavailableError(absl::StrCat("creating ", what, ": ", created->error));
  }
  // A server older than hookrelay needs ignores settings it does not know (message schedules,
  // direct gets) and creates the stream without them: say so rather than run without retries.
  absl::StatusOr<std::vector<std::string>> problems = Differences(what, created->body, wanted);
  if (!problems.ok()) return problems.status();
  if (!problems->empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " was created without settings this server does not know (",
        absl::StrJoin(*problems, "; "), "): hookrelay needs nats-server ", kMinNatsServerVersion,
        " or later. Remove the stream after upgrading the server."));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JetStreamApiReply> JetStreamApi(natsConnection* nc, const std::string& subject,
                                 const std::string& body, absl::Duration timeout) {
  natsMsg* reply = nullptr;
  const natsStatus s = natsConnection_RequestString(&reply, nc, subject.c_str(), body.c_str(),
                                                    absl::ToInt64Milliseconds(timeout));
  if (s != NATS_OK) {
    return absl::UnavailableError(absl::StrCat("JetStream API ", subject, ": ",
                                               natsStatus_GetText(s)));
  }
  JetStreamApiReply out;
  out.body.assign(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
  natsMsg_Destroy(reply);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(out.body).get(doc) != simdjson::SUCCESS) {
    return absl::UnavailableError(absl::StrCat("JetStream API ", subject, ": unreadable answer"));
  }
  simdjson::dom::object error;
  if (doc["error"].get_object().get(error) == simdjson::SUCCESS) {
    int64_t code = 0;
    if (error["err_code"].get_int64().get(code) != simdjson::SUCCESS) code = -1;
    out.error_code = code;
    std::string_view description;
    if (error["description"].get_string().get(description) != simdjson::SUCCESS) {
      description = "(no description)";
    }
    out.error = std::string(description);
  }
  return out;
}

namespace {

// STREAM.MSG.GET with `request`, retried while nothing answers (JetStreamNextMessage).
absl::StatusOr<std::optional<JetStreamMessage>> GetMessage(natsConnection* nc, const char* stream,
                                                           const std::string& request,
                                                           absl::Duration timeout,
                                                           absl::Duration retry_for) {
  const std::string api = absl::StrCat("$JS.API.STREAM.MSG.GET.", stream);
  const absl::Time give_up = absl::Now() + retry_for;
  absl::StatusOr<JetStreamApiReply> reply = JetStreamApi(nc, api, request, timeout);
  while (!reply.ok() && absl::IsUnavailable(reply.status()) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(200));  // Passing: a leader election, a node rejoining.
    reply = JetStreamApi(nc, api, request, timeout);
  }
  if (!reply.ok()) return reply.status();
  constexpr int64_t kNoMessageFound = 10037;
  if (reply->error_code == kNoMessageFound) return std::optional<JetStreamMessage>();
  if (reply->error_code != 0) {
    return absl::UnavailableError(absl::StrCat("JetStream: reading ", stream, ": ", reply->error));
  }
  simdjson::dom::parser parser;
  simdjson::dom::object message;
  JetStreamMessage out;
  std::string_view data64;
  if (parser.parse(reply->body)["message"].get_object().get(message) != simdjson::SUCCESS ||
      message["seq"].get_uint64().get(out.seq) != simdjson::SUCCESS) {
    return absl::DataLossError(absl::StrCat("JetStream: an unreadable answer reading ", stream));
  }
  if (message["data"].get_string().get(data64) != simdjson::SUCCESS) data64 = "";
  if (!absl::Base64Unescape(absl::string_view(data64.data(), data64.size()), &out.data)) {
    return absl::DataLossError(
        absl::StrCat("JetStream: message ", out.seq, " of ", stream, " is unreadable"));
  }
  return std::optional<JetStreamMessage>(std::move(out));
}

}  // namespace

absl::StatusOr<std::optional<JetStreamMessage>> JetStreamNextMessage(natsConnection* nc,
                                                                    const char* stream,
                                                                    uint64_t seq,
                                                                    std::string_view subject,
                                                                    absl::Duration timeout,
                                                                    absl::Duration retry_for) {
  return GetMessage(nc, stream,
                    absl::StrCat(R"({"seq":)", seq, R"(,"next_by_subj":")",
                                 absl::string_view(subject.data(), subject.size()), R"("})"),
                    timeout, retry_for);
}

namespace {

// A direct get's answer: the message, none (a 404 status), or an error; `reply` is destroyed.
absl::StatusOr<std::optional<JetStreamMessage>> DirectAnswer(const char* stream, natsMsg* reply) {
  // A status header instead of a message: 404 when there is none; anything else (a replica
  // catching up, a request the server refused) is an answer to try again later.
  const char* status = nullptr;
  const char* sequence = nullptr;
  absl::StatusOr<std::optional<JetStreamMessage>> out;
  JetStreamMessage m;
  if (natsMsgHeader_Get(reply, "Status", &status) == NATS_OK && status != nullptr) {
    if (strcmp(status, "404") == 0) {
      out = std::optional<JetStreamMessage>();
    } else {
      out = absl::UnavailableError(
          absl::StrCat("JetStream: reading ", stream, " directly: status ", status));
    }
  } else if (natsMsgHeader_Get(reply, "Nats-Sequence", &sequence) != NATS_OK ||
             sequence == nullptr || !absl::SimpleAtoi(sequence, &m.seq)) {
    out = absl::DataLossError(
        absl::StrCat("JetStream: a direct answer from ", stream, " without its sequence"));
  } else {
    m.data.assign(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
    out = std::optional<JetStreamMessage>(std::move(m));
  }
  natsMsg_Destroy(reply);
  return out;
}

std::string DirectNextBody(uint64_t seq, std::string_view subject) {
  return absl::StrCat(R"({"seq":)", seq, R"(,"next_by_subj":")",
                      absl::string_view(subject.data(), subject.size()), R"("})");
}

}  // namespace

absl::StatusOr<std::optional<JetStreamMessage>> JetStreamDirectNextMessage(
    natsConnection* nc, const char* stream, uint64_t seq, std::string_view subject,
    absl::Duration timeout) {
  const std::string api = absl::StrCat("$JS.API.DIRECT.GET.", stream);
  const std::string body = DirectNextBody(seq, subject);
  natsMsg* reply = nullptr;
  const natsStatus s =
      natsConnection_Request(&reply, nc, api.c_str(), body.data(), static_cast<int>(body.size()),
                             absl::ToInt64Milliseconds(timeout));
  if (s != NATS_OK) {
    return absl::UnavailableError(
        absl::StrCat("JetStream: reading ", stream, " directly: ", natsStatus_GetText(s)));
  }
  return DirectAnswer(stream, reply);
}

std::vector<absl::StatusOr<std::optional<JetStreamMessage>>> JetStreamDirectNextMessages(
    natsConnection* nc, const char* stream,
    const std::vector<std::pair<uint64_t, std::string>>& reads, absl::Duration timeout) {
  const absl::Status unanswered =
      absl::UnavailableError(absl::StrCat("JetStream: reading ", stream, " directly: no answer"));
  std::vector<absl::StatusOr<std::optional<JetStreamMessage>>> out(reads.size(), unanswered);
  if (reads.empty()) return out;
  const auto failed = [&](const char* what, natsStatus s) {
    for (auto& answer : out) {
      answer = absl::UnavailableError(absl::StrCat("JetStream: reading ", stream, " directly: ",
                                                   what, ": ", natsStatus_GetText(s)));
    }
    return out;
  };
  // Answers come to <inbox>.<read>, on a subscription of this call's own.
  char* inbox = nullptr;
  natsStatus s = natsInbox_Create(&inbox);
  if (s != NATS_OK) return failed("an inbox", s);
  const std::string prefix = inbox;
  natsInbox_Destroy(inbox);
  natsSubscription* sub = nullptr;
  s = natsConnection_SubscribeSync(&sub, nc, absl::StrCat(prefix, ".*").c_str());
  if (s != NATS_OK) return failed("subscribing to the answers", s);
  natsSubscription_SetPendingLimits(sub, -1, -1);
  const std::string api = absl::StrCat("$JS.API.DIRECT.GET.", stream);
  std::vector<bool> answered(reads.size(), false);
  size_t open = 0;
  for (size_t i = 0; i < reads.size(); ++i) {
    const std::string body = DirectNextBody(reads[i].first, reads[i].second);
    s = natsConnection_PublishRequest(nc, api.c_str(), absl::StrCat(prefix, ".", i).c_str(),
                                      body.data(), static_cast<int>(body.size()));
    if (s != NATS_OK) {
      out[i] = absl::UnavailableError(absl::StrCat("JetStream: reading ", stream,
                                                    " directly: ", natsStatus_GetText(s)));
      answered[i] = true;
      continue;
    }
    ++open;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (open > 0) {
    natsMsg* reply = nullptr;
    const int64_t wait_ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (natsSubscription_NextMsg(&reply, sub, wait_ms) != NATS_OK) break;  // The rest: no answer.
    const char* subject = natsMsg_GetSubject(reply);
    const char* dot = subject == nullptr ? nullptr : strrchr(subject, '.');
    size_t i = 0;
    if (dot == nullptr || !absl::SimpleAtoi(dot + 1, &i) || i >= reads.size() || answered[i]) {
      natsMsg_Destroy(reply);
      continue;
    }
    answered[i] = true;
    --open;
    out[i] = DirectAnswer(stream, reply);
  }
  natsSubscription_Unsubscribe(sub);
  natsSubscription_Destroy(sub);
  return out;
}

absl::StatusOr<std::optional<JetStreamMessage>> JetStreamLastMessage(natsConnection* nc,
                                                                    const char* stream,
                                                                    std::string_view subject,
                                                                    absl::Duration timeout,
                                                                    absl::Duration retry_for) {
  return GetMessage(nc, stream,
                    absl::StrCat(R"({"last_by_subj":")",
                                 absl::string_view(subject.data(), subject.size()), R"("})"),
                    timeout, retry_for);
}


namespace internal {

std::string JobsStreamConfig(const JetStreamLayout& layout) {
  return absl::StrCat(R"({"name":")", kJobsStream, R"(","subjects":[")", kReadySubjects, R"(",")",
                      kScheduleSubjects,
                      R"("],"retention":"workqueue","storage":"file","num_replicas":)",
                      layout.replicas,
                      R"(,"allow_msg_schedules":true,"allow_rollup_hdrs":true,)"
                      R"("allow_atomic":true,"allow_direct":true,"duplicate_window":)",
                      absl::ToInt64Nanoseconds(layout.duplicate_window),
                      "}");
}

std::string DeadStreamConfig(const JetStreamLayout& layout) {
  return absl::StrCat(R"({"name":")", kDeadStream, R"(","subjects":[")", kDeadSubjects,
                      R"("],"retention":"limits","storage":"file","num_replicas":)",
                      layout.replicas, "}");
}

std::string DedupStreamConfig(const JetStreamLayout& layout) {
  return absl::StrCat(R"({"name":")", kDedupStream, R"(","subjects":[")", kDedupSubjects,
                      R"("],"retention":"limits","storage":"file","num_replicas":)",
                      layout.DedupReplicas(), R"(,"max_age":)",
                      absl::ToInt64Nanoseconds(layout.dedup_window),
                      R"(,"max_msgs_per_subject":1,"allow_direct":true,"discard":"old"})");
}

namespace {
// A limits stream of user data: `extra` settings appended.
std::string UserDataConfig(const JetStreamLayout& layout, const char* name, const char* subjects,
                           const std::string& extra) {
  return absl::StrCat(R"({"name":")", name, R"(","subjects":[")", subjects,
                      R"("],"retention":"limits","storage":"file","num_replicas":)",
                      layout.replicas, R"(,"discard":"old")", extra, "}");
}
}  // namespace

std::string UsersStreamConfig(const JetStreamLayout& layout) {
  return UserDataConfig(layout, kUsersStream, kUsersSubjects, R"(,"max_msgs_per_subject":1)");
}

std::string ProfilesStreamConfig(const JetStreamLayout& layout) {
  return UserDataConfig(layout, kProfilesStream, kProfilesSubjects,
                        R"(,"allow_direct":true,"allow_rollup_hdrs":true,"duplicate_window":)" +
                            absl::StrCat(absl::ToInt64Nanoseconds(layout.duplicate_window)));
}

std::string DeletionsStreamConfig(const JetStreamLayout& layout) {
  return UserDataConfig(layout, kDeletionsStream, kDeletionsSubjects,
                        R"(,"max_msgs_per_subject":1)");
}

std::string AudiencesStreamConfig(const JetStreamLayout& layout) {
  return UserDataConfig(layout, kAudiencesStream, kAudiencesSubjects,
                        R"(,"max_msgs_per_subject":1,"duplicate_window":)" +
                            absl::StrCat(absl::ToInt64Nanoseconds(layout.duplicate_window)));
}

std::string DispatchConsumerConfig(const JetStreamLayout& layout) {
  return absl::StrCat(R"({"stream_name":")", kJobsStream, R"(","config":{"durable_name":")",
                      kDispatchConsumer, R"(","filter_subject":")", kLegacyReadySubjects,
                      R"(","ack_policy":"explicit","ack_wait":)",
                      absl::ToInt64Nanoseconds(layout.ack_wait),
                      R"(,"max_deliver":-1,"max_ack_pending":)", layout.max_ack_pending,
                      "}}");
}

std::string DestinationConsumerConfig(const JetStreamLayout& layout,
                                      std::string_view destination_id) {
  return absl::StrCat(R"({"stream_name":")", kJobsStream, R"(","config":{"durable_name":")",
                      DestinationConsumerName(destination_id), R"(","filter_subject":")",
                      DestinationReadyFilter(destination_id),
                      R"(","ack_policy":"explicit","ack_wait":)",
                      absl::ToInt64Nanoseconds(layout.ack_wait),
                      R"(,"max_deliver":-1,"max_ack_pending":)", layout.max_ack_pending,
                      "}}");
}

}  // namespace internal

std::string DestinationConsumerName(std::string_view destination_id) {
  return absl::StrCat(kDestinationConsumerPrefix, JetStreamToken(destination_id));
}

std::string DestinationReadyFilter(std::string_view destination_id) {
  // Exactly <S>.<U> after it: "hr.jobs.ready.<D>.>" would overlap the dispatch consumer's
  // hr.jobs.ready.*.* (on hr.jobs.ready.<D>.<x>), which a work-queue stream refuses.
  return absl::StrCat("hr.jobs.ready.", JetStreamToken(destination_id), ".*.*");
}

std::optional<std::string> DestinationOfConsumer(std::string_view name) {
  const std::string_view prefix = kDestinationConsumerPrefix;
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  return Untok(name.substr(prefix.size()));
}

absl::Status EnsureDestinationConsumer(natsConnection* nc, const JetStreamLayout& layout,
                                       std::string_view destination_id) {
  const std::string name = DestinationConsumerName(destination_id);
  absl::StatusOr<JetStreamApiReply> created = JetStreamApi(
      nc, absl::StrCat("$JS.API.CONSUMER.CREATE.", kJobsStream, ".", name),
      internal::DestinationConsumerConfig(layout, destination_id), layout.request_timeout);
  if (!created.ok()) return created.status();
  if (created->error_code != 0) {
    return absl::UnavailableError(absl::StrCat("creating JetStream consumer ", kJobsStream, "/",
                                               name, ": ", created->error));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> JetStreamConsumerNames(natsConnection* nc,
                                                               const char* stream,
                                                               absl::Duration timeout) {
  std::vector<std::string> names;
  simdjson::dom::parser parser;
  for (;;) {
    absl::StatusOr<JetStreamApiReply> reply =
        JetStreamApi(nc, absl::StrCat("$JS.API.CONSUMER.NAMES.", stream),
                     absl::StrCat(R"({"offset":)", names.size(), "}"), timeout);
    if (!reply.ok()) return reply.status();
    if (reply->error_code != 0) {
      return absl::UnavailableError(
          absl::StrCat("listing the consumers of ", stream, ": ", reply->error));
    }
    simdjson::dom::element doc;
    if (parser.parse(reply->body).get(doc) != simdjson::SUCCESS) {
      return absl::UnavailableError(absl::StrCat("listing the consumers of ", stream,
                                                 ": the answer is not JSON"));
    }
    int64_t total = 0;
    if (doc["total"].get_int64().get(total) != simdjson::SUCCESS) total = 0;
    simdjson::dom::array page;
    size_t added = 0;
    if (doc["consumers"].get_array().get(page) == simdjson::SUCCESS) {
      for (simdjson::dom::element e : page) {
        std::string_view name;
        if (e.get_string().get(name) == simdjson::SUCCESS) {
          names.emplace_back(name);
          ++added;
        }
      }
    }
    if (added == 0 || static_cast<int64_t>(names.size()) >= total) return names;
  }
}

absl::Status EnsureDedupStream(natsConnection* nc, const JetStreamLayout& layout) {
  // The markers' replication follows --nats_dedup_replicas: a stream an earlier release made
  // with the jobs' replication (its default then) is scaled, not refused.
  return EnsureStream(nc, layout, kDedupStream, internal::DedupStreamConfig(layout),
                      {{"subjects", kDedupSubjects, "one marker per accepted event"},
                       {"num_replicas", absl::StrCat(layout.DedupReplicas()),
                        "--nats_dedup_replicas", true},
                       {"max_age", absl::StrCat(absl::ToInt64Nanoseconds(layout.dedup_window)),
                        "--dedup_window"},
                       {"max_msgs_per_subject", "1", "one marker per event"},
                       {"allow_direct", "true", "batched marker lookups"}});
}

absl::Status EnsureJobAndUserLayout(natsConnection* nc, const JetStreamLayout& layout) {
  if (layout.replicas != 1 && layout.replicas != 3 && layout.replicas != 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nats_replicas is ", layout.replicas, "; use 1, 3 or 5"));
  }
  if (layout.dedup_replicas != 0 && layout.dedup_replicas != 1 && layout.dedup_replicas != 3 &&
      layout.dedup_replicas != 5) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nats_dedup_replicas is ", layout.dedup_replicas, "; use 0 (as --nats_replicas), 1, 3 or 5"));
  }
  if (layout.ack_wait < absl::Seconds(1)) {
    return absl::InvalidArgumentError("the JetStream lease (ack wait) must be at least 1s");
  }
  const std::string replicas = absl::StrCat(layout.replicas);
  absl::Status st = EnsureStream(
      nc, layout, kJobsStream, internal::JobsStreamConfig(layout),
      {{"subjects", absl::StrCat(kReadySubjects, ",", kScheduleSubjects), "jobs and retries"},
       {"retention", "workqueue", "each job is taken once"},
       {"storage", "file", "acknowledged events survive restarts"},
       {"num_replicas", replicas, "--nats_replicas"},
       {"allow_msg_schedules", "true", "retries are message schedules"},
       {"allow_atomic", "true", "a deletion's notifications are stored with their marker at once",
        true},
       {"allow_direct", "true", "per-user order checks answered by any replica", true}});
  if (!st.ok()) return st;
  st = EnsureStream(nc, layout, kDeadStream, internal::DeadStreamConfig(layout),
                    {{"subjects", kDeadSubjects, "dead letters by destination"},
                     {"storage", "file", "dead letters survive restarts"},
                     {"num_replicas", replicas, "--nats_replicas"}});
  if (!st.ok()) return st;
  st = EnsureStream(nc, layout, kUsersStream, internal::UsersStreamConfig(layout),
                    {{"subjects", kUsersSubjects, "the sources each user was seen in"},
                     {"storage", "file", "the index survives restarts"},
                     {"num_replicas", replicas, "--nats_replicas"},
                     {"max_msgs_per_subject", "1", "one entry per user and source"}});
  if (!st.ok()) return st;
  st = EnsureStream(nc, layout, kProfilesStream, internal::ProfilesStreamConfig(layout),
                    {{"subjects", kProfilesSubjects, "profile deltas by source and user"},
                     {"storage", "file", "profiles survive restarts"},
                     {"num_replicas", replicas, "--nats_replicas"},
                     {"max_msgs_per_subject", "-1", "every delta of a profile is kept"},
                     {"max_age", "0", "profiles are kept until deleted"},
                     {"allow_direct", "true", "batched profile reads"},
                     {"allow_rollup_hdrs", "true", "profiles are rolled up"}});
  if (!st.ok()) return st;
  st = EnsureStream(nc, layout, kDeletionsStream, internal::DeletionsStreamConfig(layout),
                    {{"subjects", kDeletionsSubjects, "deletion records and request ids"},
                     {"storage", "file", "deletion records survive restarts"},
                     {"num_replicas", replicas, "--nats_replicas"},
                     {"max_msgs_per_subject", "1", "one record per deletion"},
                     {"max_age", "0", "deletion records are kept"}});
  if (!st.ok()) return st;
  st = EnsureStream(nc, layout, kAudiencesStream, internal::AudiencesStreamConfig(layout),
                    {{"subjects", kAudiencesSubjects, "audience states and memberships"},
                     {"storage", "file", "memberships sent survive restarts"},
                     {"num_replicas", replicas, "--nats_replicas"},
                     {"max_msgs_per_subject", "1", "one value per key"},
                     {"max_age", "0", "memberships are kept"}});
  if (!st.ok()) return st;

  const std::string what = absl::StrCat("JetStream consumer ", kJobsStream, "/", kDispatchConsumer);
  absl::StatusOr<JetStreamApiReply> info = JetStreamApi(
      nc, absl::StrCat("$JS.API.CONSUMER.INFO.", kJobsStream, ".", kDispatchConsumer), "",
      layout.request_timeout);
  if (!info.ok()) return info.status();
  simdjson::dom::parser parser;
  simdjson::dom::object config;
  if (info->error_code == 0 &&
      parser.parse(info->body)["config"].get_object().get(config) == simdjson::SUCCESS &&
      Setting(config, "filter_subject") == kReadySubjects) {
    // The layout before per-destination consumers: narrowed to the jobs published in it (a
    // work-queue stream refuses consumers that overlap). Its other settings stay as they are.
    std::string narrowed = simdjson::minify(config);
    const std::string from = absl::StrCat(R"("filter_subject":")", kReadySubjects, "\"");
    const size_t at = narrowed.find(from);
    if (at == std::string::npos) {
      return absl::UnavailableError(absl::StrCat(what, ": cannot read its filter subject"));
    }
    narrowed.replace(at, from.size(),
                     absl::StrCat(R"("filter_subject":")", kLegacyReadySubjects, "\""));
    absl::StatusOr<JetStreamApiReply> updated = JetStreamApi(
        nc, absl::StrCat("$JS.API.CONSUMER.CREATE.", kJobsStream, ".", kDispatchConsumer),
        absl::StrCat(R"({"stream_name":")", kJobsStream, R"(","config":)", narrowed, "}"),
        layout.request_timeout);
    if (!updated.ok()) return updated.status();
    if (updated->error_code != 0) {
      return absl::UnavailableError(
          absl::StrCat("narrowing ", what, " to ", kLegacyReadySubjects, ": ", updated->error));
    }
    info = JetStreamApi(
        nc, absl::StrCat("$JS.API.CONSUMER.INFO.", kJobsStream, ".", kDispatchConsumer), "",
        layout.request_timeout);
    if (!info.ok()) return info.status();
  }
  if (info->error_code == 0) {
    return Check(what, info->body,
                 {{"filter_subject", kLegacyReadySubjects,
                   "it dispatches the jobs stored before per-destination consumers"},
                  {"ack_policy", "explicit", "each job is settled"},
                  {"ack_wait", absl::StrCat(absl::ToInt64Nanoseconds(layout.ack_wait)), "the lease"},
                  {"max_deliver", "-1", "retries are hookrelay's"}});
  }
  if (info->error_code != kConsumerNotFound) {
    return absl::UnavailableError(absl::StrCat(what, ": ", info->error));
  }
  absl::StatusOr<JetStreamApiReply> created = JetStreamApi(
      nc, absl::StrCat("$JS.API.CONSUMER.CREATE.", kJobsStream, ".", kDispatchConsumer),
      internal::DispatchConsumerConfig(layout), layout.request_timeout);
  if (!created.ok()) return created.status();
  if (created->error_code != 0) {
    return absl::UnavailableError(absl::StrCat("creating ", what, ": ", created->error));
  }
  return absl::OkStatus();
}

absl::Status EnsureJetStreamLayout(natsConnection* nc, const JetStreamLayout& layout) {
  if (absl::Status st = EnsureJobAndUserLayout(nc, layout); !st.ok()) return st;
  return EnsureDedupStream(nc, layout);
}

}  // namespace hookrelay::collector
