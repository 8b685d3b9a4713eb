#include "tests/collector_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <nats/nats.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include <simdjson.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collector/store/jetstream/jetstream_layout.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"
#include "common/strings.h"

namespace hookrelay::test {
namespace {

using common::ToAbsl;

absl::Status Errno(std::string_view what) {
  return absl::UnavailableError(absl::StrCat(ToAbsl(what), ": ", strerror(errno)));
}

int RemainingMillis(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
}

// Waits until `fd` has `events`; false on timeout.
bool PollFor(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int ms = RemainingMillis(deadline);
    const int r = poll(&p, 1, ms);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace

std::string TestConfigYaml() {
  return absl::StrCat(R"yaml(
sources:
  - id: web
    name: Website
    kind: web
    write_keys: [)yaml", kWebKey, R"yaml(]
  - id: fan
    name: Fan-out
    kind: server
    write_keys: [)yaml", kFanKey, R"yaml(]
  - id: quiet
    name: Quiet
    kind: mobile
    write_keys: [)yaml", kQuietKey, R"yaml(]
destinations:
  - id: hook-web
    type: webhooks
    sources: [web, fan]
    enabled: true
    urls:
      - url: https://hooks.example.com/web
  - id: hook-fan
    type: webhooks
    sources: [fan]
    enabled: true
    shared_secret: s3cr3t
    urls:
      - url: https://hooks.example.com/fan
        headers:
          X-Api-Key: abc
  - id: hook-off
    type: webhooks
    sources: [web, quiet]
    enabled: false
    urls:
      - url: https://hooks.example.com/off
)yaml");
}

std::string MakeTempDir(std::string_view name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/",
                                     ToAbsl(name), ".XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    fprintf(stderr, "mkdtemp(%s) failed: %s\n", pattern.c_str(), strerror(errno));
    abort();
  }
  return pattern;
}

absl::Status WriteFile(const std::string& path, std::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string HttpResponse::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, ToAbsl(name))) return v;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<HttpConnection>> HttpConnection::Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    absl::Status s = Errno(absl::StrCat("connect to 127.0.0.1:", port));
    close(fd);
    return s;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return std::unique_ptr<HttpConnection>(new HttpConnection(fd));
}

HttpConnection::~HttpConnection() { close(fd_); }

absl::Status HttpConnection::SendAll(std::string_view bytes) {
  const absl::Time deadline = absl::Now() + kIoTimeout;
  size_t sent = 0;
  while (sent < bytes.size()) {
    if (!PollFor(fd_, POLLOUT, deadline)) return absl::DeadlineExceededError("send timed out");
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Errno("send");
    }
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void HttpConnection::ShutdownWrite() { shutdown(fd_, SHUT_WR); }

absl::StatusOr<bool> HttpConnection::ReadMore(absl::Time deadline) {
  while (true) {
    if (!PollFor(fd_, POLLIN, deadline)) return absl::DeadlineExceededError("read timed out");
    char chunk[64 * 1024];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) return false;
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    return Errno("recv");
  }
}

absl::StatusOr<HttpResponse> HttpConnection::ReadResponse(bool head_request) {
  const absl::Time deadline = absl::Now() + kIoTimeout;
  size_t header_end;
  while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    absl::StatusOr<bool> more = ReadMore(deadline);
    if (!more.ok()) return more.status();
    if (!*more) {
      return absl::UnavailableError(
          absl::StrCat("connection closed before a complete response header (got ",
                       buffer_.size(), " bytes)"));
    }
  }
  HttpResponse response;
  const std::string header_block = buffer_.substr(0, header_end);
  buffer_.erase(0, header_end + 4);
  std::vector<std::string> lines = absl::StrSplit(header_block, "\r\n");
  // "HTTP/1.1 200 OK"
  std::vector<std::string> status_parts = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status_parts.size() < 2 || !absl::StartsWith(status_parts[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status_parts[1], &response.status)) {
    return absl::DataLossError(absl::StrCat("bad status line: ", lines[0]));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) return absl::DataLossError(absl::StrCat("bad header: ", lines[i]));
    response.headers.emplace_back(
        lines[i].substr(0, colon),
        std::string(absl::StripAsciiWhitespace(absl::string_view(lines[i]).substr(colon + 1))));
  }
  if (head_request || response.status == 204 || response.status == 304) return response;
  const std::string length_text = response.Header("Content-Length");
  if (length_text.empty()) {
    while (true) {  // No length: the body runs to the end of the stream.
      absl::StatusOr<bool> more = ReadMore(deadline);
      if (!more.ok()) return more.status();
      if (!*more) break;
    }
    response.body = std::move(buffer_);
    buffer_.clear();
    return response;
  }
  size_t length = 0;
  if (!absl::SimpleAtoi(length_text, &length)) {
    return absl::DataLossError(absl::StrCat("bad Content-Length: ", length_text));
  }
  while (buffer_.size() < length) {
    absl::StatusOr<bool> more = ReadMore(deadline);
    if (!more.ok()) return more.status();
    if (!*more) return absl::UnavailableError("connection closed inside the response body");
  }
  response.body = buffer_.substr(0, length);
  buffer_.erase(0, length);
  return response;
}

bool HttpConnection::WaitPeerClosed() {
  const absl::Time deadline = absl::Now() + kIoTimeout;
  while (true) {
    absl::StatusOr<bool> more = ReadMore(deadline);
    if (!more.ok()) return more.status().code() != absl::StatusCode::kDeadlineExceeded;  // reset
    if (!*more) return true;
  }
}

absl::StatusOr<HttpResponse> HttpConnection::Request(std::string_view method,
                                                     std::string_view target,
                                                     std::string_view body,
                                                     const HttpHeaders& headers) {
  std::string request = absl::StrCat(ToAbsl(method), " ", ToAbsl(target),
                                     " HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  for (const auto& [k, v] : headers) absl::StrAppend(&request, k, ": ", v, "\r\n");
  absl::StrAppend(&request, "Content-Length: ", body.size(), "\r\n\r\n");
  request.append(body);
  const absl::Status sent = SendAll(request);
  absl::StatusOr<HttpResponse> response = ReadResponse(/*head=*/method == "HEAD");
  if (!response.ok() && !sent.ok()) {
    return absl::UnavailableError(
        absl::StrCat(sent.message(), "; then reading: ", response.status().message()));
  }
  return response;
}

absl::StatusOr<HttpResponse> HttpConnection::Post(std::string_view target, std::string_view body,
                                                  std::string_view write_key, HttpHeaders extra) {
  HttpHeaders headers = {{"Content-Type", "application/json"}};
  if (!write_key.empty()) headers.emplace_back("Authorization", BasicAuth(write_key));
  for (auto& h : extra) headers.push_back(std::move(h));
  return Request("POST", target, body, headers);
}

absl::StatusOr<HttpResponse> HttpPost(int port, std::string_view target, std::string_view body,
                                      std::string_view write_key, HttpHeaders extra) {
  absl::StatusOr<std::unique_ptr<HttpConnection>> conn = HttpConnection::Connect(port);
  if (!conn.ok()) return conn.status();
  return (*conn)->Post(target, body, write_key, std::move(extra));
}

std::string BasicAuth(std::string_view write_key) {
  return absl::StrCat("Basic ", absl::Base64Escape(absl::StrCat(ToAbsl(write_key), ":")));
}

std::string Gzip(std::string_view data) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    abort();
  }
  std::string out(deflateBound(&zs, static_cast<uLong>(data.size())) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  if (rc != Z_STREAM_END) abort();
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string JsonAt(std::string_view json, std::string_view pointer) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json.data(), json.size());
  simdjson::dom::element root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) return "<invalid json>";
  simdjson::dom::element value;
  if (root.at_pointer(pointer).get(value) != simdjson::SUCCESS) return "<missing>";
  return simdjson::minify(value);
}

std::string JsonStr(std::string_view json, std::string_view pointer) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json.data(), json.size());
  simdjson::dom::element root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) return "<invalid json>";
  simdjson::dom::element value;
  if (root.at_pointer(pointer).get(value) != simdjson::SUCCESS) return "<missing>";
  std::string_view s;
  if (value.get(s) != simdjson::SUCCESS) return "<not a string>";
  return std::string(s);
}

bool IsJsonError(std::string_view json) {
  return JsonAt(json, "/success") == "false" && JsonAt(json, "/error").starts_with('"');
}

absl::StatusOr<std::vector<hookrelay::v1::Job>> LeaseAllJobs(const std::string& data_dir) {
  collector::RocksDbJobStore::Options options;
  options.path = data_dir;
  absl::StatusOr<std::unique_ptr<collector::RocksDbJobStore>> store =
      collector::RocksDbJobStore::Open(options);
  if (!store.ok()) return store.status();
  std::vector<hookrelay::v1::Job> jobs;
  while (true) {
    absl::StatusOr<std::vector<collector::LeasedJob>> leased =
        (*store)->Lease(10000);
    if (!leased.ok()) return leased.status();
    if (leased->empty()) break;
    for (collector::LeasedJob& job : *leased) jobs.push_back(std::move(job.job));
  }
  return jobs;
}

absl::StatusOr<natsConnection*> ConnectNats(const std::string& urls) {
  natsConnection* nc = nullptr;
  if (natsStatus s = natsConnection_ConnectTo(&nc, urls.c_str()); s != NATS_OK) {
    return absl::UnavailableError(absl::StrCat("connecting to ", urls, ": ", natsStatus_GetText(s)));
  }
  return nc;
}

namespace {

// Every message of HR_JOBS, read by sequence number through the stream API (the stream's own
// consumer is the collectors'; a read-only look must not take their jobs).
absl::StatusOr<std::vector<hookrelay::v1::Job>> ReadJetStreamJobs(natsConnection* nc) {
  absl::StatusOr<collector::JetStreamApiReply> info =
      collector::JetStreamApi(nc, "$JS.API.STREAM.INFO.HR_JOBS", "", absl::Seconds(5));
  if (!info.ok()) return info.status();
  if (info->error_code != 0) return absl::InternalError(absl::StrCat("HR_JOBS info: ", info->error));
  int64_t first = 0;
  int64_t last = 0;
  if (!absl::SimpleAtoi(JsonAt(info->body, "/state/first_seq"), &first) ||
      !absl::SimpleAtoi(JsonAt(info->body, "/state/last_seq"), &last)) {
    return absl::InternalError(absl::StrCat("HR_JOBS info without sequence numbers: ", info->body));
  }
  std::vector<hookrelay::v1::Job> jobs;
  for (int64_t seq = std::max<int64_t>(first, 1); seq <= last; ++seq) {
    absl::StatusOr<collector::JetStreamApiReply> got = collector::JetStreamApi(
        nc, "$JS.API.STREAM.MSG.GET.HR_JOBS", absl::StrCat(R"({"seq":)", seq, "}"),
        absl::Seconds(5));
    if (!got.ok()) return got.status();
    constexpr int64_t kNoMessage = 10037;  // deleted (acknowledged) since
    if (got->error_code == kNoMessage) continue;
    if (got->error_code != 0) {
      return absl::InternalError(absl::StrCat("HR_JOBS message ", seq, ": ", got->error));
    }
    std::string data;
    if (!absl::Base64Unescape(JsonStr(got->body, "/message/data"), &data) ||
        !jobs.emplace_back().ParseFromString(data)) {
      return absl::InternalError(absl::StrCat("HR_JOBS message ", seq, " is not a job"));
    }
  }
  return jobs;
}

}  // namespace

absl::StatusOr<std::vector<hookrelay::v1::Job>> ReadAllJobs(const EngineSetup& engine,
                                                          const std::string& data_dir) {
  if (engine.engine != "jetstream") return LeaseAllJobs(data_dir);
  absl::StatusOr<natsConnection*> nc = ConnectNats(engine.nats_url);
  if (!nc.ok()) return nc.status();
  absl::StatusOr<std::vector<hookrelay::v1::Job>> jobs = ReadJetStreamJobs(*nc);
  natsConnection_Destroy(*nc);
  return jobs;
}


InProcessCollector::InProcessCollector(std::string_view name, std::string config_yaml,
                                       EngineSetup engine)
    : clock_(absl::FromUnixSeconds(kNowUnixSeconds)), engine_(std::move(engine)) {
  dir_ = MakeTempDir(name);
  config_path_ = dir_ + "/collector.yaml";
  data_dir_ = dir_ + "/data";
  const absl::Status written = WriteFile(config_path_, config_yaml);
  if (!written.ok()) {
    fprintf(stderr, "%s\n", written.ToString().c_str());
    abort();
  }
  collector::Server::Options options;
  options.config_path = config_path_;
  options.data_dir = data_dir_;
  options.grpc_address = "127.0.0.1:0";
  options.http_address = "127.0.0.1:0";
  options.metrics_address = "127.0.0.1:0";
  options.admin_http_address = "127.0.0.1:0";
  options.clock = &clock_;
  if (engine_.engine == "jetstream") {
    options.store = "jetstream";
    options.nats_url = engine_.nats_url;
    options.nats_replicas = 3;
    // The manual clock runs hours of retries in milliseconds; the server's schedules run on
    // real time: retries come back at once and wait in the collector until the clock is there.
    options.max_schedule_delay_for_testing = absl::ZeroDuration();
  }
  server_ = std::make_unique<collector::Server>(options);
}

InProcessCollector::~InProcessCollector() { Stop(); }

absl::Status InProcessCollector::Start() { return server_->Start(); }

void InProcessCollector::Stop() { server_->Shutdown(); }

absl::StatusOr<std::vector<hookrelay::v1::Job>> InProcessCollector::StopAndLeaseAll() {
  Stop();
  return ReadAllJobs(engine_, data_dir_);
}

}  // namespace hookrelay::test
