// hookrelayctl's parts, shared by the command files (cli_config.cc, cli_operations.cc,
// cli_audiences.cc) and cli.cc: the parsed command line, the admin API connection and the table
// and JSON printers. Not an API: only hookrelayctl's own files include it.
#ifndef HOOKRELAY_TOOLS_HOOKRELAYCTL_CLI_INTERNAL_H_
#define HOOKRELAY_TOOLS_HOOKRELAYCTL_CLI_INTERNAL_H_

#include <simdjson.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <google/protobuf/message.h>

#include "absl/status/statusor.h"

#include "hookrelay/v1/admin.pb.h"
#include "hookrelay/v1/job.pb.h"
#include "tools/hookrelayctl/admin_client.h"
#include "tools/hookrelayctl/cli.h"

namespace hookrelay::hookrelayctl::internal {

inline constexpr int64_t kDefaultLimit = 100;
inline constexpr int64_t kMaxPageSize = 1000;

using FlagNames = std::span<const std::string_view>;

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

// Settings shared by every admin call.
struct Context {
  std::optional<AdminClient> client;
  bool json = false;
  std::ostream* out;
  std::ostream* err;
};

bool Contains(FlagNames names, std::string_view name);
std::optional<UsageError> Parse(const std::vector<std::string>& args, CommandLine* out);
// The whole of a small JSON file named by a flag (--rule-file, --filter-file); at most 1 MiB.
absl::StatusOr<std::string> ReadRuleFile(const std::string& path);
// A usage error when a flag other than the global ones and `allowed` was given.
std::optional<UsageError> CheckScope(const CommandLine& cl, std::string_view command,
                                     FlagNames allowed);
// A usage error unless exactly `count` positional arguments follow position `first`.
std::optional<UsageError> Positional(const CommandLine& cl, size_t first, size_t count,
                                     std::string_view what);
std::optional<UsageError> Connect(const CommandLine& cl, const Environment& env, Context* ctx);
// Prints the API's error (with its field violations); returns kExitFailure.
int Failed(const Context& ctx, std::string_view what, const ApiError& e);

std::string ToJson(const google::protobuf::Message& m);
std::string TypeName(hookrelay::v1::EventType type);
std::string Iso(int64_t unix_ms);
// A table cell: one line, "-" when empty.
std::string Cell(std::string_view s);
size_t DisplayWidth(std::string_view s);
void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows);
std::vector<std::string> TableRow(const hookrelay::v1::Job& job);
std::string JsonLine(const hookrelay::v1::Job& job, simdjson::dom::parser& parser);
void PrintKeyValues(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& kv);
std::vector<std::pair<std::string, std::string>> SourceFields(
    const hookrelay::v1::SourceResource& s);
std::string UrlsCell(const hookrelay::v1::DestinationResource& d);
std::vector<std::pair<std::string, std::string>> DestinationFields(
    const hookrelay::v1::DestinationResource& d);

// The commands: each returns the exit status, or sets *usage for a usage error.
int Catalog(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage);
int Sources(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage);
int Destinations(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage);
int DeadLetters(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage);
int Deletions(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage);
int Audiences(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage);
int Health(const CommandLine& cl, Context& ctx, std::optional<UsageError>* usage);

}  // namespace hookrelay::hookrelayctl::internal

#endif  // HOOKRELAY_TOOLS_HOOKRELAYCTL_CLI_INTERNAL_H_
