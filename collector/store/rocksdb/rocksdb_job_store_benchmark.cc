// Durable Append throughput of the embedded job store: batches of 100 one-job events with a
// ~350-byte event_json, from 1 and 4 threads, each thread keeping `in_flight` Appends pending
// (1 = every caller waits for its fsync before the next batch, like one ingest request at a time;
// 8 and 64 = a busy ingest front end with many requests waiting for their fsync). Items are
// counted when appended; at most in_flight batches per thread are still pending when the timer
// stops. Counters: commit_ms and group_jobs are the mean group commit (write + fsync) and its
// size; cpu_us_per_job is the CPU time of the whole process (callers, store threads, RocksDB's
// flushes and compactions) per job: 200k jobs/s on 2 cores allows at most 10.
//
// Events come from 100,000 users (the per-user index is maintained as at ingest).
//
// BM_Deletion: the time of one deletion (SPEC §6.1) of a user with `user_jobs` pending jobs in a
// store holding 1,000,000 other jobs; keys_touched per deletion is reported.
//
//   bazel run -c opt //collector:rocksdb_job_store_benchmark
#include <stdlib.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "collector/store/store.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {
namespace {

constexpr int kBatch = 100;

// A typical normalised track event, 350 bytes.
const std::string& EventJson() {
  static const std::string* const json = [] {
    auto* s = new std::string(
        R"({"type":"track","event":"Order Completed","userId":"user-5512","anonymousId":)"
        R"("a8f0c2d4-7b1e-4c3a-9f6d-2e8b5a1c7d90","messageId":"ajs-next-1700000000-4f6a",)"
        R"("timestamp":"2024-05-01T12:00:00.000Z","properties":{"orderId":"50314b8e",)"
        R"("total":27.5,"currency":"USD","products":[{"sku":"45790-32","qty":1}]},)"
        R"("context":{"ip":"203.0.113.9","library":{"name":"analytics.js","version":"2.1"}}})");
    s->resize(350, ' ');
    return s;
  }();
  return *json;
}

std::atomic<uint64_t> g_sequence{0};
RocksDbJobStore* g_store = nullptr;  // Set by thread 0 before the threads start together.
prometheus::Registry* g_registry = nullptr;
std::string g_dir;
double g_cpu_start = 0;

// CPU seconds used by the whole process so far (all threads: callers, store, RocksDB's).
double ProcessCpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// A job as the ingest path makes it.
NewJob BenchJob(std::string_view message_id, std::string_view user_id) {
  NewJob::Fields fields;
  fields.source_id = "src_web";
  fields.destination_id = "dst_orders";
  fields.type = hookrelay::v1::TRACK;
  fields.message_id = message_id;
  fields.user_id = user_id;
  const std::string& json = EventJson();
  fields.event_json = json;
  fields.received_at_unix_ms = 1700000000000;
  return NewJob(fields);
}

std::vector<AppendItem> MakeBatch() {
  std::vector<AppendItem> items(kBatch);
  const uint64_t first = g_sequence.fetch_add(kBatch, std::memory_order_relaxed);
  for (int i = 0; i < kBatch; ++i) {
    const std::string message_id = absl::StrCat("msg-", first + i);
    AppendItem& item = items[i];
    item.dedup_key = DedupKey("src_web", message_id);
    item.user_id = absl::StrCat("user-", ((first + i) * 7919) % 100000);
    item.source_id = "src_web";
    item.jobs.push_back(BenchJob(message_id, item.user_id));
  }
  return items;
}

// Appends pending for one thread.
class Window {
 public:
  explicit Window(int limit) : limit_(limit) {}

  void Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Window::HasRoom));
    ++pending_;
  }
  void Release(bool ok) {
    absl::MutexLock lock(&mu_);
    --pending_;
    if (!ok) ++errors_;
  }
  int Drain() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Window::Empty));
    return errors_;
  }

 private:
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ < limit_; }
  bool Empty() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; }

  const int limit_;
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  int errors_ ABSL_GUARDED_BY(mu_) = 0;
};

void BM_Append(benchmark::State& state) {
  if (state.thread_index() == 0) {
    std::string pattern = "/tmp/rocksdb_job_store_benchmark_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      state.SkipWithError("mkdtemp failed");
      return;
    }
    g_dir = pattern;
    RocksDbJobStore::Options options;
    options.path = g_dir;
    g_registry = new prometheus::Registry();
    options.registry = g_registry;
    absl::StatusOr<std::unique_ptr<RocksDbJobStore>> store = RocksDbJobStore::Open(options);
    if (!store.ok()) {
      state.SkipWithError(std::string(store.status().message()).c_str());
      return;
    }
    g_store = store->release();
    g_cpu_start = ProcessCpuSeconds();
  }
  Window window(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    if (g_store == nullptr) {
      state.SkipWithError("the store did not open");
      break;
    }
    std::vector<AppendItem> items = MakeBatch();
    window.Acquire();
    g_store->Append(std::move(items), [&window](absl::StatusOr<AppendResult> result) {
      window.Release(result.ok());
    });
  }
  if (window.Drain() > 0) state.SkipWithError("an Append failed");
  state.SetItemsProcessed(state.iterations() * kBatch);
  if (state.thread_index() == 0) {
    // Destroying the store drains the other threads' pending Appends too.
    delete g_store;
    g_store = nullptr;
    std::filesystem::remove_all(g_dir);
    // What 200k jobs/s on 2 cores allows is 10 us per job.
    state.counters["cpu_us_per_job"] =
        1e6 * (ProcessCpuSeconds() - g_cpu_start) /
        static_cast<double>(state.iterations() * state.threads() * kBatch);
    // Mean group commit: its duration (write + fsync) and its size.
    for (const prometheus::MetricFamily& family : g_registry->Collect()) {
      const prometheus::ClientMetric::Histogram& h = family.metric.at(0).histogram;
      if (h.sample_count == 0) continue;
      if (family.name == "hookrelay_store_commit_duration_seconds") {
        state.counters["commit_ms"] = 1000 * h.sample_sum / static_cast<double>(h.sample_count);
      } else if (family.name == "hookrelay_store_commit_batch_items") {
        state.counters["group_jobs"] = h.sample_sum / static_cast<double>(h.sample_count);
      }
    }
    delete g_registry;
    g_registry = nullptr;
  }
}

BENCHMARK(BM_Append)
    ->ArgName("in_flight")
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->Threads(1)
    ->Threads(4)
    ->UseRealTime()
    ->MinTime(3.0);

// Appends `n` one-job events of `user` and waits for them.
bool AppendUser(RocksDbJobStore& store, const std::string& user, int n) {
  Window window(64);
  std::atomic<bool> ok{true};
  for (int done = 0; done < n; done += kBatch) {
    std::vector<AppendItem> items = MakeBatch();
    for (AppendItem& item : items) {
      item.user_id = user;
      hookrelay::v1::Job job = item.jobs[0].ToJob(0, 0);
      job.set_user_id(user);
      item.jobs[0] = NewJob(job);
    }
    window.Acquire();
    store.Append(std::move(items), [&](absl::StatusOr<AppendResult> result) {
      if (!result.ok()) ok = false;
      window.Release(result.ok());
    });
  }
  return window.Drain() == 0 && ok;
}

void BM_Deletion(benchmark::State& state) {
  std::string pattern = "/tmp/rocksdb_job_store_benchmark_XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  const std::string dir = pattern;
  {
    RocksDbJobStore::Options options;
    options.path = dir;
    absl::StatusOr<std::unique_ptr<RocksDbJobStore>> opened = RocksDbJobStore::Open(options);
    if (!opened.ok()) {
      state.SkipWithError(std::string(opened.status().message()).c_str());
      return;
    }
    RocksDbJobStore& store = **opened;
    Window window(64);
    for (int i = 0; i < 1'000'000 / kBatch; ++i) {  // The others, from 100,000 users.
      window.Acquire();
      store.Append(MakeBatch(),
                   [&window](absl::StatusOr<AppendResult> r) { window.Release(r.ok()); });
    }
    if (window.Drain() > 0) state.SkipWithError("an Append failed");
    const int user_jobs = static_cast<int>(state.range(0));
    double touched = 0;
    int n = 0;
    for (auto _ : state) {
      state.PauseTiming();
      const std::string user = absl::StrCat("target-", n++);
      if (!AppendUser(store, user, user_jobs)) state.SkipWithError("an Append failed");
      DeletionPlan plan;
      plan.record.set_id(absl::StrCat("del_", n));
      plan.record.set_user_id(user);
      plan.record.add_source_ids("src_web");
      state.ResumeTiming();
      absl::StatusOr<DeletionOutcome> outcome = store.ApplyDeletion(std::move(plan));
      if (!outcome.ok() || outcome->record.purged_jobs() != static_cast<uint64_t>(user_jobs)) {
        state.SkipWithError("the deletion failed or purged another number of jobs");
        break;
      }
      touched += static_cast<double>(outcome->keys_touched);
    }
    state.counters["keys_touched"] = touched / static_cast<double>(std::max(n, 1));
    state.counters["other_jobs"] = 1'000'000;
  }
  std::filesystem::remove_all(dir);
}

// Open (recovery) of a store holding 1,000,000 pending jobs of 100,000 users: the time to rebuild
// the in-memory queues and the per-user index.
void BM_Open(benchmark::State& state) {
  std::string pattern = "/tmp/rocksdb_job_store_benchmark_XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  const std::string dir = pattern;
  RocksDbJobStore::Options options;
  options.path = dir;
  {
    absl::StatusOr<std::unique_ptr<RocksDbJobStore>> opened = RocksDbJobStore::Open(options);
    if (!opened.ok()) {
      state.SkipWithError(std::string(opened.status().message()).c_str());
      return;
    }
    Window window(64);
    for (int i = 0; i < 1'000'000 / kBatch; ++i) {
      window.Acquire();
      (*opened)->Append(MakeBatch(),
                        [&window](absl::StatusOr<AppendResult> r) { window.Release(r.ok()); });
    }
    if (window.Drain() > 0) state.SkipWithError("an Append failed");
    (void)(*opened)->CompactForTesting();  // Recovery reads SST files, as after a long run.
  }
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<RocksDbJobStore>> opened = RocksDbJobStore::Open(options);
    if (!opened.ok() || (*opened)->Counts().ready != 1'000'000) {
      state.SkipWithError("reopening failed or lost jobs");
      break;
    }
    state.PauseTiming();
    opened->reset();
    state.ResumeTiming();
  }
  std::filesystem::remove_all(dir);
}

BENCHMARK(BM_Open)->Unit(benchmark::kMillisecond)->Iterations(3);

BENCHMARK(BM_Deletion)
    ->ArgName("user_jobs")
    ->Arg(100)
    ->Arg(10'000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

}  // namespace
}  // namespace hookrelay::collector
