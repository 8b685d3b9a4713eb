#include "tools/hookrelayctl/cli.h"

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

namespace hookrelay::hookrelayctl {

const char kUsage[] =
    R"(hookrelayctl: set up and operate a hookrelay collector through its admin API.

Usage: hookrelayctl [global flags] COMMAND [flags]

Commands:
  catalog                                  destination types and their limits
  sources list | get ID | delete ID
  sources create --kind=web|mobile|server [--id=ID] [--name=NAME]
  sources update ID [--name=NAME] [--kind=KIND]
  sources write-keys create SOURCE         prints the new write key
  sources write-keys revoke SOURCE KEY     ingest refuses the key from the next request on
  destinations list | get ID | delete ID
  destinations create --source=ID... --url=URL [--header="Name: value"]... [--url=...]...
                      [--id=ID] [--shared-secret-file=FILE] [--enabled] [--timeout-ms=N]
                      [--rate-limit-per-second=N] [--circuit-breaker-failures=N]
  destinations update ID [--source=ID...] [--url=URL [--header=...]...]...
                      [--shared-secret-file=FILE | --no-shared-secret] [--enabled=true|false]
                      [--timeout-ms=N] [--rate-limit-per-second=N] [--circuit-breaker-failures=N]
                      (the --*-ms / rate / breaker flags replace the whole options object)
  destinations enable ID | disable ID
  destinations test ID                     one sample event to this destination; each URL's answer
  dead-letters list [--destination=ID] [--from=TIME] [--to=TIME] [--limit=N]
  dead-letters replay (--all | --destination=ID [--from=TIME] [--to=TIME])
  deletions create --user=USER [--source=ID]... [--request-id=KEY]
                                           irreversible: sends a `delete` event to the sources'
                                           webhook destinations and purges the user's
                                           undelivered jobs and dead letters there
  deletions list [--limit=N]               newest first
  deletions get ID
  audiences list | get ID | delete ID
  audiences create --name=NAME --source=ID... (--rule=JSON | --rule-file=FILE)
                   [--id=ID] [--sync-interval=SECONDS]
                                           computes the membership at once and sends each
                                           member an identify (trait snake_case(NAME): true)
  audiences sync ID                        a sync now: identify calls for who entered or left
  health [--service=NAME]                  the collector's gRPC health (uses --collector)

  --url may be given up to 5 times; each --header belongs to the --url before it (up to 5 each).
  A destination's shared secret is read from a file (never from the command line).
  `update` sends only what is given: --url replaces every URL; --source replaces the sources.
  `deletions create` without --source affects every source the user was seen in. With a
  --request-id, repeating the call does nothing again and shows the first call's record.
  An audience rule is JSON, e.g. --rule='{"match":"all","conditions":[{"trait":"plan","op":"eq",
  "value":"pro"},{"event":"Order Completed","countGte":3,"within":"30d"}]}': match "all" or
  "any"; a trait condition has trait, op (eq neq gt gte lt lte exists contains) and value; an
  event condition has event, countGte and/or countLte, and within (15m, 1h, 30d). --rule-file=-
  reads it from standard input. --sync-interval defaults to 60 seconds.

Global flags:
  --admin-url=URL        the admin HTTP API (default $HOOKRELAY_ADMIN_URL, else
                         http://127.0.0.1:8081)
  --admin-token-file=F   a file holding the admin token (default $HOOKRELAY_ADMIN_TOKEN_FILE;
                         $HOOKRELAY_ADMIN_TOKEN is used when neither is set)
  -o, --output=FORMAT    table (default) or json (the API's JSON, one object per line)
  --timeout=DURATION     limit of each call, e.g. 500ms, 30s (default 15s)
  --collector=HOST:PORT  gRPC address, for health only (default 127.0.0.1:50051)

TIME is RFC 3339, e.g. 2026-05-01T12:00:00Z.
Exit status: 0 done, 1 the collector refused or could not be reached (its error, with the field
and the limit, is printed), 2 usage error.
)";

namespace {

using ::hookrelay::v1::Job;

constexpr int64_t kDefaultLimit = 100;
constexpr int64_t kMaxPageSize = 1000;

using FlagNames = std::span<const std::string_view>;

constexpr std::string_view kBoolFlags[] = {"help", "json", "all", "enabled", "no-shared-secret"};
constexpr std::string_view kValueFlags[] = {
    "admin-url", "admin-token-file", "output", "timeout", "collector", "token",
    "destination", "from", "to", "limit", "service", "id", "name", "kind", "source", "url",
    "header", "shared-secret-file", "timeout-ms", "rate-limit-per-second",
    "circuit-breaker-failures", "user", "request-id", "rule", "rule-file",
    "sync-interval"};
constexpr std::string_view kGlobalFlags[] = {"help", "admin-url", "admin-token-file", "output",
                                             "timeout", "token", "json"};
// Flags that may repeat; their order relative to each other is kept.
constexpr std::string_view kRepeatable[] = {"source", "url", "header"};

bool Contains(FlagNames names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

struct UsageError {
  std::string message;
};

struct CommandLine {
  std::vector<std::string> positional;
  std::map<std::string, std::string, std::less<>> flags;  // last value wins
  std::vector<std::pair<std::string, std::string>> ordered;  // repeatable flags, in order

  bool Has(std::string_view name) const { return flags.find(name) != flags.end(); }
  std::string Get(std::string_view name) const {
    auto it = flags.find(name);
    return it == flags.end() ? "" : it->second;
  }
  bool Bool(std::string_view name) const { return Get(name) == "true"; }
  std::vector<std::string> All(std::string_view name) const {
    std::vector<std::string> out;
    for (const auto& [n, v] : ordered) {
      if (n == name) out.push_back(v);
    }
    return out;
  }
};

std::optional<UsageError> Parse(const std::vector<std::string>& args, CommandLine* out) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out->positional.insert(out->positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      out->positional.push_back(arg);
      continue;
    }
    std::string_view body = std::string_view(arg).substr(arg[1] == '-' ? 2 : 1);
    std::optional<std::string> value;
    if (const size_t eq = body.find('='); eq != std::string_view::npos) {
      value = std::string(body.substr(eq + 1));
      body = body.substr(0, eq);
    }
    std::string name(body);
    if (name == "h") name = "help";
    if (name == "o") name = "output";
    if (Contains(kBoolFlags, name)) {
      if (!value.has_value()) {
        value = "true";
      } else if (*value != "true" && *value != "false") {
        return UsageError{absl::StrCat("--", name, " takes no value (or =true, =false), not \"",
                                       *value, "\"")};
      }
    } else if (Contains(kValueFlags, name)) {
      if (!value.has_value()) {
        if (i + 1 >= args.size()) return UsageError{absl::StrCat("--", name, " needs a value")};
        value = args[++i];
      }
    } else {
      return UsageError{absl::StrCat("unknown flag ", arg.substr(0, arg.find('=')))};
    }
    if (Contains(kRepeatable, name)) out->ordered.emplace_back(name, *value);
    out->flags[name] = *std::move(value);
  }
  if (out->Bool("json")) out->flags["output"] = "json";
  return std::nullopt;
}

std::optional<UsageError> CheckScope(const CommandLine& cl, std::string_view command,
                                     FlagNames allowed) {
  for (const auto& [name, value] : cl.flags) {
    if (!Contains(kGlobalFlags, name) && !Contains(allowed, name)) {
      return UsageError{absl::StrCat("--", name, " is not a flag of ", common::ToAbsl(command))};
    }
  }
  return std::nullopt;
}

std::optional<UsageError> Positional(const CommandLine& cl, size_t first, size_t count,
                                     std::string_view what) {
  if (cl.positional.size() < first + count) {
    return UsageError{absl::StrCat(common::ToAbsl(what), " needs ", count == 1 ? "an argument" :
                                                                              "more arguments")};
  }
  if (cl.positional.size() > first + count) {
    return UsageError{absl::StrCat("unexpected argument \"", cl.positional[first + count], "\"")};
  }
  return std::nullopt;
}


// Settings shared by every admin call.
struct Context {
  std::optional<AdminClient> client;
  bool json = false;
  std::ostream* out;
  std::ostream* err;
};

std::optional<UsageError> Connect(const CommandLine& cl, const Environment& env, Context* ctx) {
  const std::string output = cl.Has("output") ? cl.Get("output") : "table";
  if (output != "table" && output != "json") {
    return UsageError{absl::StrCat("-o/--output: \"", output, "\" is not table or json")};
  }
  ctx->json = output == "json";
  std::string url = cl.Has("admin-url") ? cl.Get("admin-url")
                    : !env.admin_url.empty() ? env.admin_url
                                             : "http://127.0.0.1:8081";
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (!absl::StartsWith(url, "http://") && !absl::StartsWith(url, "https://")) {
    return UsageError{absl::StrCat("--admin-url: \"", url, "\" is not an http:// or https:// URL")};
  }
  std::string token = env.admin_token;
  const std::string token_file =
      cl.Has("admin-token-file") ? cl.Get("admin-token-file") : env.admin_token_file;
  if (!token_file.empty()) {
    absl::StatusOr<std::string> t = common::ReadSecretFile(token_file);
    if (!t.ok()) return UsageError{absl::StrCat("--admin-token-file: ", t.status().message())};
    token = *std::move(t);
  }
  if (cl.Has("token")) token = cl.Get("token");
  absl::Duration timeout = absl::Seconds(15);
  if (cl.Has("timeout")) {
    if (!absl::ParseDuration(cl.Get("timeout"), &timeout) || timeout <= absl::ZeroDuration()) {
      return UsageError{absl::StrCat("--timeout: \"", cl.Get("timeout"),
                                     "\" is not a positive duration such as 10s or 1m")};
    }
  }
  ctx->client.emplace(url, token, timeout);
  return std::nullopt;
}

int Failed(const Context& ctx, std::string_view what, const ApiError& e) {
  *ctx.err << "hookrelayctl: " << what << ": " << e.code << ": " << e.message << "\n";
  for (const auto& [field, description] : e.violations) {
    *ctx.err << "  " << (field.empty() ? "-" : field) << ": " << description << "\n";
  }
  return kExitFailure;
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

std::string TypeName(hookrelay::v1::EventType type) {
  if (type == hookrelay::v1::EVENT_TYPE_UNSPECIFIED) return "-";
  return absl::AsciiStrToLower(hookrelay::v1::EventType_Name(type));
}

std::string Iso(int64_t unix_ms) {
  return unix_ms == 0 ? "-" : common::FormatIso8601Millis(absl::FromUnixMillis(unix_ms));
}

// A table cell: one line, "-" when empty.
std::string Cell(std::string_view s) {
  if (s.empty()) return "-";
  std::string out(s);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

size_t DisplayWidth(std::string_view s) {
  return common::IsValidUtf8(s) ? common::Utf8Length(s) : s.size();
}

void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - DisplayWidth(row[i]) + 2, ' ');
    }
    out << line << "\n";
  }
}

std::vector<std::string> TableRow(const Job& job) {
  return {absl::StrCat(job.id()),
          Cell(job.destination_id()),
          TypeName(job.type()),
          Cell(job.message_id()),
          Iso(job.dead_at_unix_ms()),
          absl::StrCat(job.attempts()),
          Cell(job.dead_reason())};
}

std::string JsonLine(const Job& job, simdjson::dom::parser& parser) {
  std::string out;
  common::JsonObjectWriter w(&out);
  w.Key("id");
  common::AppendJsonUint(&out, job.id());
  w.String("source_id", job.source_id());
  w.String("destination_id", job.destination_id());
  w.String("type", TypeName(job.type()));
  w.String("message_id", job.message_id());
  w.String("user_id", job.user_id());
  w.String("received_at", Iso(job.received_at_unix_ms()));
  w.String("dead_at", Iso(job.dead_at_unix_ms()));
  w.String("reason", job.dead_reason());
  w.Int("attempts", job.attempts());
  // Every recorded attempt (bounded by the store), newest last, with each URL's status or error.
  w.Key("history");
  out.push_back('[');
  for (int i = 0; i < job.history_size(); ++i) {
    const hookrelay::v1::Attempt& attempt = job.history(i);
    if (i > 0) out.push_back(',');
    common::JsonObjectWriter a(&out);
    a.String("at", Iso(attempt.at_unix_ms()));
    a.Key("urls");
    out.push_back('[');
    for (int j = 0; j < attempt.urls_size(); ++j) {
      if (j > 0) out.push_back(',');
      common::JsonObjectWriter u(&out);
      u.String("url", common::RedactUrl(attempt.urls(j).url()));
      u.Int("status", attempt.urls(j).status());
      u.String("error", attempt.urls(j).error());
      u.Close();
    }
    out.push_back(']');
    a.Close();
  }
  out.push_back(']');
  // The stored event is JSON written by the collector; should it not parse, it is still shown,
  // as a string, so that the line stays valid JSON.
  simdjson::dom::element event;
  if (parser.parse(job.event_json().data(), job.event_json().size()).get(event) ==
      simdjson::SUCCESS) {
    w.Key("event");
    common::AppendJsonElement(&out, event);
  } else {
    w.String("event_json", job.event_json());
  }
  w.Close();
  return out;
}


void PrintKeyValues(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& kv) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& [k, v] : kv) rows.push_back({k + ":", Cell(v)});
  PrintTable(out, rows);
}

std::vector<std::pair<std::string, std::string>> SourceFields(
    const hookrelay::v1::SourceResource& s) {
  return {{"id", s.id()},
          {"name", s.name()},
          {"kind", s.kind()},
          {"write keys", absl::StrJoin(s.write_keys(), ", ")},
          {"managed by", s.managed_by()}};
}

std::string UrlsCell(const hookrelay::v1::DestinationResource& d) {
  std::vector<std::string> urls;
  for (const auto& u : d.urls()) {
    std::string one = common::RedactUrl(u.url());
    if (!u.headers().empty()) {
      std::vector<std::string> names;
      for (const auto& [name, value] : u.headers()) names.push_back(name);
      std::sort(names.begin(), names.end());
      absl::StrAppend(&one, " (headers: ", absl::StrJoin(names, ", "), ")");
    }
    urls.push_back(std::move(one));
  }
  return absl::StrJoin(urls, "; ");
}

std::vector<std::pair<std::string, std::string>> DestinationFields(
    const hookrelay::v1::DestinationResource& d) {
  const auto& st = d.stats();
  return {{"id", d.id()},
          {"type", d.type()},
          {"enabled", d.enabled() ? "yes" : "no"},
          {"sources", absl::StrJoin(d.sources(), ", ")},
          {"urls", UrlsCell(d)},
          {"shared secret", d.shared_secret_set() ? "set" : "none"},
          {"managed by", d.managed_by()},
          {"delivered / retried / dead",
           absl::StrCat(st.delivered(), " / ", st.retried(), " / ", st.dead())},
          {"last error", st.last_error().empty()
                             ? ""
                             : absl::StrCat(st.last_error(), " at ",
                                            common::FormatIso8601Millis(absl::FromUnixSeconds(
                                                st.last_error_at().seconds())))}};
}

// --- catalog -----------------------------------------------------------------------------------

int Catalog(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage) {
  if ((*usage = CheckScope(cl, "catalog", {}))) return kExitUsage;
  if ((*usage = Positional(cl, 1, 0, "catalog"))) return kExitUsage;
  hookrelay::v1::Catalog catalog;
  ApiError e;
  if (!ctx.client->Call("GET", "/admin/v1/catalog", nullptr, &catalog, &e)) {
    return Failed(ctx, "reading the catalog", e);
  }
  if (ctx.json) {
    *ctx.out << ToJson(catalog) << "\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"TYPE", "NAME", "MAX URLS", "MAX HEADERS PER URL", "RESERVED HEADERS"}};
  for (const auto& t : catalog.destination_types()) {
    rows.push_back({t.type(), t.name(), absl::StrCat(t.max_urls()),
                    absl::StrCat(t.max_headers_per_url()), absl::StrJoin(t.reserved_headers(), ", ")});
  }
  PrintTable(*ctx.out, rows);
  *ctx.out << "source kinds: " << absl::StrJoin(catalog.source_kinds(), ", ") << "\n";
  return kExitOk;
}

// --- sources -----------------------------------------------------------------------------------

constexpr std::string_view kSourceCreateFlags[] = {"id", "name", "kind"};
constexpr std::string_view kSourceUpdateFlags[] = {"name", "kind"};

void PrintSource(Context& ctx, const hookrelay::v1::SourceResource& s) {
  if (ctx.json) {
    *ctx.out << ToJson(s) << "\n";
  } else {
    PrintKeyValues(*ctx.out, SourceFields(s));
  }
}

int Sources(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage) {
  const auto& pos = cl.positional;
  if (pos.size() < 2) {
    *usage = UsageError{"sources needs a command: list, get, create, update, delete, write-keys"};
    return kExitUsage;
  }
  const std::string& verb = pos[1];
  ApiError e;
  if (verb == "list") {
    if ((*usage = CheckScope(cl, "sources list", {}))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 0, "sources list"))) return kExitUsage;
    std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "KIND", "WRITE KEYS", "MANAGED BY"}};
    std::string token;
    do {
      hookrelay::v1::ListSourcesResponse page;
      const std::string path = absl::StrCat("/admin/v1/sources?page_size=1000",
                                            token.empty() ? "" : "&page_token=", UrlEncode(token));
      if (!ctx.client->Call("GET", path, nullptr, &page, &e)) {
        return Failed(ctx, "listing sources", e);
      }
      for (const auto& s : page.sources()) {
        if (ctx.json) {
          *ctx.out << ToJson(s) << "\n";
        } else {
          rows.push_back({s.id(), Cell(s.name()), s.kind(), absl::StrCat(s.write_keys_size()),
                          s.managed_by()});
        }
      }
      token = page.next_page_token();
    } while (!token.empty());
    if (!ctx.json) {
      if (rows.size() == 1) {
        *ctx.err << "no sources\n";
      } else {
        PrintTable(*ctx.out, rows);
      }
    }
    return kExitOk;
  }
  if (verb == "get" || verb == "delete") {
    if ((*usage = CheckScope(cl, absl::StrCat("sources ", verb), {}))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 1, absl::StrCat("sources ", verb)))) return kExitUsage;
    const std::string path = absl::StrCat("/admin/v1/sources/", UrlEncode(pos[2]));
    if (verb == "delete") {
      hookrelay::v1::DeleteResponse r;
      if (!ctx.client->Call("DELETE", path, nullptr, &r, &e)) {
        return Failed(ctx, absl::StrCat("deleting source ", pos[2]), e);
      }
      if (!ctx.json) *ctx.out << "deleted source " << pos[2] << "\n";
      return kExitOk;
    }
    hookrelay::v1::SourceResource s;
    if (!ctx.client->Call("GET", path, nullptr, &s, &e)) {
      return Failed(ctx, absl::StrCat("reading source ", pos[2]), e);
    }
    PrintSource(ctx, s);
    return kExitOk;
  }
  if (verb == "create") {
    if ((*usage = CheckScope(cl, "sources create", kSourceCreateFlags))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 0, "sources create"))) return kExitUsage;
    if (!cl.Has("kind")) {
      *usage = UsageError{"sources create needs --kind=web, mobile or server"};
      return kExitUsage;
    }
    hookrelay::v1::SourceResource in;
    in.set_id(cl.Get("id"));
    in.set_name(cl.Get("name"));
    in.set_kind(cl.Get("kind"));
    hookrelay::v1::SourceResource s;
    if (!ctx.client->Call("POST", "/admin/v1/sources", &in, &s, &e)) {
      return Failed(ctx, "creating the source", e);
    }
    PrintSource(ctx, s);
    return kExitOk;
  }
  if (verb == "update") {
    if ((*usage = CheckScope(cl, "sources update", kSourceUpdateFlags))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 1, "sources update"))) return kExitUsage;
    if (!cl.Has("name") && !cl.Has("kind")) {
      *usage = UsageError{"sources update needs --name or --kind"};
      return kExitUsage;
    }
    std::string body;
    common::JsonObjectWriter w(&body);
    if (cl.Has("name")) w.String("name", cl.Get("name"));
    if (cl.Has("kind")) w.String("kind", cl.Get("kind"));
    w.Close();
    hookrelay::v1::SourceResource s;
    if (!ctx.client->Call("PATCH", absl::StrCat("/admin/v1/sources/", UrlEncode(pos[2])), nullptr,
                          &s, &e, body)) {
      return Failed(ctx, absl::StrCat("updating source ", pos[2]), e);
    }
    PrintSource(ctx, s);
    return kExitOk;
  }
  if (verb == "write-keys") {
    if ((*usage = CheckScope(cl, "sources write-keys", {}))) return kExitUsage;
    if (pos.size() >= 3 && pos[2] == "create") {
      if ((*usage = Positional(cl, 3, 1, "sources write-keys create"))) return kExitUsage;
      hookrelay::v1::CreateWriteKeyResponse r;
      if (!ctx.client->Call("POST",
                            absl::StrCat("/admin/v1/sources/", UrlEncode(pos[3]), "/write-keys"),
                            nullptr, &r, &e, "{}")) {
        return Failed(ctx, absl::StrCat("creating a write key for source ", pos[3]), e);
      }
      if (ctx.json) {
        *ctx.out << ToJson(r) << "\n";
      } else {
        *ctx.out << r.write_key() << "\n";
      }
      return kExitOk;
    }
    if (pos.size() >= 3 && pos[2] == "revoke") {
      if ((*usage = Positional(cl, 3, 2, "sources write-keys revoke"))) return kExitUsage;
      hookrelay::v1::SourceResource s;
      if (!ctx.client->Call("DELETE",
                            absl::StrCat("/admin/v1/sources/", UrlEncode(pos[3]), "/write-keys/",
                                         UrlEncode(pos[4])),
                            nullptr, &s, &e)) {
        return Failed(ctx, absl::StrCat("revoking a write key of source ", pos[3]), e);
      }
      if (ctx.json) {
        *ctx.out << ToJson(s) << "\n";
      } else {
        *ctx.out << "revoked; source " << s.id() << " has " << s.write_keys_size()
                 << " write key(s) left\n";
      }
      return kExitOk;
    }
    *usage = UsageError{"sources write-keys needs create SOURCE or revoke SOURCE KEY"};
    return kExitUsage;
  }
  *usage = UsageError{absl::StrCat("unknown command \"sources ", verb, "\"")};
  return kExitUsage;
}

// --- destinations ------------------------------------------------------------------------------

constexpr std::string_view kDestinationFlags[] = {
    "id", "source", "url", "header", "shared-secret-file", "no-shared-secret", "enabled",
    "timeout-ms", "rate-limit-per-second", "circuit-breaker-failures"};

void PrintDestination(Context& ctx, const hookrelay::v1::DestinationResource& d) {
  if (ctx.json) {
    *ctx.out << ToJson(d) << "\n";
  } else {
    PrintKeyValues(*ctx.out, DestinationFields(d));
  }
}

// The JSON body of create / update from the flags; only what is given.
std::optional<UsageError> DestinationBody(const CommandLine& cl, bool create, std::string* body) {
  common::JsonObjectWriter w(body);
  if (create && cl.Has("id")) w.String("id", cl.Get("id"));
  if (create) w.String("type", "webhooks");
  const std::vector<std::string> sources = cl.All("source");
  if (!sources.empty()) {
    std::string list = "[";
    for (size_t i = 0; i < sources.size(); ++i) {
      if (i) list.push_back(',');
      common::AppendJsonString(&list, sources[i]);
    }
    list.push_back(']');
    w.Raw("sources", list);
  }
  // --url and --header in order: each header belongs to the URL before it.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> urls;
  for (const auto& [name, value] : cl.ordered) {
    if (name == "url") {
      urls.push_back({value, {}});
    } else if (name == "header") {
      if (urls.empty()) return UsageError{"--header must follow the --url it belongs to"};
      const size_t colon = value.find(':');
      if (colon == std::string::npos || colon == 0) {
        return UsageError{absl::StrCat("--header: \"", value, "\" is not \"Name: value\"")};
      }
      urls.back().second.emplace_back(
          std::string(absl::StripAsciiWhitespace(value.substr(0, colon))),
          std::string(absl::StripAsciiWhitespace(value.substr(colon + 1))));
    }
  }
  if (!urls.empty()) {
    std::string list = "[";
    for (size_t i = 0; i < urls.size(); ++i) {
      if (i) list.push_back(',');
      std::string headers = "{";
      for (size_t j = 0; j < urls[i].second.size(); ++j) {
        if (j) headers.push_back(',');
        common::AppendJsonString(&headers, urls[i].second[j].first);
        headers.push_back(':');
        common::AppendJsonString(&headers, urls[i].second[j].second);
      }
      headers.push_back('}');
      common::JsonObjectWriter u(&list);
      u.String("url", urls[i].first);
      u.Raw("headers", headers);
      u.Close();
    }
    list.push_back(']');
    w.Raw("urls", list);
  }
  if (cl.Has("shared-secret-file") && cl.Bool("no-shared-secret")) {
    return UsageError{"--shared-secret-file and --no-shared-secret exclude each other"};
  }
  if (cl.Has("shared-secret-file")) {
    absl::StatusOr<std::string> secret = common::ReadSecretFile(cl.Get("shared-secret-file"));
    if (!secret.ok()) {
      return UsageError{absl::StrCat("--shared-secret-file: ", secret.status().message())};
    }
    w.String("sharedSecret", *secret);
  }
  if (cl.Bool("no-shared-secret")) w.String("sharedSecret", "");
  if (cl.Has("enabled")) w.Bool("enabled", cl.Bool("enabled"));
  if (cl.Has("timeout-ms") || cl.Has("rate-limit-per-second") ||
      cl.Has("circuit-breaker-failures")) {
    // Limits are the server's to judge (it names the field); only the shape is checked here.
    auto number = [&cl](const char* flag, int64_t* out) -> std::optional<UsageError> {
      if (!absl::SimpleAtoi(cl.Get(flag), out) || *out < 0) {
        return UsageError{absl::StrCat("--", flag, ": \"", cl.Get(flag), "\" is not a number")};
      }
      return std::nullopt;
    };
    std::string options;
    common::JsonObjectWriter o(&options);
    int64_t n = 0;
    if (cl.Has("timeout-ms")) {
      if (auto e = number("timeout-ms", &n)) return e;
      o.Int("timeoutMs", n);
    }
    if (cl.Has("rate-limit-per-second")) {
      if (auto e = number("rate-limit-per-second", &n)) return e;
      o.Int("rateLimitPerSecond", n);
    }
    if (cl.Has("circuit-breaker-failures")) {
      if (auto e = number("circuit-breaker-failures", &n)) return e;
      std::string breaker;
      common::JsonObjectWriter b(&breaker);
      b.Int("failures", n);
      b.Close();
      o.Raw("circuitBreaker", breaker);
    }
    o.Close();
    w.Raw("options", options);
  }
  w.Close();
  return std::nullopt;
}

int Destinations(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage) {
  const auto& pos = cl.positional;
  if (pos.size() < 2) {
    *usage = UsageError{
        "destinations needs a command: list, get, create, update, enable, disable, delete, test"};
    return kExitUsage;
  }
  const std::string& verb = pos[1];
  const std::string command = absl::StrCat("destinations ", verb);
  ApiError e;
  if (verb == "list") {
    if ((*usage = CheckScope(cl, command, {}))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 0, command))) return kExitUsage;
    std::vector<std::vector<std::string>> rows = {
        {"ID", "ENABLED", "SOURCES", "URLS", "DELIVERED", "RETRIED", "DEAD", "LAST ERROR"}};
    std::string token;
    do {
      hookrelay::v1::ListDestinationsResponse page;
      const std::string path = absl::StrCat("/admin/v1/destinations?page_size=1000",
                                            token.empty() ? "" : "&page_token=", UrlEncode(token));
      if (!ctx.client->Call("GET", path, nullptr, &page, &e)) {
        return Failed(ctx, "listing destinations", e);
      }
      for (const auto& d : page.destinations()) {
        if (ctx.json) {
          *ctx.out << ToJson(d) << "\n";
        } else {
          rows.push_back({d.id(), d.enabled() ? "yes" : "no", absl::StrJoin(d.sources(), ","),
                          absl::StrCat(d.urls_size()), absl::StrCat(d.stats().delivered()),
                          absl::StrCat(d.stats().retried()), absl::StrCat(d.stats().dead()),
                          Cell(d.stats().last_error())});
        }
      }
      token = page.next_page_token();
    } while (!token.empty());
    if (!ctx.json) {
      if (rows.size() == 1) {
        *ctx.err << "no destinations\n";
      } else {
        PrintTable(*ctx.out, rows);
      }
    }
    return kExitOk;
  }
  if (verb == "create") {
    if ((*usage = CheckScope(cl, command, kDestinationFlags))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 0, command))) return kExitUsage;
    std::string body;
    if ((*usage = DestinationBody(cl, true, &body))) return kExitUsage;
    hookrelay::v1::DestinationResource d;
    if (!ctx.client->Call("POST", "/admin/v1/destinations", nullptr, &d, &e, body)) {
      return Failed(ctx, "creating the destination", e);
    }
    PrintDestination(ctx, d);
    return kExitOk;
  }
  if ((*usage = Positional(cl, 2, 1, command))) return kExitUsage;
  const std::string path = absl::StrCat("/admin/v1/destinations/", UrlEncode(pos[2]));
  if (verb == "get") {
    if ((*usage = CheckScope(cl, command, {}))) return kExitUsage;
    hookrelay::v1::DestinationResource d;
    if (!ctx.client->Call("GET", path, nullptr, &d, &e)) {
      return Failed(ctx, absl::StrCat("reading destination ", pos[2]), e);
    }
    PrintDestination(ctx, d);
    return kExitOk;
  }
  if (verb == "update" || verb == "enable" || verb == "disable") {
    std::string body;
    if (verb == "update") {
      if ((*usage = CheckScope(cl, command, kDestinationFlags))) return kExitUsage;
      if (cl.Has("id")) {
        *usage = UsageError{"--id: the id cannot change; give it as the argument"};
        return kExitUsage;
      }
      if ((*usage = DestinationBody(cl, false, &body))) return kExitUsage;
      if (body == "{}") {
        *usage = UsageError{"destinations update needs something to change (see --help)"};
        return kExitUsage;
      }
    } else {
      if ((*usage = CheckScope(cl, command, {}))) return kExitUsage;
      body = verb == "enable" ? R"({"enabled":true})" : R"({"enabled":false})";
    }
    hookrelay::v1::DestinationResource d;
    if (!ctx.client->Call("PATCH", path, nullptr, &d, &e, body)) {
      return Failed(ctx, absl::StrCat("updating destination ", pos[2]), e);
    }
    PrintDestination(ctx, d);
    return kExitOk;
  }
  if (verb == "delete") {
    if ((*usage = CheckScope(cl, command, {}))) return kExitUsage;
    hookrelay::v1::DeleteResponse r;
    if (!ctx.client->Call("DELETE", path, nullptr, &r, &e)) {
      return Failed(ctx, absl::StrCat("deleting destination ", pos[2]), e);
    }
    if (!ctx.json) *ctx.out << "deleted destination " << pos[2] << "\n";
    return kExitOk;
  }
  if (verb == "test") {
    if ((*usage = CheckScope(cl, command, {}))) return kExitUsage;
    hookrelay::v1::TestDestinationResponse r;
    if (!ctx.client->Call("POST", absl::StrCat(path, ":test"), nullptr, &r, &e, "{}")) {
      return Failed(ctx, absl::StrCat("testing destination ", pos[2]), e);
    }
    if (ctx.json) {
      *ctx.out << ToJson(r) << "\n";
    } else {
      std::vector<std::vector<std::string>> rows = {{"URL", "STATUS", "LATENCY", "ERROR"}};
      for (const auto& u : r.results()) {
        rows.push_back({u.url(), u.status() ? absl::StrCat(u.status()) : "-",
                        absl::StrCat(u.latency_ms(), " ms"), Cell(u.error())});
      }
      PrintTable(*ctx.out, rows);
      *ctx.out << "outcome: " << r.outcome() << (r.reason().empty() ? "" : " (") << r.reason()
               << (r.reason().empty() ? "" : ")") << "  message id: " << r.message_id() << "\n";
    }
    return r.outcome() == "delivered" ? kExitOk : kExitFailure;
  }
  *usage = UsageError{absl::StrCat("unknown command \"", command, "\"")};
  return kExitUsage;
}

// --- dead letters ------------------------------------------------------------------------------

constexpr std::string_view kListFlags[] = {"destination", "from", "to", "limit"};
constexpr std::string_view kReplayFlags[] = {"all", "destination", "from", "to"};

std::optional<UsageError> TimeFlag(const CommandLine& cl, std::string_view name,
                                   std::optional<absl::Time>* out) {
  if (!cl.Has(name)) return std::nullopt;
  *out = common::ParseIso8601(cl.Get(name));
  if (!out->has_value()) {
    return UsageError{absl::StrCat("--", common::ToAbsl(name), ": \"", cl.Get(name),
                                   "\" is not an RFC 3339 time such as 2024-05-01T12:00:00Z")};
  }
  return std::nullopt;
}

// The filter as query parameters (list) and as a DeadLetterFilter (replay).
std::optional<UsageError> Filter(const CommandLine& cl, std::string* query,
                                 hookrelay::v1::DeadLetterFilter* filter) {
  if (cl.Has("destination")) {
    if (cl.Get("destination").empty()) return UsageError{"--destination needs a destination id"};
    filter->set_destination_id(cl.Get("destination"));
    absl::StrAppend(query, "&destination_id=", UrlEncode(cl.Get("destination")));
  }
  std::optional<absl::Time> from, to;
  if (auto error = TimeFlag(cl, "from", &from)) return error;
  if (auto error = TimeFlag(cl, "to", &to)) return error;
  if (from.has_value() && to.has_value() && *to <= *from) {
    return UsageError{"--to must be after --from (the range is [from, to))"};
  }
  if (from.has_value()) {
    filter->mutable_from()->set_seconds(absl::ToUnixSeconds(*from));
    filter->mutable_from()->set_nanos(
        static_cast<int32_t>((absl::ToUnixNanos(*from) % 1000000000 + 1000000000) % 1000000000));
    absl::StrAppend(query, "&from=", UrlEncode(common::FormatIso8601Millis(*from)));
  }
  if (to.has_value()) {
    filter->mutable_to()->set_seconds(absl::ToUnixSeconds(*to));
    filter->mutable_to()->set_nanos(
        static_cast<int32_t>((absl::ToUnixNanos(*to) % 1000000000 + 1000000000) % 1000000000));
    absl::StrAppend(query, "&to=", UrlEncode(common::FormatIso8601Millis(*to)));
  }
  return std::nullopt;
}

int DeadLetters(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage) {
  const auto& pos = cl.positional;
  if (pos.size() < 2) {
    *usage = UsageError{"dead-letters needs a command: list or replay"};
    return kExitUsage;
  }
  if ((*usage = Positional(cl, 2, 0, absl::StrCat("dead-letters ", pos[1])))) return kExitUsage;
  ApiError e;
  std::string query;
  hookrelay::v1::DeadLetterFilter filter;
  if (pos[1] == "list") {
    if ((*usage = CheckScope(cl, "dead-letters list", kListFlags))) return kExitUsage;
    if ((*usage = Filter(cl, &query, &filter))) return kExitUsage;
    int64_t limit = kDefaultLimit;
    if (cl.Has("limit") && (!absl::SimpleAtoi(cl.Get("limit"), &limit) || limit < 1)) {
      *usage = UsageError{absl::StrCat("--limit: \"", cl.Get("limit"), "\" is not a number >= 1")};
      return kExitUsage;
    }
    simdjson::dom::parser parser;
    std::vector<std::vector<std::string>> rows = {
        {"ID", "DESTINATION", "TYPE", "MESSAGE ID", "DIED", "ATTEMPTS", "REASON"}};
    int64_t printed = 0;
    bool more = false;
    std::string token;
    while (true) {
      hookrelay::v1::ListDeadLettersResponse page;
      const std::string path = absl::StrCat(
          "/admin/v1/dead-letters?page_size=", std::min(limit - printed, kMaxPageSize), query,
          token.empty() ? "" : "&page_token=", UrlEncode(token));
      if (!ctx.client->Call("GET", path, nullptr, &page, &e)) {
        ctx.out->flush();  // JSON lines of earlier pages stay printed.
        return Failed(ctx, "listing dead letters", e);
      }
      for (const Job& job : page.jobs()) {
        if (ctx.json) {
          *ctx.out << JsonLine(job, parser) << "\n";
        } else {
          rows.push_back(TableRow(job));
        }
      }
      printed += page.jobs_size();
      if (page.next_page_token().empty()) break;
      if (printed >= limit || page.jobs_size() == 0) {
        more = true;
        break;
      }
      token = page.next_page_token();
    }
    if (!ctx.json) {
      if (printed == 0) {
        *ctx.err << "no dead letters\n";
      } else {
        PrintTable(*ctx.out, rows);
      }
    }
    if (more) {
      *ctx.err << "hookrelayctl: showing the first " << printed
               << " dead letters; there are more (raise --limit)\n";
    }
    return kExitOk;
  }
  if (pos[1] == "replay") {
    if ((*usage = CheckScope(cl, "dead-letters replay", kReplayFlags))) return kExitUsage;
    const bool all = cl.Bool("all");
    const bool filtered = cl.Has("destination") || cl.Has("from") || cl.Has("to");
    if (all && filtered) {
      *usage = UsageError{"--all replays every dead letter; it cannot be combined with "
                          "--destination, --from or --to"};
      return kExitUsage;
    }
    if (!all && !cl.Has("destination")) {
      *usage = UsageError{cl.Has("from") || cl.Has("to")
                              ? "--from and --to select within a destination: add --destination=ID"
                              : "dead-letters replay needs --all or --destination=ID"};
      return kExitUsage;
    }
    if ((*usage = Filter(cl, &query, &filter))) return kExitUsage;
    hookrelay::v1::ReplayDeadLettersRequest request;
    *request.mutable_filter() = filter;
    request.set_all(all);
    hookrelay::v1::ReplayDeadLettersResponse response;
    if (!ctx.client->Call("POST", "/admin/v1/dead-letters:replay", &request, &response, &e)) {
      return Failed(ctx, "replaying dead letters", e);
    }
    if (ctx.json) {
      *ctx.out << ToJson(response) << "\n";
    } else {
      *ctx.out << "replayed " << response.replayed() << " dead letters\n";
    }
    return kExitOk;
  }
  *usage = UsageError{absl::StrCat("unknown command \"dead-letters ", pos[1], "\"")};
  return kExitUsage;
}

// --- deletion requests (SPEC §6.1) --------------------------------------------------------------

// The user id is personal data: it is printed in the records asked for, never in messages.
constexpr std::string_view kDeletionCreateFlags[] = {"user", "source", "request-id"};
constexpr std::string_view kDeletionListFlags[] = {"limit"};

std::string CreateTime(const hookrelay::v1::Deletion& d) {
  if (!d.has_create_time()) return "-";
  const std::optional<absl::Time> t = common::FromProtoTime(d.create_time());
  return t.has_value() ? common::FormatIso8601Millis(*t) : "-";
}

// "web,app", or "-" when none was affected.
std::string SourcesCell(const hookrelay::v1::Deletion& d) {
  return Cell(absl::StrJoin(d.source_ids(), ","));
}

std::vector<std::string> DeletionRow(const hookrelay::v1::Deletion& d) {
  return {d.id(),
          Cell(d.user_id()),
          SourcesCell(d),
          absl::StrCat(d.notifications()),
          absl::StrCat(d.purged_jobs()),
          absl::StrCat(d.purged_dead_letters()),
          CreateTime(d)};
}

void PrintDeletion(Context& ctx, const hookrelay::v1::Deletion& d) {
  if (ctx.json) {
    *ctx.out << ToJson(d) << "\n";
    return;
  }
  std::string sources = absl::StrJoin(d.source_ids(), ", ");
  if (d.sources_from_index()) {
    sources = sources.empty() ? "none (the user was not seen in any source)"
                              : absl::StrCat(sources, " (every source the user was seen in)");
  }
  PrintKeyValues(*ctx.out,
                 {{"id", d.id()},
                  {"user", d.user_id()},
                  {"sources", sources},
                  {"request id", d.request_id()},
                  {"state", hookrelay::v1::Deletion::State_Name(d.state())},
                  {"notified", absl::StrCat(d.notifications(), " delete job(s)")},
                  {"purged jobs", absl::StrCat(d.purged_jobs())},
                  {"purged dead letters", absl::StrCat(d.purged_dead_letters())},
                  {"purged profile", d.purged_profile() ? "yes" : "no"},
                  {"created", CreateTime(d)}});
}

int Deletions(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage) {
  const auto& pos = cl.positional;
  if (pos.size() < 2) {
    *usage = UsageError{"deletions needs a command: create, list or get"};
    return kExitUsage;
  }
  const std::string& verb = pos[1];
  const std::string command = absl::StrCat("deletions ", verb);
  ApiError e;
  if (verb == "create") {
    if ((*usage = CheckScope(cl, command, kDeletionCreateFlags))) return kExitUsage;
    // Before the argument count: `deletions create u1` is a missing --user.
    if (!cl.Has("user") || cl.Get("user").empty()) {
      *usage = UsageError{"deletions create needs --user=USER (the user id whose data to delete)"};
      return kExitUsage;
    }
    if ((*usage = Positional(cl, 2, 0, command))) return kExitUsage;
    hookrelay::v1::CreateDeletionRequest request;
    request.set_user_id(cl.Get("user"));
    for (const std::string& source : cl.All("source")) {
      if (source.empty()) {
        *usage = UsageError{"--source needs a source id"};
        return kExitUsage;
      }
      request.add_source_ids(source);
    }
    if (cl.Has("request-id")) {
      if (cl.Get("request-id").empty()) {
        *usage = UsageError{"--request-id needs a value (or leave the flag out)"};
        return kExitUsage;
      }
      request.set_request_id(cl.Get("request-id"));
    }
    hookrelay::v1::Deletion d;
    if (!ctx.client->Call("POST", "/admin/v1/deletions", &request, &d, &e)) {
      return Failed(ctx, "creating the deletion request", e);
    }
    PrintDeletion(ctx, d);
    return kExitOk;
  }
  if (verb == "list") {
    if ((*usage = CheckScope(cl, command, kDeletionListFlags))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 0, command))) return kExitUsage;
    int64_t limit = kDefaultLimit;
    if (cl.Has("limit") && (!absl::SimpleAtoi(cl.Get("limit"), &limit) || limit < 1)) {
      *usage = UsageError{absl::StrCat("--limit: \"", cl.Get("limit"), "\" is not a number >= 1")};
      return kExitUsage;
    }
    std::vector<std::vector<std::string>> rows = {
        {"ID", "USER", "SOURCES", "NOTIFIED", "PURGED JOBS", "PURGED DEAD", "CREATED"}};
    int64_t printed = 0;
    bool more = false;
    std::string token;
    while (true) {
      hookrelay::v1::ListDeletionsResponse page;
      const std::string path =
          absl::StrCat("/admin/v1/deletions?page_size=", std::min(limit - printed, kMaxPageSize),
                       token.empty() ? "" : "&page_token=", UrlEncode(token));
      if (!ctx.client->Call("GET", path, nullptr, &page, &e)) {
        ctx.out->flush();  // JSON lines of earlier pages stay printed.
        return Failed(ctx, "listing deletion requests", e);
      }
      for (const auto& d : page.deletions()) {
        if (printed >= limit) {  // a server may answer more than asked for
          more = true;
          break;
        }
        if (ctx.json) {
          *ctx.out << ToJson(d) << "\n";
        } else {
          rows.push_back(DeletionRow(d));
        }
        ++printed;
      }
      if (more || page.next_page_token().empty()) break;
      if (printed >= limit || page.deletions_size() == 0) {
        more = true;
        break;
      }
      token = page.next_page_token();
    }
    if (!ctx.json) {
      if (printed == 0) {
        *ctx.err << "no deletion requests\n";
      } else {
        PrintTable(*ctx.out, rows);
      }
    }
    if (more) {
      *ctx.err << "hookrelayctl: showing the newest " << printed
               << " deletion requests; there are more (raise --limit)\n";
    }
    return kExitOk;
  }
  if (verb == "get") {
    if ((*usage = CheckScope(cl, command, {}))) return kExitUsage;
    if ((*usage = Positional(cl, 2, 1, command))) return kExitUsage;
    if (pos[2].empty()) {
      *usage = UsageError{"deletions get needs a deletion request id"};
      return kExitUsage;
    }
    hookrelay::v1::Deletion d;
    if (!ctx.client->Call("GET", absl::StrCat("/admin/v1/deletions/", UrlEncode(pos[2])), nullptr,
                          &d, &e)) {
      return Failed(ctx, absl::StrCat("reading deletion request ", pos[2]), e);
    }
    PrintDeletion(ctx, d);
    return kExitOk;
  }
  *usage = UsageError{absl::StrCat("unknown command \"", command, "\"")};
  return kExitUsage;
}

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
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // a misspelt "countGte" must not vanish
  const auto st = google::protobuf::util::JsonStringToMessage(json, rule, options);
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

}  // namespace

int Run(const std::vector<std::string>& args, const Environment& env, std::ostream& out,
        std::ostream& err) {
  CommandLine cl;
  std::optional<UsageError> usage = Parse(args, &cl);
  int code = kExitUsage;
  Context ctx;
  ctx.out = &out;
  ctx.err = &err;
  if (!usage.has_value()) {
    const std::vector<std::string>& pos = cl.positional;
    if (cl.Bool("help") || (!pos.empty() && pos[0] == "help")) {
      out << kUsage;
      return kExitOk;
    }
    if (pos.empty()) {
      usage = UsageError{"no command given"};
    } else if (pos[0] == "health") {
      code = Health(cl, ctx, &usage);
    } else if (pos[0] != "catalog" && pos[0] != "sources" && pos[0] != "destinations" &&
               pos[0] != "dead-letters" && pos[0] != "deletions" && pos[0] != "audiences") {
      usage = UsageError{absl::StrCat("unknown command \"", pos[0], "\"")};
    } else if (!(usage = Connect(cl, env, &ctx))) {
      if (pos[0] == "catalog") {
        code = Catalog(cl, ctx, &usage);
      } else if (pos[0] == "sources") {
        code = Sources(cl, ctx, &usage);
      } else if (pos[0] == "destinations") {
        code = Destinations(cl, ctx, &usage);
      } else if (pos[0] == "deletions") {
        code = Deletions(cl, ctx, &usage);
      } else if (pos[0] == "audiences") {
        code = Audiences(cl, ctx, &usage);
      } else {
        code = DeadLetters(cl, ctx, &usage);
      }
    }
  }
  if (usage.has_value()) {
    err << "hookrelayctl: " << usage->message << "\n\n" << kUsage;
    return kExitUsage;
  }
  out.flush();
  return code;
}

}  // namespace hookrelay::hookrelayctl
