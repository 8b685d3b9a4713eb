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

// Parsing, the connection and the printers every command uses.
namespace hookrelay::hookrelayctl::internal {

using ::hookrelay::v1::Job;

namespace {

constexpr std::string_view kBoolFlags[] = {"help",          "json",           "all", "enabled",
                                           "no-shared-secret", "no-filter"};
constexpr std::string_view kValueFlags[] = {
    "admin-url", "admin-token-file", "output", "timeout", "collector", "token",
    "destination", "from", "to", "limit", "service", "id", "name", "kind", "source", "url",
    "header", "shared-secret-file", "timeout-ms", "rate-limit-per-second",
    "circuit-breaker-failures", "user", "request-id", "rule", "rule-file",
    "sync-interval", "filter-file", "overlap", "batch-max-events", "batch-max-bytes",
    "batch-max-wait-ms", "ordering"};
constexpr std::string_view kGlobalFlags[] = {"help", "admin-url", "admin-token-file", "output",
                                             "timeout", "token", "json"};
// Flags that may repeat; their order relative to each other is kept.
constexpr std::string_view kRepeatable[] = {"source", "url", "header"};

}  // namespace

bool Contains(FlagNames names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}



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

namespace {

// A destination's filter in one line: "types track; events Order *; where properties.plan eq
// "pro"", or "none".
std::string FilterCell(const hookrelay::v1::DestinationResource& d) {
  const hookrelay::v1::DestinationFilter& f = d.filter();
  std::vector<std::string> parts;
  if (f.types_size() > 0) parts.push_back(absl::StrCat("types ", absl::StrJoin(f.types(), ",")));
  if (f.events_size() > 0) {
    parts.push_back(absl::StrCat("events ", absl::StrJoin(f.events(), ",")));
  }
  for (const hookrelay::v1::FilterCondition& c : f.where()) {
    std::string value;
    if (c.has_value()) (void)google::protobuf::util::MessageToJsonString(c.value(), &value);
    parts.push_back(absl::StrCat("where ", c.path(), " ", c.op(), value.empty() ? "" : " ", value));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, "; ");
}

}  // namespace

std::vector<std::pair<std::string, std::string>> DestinationFields(
    const hookrelay::v1::DestinationResource& d) {
  const auto& st = d.stats();
  return {{"id", d.id()},
          {"type", d.type()},
          {"enabled", d.enabled() ? "yes" : "no"},
          {"sources", absl::StrJoin(d.sources(), ", ")},
          {"urls", UrlsCell(d)},
          {"shared secret",
           !d.shared_secret_set() ? "none"
           : d.has_rotation()
               ? absl::StrCat("set; the previous one also signs until ",
                              common::FormatIso8601Millis(absl::FromUnixSeconds(
                                  d.rotation().ends_at().seconds())))
               : "set"},
          {"filter", FilterCell(d)},
          {"batches", d.options().has_batch()
                          ? absl::StrCat("up to ", d.options().batch().max_events(), " events, ",
                                         d.options().batch().max_bytes(), " bytes, ",
                                         d.options().batch().max_wait_ms(), " ms")
                          : "no (one event per request)"},
          {"order", d.options().ordering() == "per_user"
                        ? "per user (one request per user in flight, in acceptance order)"
                        : "none"},
          {"managed by", d.managed_by()},
          {"delivered / retried / dead",
           absl::StrCat(st.delivered(), " / ", st.retried(), " / ", st.dead())},
          {"last error", st.last_error().empty()
                             ? ""
                             : absl::StrCat(st.last_error(), " at ",
                                            common::FormatIso8601Millis(absl::FromUnixSeconds(
                                                st.last_error_at().seconds())))}};
}

}  // namespace hookrelay::hookrelayctl::internal
