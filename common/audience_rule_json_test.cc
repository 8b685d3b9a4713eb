#include "common/audience_rule_json.h"

#include <google/protobuf/util/json_util.h>

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::common {
namespace {

using ::testing::HasSubstr;

hookrelay::v1::AudienceRule ParseRule(const std::string& json) {
  hookrelay::v1::AudienceRule rule;
  google::protobuf::util::JsonParseOptions options;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &rule, options).ok()) << json;
  return rule;
}

// The shorthand becomes the canonical shape: the same AudienceRule as written canonically.
TEST(AudienceRuleJsonTest, ShorthandBecomesMatchAndConditions) {
  const std::string canonical =
      R"({"match":"any","conditions":[{"trait":"plan","op":"eq","value":"pro"},)"
      R"({"event":"Order Completed","countGte":3,"within":"30d"}]})";
  absl::StatusOr<std::string> from_shorthand = CanonicalRuleJson(
      R"({"any":[{"trait":"plan","op":"eq","value":"pro"},)"
      R"({"event":"Order Completed","countGte":3,"within":"30d"}]})");
  ASSERT_TRUE(from_shorthand.ok()) << from_shorthand.status();
  EXPECT_EQ(ParseRule(*from_shorthand).SerializeAsString(),
            ParseRule(canonical).SerializeAsString());
  // The canonical shape and text that is not an object pass through unchanged.
  EXPECT_EQ(*CanonicalRuleJson(canonical), canonical);
  EXPECT_EQ(*CanonicalRuleJson("[1"), "[1");
}

// Inside an audience body only `rule` is rewritten; the other members keep their values.
TEST(AudienceRuleJsonTest, AudienceBodyRuleIsRewritten) {
  absl::StatusOr<std::string> body = CanonicalAudienceJson(
      R"({"name":"Pro","sources":["web"],"rule":{"all":[{"trait":"plan","op":"exists"}]}})");
  ASSERT_TRUE(body.ok()) << body.status();
  hookrelay::v1::Audience audience;
  google::protobuf::util::JsonParseOptions options;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*body, &audience, options).ok()) << *body;
  EXPECT_EQ(audience.name(), "Pro");
  EXPECT_EQ(audience.sources(0), "web");
  EXPECT_EQ(audience.rule().match(), "all");
  ASSERT_EQ(audience.rule().conditions_size(), 1);
  EXPECT_EQ(audience.rule().conditions(0).trait(), "plan");
}

// Both shorthands, or the shorthand mixed with the canonical keys, are refused naming the field.
TEST(AudienceRuleJsonTest, AmbiguousRulesAreRefused) {
  absl::StatusOr<std::string> both = CanonicalRuleJson(R"({"all":[],"any":[]})");
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(both.status().message()), HasSubstr("rule: give \"all\" or \"any\""));
  absl::StatusOr<std::string> mixed =
      CanonicalAudienceJson(R"({"rule":{"match":"all","all":[]}})");
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mixed.status().message()), HasSubstr("give match and conditions"));
  absl::StatusOr<std::string> not_list = CanonicalRuleJson(R"({"all":{"trait":"x"}})", "--rule");
  EXPECT_EQ(not_list.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(not_list.status().message()),
              HasSubstr("--rule.all: expected a list of conditions"));
}

}  // namespace
}  // namespace hookrelay::common
