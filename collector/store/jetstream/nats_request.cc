// NATS requests and their errors, for every part of the JetStream engine.
#include "collector/store/jetstream/nats_request.h"

#include <simdjson.h>

#include "absl/strings/str_cat.h"

namespace hookrelay::collector {

absl::Status NatsError(std::string_view what, natsStatus s) {
  return absl::UnavailableError(
      absl::StrCat("JetStream: ", std::string(what), ": ", natsStatus_GetText(s)));
}

PubAck ParsePubAck(const std::string& body) {
  PubAck ack;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body).get(doc) != simdjson::SUCCESS) {
    ack.error_code = -1;
    ack.error = "unreadable publish ack";
    return ack;
  }
  simdjson::dom::object error;
  if (doc["error"].get_object().get(error) == simdjson::SUCCESS) {
    int64_t code = -1;
    if (error["err_code"].get_int64().get(code) != simdjson::SUCCESS) code = -1;
    ack.error_code = code;
    std::string_view description;
    if (error["description"].get_string().get(description) != simdjson::SUCCESS) {
      description = "(no description)";
    }
    ack.error = std::string(description);
    return ack;
  }
  uint64_t seq = 0;
  if (doc["seq"].get_uint64().get(seq) != simdjson::SUCCESS) {
    ack.error_code = -1;
    ack.error = "publish ack without a sequence";
  }
  ack.seq = seq;
  return ack;
}

std::string NatsHeader(natsMsg* msg, const char* key) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, key, &value) != NATS_OK || value == nullptr) return "";
  return value;
}

jsPubOptions AsyncPublishOptions(absl::Duration wait) {
  jsPubOptions o;
  jsPubOptions_Init(&o);
  o.MaxWait = absl::ToInt64Milliseconds(wait);
  return o;
}

}  // namespace hookrelay::collector
