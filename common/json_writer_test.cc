#include "common/json_writer.h"

#include <simdjson.h>

#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace hookrelay::common {
namespace {

std::string Quote(std::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

// Escapes the characters JSON requires and nothing else.
TEST(JsonWriterTest, EscapesStrings) {
  EXPECT_EQ(Quote("plain"), "\"plain\"");
  EXPECT_EQ(Quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(Quote("line\nfeed\ttab\r"), "\"line\\nfeed\\ttab\\r\"");
  EXPECT_EQ(Quote(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
  EXPECT_EQ(Quote("\x1f"), "\"\\u001f\"");
  EXPECT_EQ(Quote("caf\xC3\xA9 \xF0\x9F\x98\x80"), "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"");
}

// Invalid UTF-8 becomes U+FFFD so the output always parses.
TEST(JsonWriterTest, ReplacesInvalidUtf8) {
  EXPECT_EQ(Quote("a\xFF" "b"), "\"a\xEF\xBF\xBD" "b\"");
  EXPECT_EQ(Quote("\xC0\xAF"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");  // overlong '/'
  EXPECT_EQ(Quote("\xED\xA0\x80"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");  // surrogate
  simdjson::dom::parser parser;
  const std::string json = Quote("x\xE2\x82");  // truncated sequence
  EXPECT_EQ(parser.parse(json).error(), simdjson::SUCCESS);
}

// Integral doubles print as integers; others round-trip; non-finite become null.
TEST(JsonWriterTest, Numbers) {
  std::string out;
  AppendJsonDouble(&out, 3.0);
  EXPECT_EQ(out, "3");
  out.clear();
  AppendJsonDouble(&out, 0.1);
  EXPECT_EQ(out, "0.1");
  out.clear();
  AppendJsonDouble(&out, -1.5e300);
  EXPECT_EQ(std::stod(out), -1.5e300);
  out.clear();
  AppendJsonDouble(&out, std::numeric_limits<double>::infinity());
  EXPECT_EQ(out, "null");
  out.clear();
  AppendJsonInt(&out, INT64_MIN);
  EXPECT_EQ(out, "-9223372036854775808");
  out.clear();
  AppendJsonUint(&out, UINT64_MAX);
  EXPECT_EQ(out, "18446744073709551615");
}

// The object writer places commas and keys correctly.
TEST(JsonWriterTest, ObjectWriter) {
  std::string out;
  JsonObjectWriter w(&out);
  w.String("a", "x");
  w.Int("b", -2);
  w.Bool("c", true);
  w.Raw("d", "{\"e\":[1,2]}");
  w.Close();
  EXPECT_EQ(out, R"({"a":"x","b":-2,"c":true,"d":{"e":[1,2]}})");
}

TEST(JsonWriterTest, Utf8Helpers) {
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo"));
  EXPECT_FALSE(IsValidUtf8("h\xC3"));
  EXPECT_EQ(Utf8Length("h\xC3\xA9llo"), 5u);
}

}  // namespace
}  // namespace hookrelay::common

namespace hookrelay::common {
namespace {

// The one escaper of the project: \b and \f by name, DEL and other controls as \u00XX, NaN and
// infinities as null (JSON has no spelling for them).
TEST(JsonWriterTest, EscapesEveryControlCharacterAndNonFiniteNumbers) {
  std::string out;
  AppendJsonString(&out, std::string("\b\f\x7f\x01", 4));
  EXPECT_EQ(out, R"("\b\f\u007f\u0001")");
  for (double v : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity()}) {
    out.clear();
    AppendJsonDouble(&out, v);
    EXPECT_EQ(out, "null");
  }
}

// The word-at-a-time scan finds every byte that needs work wherever it sits in the word: each
// byte value at each offset of a 24-byte ASCII string (three words and the tail) comes out as the
// byte-by-byte rules say.
TEST(JsonWriterTest, EveryByteValueAtEveryOffset) {
  auto expected_for = [](unsigned char c) -> std::string {
    switch (c) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\n': return "\\n";
      case '\r': return "\\r";
      case '\t': return "\\t";
      case '\b': return "\\b";
      case '\f': return "\\f";
      default: break;
    }
    if (c < 0x20 || c == 0x7F) {
      static constexpr char kHexDigits[] = "0123456789abcdef";
      return std::string("\\u00") + kHexDigits[c >> 4] + kHexDigits[c & 0xF];
    }
    if (c >= 0x80) return "\xEF\xBF\xBD";  // a lone byte >= 0x80 is not UTF-8
    return std::string(1, static_cast<char>(c));
  };
  for (size_t length : {1u, 7u, 8u, 9u, 16u, 24u, 27u}) {
    for (size_t offset = 0; offset < length; ++offset) {
      for (int b = 0; b < 256; ++b) {
        std::string in(length, 'a');
        in[offset] = static_cast<char>(b);
        std::string out;
        AppendJsonString(&out, in);
        const std::string want = "\"" + std::string(offset, 'a') +
                                 expected_for(static_cast<unsigned char>(b)) +
                                 std::string(length - offset - 1, 'a') + "\"";
        ASSERT_EQ(out, want) << "byte " << b << " at " << offset << " of " << length;
      }
    }
  }
  // Valid multi-byte UTF-8 straddling a word boundary is copied as is.
  std::string out;
  AppendJsonString(&out, "abcdefg\xC3\xA9xyz\xE2\x82\xAC");  // é at bytes 7-8, € at 12-14
  EXPECT_EQ(out, "\"abcdefg\xC3\xA9xyz\xE2\x82\xAC\"");
}

}  // namespace
}  // namespace hookrelay::common
