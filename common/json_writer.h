// Appends compact JSON to a std::string. Cheap enough for the ingest hot path: no allocation
// beyond the output buffer's growth. The caller is responsible for commas and structure; the
// JsonObjectWriter helper below handles the common "object of fields" case.
#ifndef HOOKRELAY_COMMON_JSON_WRITER_H_
#define HOOKRELAY_COMMON_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace hookrelay::common {

// Appends `s` as a quoted JSON string. `s` should be UTF-8; bytes that are not valid UTF-8 are
// replaced by U+FFFD so the output is always valid JSON.
void AppendJsonString(std::string* out, std::string_view s);
void AppendJsonInt(std::string* out, int64_t v);
void AppendJsonUint(std::string* out, uint64_t v);
// Shortest round-trip form; integral values print without a fraction ("3", not "3.0").
// NaN and infinities, which JSON cannot carry, print as null.
void AppendJsonDouble(std::string* out, double v);

// Writes `{"k":v,...}` field by field. Not thread-safe; one per output.
class JsonObjectWriter {
 public:
  explicit JsonObjectWriter(std::string* out) : out_(out) { out_->push_back('{'); }

  // Starts a field; the caller then appends exactly one JSON value.
  void Key(std::string_view key) {
    if (!first_) out_->push_back(',');
    first_ = false;
    AppendJsonString(out_, key);
    out_->push_back(':');
  }
  void String(std::string_view key, std::string_view value) {
    Key(key);
    AppendJsonString(out_, value);
  }
  void Int(std::string_view key, int64_t value) {
    Key(key);
    AppendJsonInt(out_, value);
  }
  void Bool(std::string_view key, bool value) {
    Key(key);
    out_->append(value ? "true" : "false");
  }
  // `json` must already be a valid JSON value.
  void Raw(std::string_view key, std::string_view json) {
    Key(key);
    out_->append(json);
  }
  void Close() { out_->push_back('}'); }

 private:
  std::string* out_;
  bool first_ = true;
};

// True when `s` is valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool IsValidUtf8(std::string_view s);
// Number of code points in valid UTF-8 `s`.
size_t Utf8Length(std::string_view s);

// Sets *out to what `write(std::string*)` appends to an empty string, with one allocation:
// written into a per-thread buffer that keeps its capacity, then copied. Appending to *out
// itself grows it by doubling: four or five reallocations and copies for a typical event's
// context object.
template <class Write>
void AssignWritten(std::string* out, Write&& write) {
  thread_local std::string scratch;
  scratch.clear();
  write(&scratch);
  out->assign(scratch);
}

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_JSON_WRITER_H_
