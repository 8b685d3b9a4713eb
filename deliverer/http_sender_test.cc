#include "deliverer/http_sender.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "deliverer/outcome_policy.h"
#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::deliverer {
namespace {

using ::hookrelay::receiver::ReceivedRequest;
using ::hookrelay::receiver::Response;
using ::hookrelay::receiver::WebhookReceiver;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::unique_ptr<HttpSender> MakeSender(HttpSender::Options options = {.allow_private_networks =
                                                                          true}) {
  absl::StatusOr<std::unique_ptr<HttpSender>> s = HttpSender::Create(std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::unique_ptr<WebhookReceiver> StartReceiver(receiver::Handler handler = nullptr,
                                               WebhookReceiver::Options options = {}) {
  absl::StatusOr<std::unique_ptr<WebhookReceiver>> r =
      WebhookReceiver::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

HttpRequest Post(std::string url, std::string body = R"({"type":"track"})") {
  HttpRequest request;
  request.url = std::move(url);
  request.body = std::make_shared<const std::string>(std::move(body));
  return request;
}

// Sends one request and waits for its callback. The result lives in shared state, so a callback
// that comes after a failed wait touches nothing freed.
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

// Sends every request at once and waits (up to `wait`) for all their results, in request order.
// The results live in shared state, so callbacks after a failed wait touch nothing freed.
std::vector<HttpResult> SendAllAndWait(HttpSender& sender, std::vector<HttpRequest> requests,
                                       absl::Duration wait = absl::Seconds(20)) {
  struct Shared {
    absl::Mutex mu;
    std::vector<HttpResult> results ABSL_GUARDED_BY(mu);
    size_t done ABSL_GUARDED_BY(mu) = 0;
  };
  auto shared = std::make_shared<Shared>();
  const size_t n = requests.size();
  {
    absl::MutexLock lock(&shared->mu);
    shared->results.resize(n);
  }
  for (size_t i = 0; i < n; ++i) {
    sender.Send(std::move(requests[i]), [shared, i](HttpResult r) {
      absl::MutexLock lock(&shared->mu);
      shared->results[i] = std::move(r);
      ++shared->done;
    });
  }
  absl::MutexLock lock(&shared->mu);
  auto all = [&shared, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return shared->done == n; };
  EXPECT_TRUE(shared->mu.AwaitWithTimeout(absl::Condition(&all), wait));
  return shared->done == n ? shared->results : std::vector<HttpResult>(n);
}

bool HasHeaderNamed(const ReceivedRequest& r, std::string_view name) {
  return std::any_of(r.headers.begin(), r.headers.end(), [&](const auto& h) {
    return absl::EqualsIgnoreCase(h.first, absl::string_view(name.data(), name.size()));
  });
}

// A 200 arrives with the exact body, the sender's own User-Agent and Content-Type, the caller's
// headers (an empty value included) and no Expect header.
TEST(HttpSenderTest, PostsExactBodyAndHeaders) {
  auto receiver = StartReceiver();
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  HttpRequest request = Post(receiver->Url(), R"({"type":"track","event":"Signed Up"})");
  request.headers = {{"X-Static", "a b"}, {"X-Signature", "0123abcd"}, {"X-Empty", ""}};
  const HttpResult r = SendAndWait(*sender, request);
  EXPECT_EQ(r.result.error, TransportError::kNone);
  EXPECT_EQ(r.result.status, 200);
  EXPECT_EQ(r.result.url, receiver->Url());
  EXPECT_EQ(r.result.retry_after, "");
  EXPECT_EQ(r.error_detail, "");
  EXPECT_GT(r.duration, absl::ZeroDuration());

  const std::vector<ReceivedRequest> got = receiver->Requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].method, "POST");
  EXPECT_EQ(got[0].target, "/hooks");
  EXPECT_EQ(got[0].body, R"({"type":"track","event":"Signed Up"})");
  EXPECT_EQ(got[0].Header("User-Agent"), "hookrelay/1.0");
  EXPECT_EQ(got[0].Header("Content-Type"), "application/json");
  EXPECT_EQ(got[0].Header("Content-Length"), std::to_string(got[0].body.size()));
  EXPECT_EQ(got[0].Header("X-Static"), "a b");
  EXPECT_EQ(got[0].Header("X-Signature"), "0123abcd");
  EXPECT_TRUE(HasHeaderNamed(got[0], "X-Empty"));
  EXPECT_EQ(got[0].Header("X-Empty"), "");
  EXPECT_FALSE(HasHeaderNamed(got[0], "Expect"));
  EXPECT_EQ(sender->in_flight(), 0);
}

// A 2 MB body (where curl would otherwise ask `Expect: 100-continue`) arrives whole, without it.
TEST(HttpSenderTest, LargeBodyWithoutExpect) {
  auto receiver = StartReceiver();
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  std::string body(2 << 20, 'x');
  body.front() = '"';
  body.back() = '"';
  const HttpResult r = SendAndWait(*sender, Post(receiver->Url(), body));
  EXPECT_EQ(r.result.status, 200);
  const std::vector<ReceivedRequest> got = receiver->Requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, body);
  EXPECT_FALSE(HasHeaderNamed(got[0], "Expect"));
}

// A 503 with Retry-After (header name in any case) is a response: status and value are kept.
TEST(HttpSenderTest, CapturesRetryAfter) {
  auto receiver = StartReceiver([](const ReceivedRequest&) {
    return Response{503, {{"retry-AFTER", " 120 "}}, "busy"};
  });
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  const HttpResult r = SendAndWait(*sender, Post(receiver->Url()));
  EXPECT_EQ(r.result.error, TransportError::kNone);
  EXPECT_EQ(r.result.status, 503);
  EXPECT_EQ(r.result.retry_after, "120");
  EXPECT_EQ(r.error_detail, "");
}

// A 404 is returned as a status; a reused handle does not carry the previous Retry-After.
TEST(HttpSenderTest, ReturnsNotFoundStatus) {
  auto receiver = StartReceiver([](const ReceivedRequest& r) {
    if (r.target == "/busy") return Response{429, {{"Retry-After", "5"}}};
    return Response{404, {}, "no such hook"};
  });
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  EXPECT_EQ(SendAndWait(*sender, Post(receiver->Url("/busy"))).result.retry_after, "5");
  const HttpResult r = SendAndWait(*sender, Post(receiver->Url()));
  EXPECT_EQ(r.result.error, TransportError::kNone);
  EXPECT_EQ(r.result.status, 404);
  EXPECT_EQ(r.result.retry_after, "");
}

// A receiver slower than the request's timeout gives kTimeout soon after the timeout.
TEST(HttpSenderTest, TimesOut) {
  auto receiver = StartReceiver([](const ReceivedRequest&) {
    Response response;
    response.delay = absl::Seconds(2);
    return response;
  });
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  HttpRequest request = Post(receiver->Url());
  request.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  const HttpResult r = SendAndWait(*sender, request);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(r.result.error, TransportError::kTimeout);
  EXPECT_THAT(r.error_detail, HasSubstr("timed out"));
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Milliseconds(1500));
  EXPECT_GE(r.duration, absl::Milliseconds(290));
  EXPECT_TRUE(receiver->WaitForRequests(1, absl::Seconds(5)));  // sent; the answer came too late
}

// Nothing listening on the port: kConnect. The port stays bound (not listening) during the test,
// so no other process can take it meanwhile.
TEST(HttpSenderTest, ConnectionRefused) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  const HttpResult r = SendAndWait(*sender, Post(absl::StrCat("http://127.0.0.1:", port, "/x")));
  close(fd);
  EXPECT_EQ(r.result.error, TransportError::kConnect);
  EXPECT_THAT(r.error_detail, HasSubstr("onnect"));
}

// A self-signed receiver certificate fails verification before any request is sent.
TEST(HttpSenderTest, SelfSignedCertificateIsRefused) {
  absl::StatusOr<receiver::SelfSignedCert> cert = receiver::GenerateSelfSignedCert();
  ASSERT_TRUE(cert.ok()) << cert.status();
  WebhookReceiver::Options options;
  options.tls = *cert;
  auto receiver = StartReceiver(nullptr, options);
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  const HttpResult r = SendAndWait(*sender, Post(receiver->Url()));
  EXPECT_EQ(r.result.error, TransportError::kTlsVerification);
  EXPECT_THAT(r.error_detail, HasSubstr("certificate"));
  EXPECT_EQ(receiver->connection_count(), 1);  // it did connect ...
  EXPECT_EQ(receiver->request_count(), 0);     // ... and sent nothing
}

std::string WriteTempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream(path) << contents;
  return path;
}

// The same certificate, trusted through Options::ca_file: the POST goes through over TLS.
TEST(HttpSenderTest, TrustsCaFile) {
  absl::StatusOr<receiver::SelfSignedCert> cert = receiver::GenerateSelfSignedCert();
  ASSERT_TRUE(cert.ok()) << cert.status();
  WebhookReceiver::Options options;
  options.tls = *cert;
  auto receiver = StartReceiver(nullptr, options);
  ASSERT_NE(receiver, nullptr);
  auto sender = MakeSender({.allow_private_networks = true,
                            .ca_file = WriteTempFile("receiver_ca.pem", cert->cert_pem)});
  ASSERT_NE(sender, nullptr);
  for (int i = 0; i < 3; ++i) {
    const HttpResult r = SendAndWait(*sender, Post(receiver->Url(), "tls body"));
    EXPECT_EQ(r.result.error, TransportError::kNone) << r.error_detail;
    EXPECT_EQ(r.result.status, 200);
    EXPECT_EQ(r.http_version, 11);  // the receiver offers no h2 in ALPN
  }
  ASSERT_EQ(receiver->request_count(), 3);
  EXPECT_EQ(receiver->Requests()[0].body, "tls body");
  EXPECT_EQ(receiver->connection_count(), 1);  // TLS connections are kept alive too
}

// A ca_file that is missing or holds no certificate is refused at Create.
TEST(HttpSenderTest, RefusesBadOptions) {
  EXPECT_EQ(HttpSender::Create({.ca_file = "/nonexistent/ca.pem"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpSender::Create({.ca_file = WriteTempFile("not_pem.txt", "hello")}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpSender::Create({.threads = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpSender::Create({.max_host_connections = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpSender::Create({.max_cached_connections = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A 302 is the result: the redirect target is never requested.
TEST(HttpSenderTest, DoesNotFollowRedirects) {
  auto receiver = StartReceiver();
  ASSERT_NE(receiver, nullptr);
  const std::string location = receiver->Url("/target");
  receiver->SetHandler([location](const ReceivedRequest&) {
    return Response{302, {{"Location", location}}, ""};
  });
  auto sender = MakeSender();
  ASSERT_NE(sender, nullptr);
  const HttpResult r = SendAndWait(*sender, Post(receiver->Url()));
  EXPECT_EQ(r.result.error, TransportError::kNone);
  EXPECT_EQ(r.result.status, 302);
  // Following would have happened before the transfer completed.
  ASSERT_EQ(receiver->request_count(), 1);
  EXPECT_EQ(receiver->Requests()[0].target, "/hooks");
}

// Without allow_private_networks, a loopback receiver is refused before any connection is made,
// whether named by address or by a name that resolves to it.
TEST(HttpSenderTest, RefusesPrivateAddress) {
  auto receiver = StartReceiver();
  ASSERT_NE(receiver, nullptr);
  auto sender = MakeSender({.allow_private_networks = false});
  ASSERT_NE(sender, nullptr);
  HttpResult r = SendAndWait(*sender, Post(receiver->Url()));
  EXPECT_EQ(r.result.error, TransportError::kForbiddenAddress);
  EXPECT_EQ(r.error_detail,
            "refused 127.0.0.1: loopback address; --allow_private_networks permits it");

  r = SendAndWait(*sender, Post(absl::StrCat("http://localhost:", receiver->port(), "/hooks")));
  EXPECT_EQ(r.result.error, TransportError::kForbiddenAddress);
  EXPECT_THAT(r.error_detail, StartsWith("refused "));
  EXPECT_THAT(r.error_detail, HasSubstr("loopback address"));

  EXPECT_EQ(receiver->connection_count(), 0);
  EXPECT_EQ(receiver->request_count(), 0);
}

// One connection slot, a receiver that holds each request 300 ms, 20 requests with a 1 s timeout:
// they wait for the slot in the sender, not in libcurl, so none times out (6 s in all). Each
// request's duration is the receiver's 300 ms; the wait is reported as `queued` and grows request
// by request. (With libcurl's own per-host limit every request after the third timed out.)
TEST(HttpSenderTest, WaitForAConnectionSlotIsNotTheReceiversTime) {
  constexpr int kRequests = 20;
  auto receiver = StartReceiver([](const ReceivedRequest&) {
    Response response;
    response.delay = absl::Milliseconds(300);
    return response;
  });
  auto sender =
      MakeSender({.allow_private_networks = true, .threads = 1, .max_host_connections = 1});
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  std::vector<HttpRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    HttpRequest request = Post(receiver->Url(), absl::StrCat("n", i));
    request.timeout = absl::Seconds(1);
    requests.push_back(std::move(request));
  }
  const std::vector<HttpResult> results =
      SendAllAndWait(*sender, std::move(requests), absl::Seconds(30));
  absl::Duration max_queued = absl::ZeroDuration();
  for (int i = 0; i < kRequests; ++i) {
    const HttpResult& r = results[i];
    EXPECT_EQ(r.result.error, TransportError::kNone) << i << ": " << r.error_detail;
    EXPECT_EQ(r.result.status, 200) << i;
    EXPECT_GE(r.duration, absl::Milliseconds(290)) << i;
    EXPECT_LT(r.duration, absl::Seconds(1)) << i;
    max_queued = std::max(max_queued, r.queued);
  }
  // The last one waited for 19 others of 300 ms each.
  EXPECT_GE(max_queued, absl::Milliseconds(19 * 290));
  EXPECT_EQ(receiver->request_count(), kRequests);
  EXPECT_EQ(receiver->connection_count(), 1);  // one slot, one kept-alive connection
  // In arrival order: the sender's queue is FIFO.
  const std::vector<ReceivedRequest> got = receiver->Requests();
  ASSERT_EQ(got.size(), static_cast<size_t>(kRequests));
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(got[i].body, absl::StrCat("n", i));
}

// A receiver that never answers: each request still times out after its own 300 ms in libcurl
// (not 300, 600, 900 ms counted from Send), while the ones behind it wait for the single slot.
TEST(HttpSenderTest, TimeoutStillFiresForEachQueuedRequest) {
  constexpr int kRequests = 3;
  auto receiver = StartReceiver([](const ReceivedRequest&) {
    Response response;
    response.delay = absl::Seconds(30);
    return response;
  });
  auto sender =
      MakeSender({.allow_private_networks = true, .threads = 1, .max_host_connections = 1});
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  std::vector<HttpRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    HttpRequest request = Post(receiver->Url());
    request.timeout = absl::Milliseconds(300);
    requests.push_back(std::move(request));
  }
  const absl::Time start = absl::Now();
  const std::vector<HttpResult> results = SendAllAndWait(*sender, std::move(requests));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(3 * 290));
  absl::Duration max_queued = absl::ZeroDuration();
  for (int i = 0; i < kRequests; ++i) {
    const HttpResult& r = results[i];
    EXPECT_EQ(r.result.error, TransportError::kTimeout) << i << ": " << r.error_detail;
    EXPECT_GE(r.duration, absl::Milliseconds(290)) << i;
    EXPECT_LT(r.duration, absl::Milliseconds(1500)) << i;
    max_queued = std::max(max_queued, r.queued);
  }
  EXPECT_GE(max_queued, absl::Milliseconds(2 * 290));
  EXPECT_EQ(receiver->request_count(), kRequests);  // each was sent, one after the other
}

// The slots are per receiver host: a slow host with its one slot taken and requests waiting does
// not hold up a request to another host.
TEST(HttpSenderTest, SlowHostDoesNotHoldUpAnother) {
  auto slow = StartReceiver([](const ReceivedRequest&) {
    Response response;
    response.delay = absl::Seconds(2);
    return response;
  });
  auto fast = StartReceiver();
  ASSERT_NE(slow, nullptr);
  ASSERT_NE(fast, nullptr);
  // Declared before the sender, which is destroyed (joining its threads) first.
  absl::Mutex mu;
  int slow_done = 0;
  auto sender =
      MakeSender({.allow_private_networks = true, .threads = 1, .max_host_connections = 1});
  ASSERT_NE(sender, nullptr);
  for (int i = 0; i < 3; ++i) {
    sender->Send(Post(slow->Url()), [&](HttpResult) {
      absl::MutexLock lock(&mu);
      ++slow_done;
    });
  }
  ASSERT_TRUE(slow->WaitForRequests(1, absl::Seconds(10)));
  const HttpResult r = SendAndWait(*sender, Post(fast->Url()));
  EXPECT_EQ(r.result.status, 200);
  EXPECT_LT(r.queued, absl::Milliseconds(500));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(slow_done, 0);             // the slow host's first request is still in flight ...
  EXPECT_EQ(slow->request_count(), 1);  // ... and the other two wait for its slot
}

// The same host spelled differently (scheme case, user info) shares one set of slots: with one
// slot, two requests never overlap at the receiver.
TEST(HttpSenderTest, HostSpellingsShareTheSlots) {
  auto receiver = StartReceiver([](const ReceivedRequest&) {
    Response response;
    response.delay = absl::Milliseconds(200);
    return response;
  });
  auto sender =
      MakeSender({.allow_private_networks = true, .threads = 1, .max_host_connections = 1});
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  const std::vector<HttpResult> results = SendAllAndWait(
      *sender, {Post(receiver->Url()),
                Post(absl::StrCat("HTTP://user@127.0.0.1:", receiver->port(), "/hooks"))});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].result.status, 200);
  EXPECT_EQ(results[1].result.status, 200);
  EXPECT_GE(std::max(results[0].queued, results[1].queued), absl::Milliseconds(190));
  EXPECT_EQ(receiver->connection_count(), 1);
}

// A plain-HTTP receiver is spoken to in HTTP/1.1, without an h2c upgrade attempt.
TEST(HttpSenderTest, PlainHttpStaysHttp11) {
  auto receiver = StartReceiver();
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  const HttpResult r = SendAndWait(*sender, Post(receiver->Url()));
  EXPECT_EQ(r.result.status, 200);
  EXPECT_EQ(r.http_version, 11);
  ASSERT_EQ(receiver->request_count(), 1);
  EXPECT_FALSE(HasHeaderNamed(receiver->Requests()[0], "Upgrade"));
  EXPECT_FALSE(HasHeaderNamed(receiver->Requests()[0], "HTTP2-Settings"));
}

// An HTTPS receiver that offers h2 through ALPN (a gRPC server: real HTTP/2 over TLS) is spoken
// to in HTTP/2, several requests at once; an HTTPS receiver without ALPN h2 gets HTTP/1.1 (see
// TrustsCaFile).
TEST(HttpSenderTest, UsesHttp2WhenTheReceiverOffersIt) {
  absl::StatusOr<receiver::SelfSignedCert> cert = receiver::GenerateSelfSignedCert();
  ASSERT_TRUE(cert.ok()) << cert.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({cert->key_pem, cert->cert_pem});
  int port = 0;
  // gRPC's own health service answers /grpc.health.v1.Health/Check once it has read the
  // request (an unknown method would be answered, and the stream reset, before the body arrived).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(ssl), &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  auto sender = MakeSender({.allow_private_networks = true,
                            .ca_file = WriteTempFile("h2_ca.pem", cert->cert_pem),
                            .threads = 1});
  ASSERT_NE(sender, nullptr);
  std::vector<HttpRequest> requests;
  for (int i = 0; i < 5; ++i) {
    // What gRPC accepts (it resets a stream with another content type, or with a body that is
    // not gRPC framing): one empty HealthCheckRequest. The answer: 200, a HealthCheckResponse,
    // then grpc-status 0 in trailers.
    HttpRequest request = Post(
        absl::StrCat("https://127.0.0.1:", port, "/grpc.health.v1.Health/Check"),
        std::string(5, '\0'));
    request.headers = {{"Content-Type", "application/grpc"}, {"TE", "trailers"}};
    request.timeout = absl::Seconds(20);  // five TLS handshakes at once, under sanitizers too
    requests.push_back(std::move(request));
  }
  const std::vector<HttpResult> results = SendAllAndWait(*sender, std::move(requests));
  for (const HttpResult& r : results) {
    EXPECT_EQ(r.result.error, TransportError::kNone) << r.error_detail;
    EXPECT_EQ(r.result.status, 200);
    EXPECT_EQ(r.http_version, 20);
  }
  sender.reset();  // closes its connections: nothing for the server to wait for
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

// Twenty sequential POSTs to one URL travel over a single kept-alive connection.
TEST(HttpSenderTest, ReusesConnections) {
  auto receiver = StartReceiver();
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  for (int i = 0; i < 20; ++i) {
    const HttpResult r = SendAndWait(*sender, Post(receiver->Url(), absl::StrCat("n", i)));
    ASSERT_EQ(r.result.status, 200);
  }
  EXPECT_EQ(receiver->request_count(), 20);
  EXPECT_EQ(receiver->connection_count(), 1);
}



// Connections opened for a burst stay open while the load dips, and the next burst reuses them
// (libcurl's default cache size, 4 x the transfers in flight, would have closed all but 4).
TEST(HttpSenderTest, KeepsIdleConnectionsAfterABurst) {
  static constexpr int kBurst = 16;
  auto receiver = StartReceiver([](const ReceivedRequest& r) {
    Response response;
    if (r.target == "/slow") response.delay = absl::Milliseconds(100);  // all of a burst overlap
    return response;
  });
  // Declared before the sender, which is destroyed (joining its threads) first.
  absl::Mutex mu;
  int ok = 0;
  int done = 0;
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  auto burst = [&] {
    {
      absl::MutexLock lock(&mu);
      ok = 0;
      done = 0;
    }
    for (int i = 0; i < kBurst; ++i) {
      sender->Send(Post(receiver->Url("/slow")), [&](HttpResult r) {
        absl::MutexLock lock(&mu);
        ++done;
        if (r.result.status == 200) ++ok;
      });
    }
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(
        absl::Condition(+[](int* d) { return *d == kBurst; }, &done), absl::Seconds(10)));
    EXPECT_EQ(ok, kBurst);
  };
  burst();
  EXPECT_EQ(receiver->connection_count(), kBurst);
  for (int i = 0; i < kBurst; ++i) {
    ASSERT_EQ(SendAndWait(*sender, Post(receiver->Url("/fast"))).result.status, 200);
  }
  burst();
  EXPECT_EQ(receiver->connection_count(), kBurst);
  EXPECT_EQ(receiver->request_count(), 3 * kBurst);
}

// Under steady load spread over two threads, connections are kept rather than churned: with at
// most 16 requests in flight, each thread never needs more than 16 connections.
TEST(HttpSenderTest, KeepsConnectionsUnderLoad) {
  constexpr int kRequests = 1000;
  constexpr int kConcurrency = 16;
  // Each completion sends the next request until kRequests have been sent.
  struct Loop {
    HttpSender* sender = nullptr;
    std::string url;
    absl::Mutex mu;
    int sent ABSL_GUARDED_BY(mu) = 0;
    int ok ABSL_GUARDED_BY(mu) = 0;
    int done ABSL_GUARDED_BY(mu) = 0;
    void Next() {
      {
        absl::MutexLock lock(&mu);
        if (sent == kRequests) return;
        ++sent;
      }
      sender->Send(Post(url), [this](HttpResult r) {
        {
          absl::MutexLock lock(&mu);
          ++done;
          if (r.result.status == 200) ++ok;
        }
        Next();
      });
    }
  };
  Loop loop;  // before the sender: outlives its threads
  auto receiver = StartReceiver();
  auto sender = MakeSender({.allow_private_networks = true, .threads = 2});
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  loop.sender = sender.get();
  loop.url = receiver->Url();
  for (int i = 0; i < kConcurrency; ++i) loop.Next();
  {
    absl::MutexLock lock(&loop.mu);
    ASSERT_TRUE(loop.mu.AwaitWithTimeout(
        absl::Condition(+[](Loop* l) ABSL_NO_THREAD_SAFETY_ANALYSIS { return l->done == kRequests; },
                        &loop),
        absl::Seconds(20)));
    EXPECT_EQ(loop.ok, kRequests);
  }
  EXPECT_EQ(receiver->request_count(), kRequests);
  EXPECT_LE(receiver->connection_count(), 2 * kConcurrency);
}

// 200 concurrent requests over 4 receivers and 2 threads: every callback runs exactly once, every
// request arrives once, and in_flight() returns to 0.
TEST(HttpSenderTest, ManyConcurrentRequestsCompleteOnce) {
  constexpr int kRequests = 200;
  std::vector<std::unique_ptr<WebhookReceiver>> receivers;
  for (int i = 0; i < 4; ++i) {
    receivers.push_back(StartReceiver());
    ASSERT_NE(receivers.back(), nullptr);
  }
  absl::Mutex mu;  // the callbacks' state, declared before the sender: outlives its threads
  std::vector<int> calls(kRequests, 0);
  std::vector<int> statuses(kRequests, 0);
  int done = 0;
  auto sender = MakeSender({.allow_private_networks = true, .threads = 2});
  ASSERT_NE(sender, nullptr);
  auto body = std::make_shared<const std::string>(R"({"type":"identify"})");
  for (int i = 0; i < kRequests; ++i) {
    HttpRequest request;
    request.url = receivers[i % 4]->Url(absl::StrCat("/hooks/", i));
    request.body = body;
    sender->Send(std::move(request), [&, i](HttpResult r) {
      absl::MutexLock lock(&mu);
      ++calls[i];
      statuses[i] = r.result.status;
      ++done;
    });
  }
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* d) { return *d >= kRequests; }, &done),
                                    absl::Seconds(20)));
  }
  EXPECT_EQ(sender->in_flight(), 0);
  sender.reset();  // no late or duplicate callbacks after this
  absl::MutexLock lock(&mu);
  EXPECT_EQ(done, kRequests);
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(calls[i], 1) << i;
    EXPECT_EQ(statuses[i], 200) << i;
  }
  for (const auto& receiver : receivers) {
    EXPECT_EQ(receiver->request_count(), kRequests / 4);
    const std::vector<ReceivedRequest> got = receiver->Requests();
    for (const ReceivedRequest& r : got) EXPECT_EQ(r.body, *body);
  }
}

// Destroying the sender with requests in flight runs every callback once, with "sender shutting
// down", promptly; a request Sent from one of those callbacks completes the same way.
TEST(HttpSenderTest, DestructionCompletesPendingRequests) {
  auto receiver = StartReceiver([](const ReceivedRequest&) {
    Response response;
    response.delay = absl::Seconds(10);
    return response;
  });
  ASSERT_NE(receiver, nullptr);
  constexpr int kRequests = 10;
  absl::Mutex mu;  // the callbacks' state, declared before the sender: outlives its threads
  std::vector<HttpResult> results;
  int resent_calls = 0;
  std::string resent_detail;
  auto sender = MakeSender({.allow_private_networks = true, .threads = 2});
  ASSERT_NE(sender, nullptr);
  HttpSender* raw = sender.get();
  for (int i = 0; i < kRequests; ++i) {
    sender->Send(Post(receiver->Url()), [&, i, raw](HttpResult r) {
      if (i == 0) {
        raw->Send(Post(receiver->Url()), [&](HttpResult again) {
          absl::MutexLock lock(&mu);
          ++resent_calls;
          resent_detail = again.error_detail;
        });
      }
      absl::MutexLock lock(&mu);
      results.push_back(std::move(r));
    });
  }
  ASSERT_TRUE(receiver->WaitForRequests(kRequests, absl::Seconds(10)));
  EXPECT_EQ(sender->in_flight(), kRequests);

  const absl::Time start = absl::Now();
  sender.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));

  absl::MutexLock lock(&mu);
  ASSERT_EQ(results.size(), static_cast<size_t>(kRequests));
  for (const HttpResult& r : results) {
    EXPECT_EQ(r.result.error, TransportError::kOther);
    EXPECT_EQ(r.error_detail, "sender shutting down");
  }
  EXPECT_EQ(resent_calls, 1);
  EXPECT_EQ(resent_detail, "sender shutting down");
}

// Requests that would be unsafe to send fail with kOther and never reach the network: a header
// with CR/LF (header injection) and a scheme other than http/https.
TEST(HttpSenderTest, RefusesUnsafeRequestsWithoutSending) {
  auto receiver = StartReceiver();
  auto sender = MakeSender();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  HttpRequest injected = Post(receiver->Url());
  injected.headers = {{"X-Evil", "a\r\nX-Injected: 1"}};
  HttpResult r = SendAndWait(*sender, injected);
  EXPECT_EQ(r.result.error, TransportError::kOther);
  EXPECT_THAT(r.error_detail, HasSubstr("X-Evil"));

  r = SendAndWait(*sender,
                  Post(absl::StrCat("ftp://127.0.0.1:", receiver->port(), "/hooks")));
  EXPECT_EQ(r.result.error, TransportError::kOther);
  EXPECT_EQ(receiver->connection_count(), 0);
}

}  // namespace
}  // namespace hookrelay::deliverer
