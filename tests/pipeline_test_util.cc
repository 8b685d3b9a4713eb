#include "tests/pipeline_test_util.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"
#include "prometheus/metric_family.h"

namespace hookrelay::test {

InProcessPipeline::InProcessPipeline(std::string_view name, std::string config_yaml)
    : InProcessPipeline(name, std::move(config_yaml), Options{}) {}

InProcessPipeline::InProcessPipeline(std::string_view name, std::string config_yaml,
                                     Options options)
    : options_(std::move(options)), collector_(name, std::move(config_yaml), options_.engine) {}

InProcessPipeline::~InProcessPipeline() { Stop(); }

absl::Status InProcessPipeline::Start() {
  if (absl::Status st = collector_.Start(); !st.ok()) return st;
  registry_ = std::make_shared<prometheus::Registry>();
  metrics_ = std::make_unique<deliverer::DeliveryMetrics>(*registry_);
  deliverer::HttpSender::Options sender_options;
  sender_options.allow_private_networks = options_.allow_private_networks;
  sender_options.ca_file = options_.ca_file;
  absl::StatusOr<std::unique_ptr<deliverer::HttpSender>> sender =
      deliverer::HttpSender::Create(sender_options);
  if (!sender.ok()) return sender.status();
  sender_ = *std::move(sender);
  deliverer::Deliverer::Options deliverer_options;
  deliverer_options.collectors = {absl::StrCat("127.0.0.1:", collector_.grpc_port())};
  deliverer_options.deliverer_id = "test-deliverer";
  deliverer_options.credits = options_.credits;
  deliverer_options.reconnect_initial_backoff = absl::Milliseconds(20);
  deliverer_options.reconnect_max_backoff = absl::Milliseconds(200);
  deliverer_ = std::make_unique<deliverer::Deliverer>(deliverer_options, *sender_,
                                                      collector_.clock(), metrics_.get());
  return deliverer_->Start();
}

void InProcessPipeline::Stop() {
  if (deliverer_) deliverer_->Shutdown();
  sender_.reset();  // before the deliverer: pending callbacks call into it
  deliverer_.reset();
  collector_.Stop();
}

bool InProcessPipeline::WaitForCounts(
    const std::function<bool(const collector::JobCounts&)>& pred) {
  const absl::Time deadline = absl::Now() + kPipelineWait;
  while (absl::Now() < deadline) {
    if (pred(store().Counts())) return true;
    absl::SleepFor(absl::Milliseconds(2));  // Polls the store; its changes come over sockets.
  }
  const collector::JobCounts c = store().Counts();
  fprintf(stderr, "WaitForCounts timed out: ready=%lld scheduled=%lld leased=%lld dead=%lld\n",
          static_cast<long long>(c.ready), static_cast<long long>(c.scheduled),
          static_cast<long long>(c.leased), static_cast<long long>(c.dead));
  return false;
}

bool InProcessPipeline::AdvanceAndWaitForDispatch(absl::Duration d) {
  collector::Server& server = collector_.server();
  auto wait_past = [&server](int64_t passes) {
    const absl::Time deadline = absl::Now() + kPipelineWait;
    while (server.dispatch_passes() <= passes) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(1));  // Polls a counter of another thread.
    }
    return true;
  };
  // The first pass after the move may have begun just before it; the one after that, woken
  // again, began after it.
  const int64_t before = server.dispatch_passes();
  clock().Advance(d);
  server.WakeDispatcher();
  if (!wait_past(before)) return false;
  const int64_t after = server.dispatch_passes();
  server.WakeDispatcher();
  return wait_past(after);
}

bool InProcessPipeline::WaitSettled() {
  return WaitForCounts(
      [](const collector::JobCounts& c) { return c.ready == 0 && c.leased == 0; });
}

bool InProcessPipeline::AdvanceToNextDue() {
  const absl::Time due = store().NextDue();
  if (due == absl::InfiniteFuture()) return false;
  if (due > clock().Now()) clock().Set(due);
  return true;
}

std::string HmacSha1HexForTest(std::string_view key, std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha1(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest,
           &length) == nullptr) {
    return "<hmac failed>";
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

double MetricValue(prometheus::Registry& registry, std::string_view name,
                   const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      std::map<std::string, std::string> have;
      for (const auto& l : metric.label) have[l.name] = l.value;
      if (have != labels) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return metric.counter.value;
        case prometheus::MetricType::Gauge:
          return metric.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(metric.histogram.sample_count);
        default:
          return -1;
      }
    }
  }
  return -1;
}

std::string PipelineConfig(const std::vector<std::string>& urls, std::string_view secret,
                           std::string_view extra_destination_yaml) {
  std::string yaml = absl::StrCat(R"yaml(sources:
  - id: web
    name: Website
    kind: web
    write_keys: [)yaml",
                                  kWebKey, R"yaml(]
destinations:
  - id: hook
    type: webhooks
    sources: [web]
    enabled: true
)yaml");
  if (!secret.empty()) absl::StrAppend(&yaml, "    shared_secret: ", common::ToAbsl(secret), "\n");
  absl::StrAppend(&yaml, "    urls:\n");
  for (const std::string& url : urls) absl::StrAppend(&yaml, "      - url: ", url, "\n");
  absl::StrAppend(&yaml, common::ToAbsl(extra_destination_yaml));
  return yaml;
}

double ScrapeMetric(int metrics_port, std::string_view series) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> c = HttpConnection::Connect(metrics_port);
  if (!c.ok()) return -1;
  absl::StatusOr<HttpResponse> r = (*c)->Request("GET", "/metrics", "", {});
  if (!r.ok()) return -1;
  const std::string prefix = absl::StrCat(common::ToAbsl(series), " ");
  for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
    if (absl::StartsWith(line, prefix)) {
      double v = -1;
      if (absl::SimpleAtod(line.substr(prefix.size()), &v)) return v;
    }
  }
  return -1;
}

std::set<std::string> DeliveredIds(const receiver::WebhookReceiver& r) {
  std::set<std::string> ids;
  for (const receiver::ReceivedRequest& req : r.Requests()) {
    ids.insert(JsonStr(req.body, "/messageId"));
  }
  return ids;
}

bool WaitDelivered(const receiver::WebhookReceiver& r, const std::set<std::string>& want,
                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const std::set<std::string> have = DeliveredIds(r);
    bool all = true;
    for (const std::string& id : want) all = all && have.count(id) > 0;
    if (all) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));  // Polls a real receiver.
  }
}

}  // namespace hookrelay::test
