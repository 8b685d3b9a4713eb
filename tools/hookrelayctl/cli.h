// hookrelayctl: the operator's command line over the collector's Admin gRPC API
// (proto/hookrelay/v1/admin.proto). `hookrelayctl --help` prints the usage (kUsage below).
//
//   hookrelayctl [--collector=HOST:PORT] [--token=T] [--timeout=10s] dead-letters list ...
//   hookrelayctl ... dead-letters replay (--all | --destination=ID [--from=TIME] [--to=TIME])
//
// Flags are parsed here rather than with absl flags: they are scoped to a subcommand, and a
// usage error must exit 2 (absl::ParseCommandLine exits 1 on an unknown flag).
#ifndef HOOKRELAY_TOOLS_HOOKRELAYCTL_CLI_H_
#define HOOKRELAY_TOOLS_HOOKRELAYCTL_CLI_H_

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace hookrelay::hookrelayctl {

// Exit codes.
inline constexpr int kExitOk = 0;
// The command could not be carried out: the collector refused it (gRPC status) or could not be
// reached.
inline constexpr int kExitFailure = 1;
// The command line is wrong; the usage is printed.
inline constexpr int kExitUsage = 2;

extern const char kUsage[];

// Runs one command. `args` is argv without the program name; `env_token` is
// $HOOKRELAY_ADMIN_TOKEN ("" when unset), used when --token is not given. Results go to `out`;
// errors go to `err` as "hookrelayctl: <message>". Returns the exit code. Blocks on the RPCs.
int Run(const std::vector<std::string>& args, std::string_view env_token, std::ostream& out,
        std::ostream& err);

}  // namespace hookrelay::hookrelayctl

#endif  // HOOKRELAY_TOOLS_HOOKRELAYCTL_CLI_H_
