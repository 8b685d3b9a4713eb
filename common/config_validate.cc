#include "common/config_validate.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
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
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "common/config_errors.h"
#include "common/redact.h"
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

using internal::ErrorList;
using internal::Index;
using internal::Quote;

// ---------------------------------------------------------------------------------------------
// Validation.

}  // namespace

std::string internal::IdProblem(absl::string_view id) {
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

namespace {

using internal::IdProblem;

bool HasControlOrSpace(absl::string_view s) {
  for (unsigned char c : s) {
    if (c <= 0x20 || c == 0x7f) return true;
  }
  return false;
}

// Write keys: the URL-safe and base64 alphabets, nothing that needs quoting in Basic auth.
bool IsWriteKey(absl::string_view key) {
  for (const char c : key) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '~' &&
        c != '+' && c != '/' && c != '=' && c != '-') {
      return false;
    }
  }
  return true;
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

constexpr absl::string_view kReservedHeaders[] = {"content-type",   "user-agent", "x-signature",
                                                 "content-length", "host",       "idempotency-key"};
constexpr absl::string_view kStandardWebhooksHeaders[] = {"webhook-id", "webhook-timestamp",
                                                         "webhook-signature"};

template <size_t N>
bool InList(const absl::string_view (&list)[N], absl::string_view name) {
  for (absl::string_view reserved : list) {
    if (absl::EqualsIgnoreCase(reserved, name)) return true;
  }
  return false;
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
      } else if (key.size() > kMaxWriteKeyLength) {
        errors.Add(absl::StrCat(key_path, ": write key is ", key.size(), " characters, at most ",
                                kMaxWriteKeyLength, " allowed"));
      } else if (!IsWriteKey(key)) {
        errors.Add(absl::StrCat(key_path,
                                ": write key may hold only A-Z a-z 0-9 . _ ~ + / = - (it travels in "
                                "HTTP Basic auth)"));
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
                              "Content-Length, Host and Idempotency-Key are set by hookrelay)"));
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
  if (given.rate_limit_per_second() > kMaxRateLimitPerSecond) {
    errors.Add(absl::StrCat(path, ".rate_limit_per_second: ", given.rate_limit_per_second(),
                            ", must be between 1 and ", kMaxRateLimitPerSecond,
                            " (omit it for no limit)"));
  }
  if (given.has_circuit_breaker()) {
    const hookrelay::v1::CircuitBreaker& b = given.circuit_breaker();
    const hookrelay::v1::CircuitBreaker& e = effective.circuit_breaker();
    const std::string cb = absl::StrCat(path, ".circuit_breaker");
    if (b.failures() == 0) {
      errors.Add(absl::StrCat(cb, ".failures: missing, must be between ", kMinBreakerFailures,
                              " and ", kMaxBreakerFailures, " (omit circuit_breaker for none)"));
    } else {
      CheckRange(errors, absl::StrCat(cb, ".failures"), b.failures(), e.failures(),
                 kMinBreakerFailures, kMaxBreakerFailures);
      CheckRange(errors, absl::StrCat(cb, ".pause_ms"), b.pause_ms(), e.pause_ms(),
                 kMinBreakerPauseMs, kMaxBreakerPauseMs);
      CheckRange(errors, absl::StrCat(cb, ".max_pause_ms"), b.max_pause_ms(), e.max_pause_ms(),
                 kMinBreakerMaxPauseMs, kMaxBreakerMaxPauseMs);
      if (e.max_pause_ms() < e.pause_ms()) {
        errors.Add(absl::StrCat(cb, ".max_pause_ms: ", e.max_pause_ms(),
                                b.max_pause_ms() == 0 ? " (default)" : "",
                                ", must be at least pause_ms (", e.pause_ms(), ")"));
      }
    }
  }
  if (given.has_batch()) {
    const hookrelay::v1::BatchOptions& b = given.batch();
    const hookrelay::v1::BatchOptions& e = effective.batch();
    const std::string bp = absl::StrCat(path, ".batch");
    CheckRange(errors, absl::StrCat(bp, ".max_events"), b.max_events(), e.max_events(),
               kMinBatchMaxEvents, kMaxBatchMaxEvents);
    CheckRange(errors, absl::StrCat(bp, ".max_bytes"), b.max_bytes(), e.max_bytes(),
               kMinBatchMaxBytes, kMaxBatchMaxBytes);
    CheckRange(errors, absl::StrCat(bp, ".max_wait_ms"), b.max_wait_ms(), e.max_wait_ms(),
               kMinBatchMaxWaitMs, kMaxBatchMaxWaitMs);
  }
  if (!given.ordering().empty() && given.ordering() != kOrderingPerUser) {
    errors.Add(absl::StrCat(path, ".ordering: \"", absl::CHexEscape(given.ordering().substr(0, 64)),
                            "\", must be \"", kOrderingPerUser, "\" (omit it for no order)"));
  }
}

// "types", "events" and "where" of a destination's filter; `path` is "destinations[i].filter".
void ValidateFilter(const hookrelay::v1::DestinationFilter& filter, const std::string& path,
                    ErrorList& errors) {
  absl::flat_hash_set<absl::string_view> types;
  for (int i = 0; i < filter.types_size(); ++i) {
    const std::string& type = filter.types(i);
    const std::string type_path = Index(absl::StrCat(path, ".types"), i);
    if (type != "track" && type != "identify" && type != "page" && type != "screen" &&
        type != "group" && type != "alias") {
      errors.Add(absl::StrCat(type_path, ": unknown type ", Quote(type),
                              ", one of track identify page screen group alias"));
    } else if (!types.insert(type).second) {
      errors.Add(absl::StrCat(type_path, ": type ", Quote(type), " listed twice"));
    }
  }
  if (filter.events_size() > kMaxFilterEvents) {
    errors.Add(absl::StrCat(path, ".events: ", filter.events_size(), " entries, at most ",
                            kMaxFilterEvents, " allowed"));
  }
  if (filter.events_size() > 0 && filter.types_size() > 0 && !types.contains("track")) {
    errors.Add(absl::StrCat(path, ".events: names track events, but types leaves out track "
                                  "(nothing could pass)"));
  }
  for (int i = 0; i < filter.events_size(); ++i) {
    const std::string& event = filter.events(i);
    const std::string event_path = Index(absl::StrCat(path, ".events"), i);
    if (event.empty()) {
      errors.Add(absl::StrCat(event_path, ": empty, give an event name or a prefix ending in *"));
    } else if (event.size() > kMaxFilterEventLength) {
      errors.Add(absl::StrCat(event_path, ": ", event.size(), " characters, at most ",
                              kMaxFilterEventLength, " allowed"));
    } else if (event.find('*') != event.size() - 1 && event.find('*') != std::string::npos) {
      errors.Add(absl::StrCat(event_path, " ", Quote(event),
                              ": * is allowed only at the end (a prefix)"));
    }
  }
  if (filter.where_size() > kMaxFilterConditions) {
    errors.Add(absl::StrCat(path, ".where: ", filter.where_size(), " conditions, at most ",
                            kMaxFilterConditions, " allowed"));
  }
  using google::protobuf::Value;
  for (int i = 0; i < filter.where_size(); ++i) {
    const hookrelay::v1::FilterCondition& c = filter.where(i);
    const std::string cpath = Index(absl::StrCat(path, ".where"), i);
    // The path: a known root, then (for the maps) non-empty segments.
    if (c.path().empty()) {
      errors.Add(absl::StrCat(cpath, ".path: missing, e.g. properties.plan"));
    } else if (c.path().size() > kMaxFilterPathLength) {
      errors.Add(absl::StrCat(cpath, ".path: ", c.path().size(), " characters, at most ",
                              kMaxFilterPathLength, " allowed"));
    } else {
      const std::vector<absl::string_view> segments = absl::StrSplit(c.path(), '.');
      const std::optional<FilterRoot> root = ParseFilterRoot(segments.front());
      if (!root.has_value()) {
        errors.Add(absl::StrCat(cpath, ".path ", Quote(c.path()),
                                ": must start with properties, traits, context, event, name, "
                                "category, userId, anonymousId, groupId or previousId"));
      } else if (!IsFilterMapRoot(*root) && segments.size() > 1) {
        errors.Add(absl::StrCat(cpath, ".path ", Quote(c.path()), ": ", segments.front(),
                                " is a string, it has no fields"));
      } else if (segments.size() > static_cast<size_t>(kMaxFilterPathSegments)) {
        errors.Add(absl::StrCat(cpath, ".path: ", segments.size(), " segments, at most ",
                                kMaxFilterPathSegments, " allowed"));
      } else if (std::find(segments.begin(), segments.end(), "") != segments.end()) {
        errors.Add(absl::StrCat(cpath, ".path ", Quote(c.path()), ": empty segment"));
      }
    }
    const std::optional<FilterOp> op = ParseFilterOp(c.op());
    if (!op.has_value()) {
      errors.Add(absl::StrCat(cpath, ".op: ",
                              c.op().empty() ? "missing" : absl::StrCat("unknown op ", Quote(c.op())),
                              ", one of ", kFilterOpNames));
      continue;
    }
    const auto kind = c.value().kind_case();
    const bool absent = !c.has_value() || kind == Value::KIND_NOT_SET || kind == Value::kNullValue;
    auto scalar_problem = [](const Value& v) -> std::string {
      switch (v.kind_case()) {
        case Value::kStringValue:
          if (v.string_value().size() > kMaxFilterValueLength) {
            return absl::StrCat(v.string_value().size(), " characters, at most ",
                                kMaxFilterValueLength, " allowed");
          }
          return "";
        case Value::kNumberValue:
        case Value::kBoolValue:
          return "";
        default:
          return "a string, number or boolean";
      }
    };
    switch (*op) {
      case FilterOp::kExists:
        if (c.has_value()) errors.Add(absl::StrCat(cpath, ".value: not used with op exists"));
        break;
      case FilterOp::kGt:
      case FilterOp::kGte:
      case FilterOp::kLt:
      case FilterOp::kLte:
        if (absent || kind != Value::kNumberValue) {
          errors.Add(absl::StrCat(cpath, ".value: op ", c.op(), " compares numbers, give a number"));
        }
        break;
      case FilterOp::kContains:
        if (absent || kind != Value::kStringValue) {
          errors.Add(absl::StrCat(cpath, ".value: op contains looks for a string, give a string"));
        } else if (std::string p = scalar_problem(c.value()); !p.empty()) {
          errors.Add(absl::StrCat(cpath, ".value: ", p));
        }
        break;
      case FilterOp::kIn:
        if (absent || kind != Value::kListValue) {
          errors.Add(absl::StrCat(cpath, ".value: op in takes a list of strings, numbers or "
                                         "booleans"));
        } else if (c.value().list_value().values_size() == 0) {
          errors.Add(absl::StrCat(cpath, ".value: empty list, at least 1 value"));
        } else if (c.value().list_value().values_size() > kMaxFilterInValues) {
          errors.Add(absl::StrCat(cpath, ".value: ", c.value().list_value().values_size(),
                                  " values, at most ", kMaxFilterInValues, " allowed"));
        } else {
          for (int j = 0; j < c.value().list_value().values_size(); ++j) {
            if (std::string p = scalar_problem(c.value().list_value().values(j)); !p.empty()) {
              errors.Add(absl::StrCat(Index(absl::StrCat(cpath, ".value"), j), ": ", p));
            }
          }
        }
        break;
      case FilterOp::kEq:
      case FilterOp::kNeq:
        if (absent) {
          errors.Add(absl::StrCat(cpath, ".value: missing for op ", c.op()));
        } else if (std::string p = scalar_problem(c.value()); !p.empty()) {
          errors.Add(absl::StrCat(cpath, ".value: ", p));
        }
        break;
    }
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
        errors.Add(absl::StrCat(url_path, ".url ", Quote(RedactUrl(url.url())), ": ", problem));
      } else if (auto [it, inserted] = urls.emplace(url.url(), j); !inserted) {
        errors.Add(absl::StrCat(url_path, ".url: same URL as ", urls_path, "[", it->second, "]"));
      }
      ValidateHeaders(url, absl::StrCat(url_path, ".headers"), dest.options().standard_webhooks(),
                      errors);
    }

    if (!dest.shared_secret_file().empty()) {
      // Only the YAML loader reads secret files; anything else must send the secret itself.
      errors.Add(absl::StrCat(path, ".shared_secret_file: not read here; set shared_secret"));
    }
    if (dest.has_rotation()) {
      const hookrelay::v1::SecretRotation& rotation = dest.rotation();
      const std::string rotation_path = absl::StrCat(path, ".rotation");
      if (!rotation.previous_secret_file().empty()) {
        errors.Add(absl::StrCat(rotation_path,
                                ".previous_secret_file: not read here; set previous_secret"));
      } else if (rotation.previous_secret().empty()) {
        errors.Add(absl::StrCat(rotation_path, ".previous_secret: missing"));
      } else if (rotation.previous_secret() == dest.shared_secret()) {
        errors.Add(absl::StrCat(rotation_path, ".previous_secret: the same as shared_secret"));
      }
      if (!rotation.has_ends_at()) errors.Add(absl::StrCat(rotation_path, ".ends_at: missing"));
      if (dest.shared_secret().empty() && dest.shared_secret_file().empty()) {
        errors.Add(absl::StrCat(rotation_path,
                                ": no shared_secret (the new secret) to rotate to"));
      }
    }
    ValidateOptions(dest, absl::StrCat(path, ".options"), errors);
    if (dest.has_filter()) ValidateFilter(dest.filter(), absl::StrCat(path, ".filter"), errors);
  }
}

}  // namespace

std::optional<FilterOp> ParseFilterOp(absl::string_view name) {
  static constexpr std::pair<absl::string_view, FilterOp> kOps[] = {
      {"eq", FilterOp::kEq},   {"neq", FilterOp::kNeq}, {"in", FilterOp::kIn},
      {"exists", FilterOp::kExists}, {"gt", FilterOp::kGt},   {"gte", FilterOp::kGte},
      {"lt", FilterOp::kLt},   {"lte", FilterOp::kLte}, {"contains", FilterOp::kContains}};
  for (const auto& [n, op] : kOps) {
    if (n == name) return op;
  }
  return std::nullopt;
}

std::optional<FilterRoot> ParseFilterRoot(absl::string_view name) {
  static constexpr std::pair<absl::string_view, FilterRoot> kRoots[] = {
      {"properties", FilterRoot::kProperties}, {"traits", FilterRoot::kTraits},
      {"context", FilterRoot::kContext},       {"event", FilterRoot::kEvent},
      {"name", FilterRoot::kName},             {"category", FilterRoot::kCategory},
      {"userId", FilterRoot::kUserId},         {"anonymousId", FilterRoot::kAnonymousId},
      {"groupId", FilterRoot::kGroupId},       {"previousId", FilterRoot::kPreviousId}};
  for (const auto& [n, root] : kRoots) {
    if (n == name) return root;
  }
  return std::nullopt;
}

absl::Status ValidateConfig(const Config& config) {
  ErrorList errors;
  ValidateSources(config, errors);
  ValidateDestinations(config, errors);
  internal::ValidateAudiences(config, errors);
  return errors.ToStatus();
}
DeliveryOptions EffectiveOptions(const Destination& destination) {
  DeliveryOptions options = destination.options();
  if (options.timeout_ms() == 0) options.set_timeout_ms(kDefaultTimeoutMs);
  if (options.retry_window_seconds() == 0) {
    options.set_retry_window_seconds(kDefaultRetryWindowSeconds);
  }
  if (options.initial_backoff_ms() == 0) options.set_initial_backoff_ms(kDefaultInitialBackoffMs);
  if (options.max_backoff_ms() == 0) options.set_max_backoff_ms(kDefaultMaxBackoffMs);
  if (options.circuit_breaker().failures() > 0) {
    hookrelay::v1::CircuitBreaker* b = options.mutable_circuit_breaker();
    if (b->pause_ms() == 0) b->set_pause_ms(kDefaultBreakerPauseMs);
    if (b->max_pause_ms() == 0) b->set_max_pause_ms(kDefaultBreakerMaxPauseMs);
  }
  if (options.has_batch()) {
    hookrelay::v1::BatchOptions* b = options.mutable_batch();
    if (b->max_events() == 0) b->set_max_events(kDefaultBatchMaxEvents);
    if (b->max_bytes() == 0) b->set_max_bytes(kDefaultBatchMaxBytes);
    if (b->max_wait_ms() == 0) b->set_max_wait_ms(kDefaultBatchMaxWaitMs);
  }
  return options;
}
}  // namespace hookrelay::common
