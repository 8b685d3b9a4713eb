#include "collector/store/jetstream/nats_connect.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collector/store/jetstream/nkey.h"
#include "common/secret_file.h"

namespace hookrelay::collector {
namespace {

// Certificates, keys and creds files are small; anything larger is not one.
constexpr size_t kMaxPemBytes = 1 << 20;

// "--flag: <what>" with the status's code kept (NOT_FOUND for a missing file).
absl::Status FlagError(const char* flag, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(flag, ": ", status.message()));
}

// The first kMaxPemBytes of a file that must exist and be non-empty (a certificate, a key, a
// creds file). The message names the flag and the path, never the contents.
absl::StatusOr<std::string> ReadPemFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message = absl::StrCat(flag, ": cannot read ", path, ": ", strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::FailedPreconditionError(message);
  }
  std::string contents(kMaxPemBytes + 1, '\0');
  in.read(contents.data(), static_cast<std::streamsize>(contents.size()));
  contents.resize(static_cast<size_t>(in.gcount()));
  if (contents.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is over 1 MB"));
  }
  if (absl::StripAsciiWhitespace(contents).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  }
  return contents;
}

// A password, token or user name goes into the CONNECT JSON as is: quotes, backslashes and
// control characters would break it.
absl::Status CheckSendable(const char* flag, const std::string& value) {
  for (const char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || u < 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": holds a quote, a backslash or a control character, which the "
                             "NATS client cannot send"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSecret(const char* flag, const std::string& path) {
  absl::StatusOr<std::string> secret = common::ReadSecretFile(path);
  if (!secret.ok()) return FlagError(flag, secret.status());
  if (absl::Status s = CheckSendable(flag, *secret); !s.ok()) return s;
  return secret;
}

// The user public key of the seed in `path`.
absl::StatusOr<std::string> NKeyPublicKey(const std::string& path) {
  absl::StatusOr<std::string> seed = common::ReadSecretFile(path);
  if (!seed.ok()) return FlagError("--nats_nkey_seed_file", seed.status());
  absl::StatusOr<NKeyPair> pair = NKeyFromSeed(*seed);
  if (!pair.ok()) return FlagError("--nats_nkey_seed_file", pair.status());
  if (pair->type != NKeyType::kUser) {
    return absl::InvalidArgumentError(
        "--nats_nkey_seed_file: not a user NKey seed (a user's starts with SU)");
  }
  return pair->public_key;
}

// The client's thread-local error without cnats's "(file.c:123): " prefix.
std::string LastErrorDetail() {
  const char* text = nats_GetLastError(nullptr);
  if (text == nullptr) return "";
  absl::string_view detail = text;
  if (absl::StartsWith(detail, "(")) {
    if (const size_t end = detail.find("): "); end != absl::string_view::npos) {
      detail.remove_prefix(end + 3);
    }
  }
  return std::string(detail);
}

// The flag(s) of the authentication configured (one: validated).
const char* AuthFlagInUse(const NatsConnectOptions& o) {
  if (!o.creds_file.empty()) return "--nats_creds_file";
  if (!o.nkey_seed_file.empty()) return "--nats_nkey_seed_file";
  if (!o.user.empty()) return "--nats_user and --nats_password_file";
  return "--nats_token_file";
}

const char* const kAuthFlags =
    "--nats_creds_file, --nats_nkey_seed_file, --nats_user with --nats_password_file, or "
    "--nats_token_file";

}  // namespace

bool NatsConnectOptions::empty() const {
  return creds_file.empty() && nkey_seed_file.empty() && user.empty() && password_file.empty() &&
         token_file.empty() && !tls();
}

bool NatsConnectOptions::tls() const {
  return !tls_ca_file.empty() || !tls_cert_file.empty() || !tls_key_file.empty();
}

absl::Status ValidateNatsConnectOptions(const NatsConnectOptions& o) {
  if (!o.password_file.empty() && o.user.empty()) {
    return absl::InvalidArgumentError("--nats_password_file needs --nats_user");
  }
  if (!o.user.empty() && o.password_file.empty()) {
    return absl::InvalidArgumentError("--nats_user needs --nats_password_file");
  }
  std::vector<std::string> methods;
  if (!o.creds_file.empty()) methods.push_back("--nats_creds_file");
  if (!o.nkey_seed_file.empty()) methods.push_back("--nats_nkey_seed_file");
  if (!o.user.empty()) methods.push_back("--nats_user");
  if (!o.token_file.empty()) methods.push_back("--nats_token_file");
  if (methods.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::StrJoin(methods, " and "), ": give one way to authenticate to NATS, not ",
        methods.size()));
  }
  if (!o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--nats_tls_cert_file needs --nats_tls_key_file");
  }
  if (!o.tls_key_file.empty() && o.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--nats_tls_key_file needs --nats_tls_cert_file");
  }

  if (!o.creds_file.empty()) {
    absl::StatusOr<std::string> creds = ReadPemFile("--nats_creds_file", o.creds_file);
    if (!creds.ok()) return creds.status();
    const bool jwt = absl::StrContains(*creds, "BEGIN NATS USER JWT");
    const bool seed = absl::StrContains(*creds, "BEGIN USER NKEY SEED");
    std::fill(creds->begin(), creds->end(), '\0');
    if (!jwt || !seed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--nats_creds_file: ", o.creds_file,
          " is not a NATS credentials file (it needs a '-----BEGIN NATS USER JWT-----' block "
          "and a '-----BEGIN USER NKEY SEED-----' block, as `nsc generate creds` writes)"));
    }
  }
  if (!o.nkey_seed_file.empty()) {
    if (absl::StatusOr<std::string> key = NKeyPublicKey(o.nkey_seed_file); !key.ok()) {
      return key.status();
    }
  }
  if (!o.user.empty()) {
    if (absl::Status s = CheckSendable("--nats_user", o.user); !s.ok()) return s;
    if (absl::StatusOr<std::string> password = ReadSecret("--nats_password_file", o.password_file);
        !password.ok()) {
      return password.status();
    }
  }
  if (!o.token_file.empty()) {
    if (absl::StatusOr<std::string> token = ReadSecret("--nats_token_file", o.token_file);
        !token.ok()) {
      return token.status();
    }
  }
  const std::pair<const char*, const std::string*> pem_files[] = {
      {"--nats_tls_ca_file", &o.tls_ca_file},
      {"--nats_tls_cert_file", &o.tls_cert_file},
      {"--nats_tls_key_file", &o.tls_key_file}};
  for (const auto& [flag, path] : pem_files) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> pem = ReadPemFile(flag, *path);
    if (!pem.ok()) return pem.status();
    const bool has_pem = absl::StrContains(*pem, "-----BEGIN ");
    std::fill(pem->begin(), pem->end(), '\0');
    if (!has_pem) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": ", *path, " holds no PEM block (-----BEGIN ...)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyNatsConnectOptions(const NatsConnectOptions& o, natsOptions* opts) {
  if (absl::Status s = ValidateNatsConnectOptions(o); !s.ok()) return s;
  // Each call's failure names its flag; the client's own detail (a path, an OpenSSL reason) is
  // appended, never a secret.
  auto check = [](natsStatus s, const char* flag) -> absl::Status {
    if (s == NATS_OK) return absl::OkStatus();
    const std::string detail = LastErrorDetail();
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", natsStatus_GetText(s),
                                                   detail.empty() ? "" : " (", detail,
                                                   detail.empty() ? "" : ")"));
  };
  if (!o.creds_file.empty()) {
    // The seed is in the same file; the client reads it at every connect.
    if (absl::Status s = check(
            natsOptions_SetUserCredentialsFromFiles(opts, o.creds_file.c_str(), nullptr),
            "--nats_creds_file");
        !s.ok()) {
      return s;
    }
  }
  if (!o.nkey_seed_file.empty()) {
    absl::StatusOr<std::string> public_key = NKeyPublicKey(o.nkey_seed_file);
    if (!public_key.ok()) return public_key.status();
    if (absl::Status s = check(natsOptions_SetNKeyFromSeed(opts, public_key->c_str(),
                                                           o.nkey_seed_file.c_str()),
                               "--nats_nkey_seed_file");
        !s.ok()) {
      return s;
    }
  }
  if (!o.user.empty()) {
    absl::StatusOr<std::string> password = ReadSecret("--nats_password_file", o.password_file);
    if (!password.ok()) return password.status();
    const natsStatus s = natsOptions_SetUserInfo(opts, o.user.c_str(), password->c_str());
    std::fill(password->begin(), password->end(), '\0');
    if (absl::Status st = check(s, "--nats_password_file"); !st.ok()) return st;
  }
  if (!o.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadSecret("--nats_token_file", o.token_file);
    if (!token.ok()) return token.status();
    const natsStatus s = natsOptions_SetToken(opts, token->c_str());
    std::fill(token->begin(), token->end(), '\0');
    if (absl::Status st = check(s, "--nats_token_file"); !st.ok()) return st;
  }
  if (o.tls()) {
    // Secure first: it creates the TLS context the calls below fill.
    if (absl::Status s = check(natsOptions_SetSecure(opts, true), "--nats_tls_*"); !s.ok()) {
      return s;
    }
    if (!o.tls_ca_file.empty()) {
      if (absl::Status s = check(natsOptions_LoadCATrustedCertificates(opts, o.tls_ca_file.c_str()),
                                 "--nats_tls_ca_file");
          !s.ok()) {
        return s;
      }
    }
    if (!o.tls_cert_file.empty()) {
      if (absl::Status s = check(natsOptions_LoadCertificatesChain(opts, o.tls_cert_file.c_str(),
                                                                   o.tls_key_file.c_str()),
                                 "--nats_tls_cert_file / --nats_tls_key_file");
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

std::string DescribeNatsConnect(const NatsConnectOptions& o) {
  std::vector<std::string> parts;
  if (!o.creds_file.empty()) parts.push_back(absl::StrCat("creds file ", o.creds_file));
  if (!o.nkey_seed_file.empty()) parts.push_back(absl::StrCat("NKey seed ", o.nkey_seed_file));
  if (!o.user.empty()) parts.push_back(absl::StrCat("user ", o.user));
  if (!o.token_file.empty()) parts.push_back(absl::StrCat("token file ", o.token_file));
  if (o.tls()) {
    std::vector<std::string> tls;
    tls.push_back(o.tls_ca_file.empty() ? "system CAs" : absl::StrCat("CA ", o.tls_ca_file));
    if (!o.tls_cert_file.empty()) tls.push_back("client certificate");
    parts.push_back(absl::StrCat("TLS (", absl::StrJoin(tls, ", "), ")"));
  }
  return parts.empty() ? "no credentials" : absl::StrJoin(parts, ", ");
}

std::string RedactNatsUrls(std::string_view urls_in) {
  const absl::string_view urls(urls_in.data(), urls_in.size());
  std::vector<std::string> out;
  for (absl::string_view url : absl::StrSplit(urls, ',')) {
    const size_t scheme = url.find("://");
    const size_t start = scheme == absl::string_view::npos ? 0 : scheme + 3;
    const size_t at = url.find('@', start);
    const size_t slash = url.find('/', start);
    if (at != absl::string_view::npos && (slash == absl::string_view::npos || at < slash)) {
      out.push_back(absl::StrCat(url.substr(0, start), "***", url.substr(at)));
    } else {
      out.push_back(std::string(url));
    }
  }
  return absl::StrJoin(out, ",");
}

natsStatus ConnectNats(natsConnection** nc, natsOptions* opts, const NatsConnectOptions& o) {
  const bool signs = !o.creds_file.empty() || !o.nkey_seed_file.empty();
  natsStatus s = natsConnection_Connect(nc, opts);
  for (int attempt = 1; signs && s == NATS_CONNECTION_AUTH_FAILED && attempt < 3; ++attempt) {
    s = natsConnection_Connect(nc, opts);
  }
  return s;
}

absl::Status NatsConnectError(std::string_view urls, const NatsConnectOptions& o,
                              natsStatus s) {
  const std::string detail = LastErrorDetail();
  const std::string prefix =
      absl::StrCat("JetStream: connecting to ", RedactNatsUrls(urls), ": ");
  const std::string because = detail.empty() ? natsStatus_GetText(s) : detail;
  switch (s) {
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_NOT_PERMITTED:
      if (o.creds_file.empty() && o.nkey_seed_file.empty() && o.user.empty() &&
          o.token_file.empty()) {
        return absl::UnavailableError(absl::StrCat(
            prefix, "the servers ask for credentials and none were given (", because,
            "): set ", kAuthFlags));
      }
      return absl::UnavailableError(absl::StrCat(prefix, "the servers refused the credentials (",
                                                 because, "): check ", AuthFlagInUse(o)));
    case NATS_SSL_ERROR:
      if (absl::StrContains(detail, "mismatch")) {
        return absl::UnavailableError(absl::StrCat(
            prefix, "the server's TLS certificate does not name the host of --nats_url (", because,
            ")"));
      }
      if (absl::StrContains(detail, "issuer") || absl::StrContains(detail, "self-signed") ||
          absl::StrContains(detail, "self signed") || absl::StrContains(detail, "verify")) {
        return absl::UnavailableError(absl::StrCat(
            prefix, "the server's TLS certificate is not signed by a trusted CA (", because,
            "): check --nats_tls_ca_file"));
      }
      return absl::UnavailableError(absl::StrCat(
          prefix, "the TLS handshake failed (", because,
          "): check --nats_tls_ca_file, and --nats_tls_cert_file / --nats_tls_key_file if the "
          "servers ask for a client certificate"));
    case NATS_SECURE_CONNECTION_WANTED:
      return absl::UnavailableError(absl::StrCat(
          prefix, "TLS was asked for (--nats_tls_* or tls:// URLs) but the servers do not offer "
                  "it"));
    case NATS_SECURE_CONNECTION_REQUIRED:
      return absl::UnavailableError(
          absl::StrCat(prefix, "the servers require TLS: set --nats_tls_ca_file"));
    case NATS_NO_SERVER:
      return absl::UnavailableError(absl::StrCat(prefix, "no server reachable (", because, ")"));
    case NATS_PROTOCOL_ERROR:
    case NATS_CONNECTION_CLOSED:
    case NATS_IO_ERROR:
      // Over TLS 1.3 a server that wants a client certificate checks it after the client's side
      // of the handshake is done, and just closes the connection.
      if (o.tls() && o.tls_cert_file.empty()) {
        return absl::UnavailableError(absl::StrCat(
            prefix, "the servers closed the connection while it was set up (", because,
            "): servers that require a client certificate do so; set --nats_tls_cert_file and "
            "--nats_tls_key_file"));
      }
      return absl::UnavailableError(absl::StrCat(prefix, natsStatus_GetText(s), " (", because, ")"));
    default:
      return absl::UnavailableError(
          absl::StrCat(prefix, natsStatus_GetText(s), detail.empty() ? "" : " (", detail,
                       detail.empty() ? "" : ")"));
  }
}

std::string NatsLastError(natsConnection* nc) {
  if (nc == nullptr) return "";
  const char* text = nullptr;
  if (natsConnection_GetLastError(nc, &text) == NATS_OK || text == nullptr) return "";
  absl::string_view detail = text;
  if (absl::StartsWith(detail, "(")) {
    if (const size_t end = detail.find("): "); end != absl::string_view::npos) {
      detail.remove_prefix(end + 3);
    }
  }
  return std::string(detail);
}

}  // namespace hookrelay::collector
