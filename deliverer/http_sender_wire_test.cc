// HttpSender's HTTP/1.1 transport against scripted receivers on raw sockets: what goes over the
// wire, connection reuse and retry rules, response framings, interim responses, early answers,
// and the routing of HTTP/2 receivers to libcurl. (http_sender_test.cc holds the sender's
// contract tests against a regular receiver.)
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "deliverer/http_sender.h"
#include "deliverer/outcome_policy.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::deliverer {
namespace {

using ::testing::HasSubstr;

// Accepts connections on 127.0.0.1 (a port chosen by the OS) and runs `script(index, fd)` for each
// on its own thread; the fd is closed after the script unless the script closed it (returns -1).
class RawServer {
 public:
  using Script = std::function<void(int index, int fd)>;

  explicit RawServer(Script script) : script_(std::move(script)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(listen_fd_, 64) != 0) {
      ADD_FAILURE() << "cannot listen";
      return;
    }
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] {
      while (true) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) return;  // shut down
        const int index = accepted_.fetch_add(1);
        absl::MutexLock lock(&mu_);
        threads_.emplace_back([this, index, fd] { script_(index, fd); });
      }
    });
  }

  ~RawServer() {
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    if (acceptor_.joinable()) acceptor_.join();
    absl::MutexLock lock(&mu_);
    for (std::thread& t : threads_) t.join();
  }

  std::string Url(const std::string& path = "/hooks") const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }
  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  Script script_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

// Reads one request (head and Content-Length body) from `fd`; bytes beyond it stay in `buffer`.
// nullopt when the peer closed first.
std::optional<std::string> ReadRequest(int fd, std::string& buffer, std::string* head = nullptr) {
  auto fill = [&]() {
    char chunk[65536];
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer.append(chunk, static_cast<size_t>(n));
    return true;
  };
  size_t end;
  while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
    if (!fill()) return std::nullopt;
  }
  const std::string h = buffer.substr(0, end + 4);
  size_t length = 0;
  for (absl::string_view line : absl::StrSplit(h, "\r\n")) {
    if (absl::StartsWithIgnoreCase(line, "content-length:")) {
      EXPECT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)), &length));
    }
  }
  while (buffer.size() < end + 4 + length) {
    if (!fill()) return std::nullopt;
  }
  std::string body = buffer.substr(end + 4, length);
  buffer.erase(0, end + 4 + length);
  if (head != nullptr) *head = h;
  return body;
}

void WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Whether bytes (or an EOF) are waiting on `fd` right now.
bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

const std::string kOk = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

std::unique_ptr<HttpSender> MakeSender(HttpSender::Options options = {.allow_private_networks =
                                                                          true}) {
  absl::StatusOr<std::unique_ptr<HttpSender>> s = HttpSender::Create(std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

HttpRequest Post(std::string url, std::string body = "{}") {
  HttpRequest request;
  request.url = std::move(url);
  request.body = std::make_shared<const std::string>(std::move(body));
  return request;
}

HttpResult SendAndWait(HttpSender& sender, HttpRequest request) {
  struct Shared {
    absl::Notification done;
    HttpResult result;
  };
  auto shared = std::make_shared<Shared>();
  sender.Send(std::move(request), [shared](HttpResult r) {
    shared->result = std::move(r);
    shared->done.Notify();
  });
  EXPECT_TRUE(shared->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  return shared->done.HasBeenNotified() ? shared->result : HttpResult{};
}

// A kept-alive connection that the receiver closed while it sat idle is not written to: the next
// request goes out on a fresh connection and succeeds.
TEST(HttpSenderWireTest, IdleConnectionClosedByTheReceiverIsNotUsed) {
  absl::Notification first_closed;
  std::vector<std::string> bodies(2);
  RawServer server([&](int index, int fd) {
    std::string buffer;
    if (index > 1) return;
    std::optional<std::string> body = ReadRequest(fd, buffer);
    if (!body) return;
    bodies[index] = *body;
    WriteAll(fd, kOk);
    if (index == 0) {
      close(fd);
      first_closed.Notify();
      return;
    }
    ReadRequest(fd, buffer);  // until the sender goes
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  EXPECT_EQ(SendAndWait(*sender, Post(server.Url(), "first")).result.status, 200);
  ASSERT_TRUE(first_closed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const HttpResult r = SendAndWait(*sender, Post(server.Url(), "second"));
  EXPECT_EQ(r.result.error, TransportError::kNone) << r.error_detail;
  EXPECT_EQ(r.result.status, 200);
  EXPECT_EQ(server.accepted(), 2);
  sender.reset();
  EXPECT_EQ(bodies[0], "first");
  EXPECT_EQ(bodies[1], "second");
}

// The receiver closes a kept-alive connection with the next request arriving unread (a reset):
// nothing of it was processed, so it is sent once more on a fresh connection, and arrives once.
TEST(HttpSenderWireTest, ResetBeforeAnyAnswerIsRetriedOnAFreshConnection) {
  absl::Mutex mu;
  std::vector<std::string> processed;
  RawServer server([&](int index, int fd) {
    std::string buffer;
    if (index == 0) {
      std::optional<std::string> body = ReadRequest(fd, buffer);
      if (!body) return;
      {
        absl::MutexLock lock(&mu);
        processed.push_back(*body);
      }
      WriteAll(fd, kOk);
      pollfd p{fd, POLLIN, 10000};
      poll(&p, 1, 10000);  // the second request arrives ...
      close(fd);           // ... and is dropped unread: the kernel answers with a reset
      return;
    }
    while (std::optional<std::string> body = ReadRequest(fd, buffer)) {
      {
        absl::MutexLock lock(&mu);
        processed.push_back(*body);
      }
      WriteAll(fd, kOk);
    }
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  EXPECT_EQ(SendAndWait(*sender, Post(server.Url(), "first")).result.status, 200);
  const HttpResult r = SendAndWait(*sender, Post(server.Url(), "second"));
  EXPECT_EQ(r.result.error, TransportError::kNone) << r.error_detail;
  EXPECT_EQ(r.result.status, 200);
  EXPECT_EQ(server.accepted(), 2);
  sender.reset();
  absl::MutexLock lock(&mu);
  EXPECT_THAT(processed, ::testing::ElementsAre("first", "second"));
}

// A receiver that times out an idle connection with a 408 and a close: the next request still
// gets its own answer on a fresh connection (the 408 is never taken for it), and arrives once.
TEST(HttpSenderWireTest, IdleTimeout408IsNotTheNextRequestsAnswer) {
  absl::Mutex mu;
  std::vector<std::string> processed;
  absl::Notification timed_out;
  RawServer server([&](int index, int fd) {
    std::string buffer;
    while (std::optional<std::string> body = ReadRequest(fd, buffer)) {
      {
        absl::MutexLock lock(&mu);
        processed.push_back(*body);
      }
      WriteAll(fd, kOk);
      if (index == 0) {
        WriteAll(fd, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
        shutdown(fd, SHUT_WR);
        timed_out.Notify();
        char sink[4096];
        while (recv(fd, sink, sizeof(sink), 0) > 0) {
        }
        break;
      }
    }
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  EXPECT_EQ(SendAndWait(*sender, Post(server.Url(), "first")).result.status, 200);
  ASSERT_TRUE(timed_out.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const HttpResult r = SendAndWait(*sender, Post(server.Url(), "second"));
  EXPECT_EQ(r.result.error, TransportError::kNone) << r.error_detail;
  EXPECT_EQ(r.result.status, 200);
  EXPECT_EQ(server.accepted(), 2);
  sender.reset();
  absl::MutexLock lock(&mu);
  EXPECT_THAT(processed, ::testing::ElementsAre("first", "second"));
}

// The receiver reads the whole request, then closes without answering: it may have processed it,
// so the sender reports it (kConnect) and does not send it again. The barrier: a third request
// afterwards is the first thing the next connection carries.
TEST(HttpSenderWireTest, CloseAfterReadingTheRequestIsReportedNotRetried) {
  absl::Mutex mu;
  std::vector<std::string> by_connection[3];
  RawServer server([&](int index, int fd) {
    std::string buffer;
    while (std::optional<std::string> body = ReadRequest(fd, buffer)) {
      {
        absl::MutexLock lock(&mu);
        if (index < 3) by_connection[index].push_back(*body);
      }
      if (index == 0 && *body == "second") break;  // read whole, never answered
      WriteAll(fd, kOk);
    }
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  EXPECT_EQ(SendAndWait(*sender, Post(server.Url(), "first")).result.status, 200);
  const HttpResult r = SendAndWait(*sender, Post(server.Url(), "second"));
  EXPECT_EQ(r.result.error, TransportError::kConnect);
  EXPECT_THAT(r.error_detail, HasSubstr("without answering"));
  EXPECT_EQ(SendAndWait(*sender, Post(server.Url(), "third")).result.status, 200);
  sender.reset();
  absl::MutexLock lock(&mu);
  EXPECT_THAT(by_connection[0], ::testing::ElementsAre("first", "second"));
  EXPECT_THAT(by_connection[1], ::testing::ElementsAre("third"));
  EXPECT_TRUE(by_connection[2].empty());
}

// No pipelining: with two slots, two requests in flight travel on two connections, and the first
// connection carries nothing more while its answer is outstanding.
TEST(HttpSenderWireTest, ConcurrentRequestsUseSeparateConnections) {
  absl::Notification both_arrived;
  absl::Notification answer;
  std::atomic<int> arrived{0};
  std::atomic<int> extra_bytes_on_first{-1};
  RawServer server([&](int index, int fd) {
    std::string buffer;
    if (!ReadRequest(fd, buffer)) return;
    if (arrived.fetch_add(1) == 1) both_arrived.Notify();
    if (!both_arrived.WaitForNotificationWithTimeout(absl::Seconds(10))) return;
    if (index == 0) extra_bytes_on_first = static_cast<int>(buffer.size()) + (Readable(fd) ? 1 : 0);
    answer.WaitForNotificationWithTimeout(absl::Seconds(10));
    WriteAll(fd, kOk);
    while (ReadRequest(fd, buffer)) WriteAll(fd, kOk);
    close(fd);
  });
  auto sender = MakeSender({.allow_private_networks = true, .threads = 1,
                            .max_host_connections = 2});
  ASSERT_NE(sender, nullptr);
  absl::Mutex mu;
  int done = 0;
  for (int i = 0; i < 2; ++i) {
    sender->Send(Post(server.Url()), [&](HttpResult r) {
      EXPECT_EQ(r.result.status, 200) << r.error_detail;
      absl::MutexLock lock(&mu);
      ++done;
    });
  }
  ASSERT_TRUE(both_arrived.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(server.accepted(), 2);
  answer.Notify();
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(+[](int* d) { return *d == 2; }, &done),
                                    absl::Seconds(10)));
  }
  EXPECT_EQ(extra_bytes_on_first.load(), 0);
}

// Chunked (with extensions and trailers) and Content-Length answers far larger than the read
// buffer, and a 204, are read whole and discarded, keeping the one connection for all of them.
TEST(HttpSenderWireTest, ResponseFramingsKeepTheConnection) {
  RawServer server([&](int, int fd) {
    std::string buffer;
    int n = 0;
    while (ReadRequest(fd, buffer)) {
      switch (n++) {
        case 0: {
          std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
          const std::string chunk(256 * 1024, 'c');
          for (int i = 0; i < 4; ++i) absl::StrAppend(&chunked, "40000;x=y\r\n", chunk, "\r\n");
          chunked += "0\r\nX-Trailer: t\r\n\r\n";
          WriteAll(fd, chunked);
          break;
        }
        case 1:
          WriteAll(fd, absl::StrCat("HTTP/1.1 202 Accepted\r\nContent-Length: ", 3 << 20,
                                    "\r\n\r\n", std::string(3 << 20, 'l')));
          break;
        default:
          WriteAll(fd, "HTTP/1.1 204 No Content\r\n\r\n");
      }
    }
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  EXPECT_EQ(SendAndWait(*sender, Post(server.Url())).result.status, 200);
  EXPECT_EQ(SendAndWait(*sender, Post(server.Url())).result.status, 202);
  const HttpResult r = SendAndWait(*sender, Post(server.Url()));
  EXPECT_EQ(r.result.status, 204);
  EXPECT_EQ(r.http_version, 11);
  EXPECT_EQ(server.accepted(), 1);
}

// Interim 1xx answers are skipped: the final status and its Retry-After count.
TEST(HttpSenderWireTest, InterimResponsesAreSkipped) {
  RawServer server([&](int, int fd) {
    std::string buffer;
    while (ReadRequest(fd, buffer)) {
      WriteAll(fd,
               "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nRetry-After: 1\r\n\r\n"
               "HTTP/1.1 503 Busy\r\nRetry-After:\t7 \r\nContent-Length: 0\r\n\r\n");
    }
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  const HttpResult r = SendAndWait(*sender, Post(server.Url()));
  EXPECT_EQ(r.result.error, TransportError::kNone) << r.error_detail;
  EXPECT_EQ(r.result.status, 503);
  EXPECT_EQ(r.result.retry_after, "7");
}

// An HTTP/1.0 answer without a length ends at the close; the next request opens a new connection.
TEST(HttpSenderWireTest, Http10AnswerUntilClose) {
  RawServer server([&](int, int fd) {
    std::string buffer;
    if (ReadRequest(fd, buffer)) WriteAll(fd, "HTTP/1.0 200 OK\r\n\r\nall of it until the close");
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  for (int i = 0; i < 2; ++i) {
    const HttpResult r = SendAndWait(*sender, Post(server.Url()));
    EXPECT_EQ(r.result.status, 200) << r.error_detail;
    EXPECT_EQ(r.http_version, 10);
  }
  EXPECT_EQ(server.accepted(), 2);
}

// A receiver that answers (and half-closes) before reading a large body: its answer is the
// result, and the connection is not reused.
TEST(HttpSenderWireTest, AnswerBeforeTheBodyIsRead) {
  RawServer server([&](int index, int fd) {
    std::string buffer;
    while (buffer.find("\r\n\r\n") == std::string::npos) {
      char chunk[4096];
      const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) break;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    WriteAll(fd, "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    shutdown(fd, SHUT_WR);
    char sink[65536];
    while (recv(fd, sink, sizeof(sink), 0) > 0) {
    }
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  const HttpResult r = SendAndWait(*sender, Post(server.Url(), std::string(32 << 20, 'x')));
  EXPECT_EQ(r.result.error, TransportError::kNone) << r.error_detail;
  EXPECT_EQ(r.result.status, 413);
}

// Bytes that are not HTTP are kOther, "malformed response".
TEST(HttpSenderWireTest, MalformedAnswer) {
  RawServer server([&](int, int fd) {
    std::string buffer;
    if (ReadRequest(fd, buffer)) WriteAll(fd, "SSH-2.0-OpenSSH_9.2\r\n\r\n");
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  const HttpResult r = SendAndWait(*sender, Post(server.Url()));
  EXPECT_EQ(r.result.error, TransportError::kOther);
  EXPECT_THAT(r.error_detail, HasSubstr("malformed response"));
}

// The request as it goes over the wire: request line, Host, the defaults, one Content-Length.
TEST(HttpSenderWireTest, RequestBytes) {
  absl::Mutex mu;
  std::string head;
  std::string body;
  RawServer server([&](int, int fd) {
    std::string buffer;
    std::string h;
    std::optional<std::string> b = ReadRequest(fd, buffer, &h);
    if (b) {
      absl::MutexLock lock(&mu);
      head = h;
      body = *b;
    }
    WriteAll(fd, kOk);
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  HttpRequest request = Post(server.Url("/p?q=1#frag"), R"({"a":1})");
  request.headers = {{"X-Signature", "s"}};
  EXPECT_EQ(SendAndWait(*sender, request).result.status, 200);
  absl::MutexLock lock(&mu);
  EXPECT_EQ(head, absl::StrCat("POST /p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:", server.port(),
                               "\r\nUser-Agent: hookrelay/1.0\r\nAccept: */*\r\n"
                               "Content-Type: application/json\r\nX-Signature: s\r\n"
                               "Content-Length: 7\r\n\r\n"));
  EXPECT_EQ(body, R"({"a":1})");
}

// A TLS receiver that never finishes the handshake: kTimeout, the detail naming the phase.
TEST(HttpSenderWireTest, TimeoutInTheTlsHandshakeNamesThePhase) {
  absl::Notification release;
  RawServer server([&](int, int fd) {
    release.WaitForNotificationWithTimeout(absl::Seconds(10));
    close(fd);
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  HttpRequest request = Post(absl::StrCat("https://127.0.0.1:", server.port(), "/hooks"));
  request.timeout = absl::Milliseconds(200);
  const HttpResult r = SendAndWait(*sender, request);
  release.Notify();
  EXPECT_EQ(r.result.error, TransportError::kTimeout);
  EXPECT_THAT(r.error_detail, HasSubstr("timed out after 200 ms in the TLS handshake"));
}

std::string WriteTempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream(path) << contents;
  return path;
}

// A receiver that selects h2 is remembered: every later request to it goes through libcurl over
// HTTP/2, while an HTTPS receiver without h2 on the same sender stays on HTTP/1.1 and keeps one
// kept-alive connection.
TEST(HttpSenderWireTest, Http2HostIsRoutedToLibcurlAndOthersAreNot) {
  absl::StatusOr<receiver::SelfSignedCert> cert = receiver::GenerateSelfSignedCert();
  ASSERT_TRUE(cert.ok()) << cert.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({cert->key_pem, cert->cert_pem});
  int port = 0;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(ssl), &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  receiver::WebhookReceiver::Options options;
  options.tls = *cert;
  absl::StatusOr<std::unique_ptr<receiver::WebhookReceiver>> h1 =
      receiver::WebhookReceiver::Start(options, nullptr);
  ASSERT_TRUE(h1.ok()) << h1.status();
  auto sender = MakeSender({.allow_private_networks = true,
                            .ca_file = WriteTempFile("wire_h2_ca.pem", cert->cert_pem),
                            .threads = 1});
  ASSERT_NE(sender, nullptr);
  for (int i = 0; i < 3; ++i) {
    HttpRequest request =
        Post(absl::StrCat("https://localhost:", port, "/grpc.health.v1.Health/Check"),
             std::string(5, '\0'));
    request.headers = {{"Content-Type", "application/grpc"}, {"TE", "trailers"}};
    request.timeout = absl::Seconds(20);
    const HttpResult r = SendAndWait(*sender, std::move(request));
    EXPECT_EQ(r.result.error, TransportError::kNone) << r.error_detail;
    EXPECT_EQ(r.result.status, 200);
    EXPECT_EQ(r.http_version, 20);

    const HttpResult plain = SendAndWait(*sender, Post((*h1)->Url()));
    EXPECT_EQ(plain.result.status, 200) << plain.error_detail;
    EXPECT_EQ(plain.http_version, 11);
  }
  EXPECT_EQ((*h1)->connection_count(), 1);
  sender.reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

}  // namespace
}  // namespace hookrelay::deliverer
