// Audiences' costs (SPEC §6.2, issue 11):
//
// BM_Ingest/audiences:{0,3}: events through the Ingestor into a RocksDbJobStore (validation,
// normalisation, routing, the profile deltas and change log, the durable group commit), 8
// batches of 100 in flight like a busy front end; 100,000 users, 80 % track events (half of
// them named by an audience), 20 % identify calls with traits. audiences:3 defines a trait
// audience, a 30-day count and a 15-minute count. Compare the two rows of one run.
//
// BM_Sync: one sync of an audience over 1,000,000 profiles of which 1 % changed since the
// previous sync; counters: evaluated users (must be the changed ones) and members.
//
//   bazel run -c opt --config=bench //collector:audience_benchmark
#include <stdlib.h>
#include <sys/resource.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "google/protobuf/util/json_util.h"
#include "collector/audiences/audience_eval.h"
#include "collector/audiences/audience_syncer.h"
#include "collector/model/event.h"
#include "collector/ingest/ingestor.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"
#include "collector/routing/routing.h"
#include "common/clock.h"
#include "hookrelay/v1/config.pb.h"

namespace hookrelay::collector {
namespace {

constexpr int kBatch = 100;

std::string TempDir() {
  std::string pattern = "/tmp/audience_benchmark_XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
}

double ProcessCpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

hookrelay::v1::Config MakeConfig(int audiences) {
  std::string json = R"({"sources":[{"id":"web","kind":"WEB","write_keys":["wk_bench"]}],
    "destinations":[{"id":"hook","type":"webhooks","sources":["web"],"enabled":true,
                     "urls":[{"url":"https://hooks.example.com/x"}]}],
    "audiences":[)";
  const char* defs[] = {
      R"({"id":"pro","name":"Pro","sources":["web"],"rule":{"match":"all","conditions":[{"trait":"plan","op":"eq","value":"pro"}]}})",
      R"({"id":"buyers","name":"Buyers","sources":["web"],"rule":{"match":"all","conditions":[{"event":"Order Completed","count_gte":3,"within":"30d"}]}})",
      R"({"id":"hot","name":"Hot","sources":["web"],"rule":{"match":"all","conditions":[{"event":"Product Viewed","count_gte":5,"within":"15m"}]}})",
  };
  for (int i = 0; i < audiences; ++i) absl::StrAppend(&json, i > 0 ? "," : "", defs[i]);
  json += "]}";
  hookrelay::v1::Config config;
  if (!google::protobuf::util::JsonStringToMessage(json, &config).ok()) abort();
  return config;
}

std::atomic<uint64_t> g_sequence{0};

std::vector<RawEvent> MakeEvents() {
  std::vector<RawEvent> events(kBatch);
  const uint64_t first = g_sequence.fetch_add(kBatch);
  for (int i = 0; i < kBatch; ++i) {
    const uint64_t n = first + i;
    RawEvent& e = events[i];
    e.message_id = absl::StrCat("bench-", n);
    e.user_id = absl::StrCat("user-", (n * 7919) % 100000);
    e.context = R"({"ip":"203.0.113.9","library":{"name":"analytics.js","version":"2.1"}})";
    switch (n % 10) {
      case 0:
      case 1:
        e.type = hookrelay::v1::IDENTIFY;
        e.traits = absl::StrCat(R"({"plan":")", n % 3 == 0 ? "pro" : "free",
                                R"(","email":"u@example.com","seats":)", n % 50, "}");
        break;
      case 2:
      case 3:
      case 4:
      case 5:
        e.type = hookrelay::v1::TRACK;
        e.event = n % 2 == 0 ? "Order Completed" : "Product Viewed";
        e.properties = R"({"orderId":"50314b8e","total":27.5,"currency":"USD"})";
        break;
      default:
        e.type = hookrelay::v1::TRACK;
        e.event = "Checkout Started";
        e.properties = R"({"step":2,"total":27.5})";
    }
    e.json_bytes = e.context.size() + e.properties.size() + e.traits.size() + 120;
  }
  return events;
}

void BM_Ingest(benchmark::State& state) {
  const std::string dir = TempDir();
  {
    RocksDbJobStore::Options options;
    options.path = dir;
    auto store = RocksDbJobStore::Open(options);
    if (!store.ok()) {
      state.SkipWithError(std::string(store.status().message()).c_str());
      return;
    }
    RoutingHolder routing(
        std::make_shared<const Routing>(MakeConfig(static_cast<int>(state.range(0)))));
    Ingestor::Options ingestor_options;
    ingestor_options.max_pending_events = 1'000'000;
    Ingestor ingestor(ingestor_options, routing, **store, common::Clock::Real(), nullptr);
    absl::Mutex mu;
    int pending = 0;
    int errors = 0;
    const double cpu_start = ProcessCpuSeconds();
    for (auto _ : state) {
      std::vector<RawEvent> events = MakeEvents();
      {
        absl::MutexLock lock(&mu);
        auto room = [&] { return pending < 8; };
        mu.Await(absl::Condition(&room));
        ++pending;
      }
      ingestor.Ingest("wk_bench", std::move(events), [&](absl::StatusOr<IngestOutcome> r) {
        absl::MutexLock lock(&mu);
        --pending;
        if (!r.ok() || !r->rejected.empty()) ++errors;
      });
    }
    {
      absl::MutexLock lock(&mu);
      auto idle = [&] { return pending == 0; };
      mu.Await(absl::Condition(&idle));
    }
    if (errors > 0) state.SkipWithError("an ingest failed or rejected events");
    state.SetItemsProcessed(state.iterations() * kBatch);
    state.counters["cpu_us_per_event"] =
        1e6 * (ProcessCpuSeconds() - cpu_start) / static_cast<double>(state.iterations() * kBatch);
  }
  std::filesystem::remove_all(dir);
}

BENCHMARK(BM_Ingest)->ArgName("audiences")->Arg(0)->Arg(3)->Arg(0)->Arg(3)->UseRealTime()->MinTime(5.0);

// One identify per user (traits plan/seats) appended as ingest would, waiting for all.
bool AppendProfiles(RocksDbJobStore& store, int users, int first_user, const std::string& plan,
                    bool log) {
  absl::Mutex mu;
  int pending = 0;
  bool ok = true;
  const hookrelay::v1::Config config = MakeConfig(1);
  const AudienceInputs inputs(config);
  for (int u = first_user; u < first_user + users; u += kBatch) {
    std::vector<AppendItem> items;
    for (int i = u; i < std::min(first_user + users, u + kBatch); ++i) {
      AppendItem& item = items.emplace_back();
      item.user_id = absl::StrCat("user-", i);
      item.source_id = "web";
      item.dedup_key = DedupKey("web", absl::StrCat(plan, "-", i, "-", g_sequence.fetch_add(1)));
      hookrelay::v1::ProfileDelta delta;
      inputs.DeltaFor("web", hookrelay::v1::IDENTIFY, "",
                      absl::StrCat(R"({"plan":")", plan, R"(","seats":)", i % 50, "}"),
                      absl::Now(), &delta);
      delta.SerializeToString(&item.profile_delta);
      item.log_profile_change = log;
    }
    {
      absl::MutexLock lock(&mu);
      auto room = [&] { return pending < 16; };
      mu.Await(absl::Condition(&room));
      ++pending;
    }
    store.Append(std::move(items), [&](absl::StatusOr<AppendResult> r) {
      absl::MutexLock lock(&mu);
      --pending;
      if (!r.ok()) ok = false;
    });
  }
  absl::MutexLock lock(&mu);
  auto idle = [&] { return pending == 0; };
  mu.Await(absl::Condition(&idle));
  return ok;
}

void BM_Sync(benchmark::State& state) {
  constexpr int kProfiles = 1'000'000;
  const int changed = static_cast<int>(state.range(0));
  const std::string dir = TempDir();
  {
    RocksDbJobStore::Options options;
    options.path = dir;
    auto store = RocksDbJobStore::Open(options);
    if (!store.ok()) {
      state.SkipWithError(std::string(store.status().message()).c_str());
      return;
    }
    // 1,000,000 profiles, 1 in 1,000 of them members ("pro").
    if (!AppendProfiles(**store, kProfiles, 0, "free", true) ||
        !AppendProfiles(**store, kProfiles / 1000, 0, "pro", true)) {
      state.SkipWithError("appending profiles failed");
      return;
    }
    AudienceSyncer::Options syncer_options;
    AudienceSyncer syncer(syncer_options, **store);
    syncer.SetConfig(std::make_shared<const hookrelay::v1::Config>(MakeConfig(1)));
    auto first = syncer.SyncNow("pro");  // The first computation: every profile.
    if (!first.ok()) {
      state.SkipWithError(std::string(first.status().message()).c_str());
      return;
    }
    state.counters["first_ms"] = static_cast<double>(first->last_duration_ms());
    uint64_t evaluated = 0;
    int round = 0;
    for (auto _ : state) {
      state.PauseTiming();
      // `changed` users change (half of them become members).
      const int from = 1000 + (round++ * changed) % (kProfiles - changed - 1000);
      if (!AppendProfiles(**store, changed / 2, from, "pro", true) ||
          !AppendProfiles(**store, changed - changed / 2, from + changed / 2, "free", true)) {
        state.SkipWithError("appending profiles failed");
        break;
      }
      state.ResumeTiming();
      auto synced = syncer.SyncNow("pro");
      if (!synced.ok()) {
        state.SkipWithError(std::string(synced.status().message()).c_str());
        break;
      }
      evaluated += synced->last_evaluated();
      state.counters["members"] = static_cast<double>(synced->members());
    }
    state.counters["evaluated"] = static_cast<double>(evaluated) / std::max(round, 1);
    state.counters["profiles"] = kProfiles;
  }
  std::filesystem::remove_all(dir);
}

BENCHMARK(BM_Sync)->ArgName("changed")->Arg(10'000)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace hookrelay::collector
