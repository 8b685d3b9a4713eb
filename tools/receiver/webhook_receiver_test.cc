#include "tools/receiver/webhook_receiver.h"

#include <curl/curl.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace hookrelay::receiver {
namespace {

// A blocking libcurl client: one easy handle, so its connection is kept alive between calls.
class Client {
 public:
  Client() : easy_(curl_easy_init()) {}
  ~Client() { curl_easy_cleanup(easy_); }

  struct Answer {
    CURLcode code = CURLE_OK;
    long status = 0;
    std::string body;
    std::string retry_after;
  };

  Answer Post(const std::string& url, const std::string& body,
              const std::vector<std::string>& headers = {}, const std::string& ca_pem = "") {
    Answer answer;
    curl_slist* list = nullptr;
    for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
    curl_easy_setopt(easy_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(easy_, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(easy_, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, &Append);
    curl_easy_setopt(easy_, CURLOPT_WRITEDATA, &answer.body);
    curl_easy_setopt(easy_, CURLOPT_HEADERFUNCTION, &OnHeader);
    curl_easy_setopt(easy_, CURLOPT_HEADERDATA, &answer.retry_after);
    curl_blob blob{const_cast<char*>(ca_pem.data()), ca_pem.size(), CURL_BLOB_COPY};
    if (!ca_pem.empty()) curl_easy_setopt(easy_, CURLOPT_CAINFO_BLOB, &blob);
    answer.code = curl_easy_perform(easy_);
    curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &answer.status);
    curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(list);
    return answer;
  }

 private:
  static size_t Append(char* data, size_t size, size_t n, void* out) {
    static_cast<std::string*>(out)->append(data, size * n);
    return size * n;
  }
  static size_t OnHeader(char* data, size_t size, size_t n, void* out) {
    const std::string line(data, size * n);
    if (absl::StartsWithIgnoreCase(line, "retry-after:")) {
      *static_cast<std::string*>(out) = line.substr(12, line.find('\r') - 12);
    }
    return size * n;
  }

  CURL* easy_;
};

std::unique_ptr<WebhookReceiver> StartOrDie(WebhookReceiver::Options options = {},
                                            Handler handler = nullptr) {
  absl::StatusOr<std::unique_ptr<WebhookReceiver>> r =
      WebhookReceiver::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

// A POST is recorded exactly as sent (method, target with query, headers, body) and the default
// handler answers 200 "ok".
TEST(WebhookReceiverTest, RecordsRequestAndAnswersOk) {
  auto receiver = StartOrDie();
  ASSERT_NE(receiver, nullptr);
  EXPECT_GT(receiver->port(), 0);
  EXPECT_EQ(receiver->Url("/x"), "http://127.0.0.1:" + std::to_string(receiver->port()) + "/x");

  Client client;
  const Client::Answer a =
      client.Post(receiver->Url("/hooks?a=1"), R"({"type":"track"})", {"X-Test: one"});
  ASSERT_EQ(a.code, CURLE_OK);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "ok");

  const std::vector<ReceivedRequest> requests = receiver->Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].target, "/hooks?a=1");
  EXPECT_EQ(requests[0].body, R"({"type":"track"})");
  EXPECT_EQ(requests[0].Header("x-TEST"), "one");
  EXPECT_EQ(requests[0].Header("absent"), "");
  EXPECT_LE(requests[0].at, absl::Now());
  EXPECT_EQ(receiver->request_count(), 1);
}

// The handler's status, headers and body are what the client gets; SetHandler swaps it, and
// nullptr restores the default.
TEST(WebhookReceiverTest, HandlerDecidesAndCanBeSwapped) {
  auto receiver = StartOrDie({}, [](const ReceivedRequest& r) {
    return Response{503, {{"Retry-After", "7"}}, "busy " + r.body, absl::ZeroDuration()};
  });
  ASSERT_NE(receiver, nullptr);
  Client client;
  Client::Answer a = client.Post(receiver->Url(), "b1");
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.retry_after, " 7");
  EXPECT_EQ(a.body, "busy b1");

  receiver->SetHandler([](const ReceivedRequest&) { return Response{404}; });
  EXPECT_EQ(client.Post(receiver->Url(), "b2").status, 404);
  receiver->SetHandler(nullptr);
  a = client.Post(receiver->Url(), "b3");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "ok");
  EXPECT_EQ(receiver->request_count(), 3);
}

// Keep-alive: sequential requests share one TCP connection, unless the handler answers
// `Connection: close`, which closes it after each answer.
TEST(WebhookReceiverTest, KeepAliveAndConnectionClose) {
  auto receiver = StartOrDie();
  ASSERT_NE(receiver, nullptr);
  Client client;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(client.Post(receiver->Url(), "x").status, 200);
  EXPECT_EQ(receiver->connection_count(), 1);

  receiver->SetHandler(
      [](const ReceivedRequest&) { return Response{200, {{"Connection", "close"}}, "bye"}; });
  for (int i = 0; i < 3; ++i) ASSERT_EQ(client.Post(receiver->Url(), "x").status, 200);
  // The kept connection carries the first of these and is closed; the next two need one each.
  EXPECT_EQ(receiver->connection_count(), 3);
  EXPECT_EQ(receiver->request_count(), 8);
}

// A delayed answer does not hold up another connection, even with a single I/O thread.
TEST(WebhookReceiverTest, DelayDoesNotBlockOtherConnections) {
  auto receiver = StartOrDie({}, [](const ReceivedRequest& r) {
    Response response;
    if (r.target == "/slow") response.delay = absl::Seconds(1);
    return response;
  });
  ASSERT_NE(receiver, nullptr);
  absl::Duration slow_took;
  std::thread slow([&] {
    Client client;
    const absl::Time start = absl::Now();
    EXPECT_EQ(client.Post(receiver->Url("/slow"), "s").status, 200);
    slow_took = absl::Now() - start;
  });
  ASSERT_TRUE(receiver->WaitForRequests(1, absl::Seconds(5)));
  Client client;
  const absl::Time start = absl::Now();
  EXPECT_EQ(client.Post(receiver->Url("/fast"), "f").status, 200);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  slow.join();
  EXPECT_GE(slow_took, absl::Milliseconds(950));
}

// TLS with a generated certificate: a client trusting the certificate gets its answer; one that
// does not refuses the handshake, which counts as a connection but not as a request.
TEST(WebhookReceiverTest, TlsWithGeneratedCertificate) {
  absl::StatusOr<SelfSignedCert> cert = GenerateSelfSignedCert();
  ASSERT_TRUE(cert.ok()) << cert.status();
  EXPECT_TRUE(absl::StartsWith(cert->cert_pem, "-----BEGIN CERTIFICATE-----"));
  EXPECT_TRUE(absl::StartsWith(cert->key_pem, "-----BEGIN PRIVATE KEY-----"));
  WebhookReceiver::Options options;
  options.tls = *cert;
  auto receiver = StartOrDie(options);
  ASSERT_NE(receiver, nullptr);
  EXPECT_TRUE(absl::StartsWith(receiver->Url(), "https://127.0.0.1:"));

  {
    Client untrusting;
    const Client::Answer a = untrusting.Post(receiver->Url(), "x");
    EXPECT_EQ(a.code, CURLE_PEER_FAILED_VERIFICATION);
  }
  EXPECT_EQ(receiver->request_count(), 0);
  EXPECT_EQ(receiver->connection_count(), 1);

  Client trusting;
  const Client::Answer a = trusting.Post(receiver->Url(), "secret body", {}, cert->cert_pem);
  ASSERT_EQ(a.code, CURLE_OK);
  EXPECT_EQ(a.status, 200);
  ASSERT_EQ(receiver->Requests().size(), 1u);
  EXPECT_EQ(receiver->Requests()[0].body, "secret body");
}

// record = false keeps counting but stores nothing.
TEST(WebhookReceiverTest, RecordFalseKeepsOnlyCounts) {
  WebhookReceiver::Options options;
  options.record = false;
  options.threads = 2;
  auto receiver = StartOrDie(options);
  ASSERT_NE(receiver, nullptr);
  Client client;
  for (int i = 0; i < 10; ++i) ASSERT_EQ(client.Post(receiver->Url(), "x").status, 200);
  EXPECT_EQ(receiver->request_count(), 10);
  EXPECT_TRUE(receiver->Requests().empty());
  EXPECT_TRUE(receiver->WaitForRequests(10, absl::ZeroDuration()));
  EXPECT_FALSE(receiver->WaitForRequests(11, absl::Milliseconds(50)));
}

// Bad options are refused with a Status, not a crash.
TEST(WebhookReceiverTest, RefusesBadOptions) {
  WebhookReceiver::Options options;
  options.address = "not-an-ip:0";
  EXPECT_EQ(WebhookReceiver::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.address = "127.0.0.1";
  EXPECT_EQ(WebhookReceiver::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.address = "127.0.0.1:0";
  options.tls = SelfSignedCert{"not a certificate", "not a key"};
  EXPECT_EQ(WebhookReceiver::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// Two receivers never share a port, and a busy port is Unavailable.
TEST(WebhookReceiverTest, BusyPortIsUnavailable) {
  auto first = StartOrDie();
  ASSERT_NE(first, nullptr);
  WebhookReceiver::Options options;
  options.address = "127.0.0.1:" + std::to_string(first->port());
  EXPECT_EQ(WebhookReceiver::Start(options).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace hookrelay::receiver
