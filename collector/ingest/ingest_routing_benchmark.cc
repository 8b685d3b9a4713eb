// The routing step's cost with destination filters (SPEC §5.4, issue 25 §1):
//
// BM_Route/filters:{0,1,2}: batches of 100 events through Ingestor::Ingest (validation,
// normalisation, filter evaluation, one job per destination) into a store that answers at once
// without storing, so the figure is the ingest CPU before the durable append. One source, ten
// enabled destinations; filters:0 without filters, filters:1 with a filter of three conditions on
// each destination (properties.plan in a list, properties.total gte a number, context.app.version
// exists; each destination its own values, on the same three paths) that every event passes (the most work: every condition evaluated, every job still made),
// filters:2 the same filters but half the events fail the first condition (fewer jobs). Events:
// 80 % track with properties, 20 % identify with traits, all with a context. Compare the rows of
// one run: the goal is filters:1 ≥ 90 % of filters:0's items per second. The counters
// instructions_per_event and cycles_per_event (this thread, user space, only the Ingest calls)
// compare the variants on a busy machine, where wall-clock rates swing by ±30 %.
//
//   bazel run --config=bench //collector/ingest:ingest_routing_benchmark
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "collector/ingest/ingestor.h"
#include "collector/model/event.h"
#include "collector/routing/routing.h"
#include "collector/store/job_queue.h"
#include "common/clock.h"
#include "common/config.h"

namespace hookrelay::collector {
namespace {

constexpr int kBatch = 100;
constexpr int kDestinations = 10;

// Answers every Append at once, on the caller's thread, as if all items were new; keeps nothing
// but a count, so the benchmark measures the ingest path and not a store.
class NullJobQueue : public JobQueue {
 public:
  void Append(std::vector<AppendItem> items, AppendCallback done) override {
    AppendResult result;
    result.stored.assign(items.size(), true);
    for (const AppendItem& item : items) jobs_ += item.jobs.size();
    std::move(done)(std::move(result));
  }
  absl::StatusOr<std::vector<LeasedJob>> Lease(size_t, LeaseBudget) override {
    return std::vector<LeasedJob>();
  }
  absl::Duration lease_duration() const override { return absl::Seconds(30); }
  std::vector<absl::StatusOr<absl::Time>> ExtendLeases(
      const std::vector<std::pair<uint64_t, uint64_t>>& leases) override {
    return std::vector<absl::StatusOr<absl::Time>>(leases.size(), absl::NotFoundError("none"));
  }
  void Settle(std::vector<Settlement>, SettleCallback done) override { std::move(done)({}); }
  absl::StatusOr<std::vector<hookrelay::v1::Job>> ListDead(const DeadFilter&) override {
    return std::vector<hookrelay::v1::Job>();
  }
  absl::StatusOr<size_t> Replay(const DeadFilter&) override { return 0; }
  absl::Status WriteHealth() const override { return absl::OkStatus(); }
  void SetReadyCallback(std::function<void()>) override {}
  JobCounts Counts() override { return {}; }
  absl::Time NextDue() override { return absl::InfiniteFuture(); }

  uint64_t jobs() const { return jobs_; }

 private:
  uint64_t jobs_ = 0;
};

// A hardware counter of this thread (user space only), read around the timed calls: instructions
// do not depend on what else runs on the machine, so they compare variants on a busy one. Reads 0
// when the kernel refuses (no PMU in the VM, perf_event_paranoid).
class ThreadCounter {
 public:
  explicit ThreadCounter(uint64_t config) {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_HARDWARE;
    attr.config = config;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    fd_ = static_cast<int>(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
  }
  ~ThreadCounter() {
    if (fd_ >= 0) close(fd_);
  }
  void Start() {
    if (fd_ >= 0) ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0);
  }
  void Stop() {
    if (fd_ >= 0) ioctl(fd_, PERF_EVENT_IOC_DISABLE, 0);
  }
  uint64_t Read() const {
    uint64_t value = 0;
    if (fd_ < 0 || read(fd_, &value, sizeof(value)) != sizeof(value)) return 0;
    return value;
  }

 private:
  int fd_ = -1;
};

hookrelay::v1::Config MakeConfig(bool filters) {
  std::string yaml = "sources: [{id: web, write_keys: [wk_bench]}]\ndestinations:\n";
  for (int i = 0; i < kDestinations; ++i) {
    absl::StrAppend(&yaml, "  - {id: d", i,
                    ", type: webhooks, sources: [web], enabled: true, urls: [{url: "
                    "'https://hooks.example.com/",
                    i, "'}]");
    if (filters) {
      // Each destination its own values, on the same three paths.
      absl::StrAppend(&yaml,
                      ", filter: {where: [{path: properties.plan, op: in, value: [pro, team, tier",
                      i, "]}, {path: properties.total, op: gte, value: ", i * 0.1,
                      "}, {path: context.app.version, op: exists}]}");
    }
    yaml += "}\n";
  }
  absl::StatusOr<hookrelay::v1::Config> config = common::ParseConfigYaml(yaml);
  if (!config.ok() || !common::ValidateConfig(*config).ok()) abort();
  return *std::move(config);
}

std::atomic<uint64_t> g_sequence{0};

std::vector<RawEvent> MakeEvents(bool half_fail) {
  std::vector<RawEvent> events(kBatch);
  const uint64_t first = g_sequence.fetch_add(kBatch);
  for (int i = 0; i < kBatch; ++i) {
    const uint64_t n = first + i;
    RawEvent& e = events[i];
    e.message_id = absl::StrCat("bench-", n);
    e.user_id = absl::StrCat("user-", (n * 7919) % 100000);
    e.context = R"({"ip":"203.0.113.9","library":{"name":"analytics.js","version":"2.1"},)"
                R"("app":{"name":"Shop","version":"3.4.1","build":"341"},"locale":"en-US"})";
    const char* plan = half_fail && n % 2 == 1 ? "free" : (n % 3 == 0 ? "pro" : "team");
    if (n % 5 == 0) {
      e.type = hookrelay::v1::IDENTIFY;
      e.traits = absl::StrCat(R"({"plan":")", plan, R"(","email":"u@example.com","seats":)",
                              n % 50, "}");
      // Identify calls carry no properties; give them the fields the filters read.
      e.properties = absl::StrCat(R"({"plan":")", plan, R"(","total":1})");
    } else {
      e.type = hookrelay::v1::TRACK;
      e.event = "Order Completed";
      e.properties = absl::StrCat(R"({"orderId":"50314b8e","plan":")", plan,
                                  R"(","total":27.5,"currency":"USD","coupon":"SPRING"})");
    }
    e.json_bytes = e.context.size() + e.properties.size() + e.traits.size() + 120;
  }
  return events;
}

void BM_Route(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  NullJobQueue store;
  RoutingHolder routing(std::make_shared<const Routing>(MakeConfig(mode > 0)));
  Ingestor ingestor(Ingestor::Options{}, routing, store, common::Clock::Real(), nullptr);
  int errors = 0;
  ThreadCounter instructions(PERF_COUNT_HW_INSTRUCTIONS);
  ThreadCounter cycles(PERF_COUNT_HW_CPU_CYCLES);
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<RawEvent> events = MakeEvents(mode == 2);
    state.ResumeTiming();
    instructions.Start();
    cycles.Start();
    ingestor.Ingest("wk_bench", std::move(events), [&](absl::StatusOr<IngestOutcome> r) {
      if (!r.ok() || !r->rejected.empty()) ++errors;
    });
    cycles.Stop();
    instructions.Stop();
  }
  if (errors > 0) state.SkipWithError("an ingest failed or rejected events");
  state.SetItemsProcessed(state.iterations() * kBatch);
  const double events = static_cast<double>(state.iterations() * kBatch);
  state.counters["jobs_per_event"] = static_cast<double>(store.jobs()) / events;
  state.counters["instructions_per_event"] = static_cast<double>(instructions.Read()) / events;
  state.counters["cycles_per_event"] = static_cast<double>(cycles.Read()) / events;
}
BENCHMARK(BM_Route)->ArgName("filters")->Arg(0)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
}  // namespace hookrelay::collector
