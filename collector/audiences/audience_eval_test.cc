#include "collector/audiences/audience_eval.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "common/config_validate.h"
#include "hookrelay/v1/config.pb.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Audience;
using hookrelay::v1::Profile;
using hookrelay::v1::ProfileDelta;

const absl::Time kT0 = absl::FromUnixSeconds(20834LL * 86400);  // A UTC midnight.

Audience Parse(const std::string& json) {
  Audience a;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &a).ok()) << json;
  return a;
}

ProfileDelta Track(const std::string& event, absl::Time at, std::vector<int64_t> widths) {
  ProfileDelta d;
  d.set_event(event);
  for (int64_t w : widths) d.add_bucket_seconds(w);
  d.set_at_ms(absl::ToUnixMillis(at));
  return d;
}

ProfileDelta Identify(const std::string& traits_json, absl::Time at) {
  ProfileDelta d;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(traits_json, d.mutable_traits()).ok());
  d.set_at_ms(absl::ToUnixMillis(at));
  return d;
}

TEST(AudienceEvalTest, BucketWidthFollowsTheWindow) {
  EXPECT_EQ(BucketSecondsFor(absl::Minutes(15)), 60);
  EXPECT_EQ(BucketSecondsFor(absl::Hours(1)), 60);
  EXPECT_EQ(BucketSecondsFor(absl::Hours(2)), 3600);
  EXPECT_EQ(BucketSecondsFor(absl::Hours(48)), 3600);
  EXPECT_EQ(BucketSecondsFor(absl::Hours(24 * 30)), 86400);
}

// Traits merge shallowly; counts land in buckets; old buckets are dropped (bounded profile).
TEST(AudienceEvalTest, DeltasMergeAndProfilesStayBounded) {
  Profile p;
  ApplyProfileDelta(Identify(R"({"plan":"free","age":30})", kT0), p);
  ApplyProfileDelta(Identify(R"({"plan":"pro"})", kT0 + absl::Seconds(1)), p);
  EXPECT_EQ(p.traits().fields().at("plan").string_value(), "pro");
  EXPECT_EQ(p.traits().fields().at("age").number_value(), 30);
  for (int day = 0; day < 200; ++day) {
    ApplyProfileDelta(Track("Order", kT0 + absl::Hours(24 * day), {86400, 60}), p);
  }
  ASSERT_EQ(p.events_size(), 2);
  for (const auto& e : p.events()) {
    EXPECT_LE(e.starts_size(), e.bucket_seconds() == 86400 ? 92 : 62) << e.bucket_seconds();
    EXPECT_EQ(e.starts_size(), e.counts_size());
  }
  // An event arriving late lands in its own (older) bucket, in order.
  Profile q;
  ApplyProfileDelta(Track("A", kT0 + absl::Minutes(10), {60}), q);
  ApplyProfileDelta(Track("A", kT0 + absl::Minutes(5), {60}), q);
  ApplyProfileDelta(Track("A", kT0 + absl::Minutes(10), {60}), q);
  ASSERT_EQ(q.events(0).starts_size(), 2);
  EXPECT_LT(q.events(0).starts(0), q.events(0).starts(1));
  EXPECT_EQ(q.events(0).counts(1), 2u);
}

// Event counts over a window: entering at the threshold, leaving when buckets age out, and the
// recheck time is when the oldest counted bucket leaves.
TEST(AudienceEvalTest, EventCountWindowAndRecheck) {
  const Audience a = Parse(R"({"id":"a","name":"Buyers","sources":["web"],"rule":{"match":"all",
      "conditions":[{"event":"Order","count_gte":3,"within":"30d"}]}})");
  Profile p;
  for (int i = 0; i < 3; ++i) ApplyProfileDelta(Track("Order", kT0 + absl::Hours(24 * i), {86400}), p);
  Evaluation e = EvaluateAudience(a, {p}, kT0 + absl::Hours(24 * 2));
  EXPECT_TRUE(e.member);
  // The first day's bucket leaves 30 days after its end.
  EXPECT_EQ(e.recheck_at, kT0 + absl::Hours(24 * 31));
  EXPECT_TRUE(EvaluateAudience(a, {p}, kT0 + absl::Hours(24 * 31) - absl::Seconds(1)).member);
  e = EvaluateAudience(a, {p}, kT0 + absl::Hours(24 * 31));
  EXPECT_FALSE(e.member);
  EXPECT_EQ(e.recheck_at, kT0 + absl::Hours(24 * 32));
  // Two of them are not enough.
  Profile two;
  for (int i = 0; i < 2; ++i) ApplyProfileDelta(Track("Order", kT0, {86400}), two);
  EXPECT_FALSE(EvaluateAudience(a, {two}, kT0).member);
  // Counted over two sources' profiles together.
  EXPECT_TRUE(EvaluateAudience(a, {two, two}, kT0).member);
  // No profile: never a member.
  EXPECT_FALSE(EvaluateAudience(a, {}, kT0).member);
}

TEST(AudienceEvalTest, CountLteAndMinuteWindows) {
  const Audience a = Parse(R"({"id":"a","name":"Quiet","sources":["web"],"rule":{"match":"all",
      "conditions":[{"event":"Click","count_lte":1,"within":"15m"}]}})");
  Profile p;
  ApplyProfileDelta(Track("Click", kT0, {60}), p);
  ApplyProfileDelta(Track("Click", kT0 + absl::Minutes(1), {60}), p);
  Evaluation e = EvaluateAudience(a, {p}, kT0 + absl::Minutes(1));
  EXPECT_FALSE(e.member);
  EXPECT_EQ(e.recheck_at, kT0 + absl::Minutes(16));
  EXPECT_TRUE(EvaluateAudience(a, {p}, kT0 + absl::Minutes(16)).member);
}

TEST(AudienceEvalTest, TraitOperators) {
  Profile p;
  ApplyProfileDelta(Identify(R"({"plan":"pro","seats":12,"beta":true,"tags":["a","vip"],
                                 "email":"x@example.com","gone":null})", kT0), p);
  struct Case {
    std::string condition;
    bool member;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"trait":"plan","op":"eq","value":"pro"})", true},
           {R"({"trait":"plan","op":"eq","value":"free"})", false},
           {R"({"trait":"plan","op":"neq","value":"free"})", true},
           {R"({"trait":"missing","op":"neq","value":"x"})", true},
           {R"({"trait":"seats","op":"gt","value":10})", true},
           {R"({"trait":"seats","op":"gte","value":12})", true},
           {R"({"trait":"seats","op":"lt","value":12})", false},
           {R"({"trait":"seats","op":"lte","value":12})", true},
           {R"({"trait":"plan","op":"gt","value":1})", false},
           {R"({"trait":"beta","op":"eq","value":true})", true},
           {R"({"trait":"email","op":"contains","value":"@example."})", true},
           {R"({"trait":"tags","op":"contains","value":"vip"})", true},
           {R"({"trait":"tags","op":"contains","value":"v"})", false},
           {R"({"trait":"plan","op":"exists"})", true},
           {R"({"trait":"gone","op":"exists"})", false},
           {R"({"trait":"missing","op":"exists"})", false},
       }) {
    const Audience a = Parse(absl::StrCat(R"({"id":"a","name":"T","sources":["web"],"rule":{)",
                                          R"("match":"all","conditions":[)", c.condition, "]}}"));
    EXPECT_EQ(EvaluateAudience(a, {p}, kT0).member, c.member) << c.condition;
  }
}

TEST(AudienceEvalTest, AllAndAny) {
  Profile p;
  ApplyProfileDelta(Identify(R"({"plan":"pro"})", kT0), p);
  const std::string conditions =
      R"([{"trait":"plan","op":"eq","value":"pro"},{"event":"Order","count_gte":1,"within":"1h"}])";
  const Audience all = Parse(absl::StrCat(
      R"({"id":"a","name":"T","sources":["web"],"rule":{"match":"all","conditions":)", conditions,
      "}}"));
  const Audience any = Parse(absl::StrCat(
      R"({"id":"a","name":"T","sources":["web"],"rule":{"match":"any","conditions":)", conditions,
      "}}"));
  EXPECT_FALSE(EvaluateAudience(all, {p}, kT0).member);
  EXPECT_TRUE(EvaluateAudience(any, {p}, kT0).member);
}

// The newest profile's trait wins when an audience reads two sources.
TEST(AudienceEvalTest, TraitsAcrossSourcesNewestWins) {
  Profile web, ios;
  ApplyProfileDelta(Identify(R"({"plan":"free"})", kT0), web);
  ApplyProfileDelta(Identify(R"({"plan":"pro"})", kT0 + absl::Minutes(1)), ios);
  const Audience a = Parse(R"({"id":"a","name":"T","sources":["web","ios"],"rule":{"match":"all",
      "conditions":[{"trait":"plan","op":"eq","value":"pro"}]}})");
  EXPECT_TRUE(EvaluateAudience(a, {web, ios}, kT0).member);
  EXPECT_TRUE(EvaluateAudience(a, {ios, web}, kT0).member);
}

// Ingest records only what some audience reads.
TEST(AudienceEvalTest, InputsSelectWhatIngestRecords) {
  hookrelay::v1::Config config;
  *config.add_audiences() = Parse(R"({"id":"a","name":"T","sources":["web"],"rule":{"match":"any",
      "conditions":[{"event":"Order","count_gte":1,"within":"30d"},
                    {"event":"Order","count_gte":1,"within":"30m"},
                    {"trait":"plan","op":"exists"}]}})");
  const AudienceInputs inputs(config);
  ProfileDelta d;
  ASSERT_TRUE(inputs.DeltaFor("web", hookrelay::v1::TRACK, "Order", "", kT0, &d));
  EXPECT_EQ(d.event(), "Order");
  EXPECT_EQ(std::vector<int64_t>(d.bucket_seconds().begin(), d.bucket_seconds().end()),
            (std::vector<int64_t>{86400, 60}));
  EXPECT_FALSE(inputs.DeltaFor("web", hookrelay::v1::TRACK, "Other", "", kT0, &d));
  EXPECT_FALSE(inputs.DeltaFor("ios", hookrelay::v1::TRACK, "Order", "", kT0, &d));
  ProfileDelta other_source;  // Traits are kept for every source (an audience may come later).
  EXPECT_TRUE(inputs.DeltaFor("ios", hookrelay::v1::IDENTIFY, "", R"({"a":1})", kT0, &other_source));
  ProfileDelta t;
  ASSERT_TRUE(inputs.DeltaFor("web", hookrelay::v1::IDENTIFY, "", R"({"plan":"pro"})", kT0, &t));
  EXPECT_EQ(t.traits().fields().at("plan").string_value(), "pro");
  EXPECT_FALSE(inputs.DeltaFor("web", hookrelay::v1::IDENTIFY, "", "", kT0, &t));
  EXPECT_TRUE(AudienceInputs(hookrelay::v1::Config()).empty());
}

}  // namespace
}  // namespace hookrelay::collector
