// Bytes as (secret, message id, body), split at the first two NUL bytes: X-Signature must be 40
// lowercase hex digits and deterministic; the Standard Webhooks signature "v1," + base64 of 32
// bytes, with the id and timestamp passed through.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "deliverer/signer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  auto next = [&rest]() {
    const size_t nul = rest.find('\0');
    std::string_view part = rest.substr(0, nul);
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
    return part;
  };
  const std::string_view secret = next();
  const std::string_view id = next();
  const std::string_view body = rest;

  const std::string signature = hookrelay::deliverer::XSignature(secret, body);
  if (signature.size() != 40) std::abort();
  for (const char c : signature) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) std::abort();
  }
  if (hookrelay::deliverer::XSignature(secret, body) != signature) std::abort();

  const hookrelay::deliverer::StandardWebhookHeaderValues headers =
      hookrelay::deliverer::StandardWebhookHeaders(secret, id, 1700000000, body);
  if (headers.id != id || headers.timestamp != "1700000000") std::abort();
  if (headers.signature.rfind("v1,", 0) != 0) std::abort();
  std::string mac;
  if (!absl::Base64Unescape(headers.signature.substr(3), &mac) || mac.size() != 32) std::abort();
  return 0;
}
