#include "common/config.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

#include "common/status_macros.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::common {
namespace {

using ::hookrelay::v1::Config;
using ::hookrelay::v1::DeliveryOptions;
using ::hookrelay::v1::Destination;
using ::hookrelay::v1::Source;
using ::hookrelay::v1::SourceKind;
using ::hookrelay::v1::WebhookUrl;

// A config with hundreds of mistakes is better answered with the first hundred.
constexpr size_t kMaxReportedErrors = 100;
constexpr size_t kMaxDisplayLength = 100;
constexpr off_t kMaxConfigFileBytes = 16 << 20;

// Collects "path: problem" messages; the whole list becomes one InvalidArgument.
class ErrorList {
 public:
  void Add(std::string message) { errors_.push_back(std::move(message)); }
  bool empty() const { return errors_.empty(); }

  absl::Status ToStatus(absl::string_view prefix = "") const {
    if (errors_.empty()) return absl::OkStatus();
    std::string text(prefix);
    if (errors_.size() <= kMaxReportedErrors) {
      absl::StrAppend(&text, absl::StrJoin(errors_, "; "));
    } else {
      absl::StrAppend(&text,
                      absl::StrJoin(errors_.begin(), errors_.begin() + kMaxReportedErrors, "; "),
                      "; ... and ", errors_.size() - kMaxReportedErrors, " more errors");
    }
    return absl::InvalidArgumentError(text);
  }

 private:
  std::vector<std::string> errors_;
};

// A user-supplied, non-secret string (id, key, type) for a message: quoted, escaped, shortened.
std::string Quote(absl::string_view s) {
  if (s.size() > kMaxDisplayLength) {
    return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMaxDisplayLength)), "...\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

std::string Index(absl::string_view path, int i) { return absl::StrCat(path, "[", i, "]"); }

// ---------------------------------------------------------------------------------------------
// YAML → proto. yaml-cpp reports problems by throwing; every call into it happens inside the
// try block of ParseConfigYaml.

class YamlMapper {
 public:
  explicit YamlMapper(ErrorList& errors) : errors_(errors) {}

  void MapConfig(const YAML::Node& root, Config& config) {
    if (root.IsNull()) return;
    if (!root.IsMap()) {
      Error(root, "config", "expected a mapping with keys \"sources\" and \"destinations\"");
      return;
    }
    ForEachKey(root, "", [&](absl::string_view key, const YAML::Node& value,
                             const std::string& path) {
      if (key == "sources") {
        ForEachItem(value, path, [&](const YAML::Node& item, const std::string& item_path) {
          MapSource(item, item_path, *config.add_sources());
        });
      } else if (key == "destinations") {
        ForEachItem(value, path, [&](const YAML::Node& item, const std::string& item_path) {
          MapDestination(item, item_path, *config.add_destinations());
        });
      } else {
        return false;
      }
      return true;
    });
  }

 private:
  void Error(const YAML::Node& node, absl::string_view path, absl::string_view problem) {
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) {
      errors_.Add(absl::StrCat(path, ": ", problem));
    } else {
      errors_.Add(absl::StrCat(path, ": ", problem, " (line ", mark.line + 1, ")"));
    }
  }

  static absl::string_view TypeName(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Map:
        return "a mapping";
      case YAML::NodeType::Scalar:
        return "a scalar";
      case YAML::NodeType::Null:
        return "nothing";
      case YAML::NodeType::Undefined:
        break;
    }
    return "an undefined node";
  }

  // Calls `fn(key, value, path_of_value)` for each entry of the mapping `node`; `fn` returns
  // false for keys it does not know. A null node is an empty mapping.
  template <typename Fn>
  void ForEachKey(const YAML::Node& node, absl::string_view path, Fn fn) {
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      Error(node, path.empty() ? "config" : path,
            absl::StrCat("expected a mapping, got ", TypeName(node)));
      return;
    }
    absl::flat_hash_set<std::string> seen;
    for (YAML::const_iterator it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key_node = it->first;
      const YAML::Node value = it->second;
      const std::string where = path.empty() ? "config" : std::string(path);
      if (!key_node.IsScalar()) {
        Error(key_node, where, "keys must be plain strings");
        continue;
      }
      const std::string& key = key_node.Scalar();
      if (!seen.insert(key).second) {
        Error(key_node, where, absl::StrCat("duplicate key ", Quote(key)));
        continue;
      }
      const std::string child = path.empty() ? key : absl::StrCat(path, ".", key);
      if (!fn(key, value, child)) {
        Error(key_node, where, absl::StrCat("unknown key ", Quote(key)));
      }
    }
  }

  // Calls `fn(item, path_of_item)` for each element of the list `node`. A null node is empty.
  template <typename Fn>
  void ForEachItem(const YAML::Node& node, absl::string_view path, Fn fn) {
    if (node.IsNull()) return;
    if (!node.IsSequence()) {
      Error(node, path, absl::StrCat("expected a list, got ", TypeName(node)));
      return;
    }
    int i = 0;
    for (YAML::const_iterator it = node.begin(); it != node.end(); ++it, ++i) {
      fn(*it, Index(path, i));
    }
  }

  // A scalar as a string; null is "". Values are never echoed: they may be secrets.
  void MapString(const YAML::Node& node, absl::string_view path, std::string* out) {
    if (node.IsNull()) {
      out->clear();
    } else if (node.IsScalar()) {
      *out = node.Scalar();
    } else {
      Error(node, path, absl::StrCat("expected a string, got ", TypeName(node)));
    }
  }

  void MapStringList(const YAML::Node& node, absl::string_view path,
                     google::protobuf::RepeatedPtrField<std::string>* out) {
    ForEachItem(node, path, [&](const YAML::Node& item, const std::string& item_path) {
      if (item.IsScalar()) {
        out->Add(std::string(item.Scalar()));
      } else {
        Error(item, item_path, absl::StrCat("expected a string, got ", TypeName(item)));
      }
    });
  }

  void MapBool(const YAML::Node& node, absl::string_view path, bool* out) {
    bool value = false;
    if (node.IsScalar() && YAML::convert<bool>::decode(node, value)) {
      *out = value;
    } else {
      Error(node, path, "expected true or false");
    }
  }

  // A positive integer that fits the proto field. 0 is refused: in the proto it means "use the
  // default", which is not what someone writing 0 asks for. Ranges are ValidateConfig's.
  void MapOption(const YAML::Node& node, absl::string_view path, uint32_t* out) {
    uint64_t value = 0;
    if (node.IsScalar() && absl::SimpleAtoi(node.Scalar(), &value) && value > 0 &&
        value <= std::numeric_limits<uint32_t>::max()) {
      *out = static_cast<uint32_t>(value);
      return;
    }
    if (node.IsScalar()) {
      Error(node, path,
            absl::StrCat("expected a positive integer (omit the key for the default), got ",
                         Quote(node.Scalar())));
    } else {
      Error(node, path, absl::StrCat("expected a positive integer, got ", TypeName(node)));
    }
  }

  void MapSource(const YAML::Node& node, const std::string& path, Source& source) {
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping, got ", TypeName(node)));
      return;
    }
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      if (key == "id") {
        MapString(value, child, source.mutable_id());
      } else if (key == "name") {
        MapString(value, child, source.mutable_name());
      } else if (key == "kind") {
        MapKind(value, child, source);
      } else if (key == "write_keys") {
        MapStringList(value, child, source.mutable_write_keys());
      } else {
        return false;
      }
      return true;
    });
  }

  void MapKind(const YAML::Node& node, const std::string& path, Source& source) {
    if (node.IsNull()) return;
    if (!node.IsScalar()) {
      Error(node, path, absl::StrCat("expected web, mobile or server, got ", TypeName(node)));
      return;
    }
    const std::string kind = absl::AsciiStrToLower(node.Scalar());
    if (kind == "web") {
      source.set_kind(hookrelay::v1::WEB);
    } else if (kind == "mobile") {
      source.set_kind(hookrelay::v1::MOBILE);
    } else if (kind == "server") {
      source.set_kind(hookrelay::v1::SERVER);
    } else {
      Error(node, path, absl::StrCat("unknown kind ", Quote(node.Scalar()),
                                     ", expected web, mobile or server"));
    }
  }

  void MapDestination(const YAML::Node& node, const std::string& path, Destination& dest) {
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping, got ", TypeName(node)));
      return;
    }
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      if (key == "id") {
        MapString(value, child, dest.mutable_id());
      } else if (key == "type") {
        MapString(value, child, dest.mutable_type());
      } else if (key == "sources") {
        MapStringList(value, child, dest.mutable_sources());
      } else if (key == "enabled") {
        bool enabled = false;
        MapBool(value, child, &enabled);
        dest.set_enabled(enabled);
      } else if (key == "shared_secret") {
        MapString(value, child, dest.mutable_shared_secret());
      } else if (key == "urls") {
        ForEachItem(value, child, [&](const YAML::Node& item, const std::string& item_path) {
          MapUrl(item, item_path, *dest.add_urls());
        });
      } else if (key == "options") {
        MapOptions(value, child, *dest.mutable_options());
      } else {
        return false;
      }
      return true;
    });
  }

  void MapUrl(const YAML::Node& node, const std::string& path, WebhookUrl& url) {
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping with \"url\", got ", TypeName(node)));
      return;
    }
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      if (key == "url") {
        MapString(value, child, url.mutable_url());
      } else if (key == "headers") {
        MapHeaders(value, child, url);
      } else {
        return false;
      }
      return true;
    });
  }

  // `headers` is a mapping name → value; every name is accepted here, ValidateConfig judges.
  void MapHeaders(const YAML::Node& node, const std::string& path, WebhookUrl& url) {
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping of header name to value, got ",
                                     TypeName(node)));
      return;
    }
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value, const std::string&) {
      hookrelay::v1::Header* header = url.add_headers();
      header->set_name(std::string(key));
      MapString(value, absl::StrCat(path, "[", Quote(key), "]"), header->mutable_value());
      return true;
    });
  }

  void MapOptions(const YAML::Node& node, const std::string& path, DeliveryOptions& options) {
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      uint32_t number = 0;
      if (key == "timeout_ms") {
        MapOption(value, child, &number);
        options.set_timeout_ms(number);
      } else if (key == "retry_window_seconds") {
        MapOption(value, child, &number);
        options.set_retry_window_seconds(number);
      } else if (key == "initial_backoff_ms") {
        MapOption(value, child, &number);
        options.set_initial_backoff_ms(number);
      } else if (key == "max_backoff_ms") {
        MapOption(value, child, &number);
        options.set_max_backoff_ms(number);
      } else if (key == "standard_webhooks") {
        bool on = false;
        MapBool(value, child, &on);
        options.set_standard_webhooks(on);
      } else {
        return false;
      }
      return true;
    });
  }

  ErrorList& errors_;
};

// ---------------------------------------------------------------------------------------------
// Validation.

// Empty when `id` is acceptable: 1..kMaxIdLength of [A-Za-z0-9._-] (ids end up in metric
// labels, log fields and store keys). Otherwise the rest of a message that follows "path.id".
std::string IdProblem(absl::string_view id) {
  if (id.empty()) return ": missing or empty, an id is required";
  bool ok = id.size() <= static_cast<size_t>(kMaxIdLength);
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      ok = false;
    }
  }
  if (ok) return "";
  return absl::StrCat(" ", Quote(id), ": must be 1 to ", kMaxIdLength,
                      " letters, digits, '.', '_' or '-'");
}

bool HasControlOrSpace(absl::string_view s) {
  for (unsigned char c : s) {
    if (c <= 0x20 || c == 0x7f) return true;
  }
  return false;
}

// RFC 7230 §3.2.6 tchar.
bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c)) continue;
    constexpr absl::string_view kTokenSymbols = "!#$%&'*+-.^_`|~";
    if (kTokenSymbols.find(static_cast<char>(c)) == absl::string_view::npos) return false;
  }
  return true;
}

// RFC 7230 field-value: no CR, LF, NUL nor any other control character except HTAB.
bool IsValidHeaderValue(absl::string_view s) {
  for (unsigned char c : s) {
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}

constexpr absl::string_view kReservedHeaders[] = {"content-type", "user-agent", "x-signature",
                                                 "content-length", "host"};
constexpr absl::string_view kStandardWebhooksHeaders[] = {"webhook-id", "webhook-timestamp",
                                                         "webhook-signature"};

template <size_t N>
bool InList(const absl::string_view (&list)[N], absl::string_view name) {
  for (absl::string_view reserved : list) {
    if (absl::EqualsIgnoreCase(reserved, name)) return true;
  }
  return false;
}

// The URL as shown in messages: user info and query may carry credentials, so they are masked.
std::string DisplayUrl(absl::string_view url) {
  std::string shown;
  size_t authority_start = 0;
  if (size_t scheme_end = url.find("://"); scheme_end != absl::string_view::npos) {
    authority_start = scheme_end + 3;
  }
  size_t authority_end = url.find_first_of("/?#", authority_start);
  if (authority_end == absl::string_view::npos) authority_end = url.size();
  absl::string_view authority = url.substr(authority_start, authority_end - authority_start);
  absl::StrAppend(&shown, url.substr(0, authority_start));
  if (size_t at = authority.rfind('@'); at != absl::string_view::npos) {
    absl::StrAppend(&shown, "***@");
    absl::StrAppend(&shown, authority.substr(at + 1));
  } else {
    absl::StrAppend(&shown, authority);
  }
  absl::string_view rest = url.substr(authority_end);
  if (size_t q = rest.find('?'); q != absl::string_view::npos) {
    size_t fragment = rest.find('#', q);
    absl::StrAppend(&shown, rest.substr(0, q));
    absl::StrAppend(&shown, "?***");
    if (fragment != absl::string_view::npos) absl::StrAppend(&shown, rest.substr(fragment));
  } else {
    absl::StrAppend(&shown, rest);
  }
  return Quote(shown);
}

// Empty when `url` is a full http(s) URL with a host; otherwise what is wrong with it.
std::string UrlProblem(absl::string_view url) {
  if (url.empty()) return "missing or empty, a full http:// or https:// URL is required";
  if (url.size() > static_cast<size_t>(kMaxUrlLength)) {
    return absl::StrCat(url.size(), " characters, at most ", kMaxUrlLength, " allowed");
  }
  if (HasControlOrSpace(url)) return "contains whitespace or control characters";
  const size_t scheme_end = url.find("://");
  if (scheme_end == absl::string_view::npos) {
    return "not a full URL, must start with http:// or https://";
  }
  const absl::string_view scheme = url.substr(0, scheme_end);
  if (!absl::EqualsIgnoreCase(scheme, "http") && !absl::EqualsIgnoreCase(scheme, "https")) {
    return "scheme must be http or https";
  }
  const absl::string_view rest = url.substr(scheme_end + 3);
  absl::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  if (size_t at = authority.rfind('@'); at != absl::string_view::npos) {
    authority.remove_prefix(at + 1);
  }
  absl::string_view host = authority;
  absl::string_view port;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return "unterminated IPv6 address in host";
    host = authority.substr(1, close - 1);
    absl::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "unexpected characters after the IPv6 address";
      has_port = true;
      port = after.substr(1);
    }
    for (char c : host) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
        return "invalid IPv6 address in host";
      }
    }
  } else if (size_t colon = authority.rfind(':'); colon != absl::string_view::npos) {
    host = authority.substr(0, colon);
    has_port = true;
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return "has no host";
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        absl::string_view("-._~%:").find(c) == absl::string_view::npos) {
      return "host contains characters not allowed in a host name";
    }
  }
  if (has_port) {
    uint32_t port_number = 0;
    bool digits = !port.empty() && port.size() <= 5;
    for (char c : port) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
    if (!digits || !absl::SimpleAtoi(port, &port_number) || port_number < 1 ||
        port_number > 65535) {
      return "port must be a number between 1 and 65535";
    }
  }
  return "";
}

void CheckRange(ErrorList& errors, absl::string_view path, uint32_t given, uint32_t effective,
                uint32_t min, uint32_t max) {
  if (effective >= min && effective <= max) return;
  errors.Add(absl::StrCat(path, ": ", effective, given == 0 ? " (default)" : "",
                          ", must be between ", min, " and ", max));
}

void ValidateSources(const Config& config, ErrorList& errors) {
  absl::flat_hash_map<absl::string_view, int> ids;  // id → index
  // write key → "sources[i].write_keys[j]"; keys themselves never reach a message.
  absl::flat_hash_map<absl::string_view, std::string> keys;
  for (int i = 0; i < config.sources_size(); ++i) {
    const Source& source = config.sources(i);
    const std::string path = Index("sources", i);
    if (std::string problem = IdProblem(source.id()); !problem.empty()) {
      errors.Add(absl::StrCat(path, ".id", problem));
    } else if (auto [it, inserted] = ids.emplace(source.id(), i); !inserted) {
      errors.Add(absl::StrCat(path, ".id: duplicate source id ", Quote(source.id()),
                              " (also sources[", it->second, "])"));
    }
    if (!hookrelay::v1::SourceKind_IsValid(source.kind())) {
      errors.Add(absl::StrCat(path, ".kind: unknown kind ", static_cast<int>(source.kind()),
                              ", expected web, mobile or server"));
    }
    const std::string keys_path = absl::StrCat(path, ".write_keys");
    if (source.write_keys_size() == 0) {
      errors.Add(absl::StrCat(keys_path, ": no write keys, at least 1 required"));
    }
    for (int j = 0; j < source.write_keys_size(); ++j) {
      const std::string& key = source.write_keys(j);
      const std::string key_path = Index(keys_path, j);
      if (key.empty()) {
        errors.Add(absl::StrCat(key_path, ": empty write key"));
      } else if (HasControlOrSpace(key)) {
        errors.Add(absl::StrCat(key_path, ": write key contains whitespace or control characters"));
      } else if (auto [it, inserted] = keys.emplace(key, key_path); !inserted) {
        errors.Add(absl::StrCat(key_path, ": duplicate write key (also ", it->second, ")"));
      }
    }
  }
}

void ValidateHeaders(const WebhookUrl& url, const std::string& path, bool standard_webhooks,
                     ErrorList& errors) {
  if (url.headers_size() > kMaxHeadersPerUrl) {
    errors.Add(absl::StrCat(path, ": ", url.headers_size(), " headers, at most ", kMaxHeadersPerUrl,
                            " allowed"));
  }
  absl::flat_hash_set<std::string> names;  // lower case
  for (const hookrelay::v1::Header& header : url.headers()) {
    const std::string header_path = absl::StrCat(path, "[", Quote(header.name()), "]");
    if (header.name().empty()) {
      errors.Add(absl::StrCat(header_path, ": empty header name"));
    } else if (!IsToken(header.name())) {
      errors.Add(absl::StrCat(header_path, ": header name is not an RFC 7230 token"));
    } else if (InList(kReservedHeaders, header.name())) {
      errors.Add(absl::StrCat(header_path,
                              ": header name is reserved (Content-Type, User-Agent, X-Signature, "
                              "Content-Length and Host are set by hookrelay)"));
    } else if (standard_webhooks && InList(kStandardWebhooksHeaders, header.name())) {
      errors.Add(absl::StrCat(header_path,
                              ": header name is reserved when options.standard_webhooks is on"));
    } else if (!names.insert(absl::AsciiStrToLower(header.name())).second) {
      errors.Add(absl::StrCat(header_path, ": duplicate header name (names are case-insensitive)"));
    }
    if (!IsValidHeaderValue(header.value())) {
      errors.Add(absl::StrCat(header_path,
                              ": header value contains CR, LF, NUL or another control character"));
    }
  }
}

void ValidateOptions(const Destination& dest, const std::string& path, ErrorList& errors) {
  const DeliveryOptions& given = dest.options();
  const DeliveryOptions effective = EffectiveOptions(dest);
  CheckRange(errors, absl::StrCat(path, ".timeout_ms"), given.timeout_ms(), effective.timeout_ms(),
             kMinTimeoutMs, kMaxTimeoutMs);
  CheckRange(errors, absl::StrCat(path, ".retry_window_seconds"), given.retry_window_seconds(),
             effective.retry_window_seconds(), kMinRetryWindowSeconds, kMaxRetryWindowSeconds);
  CheckRange(errors, absl::StrCat(path, ".initial_backoff_ms"), given.initial_backoff_ms(),
             effective.initial_backoff_ms(), kMinInitialBackoffMs, kMaxInitialBackoffMs);
  CheckRange(errors, absl::StrCat(path, ".max_backoff_ms"), given.max_backoff_ms(),
             effective.max_backoff_ms(), kMinMaxBackoffMs, kMaxMaxBackoffMs);
  if (effective.max_backoff_ms() < effective.initial_backoff_ms()) {
    errors.Add(absl::StrCat(path, ".max_backoff_ms: ", effective.max_backoff_ms(),
                            given.max_backoff_ms() == 0 ? " (default)" : "",
                            ", must be at least initial_backoff_ms (",
                            effective.initial_backoff_ms(), ")"));
  }
}

void ValidateDestinations(const Config& config, ErrorList& errors) {
  absl::flat_hash_set<absl::string_view> source_ids;
  for (const Source& source : config.sources()) source_ids.insert(source.id());
  absl::flat_hash_map<absl::string_view, int> ids;
  for (int i = 0; i < config.destinations_size(); ++i) {
    const Destination& dest = config.destinations(i);
    const std::string path = Index("destinations", i);
    if (std::string problem = IdProblem(dest.id()); !problem.empty()) {
      errors.Add(absl::StrCat(path, ".id", problem));
    } else if (auto [it, inserted] = ids.emplace(dest.id(), i); !inserted) {
      errors.Add(absl::StrCat(path, ".id: duplicate destination id ", Quote(dest.id()),
                              " (also destinations[", it->second, "])"));
    }

    if (dest.type().empty()) {
      errors.Add(absl::StrCat(path, ".type: missing, must be \"", kWebhooksType, "\""));
    } else if (!absl::EqualsIgnoreCase(dest.type(), kWebhooksType)) {
      errors.Add(absl::StrCat(path, ".type ", Quote(dest.type()),
                              ": unknown destination type, must be \"", kWebhooksType, "\""));
    }

    const std::string sources_path = absl::StrCat(path, ".sources");
    if (dest.sources_size() == 0) {
      errors.Add(absl::StrCat(sources_path, ": no sources, at least 1 required"));
    }
    absl::flat_hash_set<absl::string_view> listed;
    for (const std::string& source : dest.sources()) {
      if (!source_ids.contains(source)) {
        errors.Add(absl::StrCat(sources_path, ": unknown source ", Quote(source)));
      } else if (!listed.insert(source).second) {
        errors.Add(absl::StrCat(sources_path, ": source ", Quote(source), " listed twice"));
      }
    }

    const std::string urls_path = absl::StrCat(path, ".urls");
    if (dest.urls_size() == 0) {
      errors.Add(absl::StrCat(urls_path, ": no URLs, at least 1 required"));
    } else if (dest.urls_size() > kMaxUrlsPerDestination) {
      errors.Add(absl::StrCat(urls_path, ": ", dest.urls_size(), " entries, at most ",
                              kMaxUrlsPerDestination, " allowed"));
    }
    absl::flat_hash_map<absl::string_view, int> urls;
    for (int j = 0; j < dest.urls_size(); ++j) {
      const WebhookUrl& url = dest.urls(j);
      const std::string url_path = Index(urls_path, j);
      if (url.url().empty()) {
        errors.Add(absl::StrCat(url_path, ".url: ", UrlProblem(url.url())));
      } else if (std::string problem = UrlProblem(url.url()); !problem.empty()) {
        errors.Add(absl::StrCat(url_path, ".url ", DisplayUrl(url.url()), ": ", problem));
      } else if (auto [it, inserted] = urls.emplace(url.url(), j); !inserted) {
        errors.Add(absl::StrCat(url_path, ".url: same URL as ", urls_path, "[", it->second, "]"));
      }
      ValidateHeaders(url, absl::StrCat(url_path, ".headers"), dest.options().standard_webhooks(),
                      errors);
    }

    ValidateOptions(dest, absl::StrCat(path, ".options"), errors);
  }
}

// Reads a whole file; errors name the path.
absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const std::string where = absl::StrCat("config file \"", absl::CHexEscape(path), "\"");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return absl::ErrnoToStatus(error, absl::StrCat(where, ": cannot open"));
  }
  std::string contents;
  char buffer[64 * 1024];
  absl::Status status;
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      status = absl::ErrnoToStatus(error, absl::StrCat(where, ": cannot read"));
      break;
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
    if (contents.size() > static_cast<size_t>(kMaxConfigFileBytes)) {
      status = absl::InvalidArgumentError(
          absl::StrCat(where, ": larger than ", kMaxConfigFileBytes >> 20, " MiB"));
      break;
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return contents;
}

}  // namespace

absl::StatusOr<Config> ParseConfigYaml(std::string_view yaml_text) {
  Config config;
  ErrorList errors;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    YamlMapper(errors).MapConfig(root, config);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) {
      return absl::InvalidArgumentError(absl::StrCat("YAML syntax error: ", e.msg));
    }
    return absl::InvalidArgumentError(absl::StrCat("YAML syntax error at line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("reading YAML failed: ", e.what()));
  }
  RETURN_IF_ERROR(errors.ToStatus());
  return config;
}

absl::Status ValidateConfig(const Config& config) {
  ErrorList errors;
  ValidateSources(config, errors);
  ValidateDestinations(config, errors);
  return errors.ToStatus();
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  const std::string prefix = absl::StrCat("config file \"", absl::CHexEscape(path), "\": ");
  absl::StatusOr<Config> config = ParseConfigYaml(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(prefix, config.status().message()));
  }
  if (absl::Status status = ValidateConfig(*config); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
  }
  return config;
}

DeliveryOptions EffectiveOptions(const Destination& destination) {
  DeliveryOptions options = destination.options();
  if (options.timeout_ms() == 0) options.set_timeout_ms(kDefaultTimeoutMs);
  if (options.retry_window_seconds() == 0) {
    options.set_retry_window_seconds(kDefaultRetryWindowSeconds);
  }
  if (options.initial_backoff_ms() == 0) options.set_initial_backoff_ms(kDefaultInitialBackoffMs);
  if (options.max_backoff_ms() == 0) options.set_max_backoff_ms(kDefaultMaxBackoffMs);
  return options;
}

}  // namespace hookrelay::common
