#include "tools/hookrelayctl/cli_internal.h"

#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/audience_rule_json.h"
#include "common/json_element.h"
#include "common/json_writer.h"
#include "common/proto_time.h"
#include "common/redact.h"
#include "common/secret_file.h"
#include "common/strings.h"
#include "common/time_format.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "hookrelay/v1/admin.pb.h"
#include "hookrelay/v1/config.pb.h"
#include "hookrelay/v1/job.pb.h"
#include "tools/hookrelayctl/admin_client.h"

// audiences, and the gRPC health check.
namespace hookrelay::hookrelayctl::internal {

using ::hookrelay::v1::Job;

// --- audiences (SPEC §6.2) ---------------------------------------------------------------------

constexpr std::string_view kAudienceCreateFlags[] = {"name", "source", "rule", "rule-file", "id",
                                                     "sync-interval"};
// A rule is a few conditions; a file larger than this is not one.
constexpr size_t kMaxRuleFileBytes = 1 << 20;
constexpr char kRuleShape[] = R"({"match":"all"|"any","conditions":[…]})";

// The whole of `path`, or why not.
absl::StatusOr<std::string> ReadRuleFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(std::strerror(errno));
  std::string content;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    content.append(buf, n);
    if (content.size() > kMaxRuleFileBytes) {
      std::fclose(f);
      return absl::InvalidArgumentError(
          absl::StrCat("larger than ", kMaxRuleFileBytes, " bytes; a rule is a few conditions"));
    }
  }
  const bool failed = std::ferror(f) != 0;
  const int error = errno;
  std::fclose(f);
  if (failed) return absl::DataLossError(std::strerror(error));
  return content;
}

// The rule from --rule or --rule-file: JSON, and an AudienceRule's shape (field names and value
// types); what the values mean (ops, windows) is the collector's to judge, field by field.
std::optional<UsageError> RuleFlag(const CommandLine& cl, hookrelay::v1::AudienceRule* rule) {
  const bool inline_rule = cl.Has("rule");
  if (inline_rule && cl.Has("rule-file")) {
    return UsageError{"--rule and --rule-file exclude each other; give the rule once"};
  }
  if (!inline_rule && !cl.Has("rule-file")) {
    return UsageError{absl::StrCat("audiences create needs --rule=JSON or --rule-file=FILE, ",
                                   "the rule as ", kRuleShape)};
  }
  std::string what = "--rule";
  std::string json = cl.Get("rule");
  if (!inline_rule) {
    const std::string path = cl.Get("rule-file");
    if (path.empty()) return UsageError{"--rule-file needs a file name"};
    what = absl::StrCat("--rule-file ", path);
    absl::StatusOr<std::string> content = ReadRuleFile(path);
    if (!content.ok()) {
      return UsageError{absl::StrCat("--rule-file: cannot read \"", path, "\": ",
                                     content.status().message())};
    }
    json = *std::move(content);
  }
  if (absl::StripAsciiWhitespace(json).empty()) {
    return UsageError{absl::StrCat(what, ": empty; the rule is JSON such as ", kRuleShape)};
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (const auto error = parser.parse(json).get(doc); error != simdjson::SUCCESS) {
    return UsageError{absl::StrCat(what, ": not JSON (", simdjson::error_message(error),
                                   "); the rule is JSON such as ", kRuleShape)};
  }
  if (!doc.is_object()) {
    return UsageError{absl::StrCat(what, ": not a JSON object; the rule is ", kRuleShape)};
  }
  // The shorthand {"all":[...]} / {"any":[...]} (the YAML file's older spelling) is the same rule.
  absl::StatusOr<std::string> canonical = common::CanonicalRuleJson(json, what);
  if (!canonical.ok()) {
    return UsageError{absl::StrCat(canonical.status().message(), "; the rule is ", kRuleShape)};
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // a misspelt "countGte" must not vanish
  const auto st = google::protobuf::util::JsonStringToMessage(*canonical, rule, options);
  if (!st.ok()) {
    return UsageError{absl::StrCat(what, ": not an audience rule ", kRuleShape, ": ",
                                   std::string(st.message()))};
  }
  return std::nullopt;
}

// A JSON value as compact text ("pro", 3, true).
std::string ValueText(const google::protobuf::Value& v) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out;
}

// One condition for people: `trait plan eq "pro"`, `event "Order Completed" count >= 3 within
// 30d`; anything else as its JSON.
std::string ConditionText(const hookrelay::v1::AudienceCondition& c) {
  if (!c.trait().empty()) {
    std::string out = absl::StrCat("trait ", c.trait(), " ", c.op().empty() ? "?" : c.op());
    if (c.has_value()) absl::StrAppend(&out, " ", ValueText(c.value()));
    return out;
  }
  if (!c.event().empty()) {
    std::string event;
    common::AppendJsonString(&event, c.event());
    std::string out = absl::StrCat("event ", event, " count");
    if (c.has_count_gte()) absl::StrAppend(&out, " >= ", c.count_gte());
    if (c.has_count_gte() && c.has_count_lte()) absl::StrAppend(&out, " and");
    if (c.has_count_lte()) absl::StrAppend(&out, " <= ", c.count_lte());
    if (!c.within().empty()) absl::StrAppend(&out, " within ", c.within());
    return out;
  }
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(c, &out);
  return out;
}

std::string RuleText(const hookrelay::v1::AudienceRule& rule) {
  std::vector<std::string> conditions;
  for (const auto& c : rule.conditions()) conditions.push_back(ConditionText(c));
  return absl::StrCat(rule.match().empty() ? "all" : rule.match(), " of: ",
                      conditions.empty() ? "(no condition)" : absl::StrJoin(conditions, "; "));
}

std::string SyncTime(const hookrelay::v1::AudienceResource& a) {
  if (!a.has_last_sync() || !a.last_sync().has_time()) return "-";
  const std::optional<absl::Time> t = common::FromProtoTime(a.last_sync().time());
  return t.has_value() ? common::FormatIso8601Millis(*t) : "-";
}

std::vector<std::string> AudienceRow(const hookrelay::v1::AudienceResource& a) {
  const bool synced = a.has_last_sync();
  return {a.id(),
          Cell(a.name()),
          Cell(a.trait()),
          Cell(absl::StrJoin(a.sources(), ",")),
          absl::StrCat(a.members()),
          SyncTime(a),
          synced ? absl::StrCat(a.last_sync().entered()) : "-",
          synced ? absl::StrCat(a.last_sync().exited()) : "-"};
}

void PrintAudience(Context& ctx, const hookrelay::v1::AudienceResource& a) {
  if (ctx.json) {
    *ctx.out << ToJson(a) << "\n";
    return;
  }
  const bool synced = a.has_last_sync();
  const auto& s = a.last_sync();
  PrintKeyValues(
      *ctx.out,
      {{"id", a.id()},
       {"name", a.name()},
       {"trait", a.trait()},
       {"sources", absl::StrJoin(a.sources(), ", ")},
       {"rule", RuleText(a.rule())},
       {"sync interval",
        absl::StrCat(a.sync_interval_seconds() == 0 ? 60 : a.sync_interval_seconds(), " s")},
       {"managed by", a.managed_by()},
       {"members", absl::StrCat(a.members())},
       {"last sync", synced ? absl::StrCat(SyncTime(a), s.first() ? " (first computation)" : "")
                            : "never"},
       {"evaluated", synced ? absl::StrCat(s.evaluated()) : ""},
       {"entered", synced ? absl::StrCat(s.entered()) : ""},
       {"exited", synced ? absl::StrCat(s.exited()) : ""},
       {"sync took", synced ? absl::StrCat(s.duration_ms(), " ms") : ""}});
}

int Audiences(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage) {
  const auto& pos = cl.positional;
  if (pos.size() < 2) {
    *usage = UsageError{"audiences needs a command: list, get, create, delete or sync"};
    return kExitUsage;
  }
  const std::string& verb = pos[1];
  const std::string command = absl::StrCat("audiences ", verb);
  ApiError e;
  if (verb == "create") {
    if ((*usage = CheckScope(cl, command, kAudienceCreateFlags))) return kExitUsage;
    // Before the argument count: `audiences create "Power Users"` is a missing --name.
    if (!cl.Has("name") || cl.Get("name").empty()) {
      *usage = UsageError{"audiences create needs --name=NAME (its trait is snake_case(NAME))"};
      return kExitUsage;
    }
    if ((*usage = Positional(cl, 2, 0, command))) return kExitUsage;
    hookrelay::v1::AudienceResource in;
    in.set_name(cl.Get("name"));
    for (const std::string& source : cl.All("source")) {
      if (source.empty()) {
        *usage = UsageError{"--source needs a source id"};
        return kExitUsage;
      }
      in.add_sources(source);
    }
    if (in.sources().empty()) {
      *usage = UsageError{"audiences create needs --source=ID (the sources whose users it reads; "
                          "repeat the flag for several)"};
      return kExitUsage;
    }
    if ((*usage = RuleFlag(cl, in.mutable_rule()))) return kExitUsage;
    if (cl.Has("id")) {
      if (cl.Get("id").empty()) {
        *usage = UsageError{"--id needs a value (or leave the flag out for a generated one)"};
        return kExitUsage;
      }
      in.set_id(cl.Get("id"));
    }
    if (cl.Has("sync-interval")) {
      uint32_t seconds = 0;
      if (!absl::SimpleAtoi(cl.Get("sync-interval"), &seconds) || seconds == 0) {
        *usage = UsageError{absl::StrCat("--sync-interval: \"", cl.Get("sync-interval"),
                                         "\" is not a number of seconds >= 1 (leave the flag "
                                         "out for the default, 60)")};
        return kExitUsage;
      }
      in.set_sync_interval_seconds(seconds);
    }
    hookrelay::v1::AudienceResource a;
    if (!ctx.client->Call("POST", "/admin/v1/audiences", &in, &a, &e)) {
      return Failed(ctx, "creating the audience", e);
    }
    PrintAudience(ctx, a);
    return kExitOk;
  }
  if (verb == "list") {
    if ((*usage = CheckScope(cl, command, {}))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 0, command))) return kExitUsage;
    std::vector<std::vector<std::string>> rows = {
        {"ID", "NAME", "TRAIT", "SOURCES", "MEMBERS", "LAST SYNC", "ENTERED", "EXITED"}};
    std::string token;
    do {
      hookrelay::v1::ListAudiencesResponse page;
      const std::string path = absl::StrCat("/admin/v1/audiences?page_size=1000",
                                            token.empty() ? "" : "&page_token=", UrlEncode(token));
      if (!ctx.client->Call("GET", path, nullptr, &page, &e)) {
        ctx.out->flush();  // JSON lines of earlier pages stay printed.
        return Failed(ctx, "listing audiences", e);
      }
      for (const auto& a : page.audiences()) {
        if (ctx.json) {
          *ctx.out << ToJson(a) << "\n";
        } else {
          rows.push_back(AudienceRow(a));
        }
      }
      // A page without audiences but with a token would loop for ever.
      token = page.audiences().empty() ? "" : page.next_page_token();
    } while (!token.empty());
    if (!ctx.json) {
      if (rows.size() == 1) {
        *ctx.err << "no audiences\n";
      } else {
        PrintTable(*ctx.out, rows);
      }
    }
    return kExitOk;
  }
  if (verb == "get" || verb == "delete" || verb == "sync") {
    if ((*usage = CheckScope(cl, command, {}))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 1, command))) return kExitUsage;
    if (pos[2].empty()) {
      *usage = UsageError{absl::StrCat(command, " needs an audience id")};
      return kExitUsage;
    }
    const std::string path = absl::StrCat("/admin/v1/audiences/", UrlEncode(pos[2]));
    if (verb == "delete") {
      hookrelay::v1::DeleteResponse r;
      if (!ctx.client->Call("DELETE", path, nullptr, &r, &e)) {
        return Failed(ctx, absl::StrCat("deleting audience ", pos[2]), e);
      }
      if (ctx.json) {
        *ctx.out << ToJson(r) << "\n";
      } else {
        *ctx.out << "deleted audience " << pos[2] << " (no identify call is sent)\n";
      }
      return kExitOk;
    }
    hookrelay::v1::AudienceResource a;
    if (verb == "sync") {
      if (!ctx.client->Call("POST", absl::StrCat(path, ":sync"), nullptr, &a, &e, "{}")) {
        return Failed(ctx, absl::StrCat("syncing audience ", pos[2]), e);
      }
    } else if (!ctx.client->Call("GET", path, nullptr, &a, &e)) {
      return Failed(ctx, absl::StrCat("reading audience ", pos[2]), e);
    }
    PrintAudience(ctx, a);
    return kExitOk;
  }
  *usage = UsageError{absl::StrCat("unknown command \"", command, "\"")};
  return kExitUsage;
}

// --- health (gRPC) -----------------------------------------------------------------------------

constexpr std::string_view kHealthFlags[] = {"service", "collector"};

int Health(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage) {
  if ((*usage = CheckScope(cl, "health", kHealthFlags))) return kExitUsage;
  if ((*usage = Positional(cl, 1, 0, "health"))) return kExitUsage;
  const std::string collector = cl.Has("collector") ? cl.Get("collector") : "127.0.0.1:50051";
  if (collector.empty()) {
    *usage = UsageError{"--collector needs an address such as host:50051"};
    return kExitUsage;
  }
  absl::Duration timeout = absl::Seconds(15);
  if (cl.Has("timeout") &&
      (!absl::ParseDuration(cl.Get("timeout"), &timeout) || timeout <= absl::ZeroDuration())) {
    *usage = UsageError{absl::StrCat("--timeout: \"", cl.Get("timeout"),
                                     "\" is not a positive duration such as 10s or 1m")};
    return kExitUsage;
  }
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(collector, grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(cl.Get("service"));
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    *ctx.err << "hookrelayctl: checking the health of " << collector << ": "
             << absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()))
             << ": " << status.error_message() << "\n";
    return kExitFailure;
  }
  *ctx.out << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) << "\n";
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk
                                                                              : kExitFailure;
}

}  // namespace hookrelay::hookrelayctl::internal
