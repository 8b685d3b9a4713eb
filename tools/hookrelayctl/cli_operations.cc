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

// dead letters and deletion requests.
namespace hookrelay::hookrelayctl::internal {

using ::hookrelay::v1::Job;

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

}  // namespace hookrelay::hookrelayctl::internal
