// Bytes as a stored event's JSON, rendered into the webhook body (SPEC §5.1). Whatever renders
// must be valid JSON with a "type"; the one-shot and the reusable renderer must agree.
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "deliverer/renderer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view event_json(reinterpret_cast<const char*>(data), size);
  static hookrelay::deliverer::WebhookRenderer* const renderer =
      new hookrelay::deliverer::WebhookRenderer();
  std::string body;
  const absl::Status status = renderer->Render(event_json, &body);
  absl::StatusOr<std::string> once = hookrelay::deliverer::RenderWebhookBody(event_json);
  if (status.ok() != once.ok()) std::abort();
  if (!status.ok()) return 0;
  if (*once != body) std::abort();
  static simdjson::dom::parser* const check = new simdjson::dom::parser();
  simdjson::dom::element element;
  if (check->parse(body).get(element) != simdjson::SUCCESS) std::abort();
  std::string_view type;
  if (element["type"].get(type) != simdjson::SUCCESS) std::abort();
  return 0;
}
