#include "common/json_writer.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace hookrelay::common {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) {
    return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
  };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c == 0xE0 && c1 < 0xA0) return 0;   // overlong
    if (c == 0xED && c1 >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c == 0xF0 && c1 < 0x90) return 0;  // overlong
    if (c == 0xF4 && c1 >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

constexpr char kHex[] = "0123456789abcdef";

// Whether any of the 8 bytes in `w` needs more than a copy: a control byte (< 0x20), '"', '\\',
// DEL or a byte >= 0x80 (UTF-8, checked byte by byte). Bitwise on the whole word ("SWAR"), with
// no carry between bytes, so the answer is exact: most strings (ids, names, ISO times) go 8
// bytes at a time.
inline bool WordNeedsWork(uint64_t w) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7FULL;
  const uint64_t low = w & kLow7;
  // Bytes >= 0x7F: the high bit, or low 7 bits all set (0x7F + 1 reaches the high bit).
  const uint64_t del_or_high = (w | (low + kOnes)) & kHigh;
  // Bytes < 0x20: high bit clear and low 7 bits + 0x60 not reaching 0x80.
  const uint64_t control = ~((low + 0x6060606060606060ULL) | w) & kHigh;
  // Bytes equal to '"' or '\\': a zero byte after the XOR.
  auto zero_byte = [&](uint64_t x) { return ~(((x & kLow7) + kLow7) | x) & kHigh; };
  const uint64_t quote = zero_byte(w ^ (kOnes * '"'));
  const uint64_t backslash = zero_byte(w ^ (kOnes * '\\'));
  return (del_or_high | control | quote | backslash) != 0;
}

}  // namespace

void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  size_t run_start = 0;
  size_t i = 0;
  auto flush = [&](size_t end) { out->append(s.data() + run_start, end - run_start); };
  while (i < s.size()) {
    if (s.size() - i >= 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (!WordNeedsWork(w)) {
        i += 8;
        continue;
      }
    }
    const auto c = static_cast<unsigned char>(s[i]);
    // DEL is valid in JSON strings but is a control character: escaped, like C0, so that logs
    // and bodies carry no raw control bytes.
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x7F) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(s, i);
      if (n != 0) {
        i += n;
        continue;
      }
      flush(i);
      out->append("\xEF\xBF\xBD");  // U+FFFD
      run_start = ++i;
      continue;
    }
    flush(i);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default: {
        const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
        out->append(esc, sizeof(esc));
      }
    }
    run_start = ++i;
  }
  flush(i);
  out->push_back('"');
}

void AppendJsonInt(std::string* out, int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

void AppendJsonUint(std::string* out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

void AppendJsonDouble(std::string* out, double v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {  // 2^53: exact integers
    AppendJsonInt(out, static_cast<int64_t>(v));
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (const char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

}  // namespace hookrelay::common
