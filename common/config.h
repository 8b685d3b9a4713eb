// Loading the collector's configuration file (SPEC §8): the YAML given by --config is mapped
// field by field onto hookrelay.v1.Config and validated with ValidateConfig
// (common/config_validate.h), the same function the admin API uses.
//
// Error messages name the field path and the limit, list every problem, and never contain a
// write key, a shared secret or a header value.
//
// All functions are thread-compatible and free of global state; none throws.
#ifndef HOOKRELAY_COMMON_CONFIG_H_
#define HOOKRELAY_COMMON_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/config_validate.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::common {

// Maps the YAML text of SPEC §8 onto a Config. Structure only: unknown or duplicate keys, wrong
// types, unknown `kind` values and unparsable numbers are errors (InvalidArgument, every problem
// listed with its path and line); limits are left to ValidateConfig. Malformed YAML gives an
// InvalidArgument naming the line and column. An empty document is an empty Config.
absl::StatusOr<hookrelay::v1::Config> ParseConfigYaml(std::string_view yaml_text);
// Reads `path`, parses and validates it. Either the whole Config or an error: a file that cannot
// be read gives an error naming the path (NotFound, PermissionDenied, ...); parse and validation
// errors are InvalidArgument prefixed with the path.
absl::StatusOr<hookrelay::v1::Config> LoadConfigFile(const std::string& path);
}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_CONFIG_H_
