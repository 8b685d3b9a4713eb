// Faults under load on the JetStream engine (issue 12 §3): a 3-node cluster (HR_JOBS at R3), two
// collectors and two deliverers (each connected to both collectors) as child processes, one
// receiver, and a steady load of small batches sent to both collectors throughout. While it runs:
// kill -9 a NATS node that does not lead HR_JOBS and restart it, then the same for the leader,
// then kill -9 a collector and restart it with the same flags and ports. Collector a is given one
// node's address only (a seed, the others found through it) and that node is one of the two
// killed, so a's connection breaks under load; each kill comes during a burst of concurrent
// batches, so that publishes are in flight when it lands.
//
// What must hold:
// - every event whose batch was answered 200 (acknowledged) reaches the receiver at least once;
//   duplicates are allowed, counted (by phase) and reported;
// - every request is answered (200, or an error once the engine's bounded retries are spent):
//   none waits until the client gives up;
// - writes go on with a node down and after each restart, both collectors take events again at
//   the end, and their /healthz is 200;
// - the two deliverers share the deliveries within 2× of each other, counted by their own
//   hookrelay_delivery_attempts_total (nothing in a webhook request says which deliverer sent it);
// - every process stops within 20 s of SIGTERM.
//
// Batches refused during a fault (503, a reset connection) are sent again with the same
// messageIds, alternately to the other collector and their own: the stream's duplicate window
// stores each job once.
#include <nats/nats.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/collector_test_util.h"
#include "tests/nats_cluster.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::test {
namespace {

constexpr int kBatch = 10;                                      // events per request
constexpr absl::Duration kBatchPause = absl::Milliseconds(50);  // a few hundred events/s
// Around each kill: kBurst connections to each collector post back to back for kBurstSpan.
constexpr int kBurst = 4;
constexpr absl::Duration kBurstSpan = absl::Milliseconds(400);
// How long a node stays dead: longer than a collector takes to notice that its connection's
// publishes were lost and send them again (their ack wait, 5 s, then a resend: up to ~7 s seen
// on a loaded 2-core machine), so that writes are seen to go on meanwhile.
constexpr absl::Duration kDown = absl::Seconds(9);
constexpr absl::Duration kDeliveryWait = absl::Seconds(60);
constexpr char kJobsStream[] = "HR_JOBS";
constexpr char kConsumer[] = "dispatch";

enum Phase {
  kWarmUp,
  kFollowerDown,
  kFollowerBack,
  kLeaderDown,
  kLeaderBack,
  kCollectorDown,
  kCollectorBack,
  kPhases
};
constexpr const char* kPhaseNames[kPhases] = {"warm-up",     "follower down", "follower back",
                                              "leader down", "leader back",   "collector down",
                                              "collector back"};

const absl::Time g_start = absl::Now();

void Note(const std::string& what) {
  std::cerr << absl::StrFormat("[fault %6.2fs] %s\n", absl::ToDoubleSeconds(absl::Now() - g_start),
                               what);
}

HttpResponse Request(int port, std::string_view method, std::string_view target,
                     std::string_view body = "") {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(port);
  if (!c.ok()) return {};
  HttpHeaders headers;
  if (!body.empty()) headers.emplace_back("Content-Type", "application/json");
  absl::StatusOr<HttpResponse> r = (*c)->Request(method, target, body, headers);
  return r.ok() ? *std::move(r) : HttpResponse{};
}

// The sum of the samples of counter `family` whose labels contain `label` (e.g.
// `outcome="delivered"`) on a /metrics page; -1 when the page cannot be read.
double MetricSum(int port, absl::string_view family, absl::string_view label) {
  const HttpResponse r = Request(port, "GET", "/metrics");
  if (r.status != 200) return -1;
  double sum = 0;
  const std::string prefix = absl::StrCat(family, "{");
  for (absl::string_view line : absl::StrSplit(r.body, '\n')) {
    if (!absl::StartsWith(line, prefix) || !absl::StrContains(line, label)) continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    if (space != absl::string_view::npos && absl::SimpleAtod(line.substr(space + 1), &v)) sum += v;
  }
  return sum;
}

// The cluster as cnats sees it: who leads HR_JOBS, and whether its replicas have caught up.
class ClusterProbe {
 public:
  ~ClusterProbe() {
    if (js_ != nullptr) jsCtx_Destroy(js_);
    if (nc_ != nullptr) natsConnection_Destroy(nc_);
    if (opts_ != nullptr) natsOptions_Destroy(opts_);
  }

  absl::Status Connect(const std::string& urls) {
    urls_ = absl::StrSplit(urls, ',');
    std::vector<const char*> servers;
    for (const std::string& u : urls_) servers.push_back(u.c_str());
    natsStatus s = natsOptions_Create(&opts_);
    if (s == NATS_OK) {
      s = natsOptions_SetServers(opts_, servers.data(), static_cast<int>(servers.size()));
    }
    if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts_, -1);
    if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts_, 100);
    if (s == NATS_OK) s = natsConnection_Connect(&nc_, opts_);
    if (s == NATS_OK) {
      jsOptions o;
      jsOptions_Init(&o);
      o.Wait = 2000;
      s = natsConnection_JetStream(&js_, nc_, &o);
    }
    if (s != NATS_OK) return absl::UnavailableError(natsStatus_GetText(s));
    return absl::OkStatus();
  }

  // HR_JOBS's leader (a server name), or "" while there is none or nobody answers.
  std::string StreamLeader() {
    jsStreamInfo* si = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    std::string leader;
    if (js_GetStreamInfo(&si, js_, kJobsStream, nullptr, &code) == NATS_OK) {
      if (si->Cluster != nullptr && si->Cluster->Leader != nullptr) leader = si->Cluster->Leader;
      jsStreamInfo_Destroy(si);
    }
    return leader;
  }

  // The dispatch consumer's leader, or "" (for the notes: it may differ from the stream's).
  std::string ConsumerLeader() {
    jsConsumerInfo* ci = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    std::string leader;
    if (js_GetConsumerInfo(&ci, js_, kJobsStream, kConsumer, nullptr, &code) == NATS_OK) {
      if (ci->Cluster != nullptr && ci->Cluster->Leader != nullptr) leader = ci->Cluster->Leader;
      jsConsumerInfo_Destroy(ci);
    }
    return leader;
  }

  // True when HR_JOBS and its consumer each have a leader and two replicas that are online and
  // current. `seen` describes what was found.
  bool Whole(std::string* seen) {
    jsErrCode code = static_cast<jsErrCode>(0);
    jsStreamInfo* si = nullptr;
    jsConsumerInfo* ci = nullptr;
    bool whole = false;
    if (js_GetStreamInfo(&si, js_, kJobsStream, nullptr, &code) == NATS_OK &&
        js_GetConsumerInfo(&ci, js_, kJobsStream, kConsumer, nullptr, &code) == NATS_OK) {
      const std::string stream = Describe(si->Cluster);
      const std::string consumer = Describe(ci->Cluster);
      whole = IsWhole(si->Cluster) && IsWhole(ci->Cluster);
      *seen = absl::StrCat("stream ", stream, "; consumer ", consumer, "; consumer pending ",
                           ci->NumPending, " ack pending ", ci->NumAckPending);
    } else {
      *seen = "no stream or consumer info";
    }
    if (si != nullptr) jsStreamInfo_Destroy(si);
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
    return whole;
  }

 private:
  static bool IsWhole(const jsClusterInfo* c) {
    if (c == nullptr || c->Leader == nullptr || c->Leader[0] == '\0' || c->ReplicasLen != 2) {
      return false;
    }
    for (int i = 0; i < c->ReplicasLen; ++i) {
      if (!c->Replicas[i]->Current || c->Replicas[i]->Offline) return false;
    }
    return true;
  }
  static std::string Describe(const jsClusterInfo* c) {
    if (c == nullptr) return "(no cluster info)";
    std::string out = absl::StrCat("leader=", c->Leader != nullptr ? c->Leader : "-");
    for (int i = 0; i < c->ReplicasLen; ++i) {
      const jsPeerInfo* p = c->Replicas[i];
      absl::StrAppend(&out, " ", p->Name, p->Current ? ":current" : ":behind",
                      p->Offline ? ":offline" : "", p->Lag > 0 ? absl::StrCat(":lag", p->Lag) : "");
    }
    return out;
  }

  std::vector<std::string> urls_;
  natsOptions* opts_ = nullptr;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
};

// Two sender threads, one for each collector, post batches of kBatch tracks until stopped. A
// refused batch (any answer but 200, or a broken connection) is sent again, same messageIds,
// alternately to the other collector and its own, up to 8 times; its events count as
// acknowledged once a 200 comes. (A collector stalled by a fault holds up its own thread only.)
// Burst() adds connections posting back to back for a moment, so that a kill finds publishes in
// flight. Every request's latency is kept: none may go unanswered (the client gives up after
// kIoTimeout).
class Load {
 public:
  Load(std::array<int, 2> http_ports, std::string write_key, const std::atomic<int>* phase)
      : ports_(http_ports), key_(std::move(write_key)), phase_(phase) {}
  ~Load() { Stop(); }

  void Start() {
    for (int home = 0; home < 2; ++home) threads_.emplace_back([this, home] { Run(home); });
  }
  // `n` connections to each collector posting batches one after another (not retried) for
  // `span`: the caller kills something meanwhile, with publishes in flight.
  void Burst(int n, absl::Duration span) {
    const int burst = bursts_++;
    const absl::Time end = absl::Now() + span;
    for (int c = 0; c < 2; ++c) {
      for (int i = 0; i < n; ++i) {
        std::string prefix = absl::StrCat("burst-", burst, "-", c, "-", i);
        threads_.emplace_back([this, c, end, prefix = std::move(prefix)] {
          std::unique_ptr<HttpConnection> conn;
          for (int k = 0; absl::Now() < end; ++k) {
            if (!Post(c, MakeBatch(absl::StrCat(prefix, "-", k)), conn)) {
              absl::MutexLock lock(&mu_);
              stats_.unacked_events += kBatch;
              break;  // The sender thread goes on; this connection is done.
            }
          }
        });
      }
    }
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  struct Stats {
    absl::flat_hash_set<std::string> acked;
    int unacked_events = 0;  // events of batches given up on
    std::array<std::array<int, 2>, kPhases> acked_by_phase{};
    std::array<int, kPhases> refused_by_phase{};
    std::map<int, int> refusals;  // HTTP status (0 = connection error, no answer) → count
    absl::Duration slowest;       // the longest request, answered or not
    std::vector<std::string> unanswered;  // requests that got no answer within kIoTimeout
  };
  Stats stats() {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

 private:
  struct Batch {
    std::vector<std::string> ids;
    std::string body;
  };
  static Batch MakeBatch(const std::string& prefix) {
    Batch b;
    b.body = R"({"batch":[)";
    for (int i = 0; i < kBatch; ++i) {
      b.ids.push_back(absl::StrCat(prefix, "-", i));
      absl::StrAppend(&b.body, i ? "," : "", R"({"type":"track","userId":"u)", i,
                      R"(","event":"Load","messageId":")", b.ids.back(), R"("})");
    }
    b.body += "]}";
    return b;
  }

  // One request to collector `c`; true when answered 200 (the batch's events are acknowledged).
  bool Post(int c, const Batch& batch, std::unique_ptr<HttpConnection>& conn) {
    const absl::Time start = absl::Now();
    absl::StatusOr<HttpResponse> r = absl::UnavailableError("not connected");
    if (conn == nullptr) {
      absl::StatusOr<std::unique_ptr<HttpConnection>> fresh = HttpConnection::Connect(ports_[c]);
      if (fresh.ok()) conn = *std::move(fresh);
    }
    if (conn != nullptr) r = conn->Post("/v1/batch", batch.body, key_);
    const absl::Duration took = absl::Now() - start;
    const int phase = phase_->load();
    const bool acked = r.ok() && r->status == 200;
    {
      absl::MutexLock lock(&mu_);
      stats_.slowest = std::max(stats_.slowest, took);
      if (took >= kIoTimeout) {
        stats_.unanswered.push_back(absl::StrCat(batch.ids[0], " to collector ", c, " in phase '",
                                                 kPhaseNames[phase], "': ", r.status().ToString()));
      }
      if (acked) {
        stats_.acked.insert(batch.ids.begin(), batch.ids.end());
        stats_.acked_by_phase[phase][c] += kBatch;
      } else {
        ++stats_.refused_by_phase[phase];
        ++stats_.refusals[r.ok() ? r->status : 0];
      }
    }
    if (!acked && (!r.ok() || r->Header("Connection") == "close")) conn.reset();
    return acked;
  }

  void Run(int home) {
    std::array<std::unique_ptr<HttpConnection>, 2> conns;
    for (int b = 0; !stop_; ++b) {
      const Batch batch = MakeBatch(absl::StrCat("ev", home, "-", b));
      bool acked = false;
      for (int attempt = 0; attempt < 8 && !acked && !(stop_ && attempt > 1); ++attempt) {
        const int c = (home + attempt) % 2;
        acked = Post(c, batch, conns[c]);
        if (!acked) absl::SleepFor(absl::Milliseconds(100));
      }
      if (!acked) {
        absl::MutexLock lock(&mu_);
        stats_.unacked_events += kBatch;
      }
      absl::SleepFor(kBatchPause);
    }
  }

  const std::array<int, 2> ports_;
  const std::string key_;
  const std::atomic<int>* const phase_;
  std::atomic<bool> stop_{false};
  int bursts_ = 0;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

TEST(JetStreamFaultTest, NodesAndCollectorKilledUnderLoad) {
  absl::StatusOr<std::unique_ptr<NatsCluster>> cluster = NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string dir = MakeTempDir("jetstream-fault");

  // Every delivery, by messageId; duplicates by the phase in which they arrived.
  std::atomic<int> phase{kWarmUp};
  absl::Mutex mu;
  absl::flat_hash_map<std::string, int> received;
  int64_t deliveries = 0;
  std::array<int, kPhases + 1> duplicates_by_phase{};  // [kPhases]: after the load stopped
  receiver::WebhookReceiver::Options receiver_options;
  receiver_options.record = false;
  receiver_options.threads = 2;
  auto receiver = receiver::WebhookReceiver::Start(
      receiver_options, [&](const receiver::ReceivedRequest& r) {
        const std::string id = JsonStr(r.body, "/messageId");
        absl::MutexLock lock(&mu);
        if (++received[id] > 1) ++duplicates_by_phase[phase.load()];
        ++deliveries;
        return receiver::Response{};
      });
  ASSERT_TRUE(receiver.ok()) << receiver.status();

  // Collector a is given one node (n1) and finds the others through it, as a deployment with one
  // seed address does; b is given all three. n1 is killed below (as the follower or as the
  // leader): a's connection breaks with publishes in flight.
  const std::vector<std::string> engine = {"--store=jetstream", "--nats_replicas=3",
                                           "--lease_duration=5s"};
  std::vector<std::string> a_flags = engine;
  a_flags.push_back(absl::StrCat("--nats_url=", (*cluster)->url(0)));
  std::vector<std::string> b_flags = engine;
  b_flags.push_back(absl::StrCat("--nats_url=", (*cluster)->urls()));
  auto a = StartCollectorProcess("", dir + "/a", a_flags);
  ASSERT_TRUE(a.ok()) << a.status();
  const int admin_a = (*a)->IntField("admin_http_port");
  HttpResponse r = Request(admin_a, "POST", "/admin/v1/sources",
                           R"({"id":"shop","name":"Shop","kind":"server"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string key = JsonStr(r.body, "/writeKeys/0");
  r = Request(admin_a, "POST", "/admin/v1/destinations",
              absl::StrCat(R"({"id":"orders","sources":["shop"],"enabled":true,)",
                           R"("urls":[{"url":")", (*receiver)->Url(), R"("}],)",
                           R"("options":{"initialBackoffMs":500,"timeoutMs":3000}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  auto b = StartCollectorProcess("", dir + "/b", b_flags);
  ASSERT_TRUE(b.ok()) << b.status();
  // Collector a comes back on the same ports (the deliverers and the sender know those).
  std::vector<std::string> a_again = a_flags;
  for (const auto& [flag, field] : std::vector<std::pair<std::string, std::string>>{
           {"grpc_address", "grpc_port"},
           {"http_address", "http_port"},
           {"metrics_address", "metrics_port"},
           {"admin_http_address", "admin_http_port"}}) {
    a_again.push_back(absl::StrCat("--", flag, "=127.0.0.1:", (*a)->IntField(field)));
  }
  const std::array<int, 2> http_ports = {(*a)->IntField("http_port"), (*b)->IntField("http_port")};

  const std::vector<int> grpc_ports = {(*a)->IntField("grpc_port"), (*b)->IntField("grpc_port")};
  auto d1 = StartDelivererProcess(grpc_ports, {"--deliverer_id=d1"});
  ASSERT_TRUE(d1.ok()) << d1.status();
  auto d2 = StartDelivererProcess(grpc_ports, {"--deliverer_id=d2"});
  ASSERT_TRUE(d2.ok()) << d2.status();
  const std::array<int, 2> deliverer_metrics = {(*d1)->IntField("metrics_port"),
                                                (*d2)->IntField("metrics_port")};

  ClusterProbe probe;
  ASSERT_TRUE(probe.Connect((*cluster)->urls()).ok());
  auto node_of = [&](const std::string& name) {
    for (int i = 0; i < (*cluster)->size(); ++i) {
      if ((*cluster)->name(i) == name) return i;
    }
    return -1;
  };
  auto wait_leader = [&] {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    std::string leader = probe.StreamLeader();
    while (node_of(leader) < 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(200));
      leader = probe.StreamLeader();
    }
    return leader;
  };
  // After a restart: the stream and its consumer have a leader and two current replicas again.
  auto wait_whole = [&](const std::string& after) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    std::string seen;
    bool whole = probe.Whole(&seen);
    while (!whole && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(250));
      whole = probe.Whole(&seen);
    }
    Note(absl::StrCat(whole ? "whole again after " : "NOT whole 30 s after ", after, ": ", seen));
    EXPECT_TRUE(whole) << after << ": " << seen;
  };

  Load load(http_ports, key, &phase);
  load.Start();
  absl::SleepFor(absl::Seconds(3));

  // 1. A node that does not lead HR_JOBS: n1 when it can be (see above), else the next one.
  std::string leader = wait_leader();
  ASSERT_GE(node_of(leader), 0) << "HR_JOBS has no leader";
  int victim = node_of(leader) == 0 ? 1 : 0;
  Note(absl::StrCat("HR_JOBS leader ", leader, " (consumer leader ", probe.ConsumerLeader(),
                    "); kill -9 follower ", (*cluster)->name(victim)));
  load.Burst(kBurst, kBurstSpan);
  absl::SleepFor(kBurstSpan / 2);  // the kill comes with publishes in flight
  phase = kFollowerDown;
  ASSERT_TRUE((*cluster)->Kill(victim).ok());
  absl::SleepFor(kDown);
  ASSERT_TRUE((*cluster)->Restart(victim).ok());
  phase = kFollowerBack;
  wait_whole(absl::StrCat("restarting ", (*cluster)->name(victim)));
  absl::SleepFor(absl::Seconds(2));

  // 2. The leader.
  leader = wait_leader();
  ASSERT_GE(node_of(leader), 0) << "HR_JOBS has no leader";
  victim = node_of(leader);
  Note(absl::StrCat("kill -9 the HR_JOBS leader ", leader, " (consumer leader ",
                    probe.ConsumerLeader(), ")"));
  load.Burst(kBurst, kBurstSpan);
  absl::SleepFor(kBurstSpan / 2);
  phase = kLeaderDown;
  ASSERT_TRUE((*cluster)->Kill(victim).ok());
  absl::SleepFor(kDown);
  Note(absl::StrCat("HR_JOBS leader now ", probe.StreamLeader()));
  ASSERT_TRUE((*cluster)->Restart(victim).ok());
  phase = kLeaderBack;
  wait_whole(absl::StrCat("restarting ", leader));
  absl::SleepFor(absl::Seconds(2));

  // 3. A collector, restarted with the same flags and ports.
  Note("kill -9 collector a");
  load.Burst(kBurst, kBurstSpan);
  absl::SleepFor(kBurstSpan / 2);
  phase = kCollectorDown;
  (*a)->Signal(SIGKILL);
  (*a)->Wait();
  absl::SleepFor(absl::Seconds(2));
  a = StartCollectorProcess("", dir + "/a", a_again);
  ASSERT_TRUE(a.ok()) << a.status();
  phase = kCollectorBack;
  Note("collector a back");
  absl::SleepFor(absl::Seconds(4));
  load.Stop();
  phase = kPhases;
  const Load::Stats stats = load.stats();
  Note(absl::StrCat("load stopped: ", stats.acked.size(), " events acknowledged, ",
                    stats.unacked_events, " given up"));

  // Every acknowledged event delivered.
  const absl::Time deadline = absl::Now() + kDeliveryWait;
  std::vector<std::string> missing;
  for (;;) {
    missing.clear();
    {
      absl::MutexLock lock(&mu);
      for (const std::string& id : stats.acked) {
        if (!received.contains(id)) missing.push_back(id);
      }
    }
    if (missing.empty() || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  Note(absl::StrCat("delivery wait over: ", missing.size(), " acknowledged events missing"));
  std::sort(missing.begin(), missing.end());
  if (missing.size() > 20) missing.resize(20);
  EXPECT_TRUE(missing.empty()) << "acknowledged, never delivered (first 20): "
                               << absl::StrJoin(missing, " ");

  int64_t total = 0;
  int64_t distinct = 0;
  int64_t unacked_delivered = 0;
  std::array<int, kPhases + 1> dup_phases{};
  {
    absl::MutexLock lock(&mu);
    dup_phases = duplicates_by_phase;
    total = deliveries;
    distinct = static_cast<int64_t>(received.size());
    for (const auto& [id, n] : received) unacked_delivered += stats.acked.contains(id) ? 0 : 1;
  }
  const int64_t duplicates = total - distinct;
  // The deliverers count an outcome after its POST's answer: wait until they have counted at
  // least the deliveries the receiver saw before reading their shares.
  std::array<double, 2> share{};
  const absl::Time counted_deadline = absl::Now() + absl::Seconds(20);
  for (;;) {
    for (int i = 0; i < 2; ++i) {
      share[i] = MetricSum(deliverer_metrics[i], "hookrelay_delivery_attempts_total",
                           R"(outcome="delivered")");
    }
    if (share[0] + share[1] >= static_cast<double>(total) || absl::Now() >= counted_deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::string phases;
  for (int p = 0; p < kPhases; ++p) {
    absl::StrAppend(&phases, "\n  ", kPhaseNames[p], ": acked a=", stats.acked_by_phase[p][0],
                    " b=", stats.acked_by_phase[p][1], ", refused requests ",
                    stats.refused_by_phase[p], ", duplicates delivered ", dup_phases[p]);
  }
  absl::StrAppend(&phases, "\n  after the load: duplicates delivered ", dup_phases[kPhases]);
  std::string refusals;
  for (const auto& [status, n] : stats.refusals) absl::StrAppend(&refusals, " ", status, ":", n);
  Note(absl::StrCat("slowest request ", absl::FormatDuration(stats.slowest), "; ",
                    stats.unanswered.size(), " unanswered after ", absl::FormatDuration(kIoTimeout),
                    stats.unanswered.empty() ? "" : ": ", absl::StrJoin(stats.unanswered, "; ")));
  Note(absl::StrCat("acknowledged ", stats.acked.size(), ", given up ", stats.unacked_events,
                    ", delivered ", distinct, " distinct (", unacked_delivered,
                    " of them never acknowledged) in ", total, " requests: ", duplicates,
                    " duplicates; deliverer shares d1=", share[0], " d2=", share[1],
                    "; refusals (status:count)", refusals, phases));
  RecordProperty("acknowledged", static_cast<int>(stats.acked.size()));
  RecordProperty("given_up", stats.unacked_events);
  RecordProperty("deliveries", static_cast<int>(total));
  RecordProperty("duplicates", static_cast<int>(duplicates));
  RecordProperty("deliverer_1", static_cast<int>(share[0]));
  RecordProperty("deliverer_2", static_cast<int>(share[1]));

  EXPECT_GT(stats.acked.size(), 0u);
  // Every request is answered — 200, or 503 once the engine's bounded retries are spent; none
  // hangs until the client gives up.
  EXPECT_TRUE(stats.unanswered.empty())
      << stats.unanswered.size() << " requests unanswered after " << kIoTimeout << ": "
      << absl::StrJoin(stats.unanswered, "; ");
  // The cluster takes writes with one node down and after each restart; both collectors do again
  // after the last fault.
  EXPECT_GT(stats.acked_by_phase[kFollowerDown][0] + stats.acked_by_phase[kFollowerDown][1], 0);
  EXPECT_GT(stats.acked_by_phase[kFollowerBack][0] + stats.acked_by_phase[kFollowerBack][1], 0);
  EXPECT_GT(stats.acked_by_phase[kLeaderBack][0] + stats.acked_by_phase[kLeaderBack][1], 0);
  EXPECT_GT(stats.acked_by_phase[kCollectorBack][0], 0) << "restarted collector a took nothing";
  EXPECT_GT(stats.acked_by_phase[kCollectorBack][1], 0) << "collector b took nothing at the end";
  // The two deliverers share the work.
  ASSERT_GT(share[0], 0) << "d1's /metrics";
  ASSERT_GT(share[1], 0) << "d2's /metrics";
  EXPECT_LE(std::max(share[0], share[1]), 2 * std::min(share[0], share[1]))
      << "d1 " << share[0] << " d2 " << share[1];

  // Both collectors healthy again.
  for (int port : http_ports) {
    const absl::Time health_deadline = absl::Now() + absl::Seconds(15);
    HttpResponse h = Request(port, "GET", "/healthz");
    while (h.status != 200 && absl::Now() < health_deadline) {
      absl::SleepFor(absl::Milliseconds(200));
      h = Request(port, "GET", "/healthz");
    }
    EXPECT_EQ(h.status, 200) << "collector on " << port << ": " << h.body;
  }

  // Each process stops on SIGTERM within a bound (a drain must not wait for ever).
  auto stop = [](ChildProcess& p, const std::string& name, const std::string& stopped) {
    p.Signal(SIGTERM);
    const absl::Time stop_deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < stop_deadline && p.Output().find(stopped) == std::string::npos) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    const bool stopped_in_time = p.Output().find(stopped) != std::string::npos;
    EXPECT_TRUE(stopped_in_time) << name << " did not log \"" << stopped << "\" 20 s after SIGTERM";
    if (!stopped_in_time) p.Signal(SIGKILL);
    const int status = p.Wait();
    if (stopped_in_time) {
      EXPECT_EQ(status, 0) << name;
    }
  };
  stop(**d1, "deliverer d1", "deliverer stopped");
  stop(**d2, "deliverer d2", "deliverer stopped");
  stop(**a, "collector a", "collector stopped");
  stop(**b, "collector b", "collector stopped");
}

}  // namespace
}  // namespace hookrelay::test
