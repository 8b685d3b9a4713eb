#include "common/config.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
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
#include "absl/time/time.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

#include "common/config_errors.h"
#include "common/secret_file.h"
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

constexpr off_t kMaxConfigFileBytes = 16 << 20;

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
      } else if (key == "audiences") {
        ForEachItem(value, path, [&](const YAML::Node& item, const std::string& item_path) {
          MapAudience(item, item_path, *config.add_audiences());
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

  // audiences:
  //   - id: power-users
  //     name: Power Users
  //     sources: [web]
  //     sync_interval: 60s          # or a number of seconds
  //     rule:
  //       all:                      # or any:
  //         - {trait: plan, op: eq, value: pro}
  //         - {event: Order Completed, count_gte: 3, within: 30d}
  void MapAudience(const YAML::Node& node, const std::string& path, hookrelay::v1::Audience& a) {
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping, got ", TypeName(node)));
      return;
    }
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      if (key == "id") {
        MapString(value, child, a.mutable_id());
      } else if (key == "name") {
        MapString(value, child, a.mutable_name());
      } else if (key == "sources") {
        MapStringList(value, child, a.mutable_sources());
      } else if (key == "sync_interval") {
        MapInterval(value, child, &a);
      } else if (key == "rule") {
        MapRule(value, child, *a.mutable_rule());
      } else {
        return false;
      }
      return true;
    });
  }

  void MapInterval(const YAML::Node& node, const std::string& path, hookrelay::v1::Audience* a) {
    uint64_t seconds = 0;
    absl::Duration d;
    if (node.IsScalar() && absl::SimpleAtoi(node.Scalar(), &seconds) && seconds > 0 &&
        seconds <= std::numeric_limits<uint32_t>::max()) {
      a->set_sync_interval_seconds(static_cast<uint32_t>(seconds));
    } else if (node.IsScalar() && absl::ParseDuration(node.Scalar(), &d) &&
               d >= absl::Seconds(1) && d <= absl::Hours(24 * 365)) {
      a->set_sync_interval_seconds(static_cast<uint32_t>(absl::ToInt64Seconds(d)));
    } else {
      Error(node, path, "expected a duration such as 60s, 5m or 1h (or a number of seconds)");
    }
  }

  // The rule's one shape is the admin API's: `match: all|any` and `conditions: [...]`. The
  // shorthand `all: [...]` / `any: [...]` is accepted too and read as that shape.
  void MapRule(const YAML::Node& node, const std::string& path, hookrelay::v1::AudienceRule& rule) {
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping with match and conditions, got ",
                                     TypeName(node)));
      return;
    }
    bool canonical = false, shorthand = false;
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      if (key == "match") {
        canonical = true;
        MapString(value, child, rule.mutable_match());
      } else if (key == "conditions") {
        canonical = true;
        ForEachItem(value, child, [&](const YAML::Node& item, const std::string& item_path) {
          MapCondition(item, item_path, *rule.add_conditions());
        });
      } else if (key == "all" || key == "any") {
        if (shorthand) {
          Error(value, child, "give \"all\" or \"any\", not both");
          return true;
        }
        shorthand = true;
        rule.set_match(std::string(key));
        ForEachItem(value, child, [&](const YAML::Node& item, const std::string& item_path) {
          MapCondition(item, item_path, *rule.add_conditions());
        });
      } else {
        return false;
      }
      return true;
    });
    if (canonical && shorthand) {
      Error(node, path,
            "give match and conditions, or the shorthand all: / any: list, not both");
    }
  }

  void MapCondition(const YAML::Node& node, const std::string& path,
                    hookrelay::v1::AudienceCondition& c) {
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping, got ", TypeName(node)));
      return;
    }
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      uint32_t number = 0;
      if (key == "trait") {
        MapString(value, child, c.mutable_trait());
      } else if (key == "op") {
        MapString(value, child, c.mutable_op());
      } else if (key == "value") {
        MapValue(value, child, c.mutable_value());
      } else if (key == "event") {
        MapString(value, child, c.mutable_event());
      } else if (key == "within") {
        MapString(value, child, c.mutable_within());
      } else if (key == "count_gte" || key == "count_lte" || key == "countGte" ||
                 key == "countLte") {
        // countGte / countLte: the admin API's JSON spelling, so a rule copied from it reads.
        if (value.IsScalar() && value.Scalar() == "0") {
          number = 0;  // count_lte: 0 ("never") is meaningful here
        } else {
          MapOption(value, child, &number);
        }
        if (key == "count_gte" || key == "countGte") {
          c.set_count_gte(number);
        } else {
          c.set_count_lte(number);
        }
      } else {
        return false;
      }
      return true;
    });
  }

  // A plain scalar that reads as true/false or a number becomes one; anything quoted stays a
  // string.
  void MapValue(const YAML::Node& node, const std::string& path, google::protobuf::Value* out) {
    if (!node.IsScalar()) {
      Error(node, path, absl::StrCat("expected a string, number or boolean, got ", TypeName(node)));
      return;
    }
    const std::string& text = node.Scalar();
    const bool plain = node.Tag() == "?";
    double number = 0;
    bool flag = false;
    if (plain && YAML::convert<bool>::decode(node, flag)) {
      out->set_bool_value(flag);
    } else if (plain && absl::SimpleAtod(text, &number) && std::isfinite(number)) {
      out->set_number_value(number);
    } else {
      out->set_string_value(text);
    }
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
      } else if (key == "shared_secret_file") {
        MapString(value, child, dest.mutable_shared_secret_file());
      } else if (key == "urls") {
        ForEachItem(value, child, [&](const YAML::Node& item, const std::string& item_path) {
          MapUrl(item, item_path, *dest.add_urls());
        });
      } else if (key == "options") {
        MapOptions(value, child, *dest.mutable_options());
      } else if (key == "filter") {
        MapFilter(value, child, *dest.mutable_filter());
      } else if (key == "rotation") {
        MapRotation(value, child, *dest.mutable_rotation());
      } else {
        return false;
      }
      return true;
    });
  }

  // filter:
  //   types: [track]
  //   events: ["Order *"]
  //   where:
  //     - {path: properties.plan, op: eq, value: pro}
  //     - {path: properties.plan, op: in, value: [pro, team]}
  void MapFilter(const YAML::Node& node, const std::string& path,
                 hookrelay::v1::DestinationFilter& filter) {
    if (!node.IsNull() && !node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping with types, events and/or where, got ",
                                     TypeName(node)));
      return;
    }
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      if (key == "types") {
        MapStringList(value, child, filter.mutable_types());
      } else if (key == "events") {
        MapStringList(value, child, filter.mutable_events());
      } else if (key == "where") {
        ForEachItem(value, child, [&](const YAML::Node& item, const std::string& item_path) {
          MapFilterCondition(item, item_path, *filter.add_where());
        });
      } else {
        return false;
      }
      return true;
    });
  }

  // rotation: {previous_secret | previous_secret_file, ends_at: RFC 3339 time}.
  void MapRotation(const YAML::Node& node, const std::string& path,
                   hookrelay::v1::SecretRotation& rotation) {
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping {previous_secret, ends_at}, got ",
                                     TypeName(node)));
      return;
    }
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      if (key == "previous_secret") {
        MapString(value, child, rotation.mutable_previous_secret());
      } else if (key == "previous_secret_file") {
        MapString(value, child, rotation.mutable_previous_secret_file());
      } else if (key == "ends_at") {
        std::string text;
        MapString(value, child, &text);
        absl::Time t;
        std::string error;
        if (text.empty()) {
          // MapString reported a non-string; an empty one is "missing" for the validator.
        } else if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
          Error(value, child,
                absl::StrCat("\"", absl::CHexEscape(text),
                             "\" is not an RFC 3339 time such as 2026-12-01T12:00:00Z"));
        } else {
          const absl::Duration since = t - absl::UnixEpoch();
          const int64_t seconds = absl::ToInt64Seconds(absl::Floor(since, absl::Seconds(1)));
          rotation.mutable_ends_at()->set_seconds(seconds);
          rotation.mutable_ends_at()->set_nanos(static_cast<int32_t>(
              absl::ToInt64Nanoseconds(since - absl::Seconds(seconds))));
        }
      } else {
        return false;
      }
      return true;
    });
  }

  void MapFilterCondition(const YAML::Node& node, const std::string& path,
                          hookrelay::v1::FilterCondition& c) {
    if (!node.IsMap()) {
      Error(node, path, absl::StrCat("expected a mapping {path, op, value}, got ", TypeName(node)));
      return;
    }
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      if (key == "path") {
        MapString(value, child, c.mutable_path());
      } else if (key == "op") {
        MapString(value, child, c.mutable_op());
      } else if (key == "value") {
        if (value.IsSequence()) {
          // `in` takes a list of scalars.
          google::protobuf::ListValue* list = c.mutable_value()->mutable_list_value();
          ForEachItem(value, child, [&](const YAML::Node& item, const std::string& item_path) {
            MapValue(item, item_path, list->add_values());
          });
        } else {
          MapValue(value, child, c.mutable_value());
        }
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

  // `circuit_breaker: {failures: 5, pause_ms: 5000, max_pause_ms: 300000}`.
  void MapCircuitBreaker(const YAML::Node& node, const std::string& path,
                         hookrelay::v1::CircuitBreaker& breaker) {
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      uint32_t number = 0;
      if (key == "failures") {
        MapOption(value, child, &number);
        breaker.set_failures(number);
      } else if (key == "pause_ms") {
        MapOption(value, child, &number);
        breaker.set_pause_ms(number);
      } else if (key == "max_pause_ms") {
        MapOption(value, child, &number);
        breaker.set_max_pause_ms(number);
      } else {
        return false;
      }
      return true;
    });
  }

  void MapBatch(const YAML::Node& node, const std::string& path,
                hookrelay::v1::BatchOptions& batch) {
    ForEachKey(node, path, [&](absl::string_view key, const YAML::Node& value,
                               const std::string& child) {
      uint32_t number = 0;
      if (key == "max_events") {
        MapOption(value, child, &number);
        batch.set_max_events(number);
      } else if (key == "max_bytes") {
        MapOption(value, child, &number);
        batch.set_max_bytes(number);
      } else if (key == "max_wait_ms") {
        MapOption(value, child, &number);
        batch.set_max_wait_ms(number);
      } else {
        return false;
      }
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
      } else if (key == "rate_limit_per_second") {
        MapOption(value, child, &number);
        options.set_rate_limit_per_second(number);
      } else if (key == "circuit_breaker") {
        MapCircuitBreaker(value, child, *options.mutable_circuit_breaker());
      } else if (key == "batch") {
        MapBatch(value, child, *options.mutable_batch());
      } else if (key == "ordering") {
        MapString(value, child, options.mutable_ordering());
      } else {
        return false;
      }
      return true;
    });
  }

  ErrorList& errors_;
};

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
absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  const std::string prefix = absl::StrCat("config file \"", absl::CHexEscape(path), "\": ");
  absl::StatusOr<Config> config = ParseConfigYaml(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(prefix, config.status().message()));
  }
  // Secrets kept in files (mounted Secrets) are read now; validation then sees shared_secret.
  ErrorList file_errors;
  for (int i = 0; i < config->destinations_size(); ++i) {
    Destination& dest = *config->mutable_destinations(i);
    if (dest.has_rotation() && !dest.rotation().previous_secret_file().empty()) {
      hookrelay::v1::SecretRotation& rotation = *dest.mutable_rotation();
      const std::string field =
          absl::StrCat(Index("destinations", i), ".rotation.previous_secret_file");
      if (!rotation.previous_secret().empty()) {
        file_errors.Add(
            absl::StrCat(field, ": give previous_secret or previous_secret_file, not both"));
      } else if (absl::StatusOr<std::string> previous =
                     ReadSecretFile(rotation.previous_secret_file());
                 !previous.ok()) {
        file_errors.Add(absl::StrCat(field, ": ", previous.status().message()));
      } else {
        rotation.set_previous_secret(*std::move(previous));
        rotation.clear_previous_secret_file();
      }
    }
    if (dest.shared_secret_file().empty()) continue;
    const std::string field = absl::StrCat(Index("destinations", i), ".shared_secret_file");
    if (!dest.shared_secret().empty()) {
      file_errors.Add(absl::StrCat(field, ": give shared_secret or shared_secret_file, not both"));
      continue;
    }
    absl::StatusOr<std::string> secret = ReadSecretFile(dest.shared_secret_file());
    if (!secret.ok()) {
      file_errors.Add(absl::StrCat(field, ": ", secret.status().message()));
      continue;
    }
    dest.set_shared_secret(*std::move(secret));
    dest.clear_shared_secret_file();
  }
  if (absl::Status status = file_errors.ToStatus(prefix); !status.ok()) return status;
  if (absl::Status status = ValidateConfig(*config); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
  }
  return config;
}
}  // namespace hookrelay::common
