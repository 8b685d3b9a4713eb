// An audience rule has one shape everywhere (YAML, the admin API's JSON, hookrelayctl, the
// console): `{"match":"all"|"any","conditions":[...]}`, protobuf's JSON mapping of
// hookrelay.v1.AudienceRule, which is also what every answer prints. The shorthand
// `{"all":[...]}` / `{"any":[...]}` (the YAML file's older spelling) is accepted on input and
// rewritten to that shape here, before protobuf's JSON parser sees it.
//
// Pure functions; thread-safe.
#ifndef HOOKRELAY_COMMON_AUDIENCE_RULE_JSON_H_
#define HOOKRELAY_COMMON_AUDIENCE_RULE_JSON_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace hookrelay::common {

// `rule_json` (a JSON object) with the shorthand rewritten to match + conditions; unchanged when
// it has no `all` / `any` key or is not a JSON object (protobuf's parser then reports what is
// wrong). InvalidArgument, naming `field` (e.g. "rule"), when it has both `all` and `any`, mixes
// the shorthand with `match` / `conditions`, or a shorthand value is not a list; its message is
// always "<field path>: <problem>" (e.g. "rule.all: expected a list of conditions").
absl::StatusOr<std::string> CanonicalRuleJson(std::string_view rule_json,
                                              std::string_view field = "rule");

// The same for the `rule` member of an audience object (a create or update body).
absl::StatusOr<std::string> CanonicalAudienceJson(std::string_view audience_json);

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_AUDIENCE_RULE_JSON_H_
