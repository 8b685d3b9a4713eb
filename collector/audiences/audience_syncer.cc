#include "collector/audiences/audience_syncer.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "collector/audiences/audience_eval.h"
#include "common/config_validate.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/time_format.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Audience;
using hookrelay::v1::AudienceState;
using hookrelay::v1::Config;

absl::Duration IntervalOf(const Audience& a) {
  return absl::Seconds(a.sync_interval_seconds() == 0 ? common::kDefaultAudienceSyncSeconds
                                                      : a.sync_interval_seconds());
}

}  // namespace

std::string AudienceIdentifyJson(const Audience& audience, const std::string& user, bool member,
                                 const std::string& message_id, absl::Time now) {
  const std::string trait = common::AudienceTraitName(audience.name());
  const std::string ts = common::FormatIso8601Millis(now);
  std::string json;
  common::JsonObjectWriter w(&json);
  w.String("type", "identify");
  w.String("messageId", message_id);
  w.String("userId", user);
  w.Key("traits");
  {
    common::JsonObjectWriter traits(&json);
    traits.Bool(trait, member);
    traits.Close();
  }
  w.Key("context");
  {
    common::JsonObjectWriter context(&json);
    context.Key("personas");
    common::JsonObjectWriter personas(&json);
    personas.String("computation_class", "audience");
    personas.String("computation_key", trait);
    personas.String("computation_id", audience.id());
    personas.Close();
    context.Close();
  }
  w.String("timestamp", ts);
  w.String("originalTimestamp", ts);
  w.String("sentAt", ts);
  w.String("receivedAt", ts);
  w.Close();
  return json;
}

AudienceSyncer::AudienceSyncer(Options options, UserDataStore& store)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : common::Clock::Real()),
      store_(store),
      config_(std::make_shared<const Config>()) {
  if (options_.registry != nullptr) {
    try {
      members_ = &prometheus::BuildGauge()
                      .Name("hookrelay_audience_members")
                      .Help("Members of each audience after its last sync")
                      .Register(*options_.registry);
      changes_ = &prometheus::BuildCounter()
                      .Name("hookrelay_audience_changes_total")
                      .Help("Membership changes sent as identify calls, by audience and "
                            "direction (entered, exited)")
                      .Register(*options_.registry);
      duration_ = &prometheus::BuildHistogram()
                       .Name("hookrelay_audience_sync_seconds")
                       .Help("Time of one audience sync (read, evaluate, commit)")
                       .Register(*options_.registry)
                       .Add({}, prometheus::Histogram::BucketBoundaries{
                                    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30});
    } catch (const std::exception& e) {
      common::LogError("registering audience metrics failed", {{"error", e.what()}});
    }
  }
}

AudienceSyncer::~AudienceSyncer() { Shutdown(); }

void AudienceSyncer::SetConfig(std::shared_ptr<const Config> config) {
  std::shared_ptr<const Config> previous;
  {
    absl::MutexLock lock(&mu_);
    previous = config_;
    config_ = config;
  }
  absl::flat_hash_set<std::string> kept;
  for (const Audience& a : config->audiences()) kept.insert(a.id());
  for (const Audience& a : previous->audiences()) {
    if (kept.contains(a.id())) continue;
    absl::MutexLock lock(&sync_mu_);
    if (absl::Status st = store_.DropAudience(a.id()); !st.ok()) {
      common::LogWarning("dropping an audience's memberships failed",
                         {{"audience", a.id()}, {"error", st.message()}});
    }
    if (members_ != nullptr) members_->Add({{"audience", a.id()}}).Set(0);
  }
  for (const Audience& a : config->audiences()) {
    if (members_ != nullptr) members_->Add({{"audience", a.id()}});
    if (changes_ != nullptr) {
      changes_->Add({{"audience", a.id()}, {"direction", "entered"}});
      changes_->Add({{"audience", a.id()}, {"direction", "exited"}});
    }
  }
}

void AudienceSyncer::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void AudienceSyncer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void AudienceSyncer::Loop() {
  pthread_setname_np(pthread_self(), "audience-sync");
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      clock_.AwaitWithDeadline(mu_, absl::Condition(&stopping_), clock_.Now() + absl::Seconds(1));
      if (stopping_) return;
    }
    SyncDue();
  }
}

void AudienceSyncer::SyncDue() {
  std::shared_ptr<const Config> config;
  {
    absl::MutexLock lock(&mu_);
    config = config_;
  }
  for (const Audience& a : config->audiences()) {
    // Whether it is due is read under sync_mu_: a SyncNow (the first computation of an audience
    // just created) may be running, and once it commits the audience is not due any more.
    absl::MutexLock lock(&sync_mu_);
    absl::StatusOr<std::optional<AudienceState>> state = store_.GetAudienceState(a.id());
    if (!state.ok()) continue;
    const bool due = !state->has_value() ||
                     clock_.Now() >= absl::FromUnixMillis((*state)->last_sync_ms()) + IntervalOf(a);
    if (!due) continue;
    absl::StatusOr<AudienceState> synced = Sync(a, *config);
    if (absl::IsAborted(synced.status())) {
      // An engine shared by several collectors: another one is syncing it (its turn).
      common::LogDebug("audience sync left to another collector",
                       {{"audience", a.id()}, {"reason", synced.status().message()}});
    } else if (!synced.ok()) {
      common::LogWarning("audience sync failed",
                         {{"audience", a.id()}, {"error", synced.status().message()}});
    }
    absl::MutexLock stop_lock(&mu_);
    if (stopping_) return;
  }
}

absl::StatusOr<AudienceState> AudienceSyncer::SyncNow(const std::string& audience_id) {
  std::shared_ptr<const Config> config;
  {
    absl::MutexLock lock(&mu_);
    config = config_;
  }
  for (const Audience& a : config->audiences()) {
    if (a.id() != audience_id) continue;
    absl::MutexLock lock(&sync_mu_);
    return Sync(a, *config);
  }
  return absl::NotFoundError(absl::StrCat("no audience \"", audience_id, "\""));
}

absl::StatusOr<AudienceState> AudienceSyncer::Sync(const Audience& a, const Config& config) {
  const auto started = std::chrono::steady_clock::now();
  const absl::Time now = clock_.Now();
  const std::vector<std::string> sources(a.sources().begin(), a.sources().end());
  ASSIGN_OR_RETURN(AudienceSyncInput input, store_.BeginAudienceSync(a.id(), sources, now));
  const bool first = !input.state.has_value();

  // Where identify calls go: every enabled webhook destination of the audience's sources, once,
  // under the first of the audience's sources it reads.
  std::vector<std::pair<const hookrelay::v1::Destination*, std::string>> targets;
  for (const hookrelay::v1::Destination& d : config.destinations()) {
    if (!d.enabled()) continue;
    for (const std::string& source : sources) {
      if (std::find(d.sources().begin(), d.sources().end(), source) != d.sources().end()) {
        targets.emplace_back(&d, source);
        break;
      }
    }
  }

  AudienceSyncPlan plan;
  plan.audience_id = a.id();
  plan.sources = sources;
  plan.log_position = input.log_position;
  plan.rechecks_done = std::move(input.rechecks_due);
  uint64_t entered = 0;
  uint64_t exited = 0;
  // Users with a profile in the audience's sources or a membership to end. An engine may list
  // users whose change was in another source only (AudienceSyncInput::users): they are read and
  // not counted, so `evaluated` means the same on every engine.
  uint64_t evaluated = 0;
  for (size_t from = 0; from < input.users.size(); from += options_.chunk) {
    const size_t to = std::min(input.users.size(), from + options_.chunk);
    const std::vector<std::string> chunk(input.users.begin() + from, input.users.begin() + to);
    ASSIGN_OR_RETURN(std::vector<AudienceUser> users,
                     store_.ReadAudienceUsers(a.id(), chunk, sources));
    for (const AudienceUser& user : users) {
      if (user.profiles.empty() && !user.member) continue;
      ++evaluated;
      const Evaluation e = EvaluateAudience(a, user.profiles, now);
      if (e.recheck_at != absl::InfiniteFuture()) plan.rechecks.emplace_back(user.user_id, e.recheck_at);
      if (e.member == user.member) continue;
      plan.changes.emplace_back(user.user_id, e.member);
      ++(e.member ? entered : exited);
      const std::string message_id =
          absl::StrCat("aud-", a.id(), "-", input.log_position, "-", plan.changes.size());
      const std::string body = AudienceIdentifyJson(a, user.user_id, e.member, message_id, now);
      for (const auto& [d, source] : targets) {
        hookrelay::v1::Job& job = plan.jobs.emplace_back();
        job.set_source_id(source);
        job.set_destination_id(d->id());
        job.set_type(hookrelay::v1::IDENTIFY);
        job.set_message_id(message_id);
        job.set_user_id(user.user_id);
        if (d->options().ordering() == common::kOrderingPerUser) {
          job.set_ordering_key(user.user_id);
        }
        job.set_received_at_unix_ms(absl::ToUnixMillis(now));
        job.set_event_json(body);
      }
    }
  }

  // Change log entries every audience has read can go.
  uint64_t needed_after = input.log_position;
  for (const Audience& other : config.audiences()) {
    if (other.id() == a.id()) continue;
    absl::StatusOr<std::optional<AudienceState>> state = store_.GetAudienceState(other.id());
    if (!state.ok()) return state.status();
    if (state->has_value()) needed_after = std::min(needed_after, (*state)->cursor());
  }
  plan.log_needed_after = needed_after;

  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - started;
  plan.stats.set_last_sync_ms(absl::ToUnixMillis(now));
  plan.stats.set_last_evaluated(evaluated);
  plan.stats.set_last_entered(entered);
  plan.stats.set_last_exited(exited);
  plan.stats.set_last_duration_ms(static_cast<int64_t>(elapsed.count() * 1000));
  plan.stats.set_last_first(first);
  ASSIGN_OR_RETURN(AudienceState state, store_.CommitAudienceSync(std::move(plan)));
  const std::chrono::duration<double> total = std::chrono::steady_clock::now() - started;
  if (duration_ != nullptr) duration_->Observe(total.count());
  if (members_ != nullptr) {
    members_->Add({{"audience", a.id()}}).Set(static_cast<double>(state.members()));
  }
  if (changes_ != nullptr) {
    changes_->Add({{"audience", a.id()}, {"direction", "entered"}})
        .Increment(static_cast<double>(entered));
    changes_->Add({{"audience", a.id()}, {"direction", "exited"}})
        .Increment(static_cast<double>(exited));
  }
  common::LogInfo("audience synced", {{"audience", a.id()},
                                      {"first", first},
                                      {"evaluated", evaluated},
                                      {"entered", entered},
                                      {"exited", exited},
                                      {"members", state.members()},
                                      {"seconds", total.count()}});
  return state;
}

}  // namespace hookrelay::collector
