// Bytes as the YAML config file: mapped onto hookrelay.v1.Config, then validated. Errors are fine;
// crashes, hangs and sanitizer reports are not. A config that validates must map again to the
// same thing (parsing is deterministic).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<hookrelay::v1::Config> config = hookrelay::common::ParseConfigYaml(yaml);
  if (!config.ok()) return 0;
  if (!hookrelay::common::ValidateConfig(*config).ok()) return 0;
  absl::StatusOr<hookrelay::v1::Config> again = hookrelay::common::ParseConfigYaml(yaml);
  if (!again.ok() || again->SerializeAsString() != config->SerializeAsString()) std::abort();
  return 0;
}
