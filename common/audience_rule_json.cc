#include "common/audience_rule_json.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hookrelay::common {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

// Rewrites `rule` in place. Returns true when it changed.
absl::StatusOr<bool> Rewrite(Struct& rule, const std::string& field) {
  auto& fields = *rule.mutable_fields();
  const bool all = fields.count("all") > 0;
  const bool any = fields.count("any") > 0;
  if (!all && !any) return false;
  if (all && any) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": give \"all\" or \"any\", not both"));
  }
  if (fields.count("match") > 0 || fields.count("conditions") > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": give match and conditions, or the shorthand {\"all\":[...]} / "
               "{\"any\":[...]}, not both"));
  }
  const std::string key = all ? "all" : "any";
  Value list = std::move(fields[key]);
  if (!list.has_list_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".", key, ": expected a list of conditions"));
  }
  fields.erase(key);
  fields["match"].set_string_value(key);
  fields["conditions"] = std::move(list);
  return true;
}

// Parses `json` into `out`; false when it is not a JSON object.
bool ParseObject(std::string_view json, Struct* out) {
  google::protobuf::util::JsonParseOptions options;
  return google::protobuf::util::JsonStringToMessage(std::string(json), out, options).ok();
}

std::string Print(const Struct& s) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(s, &out);
  return out;
}

}  // namespace

absl::StatusOr<std::string> CanonicalRuleJson(std::string_view rule_json, std::string_view field) {
  Struct rule;
  if (!ParseObject(rule_json, &rule)) return std::string(rule_json);
  absl::StatusOr<bool> changed = Rewrite(rule, std::string(field));
  if (!changed.ok()) return changed.status();
  return *changed ? Print(rule) : std::string(rule_json);
}

absl::StatusOr<std::string> CanonicalAudienceJson(std::string_view audience_json) {
  Struct audience;
  if (!ParseObject(audience_json, &audience)) return std::string(audience_json);
  auto it = audience.mutable_fields()->find("rule");
  if (it == audience.mutable_fields()->end() || !it->second.has_struct_value()) {
    return std::string(audience_json);
  }
  absl::StatusOr<bool> changed = Rewrite(*it->second.mutable_struct_value(), "rule");
  if (!changed.ok()) return changed.status();
  return *changed ? Print(audience) : std::string(audience_json);
}

}  // namespace hookrelay::common
