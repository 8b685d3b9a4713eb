// hookrelayctl: the operator's command line over the collector's admin API. Everything but
// reading argv and the environment is in cli.{h,cc}; `hookrelayctl --help` shows the usage.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "tools/hookrelayctl/cli.h"

namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  hookrelay::hookrelayctl::Environment env;
  env.admin_url = Env("HOOKRELAY_ADMIN_URL");
  env.admin_token = Env("HOOKRELAY_ADMIN_TOKEN");
  env.admin_token_file = Env("HOOKRELAY_ADMIN_TOKEN_FILE");
  return hookrelay::hookrelayctl::Run(args, env, std::cout, std::cerr);
}
