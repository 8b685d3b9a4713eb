#include "collector/routing/destination_filter.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "common/config.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::EventType;

// The filter of a one-destination config whose `filter:` is `yaml` (a flow mapping); the config
// must be valid, as the routing step only compiles valid filters.
CompiledFilter Compile(const std::string& yaml, FilterPathTable* paths = nullptr) {
  absl::StatusOr<hookrelay::v1::Config> config = common::ParseConfigYaml(absl::StrCat(
      "sources: [{id: web, write_keys: [wk]}]\n"
      "destinations:\n"
      "  - {id: d, type: webhooks, sources: [web], urls: [{url: 'https://h.example/'}],\n"
      "     filter: ",
      yaml, "}\n"));
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return CompiledFilter(hookrelay::v1::DestinationFilter());
  const absl::Status valid = common::ValidateConfig(*config);
  EXPECT_TRUE(valid.ok()) << valid;
  return CompiledFilter(config->destinations(0).filter(), paths);
}

FilterEvent Track(std::string_view event, std::string_view properties) {
  FilterEvent e;
  e.type = hookrelay::v1::TRACK;
  e.event = event;
  e.user_id = "u1";
  e.properties = properties;
  e.context = R"({"app":{"version":"2.1.0","build":42},"locale":"fr-FR"})";
  return e;
}

FilterVerdict Verdict(const CompiledFilter& f, const FilterEvent& e, int* failed = nullptr) {
  FilterInput input(e);
  return f.Evaluate(input, failed);
}

bool Passes(const std::string& where, std::string_view properties) {
  const CompiledFilter f = Compile(absl::StrCat("{where: [", where, "]}"));
  return Verdict(f, Track("E", properties)) == FilterVerdict::kPass;
}

// An empty filter lets everything through.
TEST(DestinationFilterTest, EmptyPassesEverything) {
  const CompiledFilter f = Compile("{}");
  EXPECT_TRUE(f.empty());
  FilterEvent identify;
  identify.type = hookrelay::v1::IDENTIFY;
  EXPECT_EQ(Verdict(f, identify), FilterVerdict::kPass);
  EXPECT_EQ(Verdict(f, Track("Anything", "")), FilterVerdict::kPass);
}

// types keeps only the listed ingest types.
TEST(DestinationFilterTest, Types) {
  const CompiledFilter f = Compile("{types: [track, page]}");
  EXPECT_FALSE(f.empty());
  EXPECT_EQ(Verdict(f, Track("E", "")), FilterVerdict::kPass);
  FilterEvent e;
  for (EventType t : {hookrelay::v1::IDENTIFY, hookrelay::v1::SCREEN, hookrelay::v1::GROUP,
                      hookrelay::v1::ALIAS}) {
    e.type = t;
    EXPECT_EQ(Verdict(f, e), FilterVerdict::kType) << t;
  }
  e.type = hookrelay::v1::PAGE;
  EXPECT_EQ(Verdict(f, e), FilterVerdict::kPass);
}

// events: exact names and prefixes ending in *; case sensitive; only track events pass.
TEST(DestinationFilterTest, EventNamesAndPrefixes) {
  const CompiledFilter f = Compile(R"({events: ["Order *", Signed Up]})");
  EXPECT_EQ(Verdict(f, Track("Order Completed", "")), FilterVerdict::kPass);
  EXPECT_EQ(Verdict(f, Track("Order ", "")), FilterVerdict::kPass);  // the prefix alone
  EXPECT_EQ(Verdict(f, Track("Order", "")), FilterVerdict::kEvent);   // shorter than the prefix
  EXPECT_EQ(Verdict(f, Track("order Completed", "")), FilterVerdict::kEvent);
  EXPECT_EQ(Verdict(f, Track("Signed Up", "")), FilterVerdict::kPass);
  EXPECT_EQ(Verdict(f, Track("Signed Up Twice", "")), FilterVerdict::kEvent);  // exact, not prefix
  EXPECT_EQ(Verdict(f, Track("Order *", "")), FilterVerdict::kPass);
  FilterEvent identify;
  identify.type = hookrelay::v1::IDENTIFY;
  EXPECT_EQ(Verdict(f, identify), FilterVerdict::kEvent);
  // A lone "*" is the empty prefix: every track event.
  const CompiledFilter all = Compile(R"({events: ["*"]})");
  EXPECT_EQ(Verdict(all, Track("x", "")), FilterVerdict::kPass);
  EXPECT_EQ(Verdict(all, identify), FilterVerdict::kEvent);
}

// eq and neq compare like with like: the number 2 is not the string "2"; 2 equals 2.0.
TEST(DestinationFilterTest, EqNeqNumbersVsStrings) {
  EXPECT_TRUE(Passes("{path: properties.plan, op: eq, value: pro}", R"({"plan":"pro"})"));
  EXPECT_FALSE(Passes("{path: properties.plan, op: eq, value: pro}", R"({"plan":"Pro"})"));
  EXPECT_TRUE(Passes("{path: properties.n, op: eq, value: 2}", R"({"n":2})"));
  EXPECT_TRUE(Passes("{path: properties.n, op: eq, value: 2}", R"({"n":2.0})"));
  EXPECT_FALSE(Passes("{path: properties.n, op: eq, value: 2}", R"({"n":"2"})"));
  EXPECT_FALSE(Passes("{path: properties.n, op: eq, value: '2'}", R"({"n":2})"));
  EXPECT_TRUE(Passes("{path: properties.n, op: eq, value: '2'}", R"({"n":"2"})"));
  EXPECT_TRUE(Passes("{path: properties.n, op: eq, value: -1}", R"({"n":-1})"));
  EXPECT_TRUE(Passes("{path: properties.big, op: eq, value: 18446744073709551615}",
                     R"({"big":18446744073709551615})"));
  EXPECT_TRUE(Passes("{path: properties.on, op: eq, value: true}", R"({"on":true})"));
  EXPECT_FALSE(Passes("{path: properties.on, op: eq, value: true}", R"({"on":"true"})"));
  EXPECT_FALSE(Passes("{path: properties.plan, op: eq, value: pro}", R"({})"));
  EXPECT_TRUE(Passes("{path: properties.plan, op: neq, value: pro}", R"({"plan":"free"})"));
  EXPECT_FALSE(Passes("{path: properties.plan, op: neq, value: pro}", R"({"plan":"pro"})"));
  EXPECT_TRUE(Passes("{path: properties.n, op: neq, value: 2}", R"({"n":"2"})"));
  // neq holds when the path is absent (missing key, null, or no properties at all).
  EXPECT_TRUE(Passes("{path: properties.plan, op: neq, value: pro}", R"({})"));
  EXPECT_TRUE(Passes("{path: properties.plan, op: neq, value: pro}", R"({"plan":null})"));
  EXPECT_TRUE(Passes("{path: properties.plan, op: neq, value: pro}", ""));
}

// gt gte lt lte compare numbers only; a string that looks like a number does not count.
TEST(DestinationFilterTest, OrderingOpsOnNumbers) {
  const char* total = R"({"total":10})";
  EXPECT_TRUE(Passes("{path: properties.total, op: gt, value: 9.5}", total));
  EXPECT_FALSE(Passes("{path: properties.total, op: gt, value: 10}", total));
  EXPECT_TRUE(Passes("{path: properties.total, op: gte, value: 10}", total));
  EXPECT_FALSE(Passes("{path: properties.total, op: gte, value: 10.01}", total));
  EXPECT_TRUE(Passes("{path: properties.total, op: lt, value: 11}", total));
  EXPECT_FALSE(Passes("{path: properties.total, op: lt, value: 10}", total));
  EXPECT_TRUE(Passes("{path: properties.total, op: lte, value: 10}", total));
  EXPECT_FALSE(Passes("{path: properties.total, op: lte, value: -3}", total));
  EXPECT_TRUE(Passes("{path: properties.total, op: lt, value: 0}", R"({"total":-0.5})"));
  EXPECT_FALSE(Passes("{path: properties.total, op: gt, value: 1}", R"({"total":"20"})"));
  EXPECT_FALSE(Passes("{path: properties.total, op: gt, value: 1}", R"({"total":true})"));
  EXPECT_FALSE(Passes("{path: properties.total, op: lt, value: 1}", R"({})"));
  EXPECT_FALSE(Passes("{path: properties.total, op: lt, value: 1}", R"({"total":null})"));
}

// in: equal to any element of the list, each compared like with like.
TEST(DestinationFilterTest, InLists) {
  const std::string in = "{path: properties.plan, op: in, value: [pro, team, 3, false]}";
  EXPECT_TRUE(Passes(in, R"({"plan":"team"})"));
  EXPECT_TRUE(Passes(in, R"({"plan":3})"));
  EXPECT_TRUE(Passes(in, R"({"plan":false})"));
  EXPECT_FALSE(Passes(in, R"({"plan":"3"})"));
  EXPECT_FALSE(Passes(in, R"({"plan":"free"})"));
  EXPECT_FALSE(Passes(in, R"({"plan":["pro"]})"));
  EXPECT_FALSE(Passes(in, R"({})"));
}

// exists: present and not null, whatever the value's type.
TEST(DestinationFilterTest, Exists) {
  const std::string exists = "{path: properties.coupon, op: exists}";
  EXPECT_TRUE(Passes(exists, R"({"coupon":""})"));
  EXPECT_TRUE(Passes(exists, R"({"coupon":0})"));
  EXPECT_TRUE(Passes(exists, R"({"coupon":{}})"));
  EXPECT_FALSE(Passes(exists, R"({"coupon":null})"));
  EXPECT_FALSE(Passes(exists, R"({"other":1})"));
  EXPECT_FALSE(Passes(exists, ""));
  // The root itself.
  EXPECT_TRUE(Passes("{path: properties, op: exists}", R"({})"));
  EXPECT_FALSE(Passes("{path: properties, op: exists}", ""));
}

// contains: a substring of a string, or an equal element of a list; nothing else.
TEST(DestinationFilterTest, Contains) {
  const std::string c = "{path: properties.tags, op: contains, value: vip}";
  EXPECT_TRUE(Passes(c, R"({"tags":"a vip customer"})"));
  EXPECT_FALSE(Passes(c, R"({"tags":"VIP"})"));
  EXPECT_TRUE(Passes(c, R"({"tags":["new","vip"]})"));
  EXPECT_FALSE(Passes(c, R"({"tags":["new","vips"]})"));
  EXPECT_FALSE(Passes(c, R"({"tags":7})"));
  EXPECT_FALSE(Passes(c, R"({})"));
}

// Nested paths walk objects; a key under a non-object, or a missing level, is absent.
TEST(DestinationFilterTest, NestedPathsInEveryMap) {
  const CompiledFilter f = Compile(
      "{where: [{path: context.app.version, op: eq, value: '2.1.0'},"
      " {path: context.app.build, op: gte, value: 40}]}");
  EXPECT_EQ(Verdict(f, Track("E", "")), FilterVerdict::kPass);
  FilterEvent other = Track("E", "");
  other.context = R"({"app":{"version":"2.0.0","build":42}})";
  int failed = -1;
  EXPECT_EQ(Verdict(f, other, &failed), FilterVerdict::kWhere);
  EXPECT_EQ(failed, 0);
  other.context = R"({"app":{"version":"2.1.0","build":39}})";
  EXPECT_EQ(Verdict(f, other, &failed), FilterVerdict::kWhere);
  EXPECT_EQ(failed, 1);
  other.context = R"({"app":"2.1.0"})";  // app is no object
  EXPECT_EQ(Verdict(f, other), FilterVerdict::kWhere);

  EXPECT_TRUE(Passes("{path: properties.a.b.c, op: eq, value: 1}", R"({"a":{"b":{"c":1}}})"));
  EXPECT_FALSE(Passes("{path: properties.a.b.c, op: exists}", R"({"a":{"b":1}})"));
  EXPECT_FALSE(Passes("{path: properties.a.b, op: exists}", R"({"a":[{"b":1}]})"));

  const CompiledFilter traits = Compile("{where: [{path: traits.email, op: contains, value: '@'}]}");
  FilterEvent identify;
  identify.type = hookrelay::v1::IDENTIFY;
  identify.traits = R"({"email":"a@example.com"})";
  EXPECT_EQ(Verdict(traits, identify), FilterVerdict::kPass);
  identify.traits = R"({"email":"nobody"})";
  EXPECT_EQ(Verdict(traits, identify), FilterVerdict::kWhere);
}

// The top-level strings (event, userId, ...) are roots of their own; empty means absent.
TEST(DestinationFilterTest, TopLevelStrings) {
  EXPECT_TRUE(Passes("{path: userId, op: eq, value: u1}", ""));
  EXPECT_FALSE(Passes("{path: userId, op: eq, value: u2}", ""));
  EXPECT_TRUE(Passes("{path: event, op: in, value: [x, E]}", ""));
  EXPECT_TRUE(Passes("{path: event, op: contains, value: E}", ""));
  EXPECT_FALSE(Passes("{path: anonymousId, op: exists}", ""));
  EXPECT_TRUE(Passes("{path: anonymousId, op: neq, value: a}", ""));
  EXPECT_FALSE(Passes("{path: userId, op: gt, value: 0}", ""));
  EXPECT_FALSE(Passes("{path: userId, op: eq, value: 1}", ""));  // a number is no string
}

// All conditions must hold; the first failing one is reported; types and events come first.
TEST(DestinationFilterTest, AllMustHoldAndTheFirstFailureIsNamed) {
  const CompiledFilter f = Compile(
      "{types: [track], events: ['Order *'], where: [{path: properties.plan, op: eq, value: pro},"
      " {path: properties.total, op: gt, value: 100}, {path: context.locale, op: exists}]}");
  EXPECT_EQ(Verdict(f, Track("Order Completed", R"({"plan":"pro","total":101})")),
            FilterVerdict::kPass);
  int failed = -1;
  EXPECT_EQ(Verdict(f, Track("Order Completed", R"({"plan":"pro","total":99})"), &failed),
            FilterVerdict::kWhere);
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(Verdict(f, Track("Signed Up", R"({"plan":"pro","total":101})")), FilterVerdict::kEvent);
  FilterEvent page;
  page.type = hookrelay::v1::PAGE;
  EXPECT_EQ(Verdict(f, page), FilterVerdict::kType);

  FilterEvent e = Track("Order Completed", R"({"plan":"free","total":101})");
  FilterInput input(e);
  const CompiledFilter::Explanation why = f.Explain(input);
  EXPECT_EQ(why.verdict, FilterVerdict::kWhere);
  EXPECT_EQ(why.failed, "where[0]");
  EXPECT_EQ(why.reason, "properties.plan does not satisfy eq");
  FilterEvent signed_up = Track("Signed Up", "");
  FilterInput input2(signed_up);
  EXPECT_EQ(f.Explain(input2).failed, "events");
  EXPECT_THAT(f.Explain(input2).reason, ::testing::HasSubstr("\"Signed Up\" matches none"));
  FilterInput input3(page);
  EXPECT_EQ(f.Explain(input3).failed, "types");
  EXPECT_EQ(f.Explain(input3).reason, "type page is not one of the filter's types");
}

// Properties that are not a JSON object (a front end never sends them, but the filter must not
// trust that) read as absent.
TEST(DestinationFilterTest, UnreadableMapIsAbsent) {
  EXPECT_FALSE(Passes("{path: properties.a, op: exists}", "[1,2]"));
  EXPECT_FALSE(Passes("{path: properties.a, op: exists}", "{not json"));
  EXPECT_TRUE(Passes("{path: properties.a, op: neq, value: 1}", "{not json"));
}

// One FilterInput serves every destination of an event: a path looked up for one filter is
// reused by the next (same FilterPathTable) with its own values; a filter without a table looks
// paths up each time.
TEST(DestinationFilterTest, OneInputServesManyFilters) {
  FilterPathTable paths;
  const CompiledFilter pro =
      Compile("{where: [{path: properties.plan, op: eq, value: pro}]}", &paths);
  const CompiledFilter free =
      Compile("{where: [{path: properties.plan, op: eq, value: free}]}", &paths);
  const CompiledFilter not_pro = Compile(
      "{where: [{path: properties.plan, op: exists}, {path: properties.plan, op: neq, value: pro}]}",
      &paths);
  std::string many = "{where: [";
  std::string properties = "{";
  for (int i = 0; i < 20; ++i) {
    absl::StrAppend(&many, i ? "," : "", "{path: properties.k", i, ", op: eq, value: ", i, "}");
    absl::StrAppend(&properties, i ? "," : "", "\"k", i, "\":", i);
  }
  many += "]}";
  properties += R"(,"plan":"pro"})";
  const CompiledFilter twenty = Compile(many, &paths);
  const CompiledFilter uncached = Compile("{where: [{path: properties.k19, op: eq, value: 19}]}");
  FilterEvent e = Track("E", properties);
  FilterInput input(e);
  EXPECT_EQ(pro.Evaluate(input), FilterVerdict::kPass);
  EXPECT_EQ(free.Evaluate(input), FilterVerdict::kWhere);
  EXPECT_EQ(not_pro.Evaluate(input), FilterVerdict::kWhere);
  EXPECT_EQ(twenty.Evaluate(input), FilterVerdict::kPass);
  EXPECT_EQ(twenty.Evaluate(input), FilterVerdict::kPass);
  EXPECT_EQ(pro.Evaluate(input), FilterVerdict::kPass);
  EXPECT_EQ(uncached.Evaluate(input), FilterVerdict::kPass);  // no table: looked up each time
  FilterEvent off = Track("E", R"({"k19":18,"plan":"free"})");
  FilterInput other(off);
  int failed = -1;
  EXPECT_EQ(twenty.Evaluate(other, &failed), FilterVerdict::kWhere);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(free.Evaluate(other), FilterVerdict::kPass);
}

// Maps are read as JSON text: escapes in keys and values are resolved before comparing, spaces
// between tokens do not matter, the first of repeated keys counts, a path may end in an object
// that other paths go into, and a map that cannot be read is absent everywhere. Each case is
// checked with paths read one by one (no table) and all at once (a shared table).
TEST(DestinationFilterTest, MapsAreReadAsJsonText) {
  struct Case {
    std::string where;
    std::string properties;
    bool passes;
  };
  const std::vector<Case> cases = {
      {"{path: properties.name, op: eq, value: 'café'}", R"({"name":"caf\u00e9"})", true},
      {"{path: properties.name, op: eq, value: 'a\"b'}", R"({"name":"a\"b"})", true},
      {"{path: properties.name, op: eq, value: 'a\\b'}", R"({"name":"a\\b"})", true},
      {"{path: properties.name, op: eq, value: '😀'}", R"({"name":"\ud83d\ude00"})", true},
      {"{path: properties.name, op: exists}", R"({"name":"\ud83d"})", false},  // lone surrogate
      {"{path: properties.name, op: exists}", R"({"name":"\q"})", false},      // no such escape
      {"{path: properties.plan, op: eq, value: pro}", R"({"pl\u0061n":"pro"})", true},
      {"{path: properties.plan, op: eq, value: pro}", R"({"x":"a\"plan\":","plan":"pro"})", true},
      {"{path: properties.plan, op: eq, value: pro}", " {\n \"plan\" :\t\"pro\" } ", true},
      {"{path: properties.plan, op: eq, value: pro}", R"({"plan":"pro","plan":"free"})", true},
      {"{path: properties.plan, op: eq, value: pro}", R"({"skip":{"plan":"free","a":[1,{"b":"}"}]},"plan":"pro"})", true},
      {"{path: properties.n, op: eq, value: 1500}", R"({"n":1.5e3})", true},
      // Plain decimals are read exactly as the configuration's values are.
      {"{path: properties.n, op: eq, value: 0.3}", R"({"n":0.3})", true},
      {"{path: properties.n, op: eq, value: 0.1}", R"({"n":0.10})", true},
      {"{path: properties.n, op: eq, value: -27.5}", R"({"n":-27.5})", true},
      {"{path: properties.n, op: eq, value: 123456789.012345}", R"({"n":123456789.012345})", true},
      {"{path: properties.n, op: eq, value: 1.0000000000000002}", R"({"n":1.0000000000000002})", true},
      {"{path: properties.n, op: gt, value: 1}", R"({"n":1.0000000000000002})", true},
      {"{path: properties.n, op: eq, value: 9007199254740993}", R"({"n":9007199254740993})", true},
      {"{path: properties.n, op: exists}", R"({"n":-})", false},
      {"{path: properties.n, op: exists}", R"({"n":1.})", false},
      {"{path: properties.n, op: lt, value: 0}", R"({"n":-2E-2})", true},
      {"{path: properties.n, op: exists}", R"({"n":1e999})", false},  // out of range: unreadable
      {"{path: properties.n, op: exists}", R"({"n":tru})", false},
      {"{path: properties.n, op: exists}", R"({"n":})", false},
      {"{path: properties.n, op: exists}", R"({"n":1)", true},  // read only as far as needed
      {"{path: properties.tags, op: contains, value: 'é'}", R"({"tags":[1,{"é":1},"\u00e9"]})", true},
      {"{path: properties.tags, op: contains, value: b}", R"({"tags":[ "a" , "b" ]})", true},
      {"{path: properties.tags, op: contains, value: c}", R"({"tags":[]})", false},
      {"{path: properties.tags, op: contains, value: c}", R"({"tags":["a",})", false},
      {"{path: properties.a, op: exists}, {path: properties.a.b, op: eq, value: 1}", R"({"a":{"b":1}})", true},
      {"{path: properties.a.b, op: eq, value: 1}, {path: properties.a, op: exists}", R"({"a":{"b":1}})", true},
      {"{path: properties.a.b, op: exists}, {path: properties.a.c, op: exists}", R"({"a":{"b":1},"a":{"c":1}})", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.where + " on " + c.properties);
    const CompiledFilter alone = Compile(absl::StrCat("{where: [", c.where, "]}"));
    FilterPathTable paths;
    const CompiledFilter shared = Compile(absl::StrCat("{where: [", c.where, "]}"), &paths);
    const FilterEvent e = Track("E", c.properties);
    EXPECT_EQ(Verdict(alone, e) == FilterVerdict::kPass, c.passes);
    EXPECT_EQ(Verdict(shared, e) == FilterVerdict::kPass, c.passes);
  }
}

// A FilterSet gives every destination the verdict its own filter gives, for filters built at
// random from every op on shared paths (grouped, indexed by value, one by one) and on top-level
// strings, over random events; with more conditions than it groups; and with filters compiled
// without the shared table.
TEST(DestinationFilterTest, FilterSetAgreesWithEachFilter) {
  const std::vector<std::string> paths = {"properties.plan", "properties.total", "properties.tags",
                                          "context.app.version", "traits.email", "userId"};
  const std::vector<std::string> ops = {"eq", "neq", "in", "exists", "gt", "gte", "lt", "lte",
                                        "contains"};
  const std::vector<std::string> strings = {"pro", "team", "free", "2.1.0", "a@b", "u1"};
  std::mt19937 rng(20261127);
  auto pick = [&](const std::vector<std::string>& from) { return from[rng() % from.size()]; };
  auto condition = [&]() {
    const std::string path = pick(paths);
    std::string op = pick(ops);
    std::string value;
    if (op == "exists") return absl::StrCat("{path: ", path, ", op: exists}");
    if (op == "contains") return absl::StrCat("{path: ", path, ", op: contains, value: '", pick(strings), "'}");
    if (path == "userId" && op != "eq" && op != "neq" && op != "in") op = "eq";
    if (op == "gt" || op == "gte" || op == "lt" || op == "lte") {
      value = absl::StrCat(static_cast<int>(rng() % 5));
    } else if (op == "in") {
      value = absl::StrCat("['", pick(strings), "', '", pick(strings), "'",
                           rng() % 2 ? ", 3" : "", "]");
    } else {
      value = rng() % 3 == 0 ? absl::StrCat(static_cast<int>(rng() % 5)) : absl::StrCat("'", pick(strings), "'");
      if (path == "userId") value = absl::StrCat("'", pick(strings), "'");
    }
    return absl::StrCat("{path: ", path, ", op: ", op, ", value: ", value, "}");
  };
  auto filter_yaml = [&](int conditions) {
    std::string where;
    for (int i = 0; i < conditions; ++i) absl::StrAppend(&where, i ? ", " : "", condition());
    const std::string types = rng() % 4 == 0 ? "types: [identify], " : "";
    return absl::StrCat("{", types, "where: [", where, "]}");
  };
  auto event_text = [&](bool with) -> std::string {
    if (!with) return "";
    std::string text = "{";
    if (rng() % 4) absl::StrAppend(&text, R"("plan":")", pick(strings), R"(",)");
    if (rng() % 4) absl::StrAppend(&text, R"("total":)", rng() % 5, ",");
    if (rng() % 4) absl::StrAppend(&text, R"("tags":[")", pick(strings), R"(",3],)");
    if (rng() % 4) absl::StrAppend(&text, R"("email":")", pick(strings), R"(",)");
    if (rng() % 4) absl::StrAppend(&text, R"("app":{"version":")", pick(strings), R"("},)");
    absl::StrAppend(&text, R"("end":null})");
    return text;
  };
  for (int round = 0; round < 60; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    FilterPathTable table;
    const bool many = round % 10 == 9;  // beyond kMaxSlots: every filter on its own
    const bool no_table = round % 10 == 8;
    std::vector<std::unique_ptr<CompiledFilter>> owned;
    std::vector<const CompiledFilter*> filters;
    const int destinations = many ? 30 : 1 + static_cast<int>(rng() % 10);
    for (int d = 0; d < destinations; ++d) {
      if (rng() % 5 == 0) {
        filters.push_back(nullptr);
        continue;
      }
      owned.push_back(std::make_unique<CompiledFilter>(
          Compile(filter_yaml(many ? 10 : 1 + static_cast<int>(rng() % 4)), no_table ? nullptr : &table)));
      filters.push_back(owned.back().get());
    }
    const FilterSet set(filters);
    for (int n = 0; n < 40; ++n) {
      const std::string properties = event_text(rng() % 5 != 0);
      const std::string traits = event_text(rng() % 2 == 0);
      const std::string context = event_text(rng() % 5 != 0);
      FilterEvent e;
      e.type = rng() % 3 == 0 ? EventType::IDENTIFY : EventType::TRACK;
      e.event = "E";
      e.user_id = rng() % 2 ? "u1" : "";
      e.properties = properties;
      e.traits = traits;
      e.context = context;
      std::vector<FilterVerdict> together(filters.size());
      {
        FilterInput input(e);
        set.Evaluate(input, together.data());
      }
      for (size_t d = 0; d < filters.size(); ++d) {
        const FilterVerdict alone =
            filters[d] == nullptr ? FilterVerdict::kPass : Verdict(*filters[d], e);
        EXPECT_EQ(together[d], alone) << "destination " << d << " on " << properties << " / "
                                      << traits << " / " << context;
      }
    }
  }
}

TEST(DestinationFilterTest, VerdictNames) {
  EXPECT_EQ(FilterVerdictName(FilterVerdict::kPass), "pass");
  EXPECT_EQ(FilterVerdictName(FilterVerdict::kType), "type");
  EXPECT_EQ(FilterVerdictName(FilterVerdict::kEvent), "event");
  EXPECT_EQ(FilterVerdictName(FilterVerdict::kWhere), "where");
}

}  // namespace
}  // namespace hookrelay::collector
