// hookrelayctl: the operator's command line over the collector's Admin API. Everything but
// reading argv and the environment is in cli.{h,cc}; `hookrelayctl --help` shows the usage.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "tools/hookrelayctl/cli.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const char* token = std::getenv("HOOKRELAY_ADMIN_TOKEN");
  return hookrelay::hookrelayctl::Run(args, token != nullptr ? token : "", std::cout, std::cerr);
}
