// hookrelayctl's logic: parses the command line, calls the collector's admin JSON API (or its
// gRPC health service) and prints tables or JSON. Separate from main.cc so that it reads no
// global state; `hookrelayctl --help` shows the usage (kUsage).
#ifndef HOOKRELAY_TOOLS_HOOKRELAYCTL_CLI_H_
#define HOOKRELAY_TOOLS_HOOKRELAYCTL_CLI_H_

#include <ostream>
#include <string>
#include <vector>

namespace hookrelay::hookrelayctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

extern const char kUsage[];

// Settings taken from the environment; flags override them.
struct Environment {
  std::string admin_url;         // $HOOKRELAY_ADMIN_URL
  std::string admin_token;       // $HOOKRELAY_ADMIN_TOKEN
  std::string admin_token_file;  // $HOOKRELAY_ADMIN_TOKEN_FILE
};

int Run(const std::vector<std::string>& args, const Environment& env, std::ostream& out,
        std::ostream& err);

}  // namespace hookrelay::hookrelayctl

#endif  // HOOKRELAY_TOOLS_HOOKRELAYCTL_CLI_H_
