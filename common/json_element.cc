#include "common/json_element.h"

#include <cstdint>
#include <string_view>

#include "common/json_writer.h"

namespace hookrelay::common {

namespace dom = simdjson::dom;

void AppendJsonObject(std::string* out, dom::object object) {
  out->push_back('{');
  bool first = true;
  for (dom::key_value_pair field : object) {
    if (!first) out->push_back(',');
    first = false;
    AppendJsonString(out, field.key);
    out->push_back(':');
    AppendJsonElement(out, field.value);
  }
  out->push_back('}');
}

// The typed getters below cannot fail once the type has been switched on, so their results are
// read with value_unsafe() (the exception-free accessor).
void AppendJsonElement(std::string* out, dom::element e) {
  switch (e.type()) {
    case dom::element_type::OBJECT:
      // A named copy: a range-for over get_object().value_unsafe() would iterate a reference into
      // a temporary that dies before the loop body runs.
      AppendJsonObject(out, e.get_object().value_unsafe());
      break;
    case dom::element_type::ARRAY: {
      const dom::array array = e.get_array().value_unsafe();
      out->push_back('[');
      bool first = true;
      for (dom::element item : array) {
        if (!first) out->push_back(',');
        first = false;
        AppendJsonElement(out, item);
      }
      out->push_back(']');
      break;
    }
    case dom::element_type::STRING:
      AppendJsonString(out, e.get_string().value_unsafe());
      break;
    case dom::element_type::INT64:
      AppendJsonInt(out, e.get_int64().value_unsafe());
      break;
    case dom::element_type::UINT64:
      AppendJsonUint(out, e.get_uint64().value_unsafe());
      break;
    case dom::element_type::DOUBLE:
      AppendJsonDouble(out, e.get_double().value_unsafe());
      break;
    case dom::element_type::BOOL:
      out->append(e.get_bool().value_unsafe() ? "true" : "false");
      break;
    case dom::element_type::NULL_VALUE:
      out->append("null");
      break;
  }
}

}  // namespace hookrelay::common
