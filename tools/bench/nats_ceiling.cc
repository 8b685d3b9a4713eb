// nats_ceiling: the JetStream engine's ceiling on this machine, measured without hookrelay. A
// minimal asynchronous JetStream publisher with the engine's message shape and ack policy:
//
//   - a stream configured like HR_JOBS (collector/store/jetstream/jetstream_layout.cc: work queue, file storage,
//     --replicas copies, message schedules and rollups allowed, the same duplicate window) under
//     another name, plus a durable pull consumer like the dispatch consumer (explicit acks);
//   - messages of --msg_bytes on subjects shaped like the jobs' (<prefix>.<source>.<user>, users
//     cycled over --subjects), each with a Nats-Msg-Id of --msg_id_bytes;
//   - js_PublishMsgAsync with an ack handler, at most --max_pending unacknowledged publishes
//     (closed loop), or --rate messages/s in bursts of --batch (open loop: latency from each
//     burst's scheduled time, so a stalled server shows up as latency);
//   - an ack counts when the stream's publish ack arrives (after the quorum with --replicas=3);
//   - with --requests=N, the collector's request shape instead of a flat window: N requests of
//     --batch messages in flight, each complete when all its messages are acknowledged.
//   - with --protocol, also the engine's dedup traffic: a stream like HR_DEDUP, one batched direct
//     get (multi_last) per --batch messages before they are published (with --requests the
//     publish waits for its answer, as the engine's does), and one marker (core publish, no ack)
//     per message once acknowledged: the server-side work of the engine's whole Append, without
//     hookrelay's own.
//
// Prints msgs/s over the window after the warm-up and ack latency percentiles, then a line
// "RESULT {json}" for scripts (tools/bench/run_jetstream_bench.sh). Other modes:
//
//   nats_ceiling --url=nats://127.0.0.1:4222 --replicas=3 --msg_bytes=486 --max_pending=6400
//   nats_ceiling --url=... --requests=64 --protocol          # the engine's exchange, emulated
//   nats_ceiling --url=... --messages=200000 --drain         # then drain it: DRAIN {json}
//   nats_ceiling --url=... --probe_stream=HR_JOBS            # sizes of a real stream's messages
//   nats_ceiling --url=... --tap='$JS.API.CONSUMER.MSG.NEXT.HR_JOBS.*'  # pull sizes
//
// Loopback servers only.
#include <nats/nats.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tools/bench/latency_histogram.h"

ABSL_FLAG(std::string, url, "nats://127.0.0.1:4222", "comma-separated nats:// URLs (loopback)");
ABSL_FLAG(std::string, stream, "HR_CEILING", "stream to create (or use); not HR_JOBS");
ABSL_FLAG(std::string, subject_prefix, "hr.ceil",
          "subjects are <prefix>.ready.<source>.<user> (the stream also takes <prefix>.sched.>)");
ABSL_FLAG(int, replicas, 1, "stream replicas (1, 3 or 5)");
ABSL_FLAG(int, msg_bytes, 520, "payload bytes per message (a serialized job)");
ABSL_FLAG(int, msg_id_bytes, 44, "Nats-Msg-Id length (the engine's: 32 hex + '-' + destination)");
ABSL_FLAG(int, subjects, 100, "distinct user tokens the subjects cycle over");
ABSL_FLAG(int, max_pending, 6400, "most unacknowledged publishes (PublishAsync.MaxPending)");
ABSL_FLAG(double, rate, 0, "messages/s (open loop, bursts of --batch); 0 = closed loop");
ABSL_FLAG(int, requests, 0,
          "if > 0: closed loop of this many requests of --batch messages, each waiting for all its "
          "acks before the next starts, like a collector's Append per HTTP request (with "
          "--protocol: lookup first, publish on its answer, markers after the acks); instead of "
          "the --max_pending window");
ABSL_FLAG(int, batch, 100, "open loop: messages per burst (one burst ~ one 100-event request)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "measured period, after the warm-up");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(2), "unmeasured period at the start");
ABSL_FLAG(absl::Duration, duplicate_window, absl::Minutes(2), "the stream's duplicate window");
ABSL_FLAG(bool, consumer, true, "also create a durable pull consumer like the dispatch consumer");
ABSL_FLAG(bool, delete_stream, true, "delete the stream at the end");
ABSL_FLAG(uint64_t, messages, 0, "closed loop: stop publishing after this many (0 = --duration)");
ABSL_FLAG(bool, drain, false,
          "after publishing, drain the stream through the durable consumer like the engine's "
          "fetcher (one fetch of --drain_batch at a time, each message acked on its own) and "
          "print DRAIN {json}: the same ack policy's ceiling for deliveries");
ABSL_FLAG(int, drain_batch, 256, "messages per fetch when draining (the engine's fetcher: 256)");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(180), "give up draining after this");
ABSL_FLAG(bool, lookups, true, "with --protocol: the dedup lookups (false: markers only)");
ABSL_FLAG(int, dedup_max_msgs_per_subject, 1,
          "with --protocol: the dedup stream's max_msgs_per_subject (HR_DEDUP's is 1; -1 = none)");
ABSL_FLAG(int, dedup_replicas, 0,
          "with --protocol: the dedup stream's replicas (0 = --replicas, as HR_DEDUP's)");
ABSL_FLAG(absl::Duration, dedup_max_age, absl::Hours(24),
          "with --protocol: the dedup stream's max_age (HR_DEDUP's is the dedup window, 24 h)");
ABSL_FLAG(bool, protocol, false,
          "also the engine's dedup traffic: <stream>_DEDUP like HR_DEDUP, a multi_last direct get "
          "per --batch messages, a marker per acknowledged message");
ABSL_FLAG(std::string, probe_stream, "",
          "instead of publishing: print the sizes of this stream's first --probe_messages "
          "messages (data, Nats-Msg-Id, subject) as PROBE {json}");
ABSL_FLAG(int, probe_messages, 100, "messages read by --probe_stream");
ABSL_FLAG(std::string, tap, "",
          "instead of publishing: count the messages on this subject for --duration (a copy, "
          "like any subscriber) and, for pull requests ($JS.API.CONSUMER.MSG.NEXT.<stream>."
          "<consumer>), the batch each asked for; prints TAP {json}");

namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

bool LoopbackUrls(const std::string& urls) {
  for (absl::string_view u : absl::StrSplit(urls, ',', absl::SkipEmpty())) {
    absl::string_view host = u;
    if (absl::ConsumePrefix(&host, "nats://")) {
    }
    if (!absl::StartsWith(host, "127.") && !absl::StartsWith(host, "localhost")) return false;
  }
  return true;
}

// A JetStream API request; the answer's body, or "" (and a message on stderr) on no answer.
std::string Api(natsConnection* nc, const std::string& subject, const std::string& body,
                int64_t timeout_ms = 2000) {
  natsMsg* reply = nullptr;
  const natsStatus s =
      natsConnection_RequestString(&reply, nc, subject.c_str(), body.c_str(), timeout_ms);
  if (s != NATS_OK) {
    std::fprintf(stderr, "%s: %s\n", subject.c_str(), natsStatus_GetText(s));
    return "";
  }
  std::string out(natsMsg_GetData(reply), natsMsg_GetDataLength(reply));
  natsMsg_Destroy(reply);
  return out;
}

bool IsError(const std::string& answer) {
  return answer.empty() || absl::StrContains(answer, "\"error\":");
}

// The stream and consumer, created like HR_JOBS and the dispatch consumer. Retries for up to 30 s:
// a cluster that has just started may have no meta leader yet.
bool EnsureStream(natsConnection* nc, const std::string& stream, const std::string& prefix,
                  int replicas, absl::Duration dup_window, bool consumer) {
  const std::string config = absl::StrCat(
      R"({"name":")", stream, R"(","subjects":[")", prefix, R"(.ready.>",")", prefix,
      R"(.sched.>"],"retention":"workqueue","storage":"file","num_replicas":)", replicas,
      R"(,"allow_msg_schedules":true,"allow_rollup_hdrs":true,"duplicate_window":)",
      absl::ToInt64Nanoseconds(dup_window), "}");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string answer;
  for (;;) {
    answer = Api(nc, absl::StrCat("$JS.API.STREAM.INFO.", stream), "");
    if (!IsError(answer)) {
      std::printf("using the existing stream %s\n", stream.c_str());
      break;
    }
    answer = Api(nc, absl::StrCat("$JS.API.STREAM.CREATE.", stream), config);
    if (!IsError(answer)) break;
    if (absl::Now() > deadline) {
      std::fprintf(stderr, "creating stream %s: %s\n", stream.c_str(), answer.c_str());
      return false;
    }
    absl::SleepFor(absl::Milliseconds(300));
  }
  if (!consumer) return true;
  const std::string consumer_config = absl::StrCat(
      R"({"stream_name":")", stream, R"(","config":{"durable_name":"ceiling","filter_subject":")",
      prefix, R"(.ready.>","ack_policy":"explicit","ack_wait":90000000000,"max_deliver":-1,)"
      R"("max_ack_pending":100000}})");
  for (;;) {
    answer = Api(nc, absl::StrCat("$JS.API.CONSUMER.CREATE.", stream, ".ceiling"), consumer_config);
    if (!IsError(answer)) return true;
    if (absl::Now() > deadline) {
      std::fprintf(stderr, "creating the consumer: %s\n", answer.c_str());
      return false;
    }
    absl::SleepFor(absl::Milliseconds(300));
  }
}

// The number of messages in `stream` (STREAM.INFO state.messages); -1 when unknown.
int64_t StreamMessages(natsConnection* nc, const std::string& stream) {
  const std::string info = Api(nc, absl::StrCat("$JS.API.STREAM.INFO.", stream), "");
  const size_t state = info.find("\"state\":");
  if (state == std::string::npos) return -1;
  const size_t at = info.find("\"messages\":", state);
  if (at == std::string::npos) return -1;
  return strtoll(info.c_str() + at + sizeof("\"messages\":") - 1, nullptr, 10);
}

// Drains `stream` through the durable consumer "ceiling": one fetch at a time, every message
// acked on its own (natsMsg_Ack, not waited for), until the stream is empty (work queue: an ack
// removes the message). Prints DRAIN {json}.
int Drain(natsConnection* nc, jsCtx* js, const std::string& stream, const std::string& prefix,
          int batch, absl::Duration timeout) {
  const int64_t total = StreamMessages(nc, stream);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Consumer = "ceiling";
  so.ManualAck = true;
  natsSubscription* sub = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const std::string filter = absl::StrCat(prefix, ".ready.>");
  if (js_PullSubscribe(&sub, js, filter.c_str(), "ceiling", nullptr, &so, &code) != NATS_OK) {
    std::fprintf(stderr, "binding the consumer to drain %s failed\n", stream.c_str());
    return 1;
  }
  std::printf("draining\n");  // run_jetstream_bench.sh samples CPU from here
  std::fflush(stdout);
  const double cpu0 = CpuSeconds();
  const int64_t start = NowNs();
  const int64_t give_up = start + absl::ToInt64Nanoseconds(timeout);
  uint64_t acked = 0;
  int64_t left = total;
  while (NowNs() < give_up) {
    natsMsgList list{};
    const natsStatus s = natsSubscription_Fetch(&list, sub, batch, 250, &code);
    if (s == NATS_OK) {
      for (int i = 0; i < list.Count; ++i) {
        natsMsg_Ack(list.Msgs[i], nullptr);
        ++acked;
      }
    }
    natsMsgList_Destroy(&list);
    if (s != NATS_OK || (total > 0 && acked >= static_cast<uint64_t>(total))) {
      natsConnection_FlushTimeout(nc, 5000);
      left = StreamMessages(nc, stream);
      if (left == 0) break;
    }
  }
  // Until the server has applied the last acks (the stream is empty).
  while (left != 0 && NowNs() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    left = StreamMessages(nc, stream);
  }
  const double seconds = static_cast<double>(NowNs() - start) / 1e9;
  std::printf("DRAIN {\"stream\":\"%s\",\"messages\":%lld,\"acked\":%llu,\"left\":%lld,"
              "\"seconds\":%.3f,\"acks_per_s\":%.0f,\"client_cpu_s\":%.2f}\n",
              stream.c_str(), static_cast<long long>(total), static_cast<unsigned long long>(acked),
              static_cast<long long>(left), seconds, acked / seconds, CpuSeconds() - cpu0);
  std::fflush(stdout);
  natsSubscription_Destroy(sub);
  return left == 0 ? 0 : 3;
}

// The dedup stream, like HR_DEDUP (collector/store/jetstream/jetstream_layout.cc).
bool EnsureDedupStream(natsConnection* nc, const std::string& stream, const std::string& prefix,
                       int replicas) {
  const std::string config = absl::StrCat(
      R"({"name":")", stream, R"(","subjects":[")", prefix,
      R"(.dedup.>"],"retention":"limits","storage":"file","num_replicas":)", replicas,
      R"(,"max_age":)", absl::ToInt64Nanoseconds(absl::GetFlag(FLAGS_dedup_max_age)),
      R"(,"max_msgs_per_subject":)", absl::GetFlag(FLAGS_dedup_max_msgs_per_subject),
      R"(,"allow_direct":true,"discard":"old"})");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (;;) {
    std::string answer = Api(nc, absl::StrCat("$JS.API.STREAM.INFO.", stream), "");
    if (!IsError(answer)) return true;
    answer = Api(nc, absl::StrCat("$JS.API.STREAM.CREATE.", stream), config);
    if (!IsError(answer)) return true;
    if (absl::Now() > deadline) {
      std::fprintf(stderr, "creating stream %s: %s\n", stream.c_str(), answer.c_str());
      return false;
    }
    absl::SleepFor(absl::Milliseconds(300));
  }
}

// Sizes of a real stream's first messages (what a job weighs on the wire).
int Probe(jsCtx* js, const std::string& stream, int messages) {
  int64_t data = 0, id = 0, subject = 0, headers = 0;
  int n = 0;
  std::string example_subject, example_id;
  for (uint64_t seq = 1; n < messages && seq <= static_cast<uint64_t>(messages) * 4; ++seq) {
    natsMsg* msg = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    if (js_GetMsg(&msg, js, stream.c_str(), seq, nullptr, &code) != NATS_OK) continue;
    ++n;
    data += natsMsg_GetDataLength(msg);
    subject += static_cast<int64_t>(strlen(natsMsg_GetSubject(msg)));
    const char** keys = nullptr;
    int count = 0;
    if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK) {
      for (int i = 0; i < count; ++i) {
        const char* v = nullptr;
        if (natsMsgHeader_Get(msg, keys[i], &v) == NATS_OK && v != nullptr) {
          // "Key: value\r\n"
          headers += static_cast<int64_t>(strlen(keys[i]) + strlen(v) + 4);
          if (strcmp(keys[i], "Nats-Msg-Id") == 0) {
            id += static_cast<int64_t>(strlen(v));
            if (example_id.empty()) example_id = v;
          }
        }
      }
      free(keys);
    }
    if (example_subject.empty()) example_subject = natsMsg_GetSubject(msg);
    natsMsg_Destroy(msg);
  }
  if (n == 0) {
    std::fprintf(stderr, "no message could be read from %s\n", stream.c_str());
    return 1;
  }
  std::printf(
      "PROBE {\"stream\":\"%s\",\"messages\":%d,\"data_bytes\":%lld,\"msg_id_bytes\":%lld,"
      "\"header_bytes\":%lld,\"subject_bytes\":%lld,\"example_subject\":\"%s\","
      "\"example_msg_id\":\"%s\"}\n",
      stream.c_str(), n, static_cast<long long>(data / n), static_cast<long long>(id / n),
      static_cast<long long>(headers / n), static_cast<long long>(subject / n),
      absl::CEscape(example_subject).c_str(), absl::CEscape(example_id).c_str());
  return 0;
}

// --tap: pull requests seen and the batches they asked for.
struct Tap {
  std::mutex mu;
  uint64_t messages = 0;
  uint64_t with_batch = 0;
  uint64_t batch_sum = 0;
  std::map<int64_t, uint64_t> batches;  // batch asked -> requests
};

void OnTap(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* tap = static_cast<Tap*>(closure);
  const std::string body(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
  int64_t batch = -1;
  if (const size_t at = body.find("\"batch\":"); at != std::string::npos) {
    batch = strtoll(body.c_str() + at + sizeof("\"batch\":") - 1, nullptr, 10);
  } else if (!body.empty() && body.find('{') == std::string::npos) {
    batch = strtoll(body.c_str(), nullptr, 10);  // The plain-number form of a pull request.
  }
  {
    std::lock_guard<std::mutex> lock(tap->mu);
    ++tap->messages;
    if (batch >= 0) {
      ++tap->with_batch;
      tap->batch_sum += static_cast<uint64_t>(batch);
      ++tap->batches[batch];
    }
  }
  natsMsg_Destroy(msg);
}

struct Stats {
  std::mutex mu;
  hookrelay::bench::LatencyHistogram latency;  // acks inside the window
  std::map<std::string, uint64_t> failures;
  uint64_t acked_in_window = 0;
  uint64_t acked = 0;
  uint64_t failed = 0;
  uint64_t duplicates = 0;
  // Publish (or scheduled) time of message i, by index; written before its publish.
  std::unique_ptr<std::atomic<int64_t>[]> sent_ns;
  size_t capacity = 0;
  std::atomic<int64_t> window_start_ns{INT64_MAX};
  std::atomic<int64_t> window_end_ns{INT64_MAX};
  // --protocol: markers published on acks, lookups answered.
  natsConnection* nc = nullptr;
  bool protocol = false;
  std::string marker_prefix;  // "<prefix>.dedup.<16 hex of the run>"
  std::atomic<uint64_t> lookups_answered{0};
  std::atomic<uint64_t> lookup_errors{0};
  // --requests: batches in flight by number (message i is in batch i / batch), and the driver's
  // queues: batches whose lookup was answered (to publish), slots free for a new request.
  int batch = 100;
  bool requests_mode = false;
  struct Batch {
    int64_t start_ns = 0;
    int outstanding = 0;
  };
  std::map<uint64_t, Batch> batches;
  hookrelay::bench::LatencyHistogram request_latency;  // requests completed inside the window
  uint64_t requests_in_window = 0;
  std::vector<uint64_t> to_publish;
  int free_slots = 0;
  std::condition_variable wake;
};

// Marker subject of message i: <prefix>.dedup.<32 hex digits>, like the engine's.
std::string MarkerSubject(const Stats& stats, uint64_t i) {
  return absl::StrFormat("%s%016x", stats.marker_prefix, i);
}

void OnLookupReply(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* stats = static_cast<Stats*>(closure);
  const char* status = nullptr;
  bool last = false;
  if (natsMsgHeader_Get(msg, "Status", &status) == NATS_OK && status != nullptr) {
    // 404: none of the markers exists (the normal answer here); 204: the end of a batch.
    last = true;
    if (strcmp(status, "404") == 0 || strcmp(status, "204") == 0) {
      stats->lookups_answered.fetch_add(1, std::memory_order_relaxed);
    } else {
      stats->lookup_errors.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (last && stats->requests_mode) {
    // Reply subject <inbox>.<batch number>: that batch may now be published (by the driver).
    const char* subject = natsMsg_GetSubject(msg);
    const char* dot = subject == nullptr ? nullptr : strrchr(subject, '.');
    if (dot != nullptr) {
      std::lock_guard<std::mutex> lock(stats->mu);
      stats->to_publish.push_back(strtoull(dot + 1, nullptr, 10));
    }
    stats->wake.notify_one();
  }
  natsMsg_Destroy(msg);
}

// The message index is the Nats-Msg-Id's numeric tail.
void OnAck(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
  const int64_t now = NowNs();
  auto* stats = static_cast<Stats*>(closure);
  const char* id = nullptr;
  uint64_t index = 0;
  if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id != nullptr) {
    const char* dash = strrchr(id, '-');
    if (dash != nullptr) index = strtoull(dash + 1, nullptr, 10);
  }
  const int64_t sent = index < stats->capacity ? stats->sent_ns[index].load(std::memory_order_acquire) : 0;
  const bool in_window = now >= stats->window_start_ns.load(std::memory_order_relaxed) &&
                         now < stats->window_end_ns.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(stats->mu);
    if (pa != nullptr) {
      if (stats->protocol && !stats->requests_mode) {
        natsConnection_Publish(stats->nc, MarkerSubject(*stats, index).c_str(), nullptr, 0);
      }
      ++stats->acked;
      if (pa->Duplicate) ++stats->duplicates;
      if (in_window) {
        ++stats->acked_in_window;
        if (sent > 0) stats->latency.Record(now - sent);
      }
    } else {
      ++stats->failed;
      std::string why = pae != nullptr && pae->ErrText != nullptr ? pae->ErrText
                        : pae != nullptr                          ? natsStatus_GetText(pae->Err)
                                                                  : "no answer";
      ++stats->failures[why];
    }
    if (stats->requests_mode) {
      const uint64_t b = index / static_cast<uint64_t>(stats->batch);
      auto it = stats->batches.find(b);
      if (it != stats->batches.end() && --it->second.outstanding == 0) {
        // The request is done: its markers (as the engine, after all the acks), its latency,
        // and its slot goes to the next request.
        if (stats->protocol) {
          for (int k = 0; k < stats->batch; ++k) {
            natsConnection_Publish(stats->nc, MarkerSubject(*stats, b * stats->batch + k).c_str(),
                                   nullptr, 0);
          }
        }
        if (in_window) {
          ++stats->requests_in_window;
          stats->request_latency.Record(now - it->second.start_ns);
        }
        stats->batches.erase(it);
        ++stats->free_slots;
        stats->wake.notify_one();
      }
    }
  }
  natsMsg_Destroy(msg);
}

std::string Base64Token(const std::string& s) {
  std::string out;
  absl::WebSafeBase64Escape(s, &out);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("minimal async JetStream publisher: the engine's ceiling");
  absl::ParseCommandLine(argc, argv);
  const std::string urls = absl::GetFlag(FLAGS_url);
  if (!LoopbackUrls(urls)) {
    std::fprintf(stderr, "--url %s: loopback servers only\n", urls.c_str());
    return 2;
  }
  const std::string stream = absl::GetFlag(FLAGS_stream);
  const std::string prefix = absl::GetFlag(FLAGS_subject_prefix);
  const int replicas = absl::GetFlag(FLAGS_replicas);
  const int msg_bytes = absl::GetFlag(FLAGS_msg_bytes);
  const int id_bytes = absl::GetFlag(FLAGS_msg_id_bytes);
  const int subjects = absl::GetFlag(FLAGS_subjects);
  const int max_pending = absl::GetFlag(FLAGS_max_pending);
  const double rate = absl::GetFlag(FLAGS_rate);
  const int batch = absl::GetFlag(FLAGS_batch);
  const int requests = absl::GetFlag(FLAGS_requests);
  const uint64_t max_messages = absl::GetFlag(FLAGS_messages);
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const absl::Duration warmup = absl::GetFlag(FLAGS_warmup);
  if (absl::GetFlag(FLAGS_probe_stream).empty() &&
      (stream == "HR_JOBS" || msg_bytes < 0 || id_bytes < 12 || subjects < 1 || max_pending < 1 ||
       batch < 1 || rate < 0 || duration <= absl::ZeroDuration())) {
    std::fprintf(stderr, "bad flags (stream must not be HR_JOBS, sizes positive)\n");
    return 2;
  }

  std::vector<std::string> servers = absl::StrSplit(urls, ',', absl::SkipEmpty());
  std::vector<const char*> server_ptrs;
  for (const std::string& s : servers) server_ptrs.push_back(s.c_str());
  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetServers(opts, server_ptrs.data(), static_cast<int>(server_ptrs.size()));
  if (s == NATS_OK) s = natsConnection_Connect(&nc, opts);
  if (s != NATS_OK) {
    std::fprintf(stderr, "connecting to %s: %s\n", urls.c_str(), natsStatus_GetText(s));
    return 1;
  }

  Stats stats;
  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.PublishAsync.AckHandler = &OnAck;
  js_options.PublishAsync.AckHandlerClosure = &stats;
  // --requests: never stall (the requests bound what is in flight).
  js_options.PublishAsync.MaxPending =
      absl::GetFlag(FLAGS_requests) > 0
          ? std::max<int64_t>(max_pending, int64_t{absl::GetFlag(FLAGS_requests) + 1} * batch)
          : max_pending;
  js_options.PublishAsync.StallWait = 1000;
  s = natsConnection_JetStream(&js, nc, &js_options);
  if (s != NATS_OK) {
    std::fprintf(stderr, "JetStream context: %s\n", natsStatus_GetText(s));
    return 1;
  }

  if (!absl::GetFlag(FLAGS_tap).empty()) {
    Tap tap;
    natsSubscription* sub = nullptr;
    if (natsConnection_Subscribe(&sub, nc, absl::GetFlag(FLAGS_tap).c_str(), &OnTap, &tap) != NATS_OK) {
      std::fprintf(stderr, "subscribing to %s failed\n", absl::GetFlag(FLAGS_tap).c_str());
      return 1;
    }
    natsSubscription_SetPendingLimits(sub, -1, -1);
    std::printf("tapping\n");
    std::fflush(stdout);
    absl::SleepFor(duration);
    natsSubscription_Unsubscribe(sub);
    std::lock_guard<std::mutex> lock(tap.mu);
    std::string hist;
    for (const auto& [b, n] : tap.batches) {
      absl::StrAppendFormat(&hist, "%s\"%d\":%llu", hist.empty() ? "" : ",", b,
                            static_cast<unsigned long long>(n));
    }
    std::printf("TAP {\"subject\":\"%s\",\"seconds\":%.1f,\"messages\":%llu,\"pull_requests\":%llu,"
                "\"mean_batch\":%.1f,\"batches\":{%s}}\n",
                absl::GetFlag(FLAGS_tap).c_str(), absl::ToDoubleSeconds(duration),
                static_cast<unsigned long long>(tap.messages),
                static_cast<unsigned long long>(tap.with_batch),
                tap.with_batch == 0 ? 0.0 : static_cast<double>(tap.batch_sum) / tap.with_batch,
                hist.c_str());
    natsSubscription_Destroy(sub);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    natsOptions_Destroy(opts);
    return 0;
  }
  if (!absl::GetFlag(FLAGS_probe_stream).empty()) {
    const int rc = Probe(js, absl::GetFlag(FLAGS_probe_stream), absl::GetFlag(FLAGS_probe_messages));
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    natsOptions_Destroy(opts);
    return rc;
  }

  if (!EnsureStream(nc, stream, prefix, replicas, absl::GetFlag(FLAGS_duplicate_window),
                    absl::GetFlag(FLAGS_consumer))) {
    return 1;
  }
  const bool protocol = absl::GetFlag(FLAGS_protocol);
  const std::string dedup_stream = stream + "_DEDUP";
  std::string lookup_inbox;
  natsSubscription* lookup_sub = nullptr;
  if (protocol) {
    const int dedup_replicas = absl::GetFlag(FLAGS_dedup_replicas);
    if (!EnsureDedupStream(nc, dedup_stream, prefix, dedup_replicas > 0 ? dedup_replicas : replicas)) {
      return 1;
    }
    natsInbox* inbox = nullptr;
    natsInbox_Create(&inbox);
    lookup_inbox = inbox;
    natsInbox_Destroy(inbox);
    if (natsConnection_Subscribe(&lookup_sub, nc, (lookup_inbox + ".*").c_str(), &OnLookupReply,
                                 &stats) != NATS_OK) {
      std::fprintf(stderr, "subscribing to lookup answers failed\n");
      return 1;
    }
    stats.nc = nc;
    stats.protocol = true;
    stats.marker_prefix = absl::StrFormat("%s.dedup.%016x", prefix,
                                          static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
  }
  uint64_t lookups_sent = 0;
  const std::string direct_get = absl::StrCat("$JS.API.DIRECT.GET.", dedup_stream);
  // --protocol: one multi_last lookup for messages [first, first + n), before they are published.
  const bool lookups = absl::GetFlag(FLAGS_lookups);
  auto lookup = [&](uint64_t first, int n, uint64_t token) {
    if (!lookups) {  // Markers only: the request goes on as if answered.
      if (stats.requests_mode) {
        std::lock_guard<std::mutex> lock(stats.mu);
        stats.to_publish.push_back(token);
      }
      return;
    }
    std::string body = R"({"multi_last":[)";
    for (int k = 0; k < n; ++k) {
      absl::StrAppend(&body, k == 0 ? "\"" : ",\"", MarkerSubject(stats, first + k), "\"");
    }
    absl::StrAppend(&body, R"(],"batch":)", n, "}");
    const std::string reply = absl::StrCat(lookup_inbox, ".", token);
    ++lookups_sent;
    natsConnection_PublishRequest(nc, direct_get.c_str(), reply.c_str(), body.data(),
                                  static_cast<int>(body.size()));
  };

  // Payload and subjects, built once. Subjects as the engine's: <prefix>.ready.<b64 source>.<b64 user>.
  const std::string payload(static_cast<size_t>(msg_bytes), 'j');
  std::vector<std::string> subject_list;
  for (int i = 0; i < subjects; ++i) {
    subject_list.push_back(absl::StrCat(prefix, ".ready.", Base64Token("web"), ".",
                                        Base64Token(absl::StrFormat("user-%06d", i))));
  }
  // Nats-Msg-Id: "<run>" padded with hex to id_bytes - 12, then "-" and an 11-digit index.
  const std::string run = absl::StrFormat("%016x", static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
  std::string id_head = run;
  while (static_cast<int>(id_head.size()) < id_bytes - 12) id_head += run;
  id_head.resize(static_cast<size_t>(id_bytes - 12));

  const double total_s = absl::ToDoubleSeconds(duration + warmup);
  // Enough slots for what can be sent in the run (at most 1M msgs/s closed loop).
  stats.capacity = rate > 0 ? static_cast<size_t>(rate * total_s) + 2 * batch + 16
                            : static_cast<size_t>(1'000'000 * total_s) + 16;
  stats.sent_ns.reset(new std::atomic<int64_t>[stats.capacity]);
  for (size_t i = 0; i < stats.capacity; ++i) stats.sent_ns[i].store(0, std::memory_order_relaxed);

  std::printf("publishing\n");  // run_jetstream_bench.sh starts its CPU window from here
  std::fflush(stdout);
  const int64_t start = NowNs();
  const int64_t window_start = start + absl::ToInt64Nanoseconds(warmup);
  const int64_t window_end = window_start + absl::ToInt64Nanoseconds(duration);
  stats.window_start_ns.store(window_start);
  stats.window_end_ns.store(window_end);
  double cpu_at_window_start = -1, cpu_at_window_end = -1;
  uint64_t published = 0, sent_total = 0, publish_errors = 0, stalls = 0, late_bursts = 0;
  std::map<std::string, uint64_t> publish_failures;
  char id[64];

  auto publish = [&](int64_t sent_at) {
    const uint64_t i = published;
    if (i >= stats.capacity) return false;
    natsMsg* msg = nullptr;
    natsMsg_Create(&msg, subject_list[i % subject_list.size()].c_str(), nullptr, payload.data(),
                   static_cast<int>(payload.size()));
    std::snprintf(id, sizeof(id), "%s-%011llu", id_head.c_str(), static_cast<unsigned long long>(i));
    natsMsgHeader_Set(msg, "Nats-Msg-Id", id);
    stats.sent_ns[i].store(sent_at, std::memory_order_release);
    ++published;
    ++sent_total;
    for (;;) {
      natsMsg* owned = msg;
      const natsStatus ps = js_PublishMsgAsync(js, &owned, nullptr);
      if (ps == NATS_OK) return true;
      if (ps == NATS_TIMEOUT && owned != nullptr && NowNs() < window_end) {  // Stalled at MaxPending.
        ++stalls;
        continue;
      }
      if (owned != nullptr) natsMsg_Destroy(owned);
      ++publish_errors;
      ++publish_failures[natsStatus_GetText(ps)];
      return false;
    }
  };

  stats.batch = batch;
  if (requests > 0 && rate <= 0) {
    // Closed loop of requests: a driver (this thread) starts a request per free slot (its
    // lookup, or its messages right away) and publishes the batches whose lookup was answered.
    {
      std::lock_guard<std::mutex> lock(stats.mu);
      stats.requests_mode = true;
      stats.free_slots = requests;
    }
    uint64_t next_batch = 0;
    std::unique_lock<std::mutex> lock(stats.mu);
    while (true) {
      const int64_t now = NowNs();
      if (now >= window_end) break;
      if (cpu_at_window_start < 0 && now >= window_start) cpu_at_window_start = CpuSeconds();
      if (stats.free_slots == 0 && stats.to_publish.empty()) {
        stats.wake.wait_for(lock, std::chrono::milliseconds(5));
        continue;
      }
      std::vector<uint64_t> ready;
      ready.swap(stats.to_publish);
      int starting = stats.free_slots;
      stats.free_slots = 0;
      std::vector<uint64_t> started;
      for (int k = 0; k < starting; ++k) {
        const uint64_t b = next_batch++;
        stats.batches[b] = Stats::Batch{now, batch};
        started.push_back(b);
      }
      lock.unlock();
      for (uint64_t b : started) {
        if (protocol) {
          lookup(b * batch, batch, b);  // Token = batch number; its answer queues the batch.
        } else {
          ready.push_back(b);
        }
      }
      for (uint64_t b : ready) {
        published = b * batch;  // publish() numbers the message by `published`
        for (int k = 0; k < batch; ++k) publish(NowNs());
      }
      lock.lock();
    }
    lock.unlock();
  } else if (rate <= 0) {
    // Closed loop: js_PublishMsgAsync blocks at MaxPending until acks free the window.
    while (true) {
      const int64_t now = NowNs();
      if (now >= window_end) break;
      if (cpu_at_window_start < 0 && now >= window_start) cpu_at_window_start = CpuSeconds();
      if (max_messages > 0 && sent_total >= max_messages) break;
      if (protocol) lookup(published, batch, lookups_sent);
      for (int k = 0; k < (protocol ? batch : 64); ++k) {
        if (!publish(NowNs())) break;
      }
    }
  } else {
    // Open loop: a burst of `batch` every batch / rate seconds, stamped with its scheduled time.
    const double interval_ns = 1e9 * batch / rate;
    for (uint64_t burst = 0;; ++burst) {
      const int64_t slot = start + static_cast<int64_t>(interval_ns * static_cast<double>(burst));
      if (slot >= window_end) break;
      int64_t now = NowNs();
      if (now < slot) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(slot - now));
        now = NowNs();
      }
      if (now - slot > 1'000'000) ++late_bursts;
      if (cpu_at_window_start < 0 && now >= window_start) cpu_at_window_start = CpuSeconds();
      if (protocol) lookup(published, batch, lookups_sent);
      for (int k = 0; k < batch; ++k) {
        if (!publish(slot)) break;
      }
    }
  }
  // Acks arriving after the window do not count; wait for them anyway (failures are reported).
  const int64_t idle_until = max_messages > 0 && sent_total >= max_messages ? 0 : window_end;
  while (NowNs() < idle_until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  cpu_at_window_end = CpuSeconds();
  if (cpu_at_window_start < 0) cpu_at_window_start = cpu_at_window_end;
  jsPubOptions wait;
  jsPubOptions_Init(&wait);
  wait.MaxWait = 30000;
  const natsStatus complete = js_PublishAsyncComplete(js, &wait);

  const double window_s = absl::ToDoubleSeconds(duration);
  std::string failures;
  uint64_t acked_in_window, acked, failed, duplicates;
  hookrelay::bench::LatencyHistogram h;
  hookrelay::bench::LatencyHistogram rh;
  uint64_t requests_in_window = 0;
  {
    std::lock_guard<std::mutex> lock(stats.mu);
    rh = stats.request_latency;
    requests_in_window = stats.requests_in_window;
    for (const auto& [why, n] : stats.failures) publish_failures[why] += n;
    acked_in_window = stats.acked_in_window;
    acked = stats.acked;
    failed = stats.failed;
    duplicates = stats.duplicates;
    h = stats.latency;
  }
  if (complete != NATS_OK) publish_failures["acks still missing 30 s after the run"] += 1;
  for (const auto& [why, n] : publish_failures) {
    absl::StrAppendFormat(&failures, "%s\"%s\":%llu", failures.empty() ? "" : ",",
                          absl::CHexEscape(why), static_cast<unsigned long long>(n));
  }
  const double msgs_per_s = static_cast<double>(acked_in_window) / window_s;
  if (protocol) natsConnection_FlushTimeout(nc, 10000);
  std::printf("stream %s: replicas %d, %d-byte messages, Nats-Msg-Id of %d bytes, %d subjects%s\n",
              stream.c_str(), replicas, msg_bytes, id_bytes, subjects,
              protocol ? absl::StrFormat("; + %s: %llu lookups sent, %llu answered, %llu failed",
                                         dedup_stream, static_cast<unsigned long long>(lookups_sent),
                                         static_cast<unsigned long long>(stats.lookups_answered.load()),
                                         static_cast<unsigned long long>(stats.lookup_errors.load()))
                                .c_str()
                       : "");
  const std::string mode_text =
      rate > 0       ? absl::StrFormat("open loop at %.0f msgs/s", rate)
      : requests > 0 ? absl::StrFormat("closed loop, %d requests of %d messages in flight", requests, batch)
                     : absl::StrFormat("closed loop, max_pending %d", max_pending);
  std::printf("%s: published %llu, acked %llu (duplicates %llu), failed %llu, publish errors %llu, "
              "publishes that waited 1 s at max_pending %llu, late bursts %llu\n",
              mode_text.c_str(), static_cast<unsigned long long>(sent_total),
              static_cast<unsigned long long>(acked), static_cast<unsigned long long>(duplicates),
              static_cast<unsigned long long>(failed),
              static_cast<unsigned long long>(publish_errors),
              static_cast<unsigned long long>(stalls), static_cast<unsigned long long>(late_bursts));
  std::printf("acked in the %.1f s window: %.0f msgs/s; ack latency p50 %.2f ms, p90 %.2f ms, "
              "p99 %.2f ms, p99.9 %.2f ms, max %.2f ms; publisher cpu %.0f%% of one core\n",
              window_s, msgs_per_s, Ms(h.Quantile(0.5)), Ms(h.Quantile(0.9)), Ms(h.Quantile(0.99)),
              Ms(h.Quantile(0.999)), Ms(h.max()),
              100.0 * (cpu_at_window_end - cpu_at_window_start) / window_s);
  if (requests > 0) {
    std::printf("requests completed in the window: %llu (%.0f/s); request latency (start, %s"
                "last ack) p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
                static_cast<unsigned long long>(requests_in_window), requests_in_window / window_s,
                protocol ? "lookup, publish, " : "publish, ", Ms(rh.Quantile(0.5)),
                Ms(rh.Quantile(0.99)), Ms(rh.max()));
  }
  std::printf(
      "RESULT {\"mode\":\"%s\",\"replicas\":%d,\"max_pending\":%d,\"requests\":%d,"
      "\"rate\":%.0f,\"msg_bytes\":%d,\"msg_id_bytes\":%d,\"window_s\":%.3f,"
      "\"published\":%llu,\"acked\":%llu,\"acked_in_window\":%llu,\"msgs_per_s\":%.0f,"
      "\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f,"
      "\"req_p50_ms\":%.3f,\"req_p99_ms\":%.3f,\"late_bursts\":%llu,\"client_cpu_s\":%.2f,"
      "\"failures\":{%s}}\n",
      protocol ? "ceiling+protocol" : "ceiling", replicas, max_pending, requests, rate, msg_bytes,
      id_bytes, window_s, static_cast<unsigned long long>(sent_total),
      static_cast<unsigned long long>(acked), static_cast<unsigned long long>(acked_in_window),
      msgs_per_s, Ms(h.Quantile(0.5)), Ms(h.Quantile(0.9)), Ms(h.Quantile(0.99)),
      Ms(h.Quantile(0.999)), Ms(h.max()), Ms(rh.Quantile(0.5)), Ms(rh.Quantile(0.99)),
      static_cast<unsigned long long>(late_bursts), cpu_at_window_end - cpu_at_window_start,
      failures.c_str());
  std::fflush(stdout);

  int drain_rc = 0;
  if (absl::GetFlag(FLAGS_drain)) {
    drain_rc = Drain(nc, js, stream, prefix, absl::GetFlag(FLAGS_drain_batch),
                     absl::GetFlag(FLAGS_drain_timeout));
  }
  if (lookup_sub != nullptr) {
    natsSubscription_Unsubscribe(lookup_sub);
    natsSubscription_Destroy(lookup_sub);
  }
  if (absl::GetFlag(FLAGS_delete_stream)) {
    Api(nc, absl::StrCat("$JS.API.STREAM.DELETE.", stream), "");
    if (protocol) Api(nc, absl::StrCat("$JS.API.STREAM.DELETE.", dedup_stream), "");
  }
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  natsOptions_Destroy(opts);
  return failed + publish_errors > 0 ? 3 : drain_rc;
}
