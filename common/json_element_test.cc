#include "common/json_element.h"

#include <simdjson.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "common/json_writer.h"

namespace hookrelay::common {
namespace {

std::string RoundTrip(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  EXPECT_EQ(parser.parse(json.data(), json.size(), true).get(e), simdjson::SUCCESS) << json;
  std::string out;
  AppendJsonElement(&out, e);
  return out;
}

// The collector's writer output is a fixed point: every value kind comes back byte-for-byte.
TEST(JsonElementTest, WriterOutputIsAFixedPoint) {
  std::string json;
  common::JsonObjectWriter w(&json);
  w.String("s", "caf\xC3\xA9 \xF0\x9F\x98\x80 \"q\" \\ \n\t\x01\x7F");
  w.Int("neg", -42);
  w.Int("min", std::numeric_limits<int64_t>::min());
  w.Key("big");
  common::AppendJsonUint(&json, std::numeric_limits<uint64_t>::max());
  for (const double d : {3.14, 0.1, -2.5e-7, 1e300, 1e20, 123456789.125, 5.0}) {
    w.Key("d");
    common::AppendJsonDouble(&json, d);
  }
  w.Bool("t", true);
  w.Raw("n", "null");
  w.Raw("arr", "[1,\"two\",[],{},[3.5,{\"k k\":false}]]");
  w.Raw("nested", "{\"z\":1,\"a\":{\"y\":2,\"b\":3}}");
  w.Close();
  EXPECT_EQ(RoundTrip(json), json);
}

// Other spellings of the same values come out in the writer's canonical form.
TEST(JsonElementTest, CanonicalisesOtherSpellings) {
  EXPECT_EQ(RoundTrip(" { \"a\" : [ 1 , 2 ] ,\n\"b\":1.0, \"c\":1E3, \"d\":\"\\u00e9\\/\" } "),
            "{\"a\":[1,2],\"b\":1,\"c\":1000,\"d\":\"\xC3\xA9/\"}");
}

}  // namespace
}  // namespace hookrelay::common
