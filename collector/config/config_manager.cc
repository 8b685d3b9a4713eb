#include "collector/config/config_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collector/api/admin_errors.h"
#include "common/config.h"
#include "common/config_validate.h"
#include "common/log.h"
#include "hookrelay/v1/admin.pb.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Config;

// file objects, then API objects whose ids the file does not use.
Config Merge(const Config& file, const Config& api, absl::flat_hash_set<std::string>* file_sources,
             absl::flat_hash_set<std::string>* file_destinations,
             absl::flat_hash_set<std::string>* file_audiences) {
  Config merged = file;
  for (const auto& s : file.sources()) file_sources->insert(s.id());
  for (const auto& d : file.destinations()) file_destinations->insert(d.id());
  for (const auto& a : file.audiences()) file_audiences->insert(a.id());
  for (const auto& a : api.audiences()) {
    if (!file_audiences->contains(a.id())) *merged.add_audiences() = a;
  }
  for (const auto& s : api.sources()) {
    if (!file_sources->contains(s.id())) *merged.add_sources() = s;
  }
  for (const auto& d : api.destinations()) {
    if (!file_destinations->contains(d.id())) *merged.add_destinations() = d;
  }
  return merged;
}

void LogShadowed(const Config& api, const absl::flat_hash_set<std::string>& file_sources,
                 const absl::flat_hash_set<std::string>& file_destinations,
                 const std::string& path) {
  for (const auto& s : api.sources()) {
    if (file_sources.contains(s.id())) {
      common::LogWarning("a source of the config file replaces the one made through the API",
                         {{"source", s.id()}, {"path", path}});
    }
  }
  for (const auto& d : api.destinations()) {
    if (file_destinations.contains(d.id())) {
      common::LogWarning("a destination of the config file replaces the one made through the API",
                         {{"destination", d.id()}, {"path", path}});
    }
  }
}

}  // namespace

std::string JsonFieldPath(absl::string_view path) {
  std::string out;
  out.reserve(path.size());
  bool upper = false;
  bool in_quotes = false;
  for (char c : path) {
    if (c == '"') in_quotes = !in_quotes;
    if (!in_quotes && c == '_') {
      upper = true;
      continue;
    }
    out.push_back(upper ? absl::ascii_toupper(static_cast<unsigned char>(c)) : c);
    upper = false;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> ParseValidationErrors(absl::string_view message) {
  std::vector<std::pair<std::string, std::string>> out;
  for (absl::string_view item : absl::StrSplit(message, "; ")) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    // "path: problem" or "path \"value\": problem"; a path has no spaces outside quotes.
    size_t end = 0;
    bool in_quotes = false;
    for (; end < item.size(); ++end) {
      const char c = item[end];
      if (c == '"') in_quotes = !in_quotes;
      if (!in_quotes && (c == ' ' || c == ':')) break;
    }
    absl::string_view path = item.substr(0, end);
    absl::string_view rest = absl::StripLeadingAsciiWhitespace(item.substr(end));
    absl::ConsumePrefix(&rest, ":");
    rest = absl::StripLeadingAsciiWhitespace(rest);
    out.emplace_back(std::string(path), std::string(rest));
  }
  return out;
}

const hookrelay::v1::Source* ConfigManager::Snapshot::FindSource(const std::string& id) const {
  for (const auto& s : merged.sources()) {
    if (s.id() == id) return &s;
  }
  return nullptr;
}

const hookrelay::v1::Destination* ConfigManager::Snapshot::FindDestination(
    const std::string& id) const {
  for (const auto& d : merged.destinations()) {
    if (d.id() == id) return &d;
  }
  return nullptr;
}

std::string ConfigManager::Snapshot::SourceManagedBy(const std::string& id) const {
  return file_sources.contains(id) ? absl::StrCat("file:", file_path) : "api";
}

std::string ConfigManager::Snapshot::DestinationManagedBy(const std::string& id) const {
  return file_destinations.contains(id) ? absl::StrCat("file:", file_path) : "api";
}

const hookrelay::v1::Audience* ConfigManager::Snapshot::FindAudience(const std::string& id) const {
  for (const auto& a : merged.audiences()) {
    if (a.id() == id) return &a;
  }
  return nullptr;
}

std::string ConfigManager::Snapshot::AudienceManagedBy(const std::string& id) const {
  return file_audiences.contains(id) ? absl::StrCat("file:", file_path) : "api";
}

ConfigManager::ConfigManager(ConfigStore& store, std::string file_path, Publish publish,
                             absl::Duration lease, bool per_key_order)
    : store_(store), lease_(lease), per_key_order_(per_key_order), file_path_(std::move(file_path)), publish_(std::move(publish)) {}

absl::Duration LeaseMargin(absl::Duration lease) {
  return std::max(absl::Seconds(1), lease / 4);
}

absl::Status CheckTimeoutsFitLease(const Config& config, absl::Duration lease) {
  if (lease == absl::InfiniteDuration()) return absl::OkStatus();
  const absl::Duration margin = LeaseMargin(lease);
  std::vector<std::string> errors;
  for (int i = 0; i < config.destinations_size(); ++i) {
    const hookrelay::v1::Destination& d = config.destinations(i);
    const hookrelay::v1::DeliveryOptions options = common::EffectiveOptions(d);
    const absl::Duration timeout = absl::Milliseconds(options.timeout_ms());
    // A batched job also waits in its deliverer for the batch to fill, under the same lease.
    const absl::Duration wait =
        options.has_batch() ? absl::Milliseconds(options.batch().max_wait_ms()) : absl::ZeroDuration();
    if (wait > absl::ZeroDuration() && timeout + wait + margin > lease) {
      errors.push_back(absl::StrCat(
          "destinations[", i, "].options.batch.max_wait_ms: ", absl::ToInt64Milliseconds(wait),
          " ms plus the timeout of ", absl::ToInt64Milliseconds(timeout),
          " ms does not fit inside the job lease of ", absl::FormatDuration(lease),
          " (--lease_duration) with ", absl::FormatDuration(margin), " to spare: at most ",
          std::max<int64_t>(0, absl::ToInt64Milliseconds(lease - margin - timeout)),
          " ms, or a longer --lease_duration"));
      continue;
    }
    if (timeout + margin <= lease) continue;
    errors.push_back(absl::StrCat(
        "destinations[", i, "].options.timeout_ms: ", absl::ToInt64Milliseconds(timeout),
        " ms does not fit inside the job lease of ", absl::FormatDuration(lease),
        " (--lease_duration) with ", absl::FormatDuration(margin),
        " to spare: at most ", absl::ToInt64Milliseconds(lease - margin),
        " ms, or a longer --lease_duration"));
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

absl::Status CheckNoOrdering(const Config& config) {
  std::vector<std::string> errors;
  for (int i = 0; i < config.destinations_size(); ++i) {
    const std::string& ordering = config.destinations(i).options().ordering();
    if (ordering.empty()) continue;
    errors.push_back(absl::StrCat("destinations[", i, "].options.ordering: \"", ordering,
                                  "\" is not available with this collector's job store (--store)"));
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

absl::StatusOr<std::shared_ptr<ConfigManager::Snapshot>> ConfigManager::Build(
    Config api, uint64_t version, const Focus* focus) const {
  auto snapshot = std::make_shared<Snapshot>();
  snapshot->version = version;
  snapshot->file_path = file_path_;
  snapshot->merged = Merge(file_, api, &snapshot->file_sources, &snapshot->file_destinations,
                           &snapshot->file_audiences);
  snapshot->api = std::move(api);
  absl::Status valid = common::ValidateConfig(snapshot->merged);
  if (absl::Status fits = CheckTimeoutsFitLease(snapshot->merged, lease_); !fits.ok()) {
    valid = valid.ok() ? fits
                       : absl::InvalidArgumentError(absl::StrCat(valid.message(), "; ", fits.message()));
  }
  if (!per_key_order_) {
    if (absl::Status order = CheckNoOrdering(snapshot->merged); !order.ok()) {
      valid = valid.ok() ? order
                         : absl::InvalidArgumentError(
                               absl::StrCat(valid.message(), "; ", order.message()));
    }
  }
  if (valid.ok()) return snapshot;
  if (focus == nullptr) return valid;
  // The focus object's index in the merged config: its errors are reported relative to it.
  std::string prefix;
  if (focus->kind == Focus::Kind::kSource) {
    for (int i = 0; i < snapshot->merged.sources_size(); ++i) {
      if (snapshot->merged.sources(i).id() == focus->id) prefix = absl::StrCat("sources[", i, "]");
    }
  } else if (focus->kind == Focus::Kind::kAudience) {
    for (int i = 0; i < snapshot->merged.audiences_size(); ++i) {
      if (snapshot->merged.audiences(i).id() == focus->id) prefix = absl::StrCat("audiences[", i, "]");
    }
  } else {
    for (int i = 0; i < snapshot->merged.destinations_size(); ++i) {
      if (snapshot->merged.destinations(i).id() == focus->id) {
        prefix = absl::StrCat("destinations[", i, "]");
      }
    }
  }
  std::vector<FieldViolation> violations;
  std::vector<std::string> texts;
  for (auto& [path, problem] : ParseValidationErrors(valid.message())) {
    absl::string_view field = path;
    if (!prefix.empty() && absl::ConsumePrefix(&field, prefix)) {
      absl::ConsumePrefix(&field, ".");
    }
    std::string json_field = JsonFieldPath(field);
    // The file writes the interval as a duration; the API in seconds.
    if (focus->kind == Focus::Kind::kAudience && json_field == "syncInterval") {
      json_field = "syncIntervalSeconds";
    }
    texts.push_back(json_field.empty() ? problem : absl::StrCat(json_field, ": ", problem));
    violations.push_back({std::move(json_field), std::move(problem)});
  }
  return WithViolations(absl::StatusCode::kInvalidArgument, absl::StrJoin(texts, "; "),
                        violations);
}

absl::Status ConfigManager::Start() {
  absl::MutexLock lock(&mu_);
  if (!file_path_.empty()) {
    absl::StatusOr<Config> file = common::LoadConfigFile(file_path_);
    if (!file.ok()) return file.status();
    file_ = *std::move(file);
  }
  hookrelay::v1::StoredConfig stored;
  absl::StatusOr<std::optional<std::string>> bytes = store_.LoadConfig();
  if (!bytes.ok()) return bytes.status();
  if (bytes->has_value() && !stored.ParseFromString(**bytes)) {
    return absl::DataLossError("the stored configuration cannot be parsed");
  }
  absl::StatusOr<std::shared_ptr<Snapshot>> snapshot =
      Build(stored.config(), stored.version(), nullptr);
  if (!snapshot.ok()) {
    return absl::Status(snapshot.status().code(),
                        absl::StrCat("the configuration (file ",
                                     file_path_.empty() ? "none" : file_path_,
                                     ", plus objects made through the admin API) is invalid: ",
                                     snapshot.status().message()));
  }
  LogShadowed((*snapshot)->api, (*snapshot)->file_sources, (*snapshot)->file_destinations,
              file_path_);
  current_ = *std::move(snapshot);
  common::LogInfo("configuration loaded",
                  {{"file", file_path_},
                   {"file_sources", file_.sources_size()},
                   {"file_destinations", file_.destinations_size()},
                   {"api_sources", current_->api.sources_size()},
                   {"api_destinations", current_->api.destinations_size()},
                   {"version", current_->version}});
  publish_(current_);
  return absl::OkStatus();
}

absl::Status ConfigManager::ReloadFile() {
  absl::MutexLock lock(&mu_);
  if (file_path_.empty()) return absl::OkStatus();
  absl::StatusOr<Config> file = common::LoadConfigFile(file_path_);
  if (!file.ok()) return file.status();
  Config previous = std::move(file_);
  file_ = *std::move(file);
  absl::StatusOr<std::shared_ptr<Snapshot>> snapshot =
      Build(current_->api, current_->version, nullptr);
  if (!snapshot.ok()) {
    file_ = std::move(previous);
    return snapshot.status();
  }
  LogShadowed((*snapshot)->api, (*snapshot)->file_sources, (*snapshot)->file_destinations,
              file_path_);
  current_ = *std::move(snapshot);
  publish_(current_);
  return absl::OkStatus();
}

std::shared_ptr<const ConfigManager::Snapshot> ConfigManager::Get() const {
  absl::ReaderMutexLock lock(&mu_);
  return current_;
}

absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> ConfigManager::Apply(
    const Audit& audit, const Focus& focus, absl::FunctionRef<absl::Status(Config& api)> mutate) {
  absl::MutexLock lock(&mu_);
  // A replicated engine refuses a save that would overwrite a change made through another
  // collector since this one last read the configuration (ABORTED): read it again and re-apply
  // the change to it, after a short random pause (collectors saving in a loop would otherwise
  // keep refusing each other), 20 times at most.
  constexpr int kAttempts = 20;
  for (int attempt = 1;; ++attempt) {
    Config api = current_->api;
    if (absl::Status st = mutate(api); !st.ok()) return st;
    absl::StatusOr<std::shared_ptr<Snapshot>> snapshot =
        Build(std::move(api), current_->version + 1, &focus);
    if (!snapshot.ok()) return snapshot.status();
    hookrelay::v1::StoredConfig stored;
    stored.set_version((*snapshot)->version);
    *stored.mutable_config() = (*snapshot)->api;
    absl::Status saved = store_.SaveConfig(stored.SerializeAsString());
    if (absl::IsAborted(saved) && attempt < kAttempts) {
      absl::SleepFor(absl::Microseconds(absl::Uniform(bitgen_, 500, 5000 * attempt)));
      if (absl::Status st = ReloadStoredLocked(); !st.ok()) {
        return absl::UnavailableError(
            absl::StrCat("the change could not be stored: ", st.message()));
      }
      continue;
    }
    if (!saved.ok()) {
      return absl::Status(absl::IsAborted(saved) ? absl::StatusCode::kAborted
                                                 : absl::StatusCode::kUnavailable,
                          absl::StrCat("the change could not be stored: ", saved.message()));
    }
    current_ = *std::move(snapshot);
    break;
  }
  common::LogInfo("admin change", {{"who", audit.who},
                                   {"action", audit.action},
                                   {"object", audit.object},
                                   {"fields", absl::StrJoin(audit.fields, ",")},
                                   {"version", current_->version}});
  publish_(current_);
  return current_;
}

absl::StatusOr<std::shared_ptr<const ConfigManager::Snapshot>> ConfigManager::Check(
    const Focus& focus, absl::FunctionRef<absl::Status(Config& api)> mutate) const {
  absl::ReaderMutexLock lock(&mu_);
  Config api = current_->api;
  if (absl::Status st = mutate(api); !st.ok()) return st;
  absl::StatusOr<std::shared_ptr<Snapshot>> snapshot =
      Build(std::move(api), current_->version + 1, &focus);
  if (!snapshot.ok()) return snapshot.status();
  return std::shared_ptr<const Snapshot>(*std::move(snapshot));
}

absl::Status ConfigManager::ReloadStoredLocked() {
  absl::StatusOr<std::optional<std::string>> bytes = store_.LoadConfig();
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) return absl::OkStatus();
  return AdoptStoredLocked(**bytes);
}

absl::Status ConfigManager::AdoptStoredLocked(const std::string& bytes) {
  hookrelay::v1::StoredConfig stored;
  if (!stored.ParseFromString(bytes)) {
    return absl::DataLossError("the stored configuration cannot be parsed");
  }
  if (current_ != nullptr && stored.version() <= current_->version) return absl::OkStatus();
  absl::StatusOr<std::shared_ptr<Snapshot>> snapshot =
      Build(stored.config(), stored.version(), nullptr);
  if (!snapshot.ok()) return snapshot.status();
  current_ = *std::move(snapshot);
  common::LogInfo("configuration changed through another collector",
                  {{"version", current_->version},
                   {"api_sources", current_->api.sources_size()},
                   {"api_destinations", current_->api.destinations_size()},
                   {"api_audiences", current_->api.audiences_size()}});
  publish_(current_);
  return absl::OkStatus();
}

absl::Status ConfigManager::AdoptStored(const std::string& bytes) {
  absl::MutexLock lock(&mu_);
  if (current_ == nullptr) return absl::OkStatus();  // Start() reads it.
  absl::Status st = AdoptStoredLocked(bytes);
  if (!st.ok()) {
    common::LogError("a configuration stored by another collector was not applied; the running "
                     "one stays",
                     {{"error", st.ToString()}});
  }
  return st;
}

}  // namespace hookrelay::collector
