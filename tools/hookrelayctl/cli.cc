#include "tools/hookrelayctl/cli.h"

#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "common/grpc_status.h"
#include "common/json_element.h"
#include "common/json_writer.h"
#include "common/proto_time.h"
#include "common/redact.h"
#include "common/strings.h"
#include "common/time_format.h"
#include "google/protobuf/timestamp.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "hookrelay/v1/admin.grpc.pb.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::hookrelayctl {

const char kUsage[] =
    R"(hookrelayctl: operate a hookrelay collector through its Admin gRPC API.

Usage:
  hookrelayctl [global flags] dead-letters list [--destination=ID] [--from=TIME] [--to=TIME]
                                                [--limit=N] [--json]
  hookrelayctl [global flags] dead-letters replay (--all | --destination=ID [--from=TIME] [--to=TIME])
  hookrelayctl [global flags] health [--service=NAME]

Global flags:
  --collector=HOST:PORT  the collector's gRPC address (default 127.0.0.1:50051)
  --token=TOKEN          the admin token, sent as "authorization: Bearer TOKEN"; defaults to
                         $HOOKRELAY_ADMIN_TOKEN (prefer the variable: flags show in ps)
  --timeout=DURATION     deadline of each call, e.g. 500ms, 10s, 1m (default 10s)

dead-letters list: dead letters in job id order, as a table or JSON lines.
  --destination=ID       only this destination's
  --from=TIME            only those that died at or after TIME (RFC 3339, e.g. 2024-05-01T12:00:00Z)
  --to=TIME              only those that died before TIME
  --limit=N              print at most N (default 100), fetching as many pages as needed
  --json                 one JSON object per line instead of a table

dead-letters replay: makes dead letters ready for delivery again, with a fresh retry window.
  --all                  every dead letter
  --destination=ID       only this destination's, optionally only those that died in
                         [--from, --to)

health: asks the collector's gRPC health service (grpc.health.v1.Health/Check) and prints
  SERVING or NOT_SERVING; exit 0 only when serving.
  --service=NAME         a service's status, e.g. hookrelay.v1.Collector (default "": the server)

Exit status: 0 done, 1 the collector refused or could not be reached, 2 usage error.
)";

namespace {

using ::hookrelay::v1::Job;

constexpr std::string_view kDefaultCollector = "127.0.0.1:50051";
constexpr absl::Duration kDefaultTimeout = absl::Seconds(10);
constexpr int64_t kDefaultLimit = 100;
// The server's largest page.
constexpr int64_t kMaxPageSize = 1000;

using FlagNames = std::span<const std::string_view>;

// Flags that take no value (`--json`, or `--json=false`).
constexpr std::string_view kBoolFlags[] = {"help", "json", "all"};
constexpr std::string_view kValueFlags[] = {"collector", "token", "timeout", "destination",
                                            "from",      "to",    "limit",   "service"};
constexpr std::string_view kGlobalFlags[] = {"help", "collector", "token", "timeout"};
constexpr std::string_view kListFlags[] = {"destination", "from", "to", "limit", "json"};
constexpr std::string_view kReplayFlags[] = {"all", "destination", "from", "to"};
constexpr std::string_view kHealthFlags[] = {"service"};

bool Contains(FlagNames names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A usage error: the message, printed with the usage text.
struct UsageError {
  std::string message;
};

struct CommandLine {
  std::vector<std::string> positional;
  // Flag name (without dashes) → value; "true"/"false" for the boolean ones. Last one wins.
  std::map<std::string, std::string, std::less<>> flags;

  bool Has(std::string_view name) const { return flags.find(name) != flags.end(); }
  bool Bool(std::string_view name) const {
    auto it = flags.find(name);
    return it != flags.end() && it->second == "true";
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
    out->flags[name] = *std::move(value);
  }
  return std::nullopt;
}

// Checks that every flag given belongs to the command (or is global).
std::optional<UsageError> CheckScope(const CommandLine& cl, std::string_view command,
                                     FlagNames allowed) {
  for (const auto& [name, value] : cl.flags) {
    if (!Contains(kGlobalFlags, name) && !Contains(allowed, name)) {
      return UsageError{absl::StrCat("--", name, " is not a flag of ", common::ToAbsl(command))};
    }
  }
  return std::nullopt;
}

// `--<name>=TIME` when given: the time, or a usage error.
std::optional<UsageError> ParseTime(const CommandLine& cl, std::string_view name,
                                    std::optional<absl::Time>* out) {
  auto it = cl.flags.find(name);
  if (it == cl.flags.end()) return std::nullopt;
  *out = common::ParseIso8601(it->second);
  if (!out->has_value()) {
    return UsageError{absl::StrCat("--", common::ToAbsl(name), ": \"", it->second,
                                   "\" is not an RFC 3339 time such as 2024-05-01T12:00:00Z")};
  }
  return std::nullopt;
}

// The filter flags shared by list and replay.
std::optional<UsageError> ParseFilter(const CommandLine& cl,
                                      hookrelay::v1::DeadLetterFilter* filter) {
  if (auto it = cl.flags.find("destination"); it != cl.flags.end()) {
    if (it->second.empty()) return UsageError{"--destination needs a destination id"};
    filter->set_destination_id(it->second);
  }
  std::optional<absl::Time> from, to;
  if (auto error = ParseTime(cl, "from", &from)) return error;
  if (auto error = ParseTime(cl, "to", &to)) return error;
  if (from.has_value() && to.has_value() && *to <= *from) {
    return UsageError{"--to must be after --from (the range is [from, to))"};
  }
  if (from.has_value()) common::ToProtoTime(*from, filter->mutable_from());
  if (to.has_value()) common::ToProtoTime(*to, filter->mutable_to());
  return std::nullopt;
}

// Connection settings shared by every command.
struct Connection {
  std::string collector;
  std::string token;
  absl::Duration timeout;
  std::unique_ptr<hookrelay::v1::Admin::Stub> stub;

  void Prepare(grpc::ClientContext& context) const {
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    if (!token.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
};

std::optional<UsageError> Connect(const CommandLine& cl, std::string_view env_token,
                                  Connection* out) {
  out->collector = std::string(kDefaultCollector);
  if (auto it = cl.flags.find("collector"); it != cl.flags.end()) {
    if (it->second.empty()) return UsageError{"--collector needs an address such as host:50051"};
    out->collector = it->second;
  }
  out->token = std::string(env_token);
  if (auto it = cl.flags.find("token"); it != cl.flags.end()) out->token = it->second;
  out->timeout = kDefaultTimeout;
  if (auto it = cl.flags.find("timeout"); it != cl.flags.end()) {
    if (!absl::ParseDuration(it->second, &out->timeout) || out->timeout <= absl::ZeroDuration()) {
      return UsageError{absl::StrCat("--timeout: \"", it->second,
                                     "\" is not a positive duration such as 10s or 1m")};
    }
  }
  out->stub = hookrelay::v1::Admin::NewStub(
      grpc::CreateChannel(out->collector, grpc::InsecureChannelCredentials()));
  return std::nullopt;
}

// "hookrelayctl: <what> <collector>: <CODE>: <message>"
int RpcFailed(std::ostream& err, std::string_view what, const Connection& conn,
              const grpc::Status& status) {
  const absl::Status s = common::FromGrpcStatus(status);
  err << "hookrelayctl: " << what << " " << conn.collector << ": "
      << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
  return kExitFailure;
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

int List(const CommandLine& cl, std::string_view env_token, std::ostream& out, std::ostream& err,
         std::optional<UsageError>* usage) {
  hookrelay::v1::ListDeadLettersRequest request;
  if ((*usage = CheckScope(cl, "dead-letters list", kListFlags))) return kExitUsage;
  if ((*usage = ParseFilter(cl, request.mutable_filter()))) return kExitUsage;
  int64_t limit = kDefaultLimit;
  if (auto it = cl.flags.find("limit"); it != cl.flags.end()) {
    if (!absl::SimpleAtoi(it->second, &limit) || limit < 1) {
      *usage = UsageError{absl::StrCat("--limit: \"", it->second, "\" is not a number >= 1")};
      return kExitUsage;
    }
  }
  const bool json = cl.Bool("json");
  Connection conn;
  if ((*usage = Connect(cl, env_token, &conn))) return kExitUsage;

  simdjson::dom::parser parser;
  std::vector<std::vector<std::string>> rows = {
      {"ID", "DESTINATION", "TYPE", "MESSAGE ID", "DIED", "ATTEMPTS", "REASON"}};
  int64_t printed = 0;
  bool more = false;
  while (true) {
    request.set_page_size(static_cast<int32_t>(std::min(limit - printed, kMaxPageSize)));
    hookrelay::v1::ListDeadLettersResponse response;
    grpc::ClientContext context;
    conn.Prepare(context);
    const grpc::Status status = conn.stub->ListDeadLetters(&context, request, &response);
    if (!status.ok()) {
      out.flush();  // JSON lines of earlier pages stay printed.
      return RpcFailed(err, "listing dead letters at", conn, status);
    }
    for (const Job& job : response.jobs()) {
      if (json) {
        out << JsonLine(job, parser) << "\n";
      } else {
        rows.push_back(TableRow(job));
      }
    }
    printed += response.jobs_size();
    if (response.next_page_token().empty()) break;
    if (printed >= limit || response.jobs_size() == 0) {
      more = true;
      break;
    }
    request.set_page_token(response.next_page_token());
  }
  if (!json) {
    if (printed == 0) {
      err << "no dead letters\n";
    } else {
      PrintTable(out, rows);
    }
  }
  if (more) {
    err << "hookrelayctl: showing the first " << printed
        << " dead letters; there are more (raise --limit)\n";
  }
  out.flush();
  return kExitOk;
}

int Replay(const CommandLine& cl, std::string_view env_token, std::ostream& out,
           std::ostream& err, std::optional<UsageError>* usage) {
  hookrelay::v1::ReplayDeadLettersRequest request;
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
  if ((*usage = ParseFilter(cl, request.mutable_filter()))) return kExitUsage;
  request.set_all(all);
  Connection conn;
  if ((*usage = Connect(cl, env_token, &conn))) return kExitUsage;

  hookrelay::v1::ReplayDeadLettersResponse response;
  grpc::ClientContext context;
  conn.Prepare(context);
  const grpc::Status status = conn.stub->ReplayDeadLetters(&context, request, &response);
  if (!status.ok()) return RpcFailed(err, "replaying dead letters at", conn, status);
  out << "replayed " << response.replayed() << " dead letters\n";
  out.flush();
  return kExitOk;
}

int Health(const CommandLine& cl, std::string_view env_token, std::ostream& out,
           std::ostream& err, std::optional<UsageError>* usage) {
  if ((*usage = CheckScope(cl, "health", kHealthFlags))) return kExitUsage;
  Connection conn;
  if ((*usage = Connect(cl, env_token, &conn))) return kExitUsage;
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(conn.collector, grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest request;
  if (auto it = cl.flags.find("service"); it != cl.flags.end()) request.set_service(it->second);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  conn.Prepare(context);
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return RpcFailed(err, "checking the health of", conn, status);
  out << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) << "\n";
  out.flush();
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk
                                                                              : kExitFailure;
}

}  // namespace

int Run(const std::vector<std::string>& args, std::string_view env_token, std::ostream& out,
        std::ostream& err) {
  CommandLine cl;
  std::optional<UsageError> usage = Parse(args, &cl);
  int code = kExitUsage;
  if (!usage.has_value()) {
    if (cl.Bool("help")) {
      out << kUsage;
      return kExitOk;
    }
    const std::vector<std::string>& pos = cl.positional;
    if (pos.empty()) {
      usage = UsageError{"no command given"};
    } else if (pos[0] == "help") {
      out << kUsage;
      return kExitOk;
    } else if (pos[0] == "health") {
      if (pos.size() > 1) {
        usage = UsageError{absl::StrCat("unexpected argument \"", pos[1], "\"")};
      } else {
        code = Health(cl, env_token, out, err, &usage);
      }
    } else if (pos[0] != "dead-letters") {
      usage = UsageError{absl::StrCat("unknown command \"", pos[0], "\"")};
    } else if (pos.size() == 1) {
      usage = UsageError{"dead-letters needs a command: list or replay"};
    } else if (pos.size() > 2) {
      usage = UsageError{absl::StrCat("unexpected argument \"", pos[2], "\"")};
    } else if (pos[1] == "list") {
      code = List(cl, env_token, out, err, &usage);
    } else if (pos[1] == "replay") {
      code = Replay(cl, env_token, out, err, &usage);
    } else {
      usage = UsageError{absl::StrCat("unknown command \"dead-letters ", pos[1], "\"")};
    }
  }
  if (usage.has_value()) {
    err << "hookrelayctl: " << usage->message << "\n\n" << kUsage;
    return kExitUsage;
  }
  return code;
}

}  // namespace hookrelay::hookrelayctl
