// demo_receiver: a webhook receiver for trying hookrelay by hand. Answers every request 200 and
// prints one line per request to stdout, e.g.
//   POST /hooks  track  messageId=ab12…  userId=u1  X-Signature: verified
// The X-Signature check recomputes HMAC-SHA1 over the received body with --secret: "verified",
// "MISMATCH", "absent" (no header), or "unchecked" (header present, no --secret given).
// The first line names the address listened on. SIGTERM/SIGINT exit 0.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

#include "common/secret_file.h"
#include "common/strings.h"
#include "deliverer/signer.h"
#include "tools/receiver/webhook_receiver.h"

ABSL_FLAG(std::string, address, "127.0.0.1:9000", "host:port to listen on; port 0 picks a free port");
ABSL_FLAG(std::string, secret, "",
          "the destination's shared secret, to verify X-Signature (empty: not checked)");
ABSL_FLAG(std::string, secret_file, "", "a file holding the shared secret (instead of --secret)");
ABSL_FLAG(bool, print_bodies, false, "print each request's body too, on the line after it");

namespace hookrelay::receiver {
namespace {

// `key=value` for a string field of the body's top-level object; "" when absent.
std::string Field(simdjson::dom::object& object, std::string_view key) {
  std::string_view value;
  if (object[key].get_string().get(value) != simdjson::SUCCESS) return "";
  return absl::StrCat("  ", common::ToAbsl(key), "=", absl::CHexEscape(common::ToAbsl(value)));
}

std::string Describe(const ReceivedRequest& request, const std::string& secret) {
  std::string line = absl::StrCat(absl::CHexEscape(request.method), " ",
                                  absl::CHexEscape(request.target));
  thread_local simdjson::dom::parser parser;
  simdjson::dom::object object;
  if (parser.parse(request.body).get_object().get(object) == simdjson::SUCCESS) {
    std::string_view type;
    if (object["type"].get_string().get(type) != simdjson::SUCCESS) type = "(no type)";
    absl::StrAppend(&line, "  ", absl::CHexEscape(common::ToAbsl(type)), Field(object, "messageId"));
    std::string user = Field(object, "userId");
    if (user.empty()) user = Field(object, "anonymousId");
    absl::StrAppend(&line, user);
  } else {
    absl::StrAppend(&line, "  (body is not a JSON object, ", request.body.size(), " bytes)");
  }
  const std::string signature = request.Header(deliverer::kSignatureHeader);
  std::string_view verdict;
  if (signature.empty()) {
    verdict = "absent";
  } else if (secret.empty()) {
    verdict = "unchecked";
  } else {
    verdict = absl::AsciiStrToLower(absl::StripAsciiWhitespace(signature)) ==
                      deliverer::XSignature(secret, request.body)
                  ? "verified"
                  : "MISMATCH";
  }
  absl::StrAppend(&line, "  ", deliverer::kSignatureHeader, ": ", common::ToAbsl(verdict), "\n");
  return line;
}

}  // namespace
}  // namespace hookrelay::receiver

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("demo webhook receiver: prints each request, answers 200");
  absl::ParseCommandLine(argc, argv);

  // Signals are taken synchronously by this thread; the receiver's threads inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string secret = absl::GetFlag(FLAGS_secret);
  if (const std::string file = absl::GetFlag(FLAGS_secret_file); !file.empty()) {
    absl::StatusOr<std::string> read = hookrelay::common::ReadSecretFile(file);
    if (!read.ok()) {
      std::cerr << "demo_receiver: " << read.status().message() << "\n";
      return 2;
    }
    secret = *std::move(read);
  }
  static absl::Mutex* const stdout_mu = new absl::Mutex();
  hookrelay::receiver::WebhookReceiver::Options options;
  options.address = absl::GetFlag(FLAGS_address);
  options.record = false;
  auto receiver = hookrelay::receiver::WebhookReceiver::Start(
      options, [secret, bodies = absl::GetFlag(FLAGS_print_bodies)](
                   const hookrelay::receiver::ReceivedRequest& request) {
        std::string line = hookrelay::receiver::Describe(request, secret);
        if (bodies) {
          // JSON as received; control bytes (never in valid JSON) are shown as '?'.
          std::string body = request.body;
          for (char& c : body) {
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
          }
          absl::StrAppend(&line, "    ", body, "\n");
        }
        {
          absl::MutexLock lock(stdout_mu);
          std::fwrite(line.data(), 1, line.size(), stdout);
          std::fflush(stdout);
        }
        return hookrelay::receiver::Response{200, {{"Content-Type", "text/plain"}}, "ok", {}};
      });
  if (!receiver.ok()) {
    std::fprintf(stderr, "demo_receiver: %s\n", std::string(receiver.status().message()).c_str());
    return 1;
  }
  {
    absl::MutexLock lock(stdout_mu);
    std::printf("demo_receiver listening on %s (any path)\n", (*receiver)->Url("/").c_str());
    std::fflush(stdout);
  }
  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) == 0) break;
  }
  receiver->reset();
  return 0;
}
