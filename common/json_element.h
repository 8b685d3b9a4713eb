// Writing a parsed simdjson DOM value back out as compact JSON.
//
// The collector stores events as compact JSON written by common/json_writer; that form is a fixed
// point of "parse with simdjson, write with AppendJsonElement" (strings are re-escaped the same
// way, integers print the same digits, doubles print in the same shortest round-trip form), so
// free-form maps copied through here come out byte-for-byte as they went in. Other spellings of
// the same value are canonicalised: whitespace is dropped, `1.0` and `1e0` print as `1`, `\u00e9`
// prints as the raw UTF-8 bytes. Key order and duplicate keys are kept as parsed.
//
// Thread-compatible; no allocation beyond the output's growth; never throws.
#ifndef HOOKRELAY_COMMON_JSON_ELEMENT_H_
#define HOOKRELAY_COMMON_JSON_ELEMENT_H_

#include <simdjson.h>

#include <string>

namespace hookrelay::common {

// Appends `e` as compact JSON. Recursion depth is bounded by the parser's maximum depth.
void AppendJsonElement(std::string* out, simdjson::dom::element e);
void AppendJsonObject(std::string* out, simdjson::dom::object o);

}  // namespace hookrelay::common

#endif  // HOOKRELAY_COMMON_JSON_ELEMENT_H_
