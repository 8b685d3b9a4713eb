#include "common/check.h"

#include <cstdlib>

#include "common/log.h"

namespace hookrelay::common::internal {

void CheckFailed(std::string_view condition, std::string_view message, std::string_view file,
                 int line) {
  LogError("invariant violated",
           {{"condition", condition}, {"message", message}, {"file", file}, {"line", line}});
  std::abort();
}

}  // namespace hookrelay::common::internal
