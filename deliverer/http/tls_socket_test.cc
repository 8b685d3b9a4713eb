// TlsSocket against a TLS server on a real loopback socket (OpenSSL, blocking, on its own thread):
// large writes through a full socket buffer, the ends of a connection as the sender tells them
// apart (close_notify, a close without one, a reset), and handshakes that cannot succeed.
#include "deliverer/http/tls_socket.h"

#include <netinet/in.h>
#include <signal.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/write.hpp>

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "gtest/gtest.h"

#include "tools/receiver/webhook_receiver.h"

namespace hookrelay::deliverer::http {
namespace {

namespace net = boost::asio;
using boost::system::error_code;
using tcp = net::ip::tcp;

// A one-connection TLS server on 127.0.0.1 (a port chosen by the OS). `script` runs on the server
// thread with the accepted descriptor and, unless `raw`, the SSL after its handshake.
class TlsServer {
 public:
  using Script = std::function<void(int fd, SSL* ssl)>;

  // `tickets`: whether the server sends TLS 1.3 session tickets after the handshake (data the
  // client's first read processes).
  TlsServer(Script script, bool raw = false, bool tickets = true) {
    // The server's OpenSSL writes with write(): a client already gone must not kill the test.
    signal(SIGPIPE, SIG_IGN);
    absl::StatusOr<receiver::SelfSignedCert> cert = receiver::GenerateSelfSignedCert();
    EXPECT_TRUE(cert.ok()) << cert.status();
    ctx_ = SSL_CTX_new(TLS_server_method());
    if (!tickets) SSL_CTX_set_num_tickets(ctx_, 0);
    BIO* cert_bio = BIO_new_mem_buf(cert->cert_pem.data(), static_cast<int>(cert->cert_pem.size()));
    BIO* key_bio = BIO_new_mem_buf(cert->key_pem.data(), static_cast<int>(cert->key_pem.size()));
    X509* x509 = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
    EXPECT_EQ(SSL_CTX_use_certificate(ctx_, x509), 1);
    EXPECT_EQ(SSL_CTX_use_PrivateKey(ctx_, key), 1);
    X509_free(x509);
    EVP_PKEY_free(key);
    BIO_free(cert_bio);
    BIO_free(key_bio);

    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 4), 0);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, script = std::move(script), raw] {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      SSL* ssl = nullptr;
      if (!raw) {
        ssl = SSL_new(ctx_);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) != 1) {
          ADD_FAILURE() << "server handshake failed";
          SSL_free(ssl);
          close(fd);
          return;
        }
      }
      script(fd, ssl);
      if (ssl != nullptr) SSL_free(ssl);
      close(fd);
    });
  }

  ~TlsServer() {
    thread_.join();
    close(listen_fd_);
    SSL_CTX_free(ctx_);
  }

  uint16_t port() const { return port_; }

 private:
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

// The client side: a connected socket, a context that trusts anything (verification is
// http_sender_test's), and the TlsSocket over them.
class Client {
 public:
  explicit Client(uint16_t port, int send_buffer = 0) : socket_(io_) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    socket_.open(tcp::v4());
    if (send_buffer > 0) socket_.set_option(net::socket_base::send_buffer_size(send_buffer));
    socket_.connect(tcp::endpoint(net::ip::address_v4::loopback(), port));
    tls_.emplace(socket_, ctx_);
  }
  ~Client() {
    tls_.reset();
    SSL_CTX_free(ctx_);
  }

  // Runs the io_context until its work is done (bounded by the servers' scripts).
  void Run() {
    io_.restart();
    io_.run();
  }

  error_code Handshake() {
    std::optional<error_code> result;
    bool returned = false;
    tls_->async_handshake([&](error_code ec) {
      EXPECT_TRUE(returned) << "completed inside the initiating call";
      result = ec;
    });
    returned = true;
    Run();
    EXPECT_TRUE(result.has_value());
    return result.value_or(net::error::operation_aborted);
  }

  TlsSocket& tls() { return *tls_; }
  // Closes the socket and drops the TlsSocket, as a connection that fails and reconnects does.
  void CloseAndDrop() {
    socket_.close();
    tls_.reset();
  }

 private:
  net::io_context io_;
  TlsSocket::Socket socket_;
  SSL_CTX* ctx_ = nullptr;
  std::optional<TlsSocket> tls_;
};

std::string Pattern(size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return s;
}

// Reads exactly `size` bytes (blocking) on the server side.
std::string ServerRead(SSL* ssl, size_t size) {
  std::string out;
  char buffer[16384];
  while (out.size() < size) {
    const int n = SSL_read(ssl, buffer, sizeof(buffer));
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

void ServerWrite(SSL* ssl, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const int n = SSL_write(ssl, data.data() + sent, static_cast<int>(data.size() - sent));
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

// 4 MB out through a 16 KB send buffer while the server waits before reading (the socket fills:
// OpenSSL's send must wait for room and go on where it stopped), 1 MB back, then close_notify:
// every byte arrives in order, and the end reads as eof.
TEST(TlsSocketTest, LargeTransfersBothWaysThenCloseNotifyIsEof) {
  const std::string request = Pattern(4 << 20);
  const std::string response = Pattern(1 << 20);
  std::string received_by_server;
  TlsServer server([&](int, SSL* ssl) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the client's buffer fill
    received_by_server = ServerRead(ssl, request.size());
    ServerWrite(ssl, response);
    SSL_shutdown(ssl);
  });
  Client client(server.port(), /*send_buffer=*/16 * 1024);
  ASSERT_FALSE(client.Handshake());

  std::optional<error_code> write_result;
  size_t written = 0;
  bool returned = false;
  net::async_write(client.tls(), net::buffer(request), [&](error_code ec, size_t n) {
    EXPECT_TRUE(returned) << "completed inside the initiating call";
    write_result = ec;
    written = n;
  });
  returned = true;
  std::string received(response.size() + 1, '\0');
  std::optional<error_code> read_result;
  size_t read = 0;
  net::async_read(client.tls(), net::buffer(received), [&](error_code ec, size_t n) {
    read_result = ec;
    read = n;
  });
  client.Run();
  ASSERT_TRUE(write_result.has_value());
  EXPECT_FALSE(*write_result) << write_result->message();
  EXPECT_EQ(written, request.size());
  EXPECT_TRUE(received_by_server == request) << "the server got " << received_by_server.size()
                                             << " bytes, not the request";
  ASSERT_TRUE(read_result.has_value());
  EXPECT_EQ(*read_result, net::error::eof) << read_result->message();
  ASSERT_EQ(read, response.size());
  received.resize(read);
  EXPECT_TRUE(received == response);
}

// The receiver closes without a close_notify: stream_truncated, as asio's TLS stream says.
TEST(TlsSocketTest, CloseWithoutCloseNotifyIsStreamTruncated) {
  TlsServer server([](int fd, SSL* ssl) {
    ServerWrite(ssl, "partial");
    shutdown(fd, SHUT_RDWR);
  });
  Client client(server.port());
  ASSERT_FALSE(client.Handshake());
  char buffer[64];
  std::optional<error_code> result;
  size_t n = 0;
  net::async_read(client.tls(), net::buffer(buffer), [&](error_code ec, size_t bytes) {
    result = ec;
    n = bytes;
  });
  client.Run();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, net::ssl::error::stream_truncated) << result->message();
  EXPECT_EQ(std::string(buffer, n), "partial");
}

// A reset: connection_reset, which the sender treats as "nothing of the request was read".
TEST(TlsSocketTest, ResetIsConnectionReset) {
  TlsServer server([](int fd, SSL*) {
    linger abort{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
  });
  Client client(server.port());
  ASSERT_FALSE(client.Handshake());
  char buffer[64];
  std::optional<error_code> result;
  client.tls().async_read_some(net::buffer(buffer),
                               [&](error_code ec, size_t) { result = ec; });
  client.Run();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, net::error::connection_reset) << result->message();
}

// A plain HTTP server answers the ClientHello: a TLS error (OpenSSL's), not a crash or a hang.
TEST(TlsSocketTest, HandshakeWithAPlainServerIsATlsError) {
  TlsServer server(
      [](int fd, SSL*) {
        char buffer[512];
        (void)!read(fd, buffer, sizeof(buffer));
        static constexpr char kAnswer[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        (void)!write(fd, kAnswer, sizeof(kAnswer) - 1);
      },
      /*raw=*/true);
  Client client(server.port());
  const error_code ec = client.Handshake();
  EXPECT_TRUE(ec);
  EXPECT_EQ(ec.category(), net::error::get_ssl_category()) << ec.message();
}

// The server accepts and closes during the handshake: stream_truncated (the sender reports "lost
// during the TLS handshake").
TEST(TlsSocketTest, HandshakeCutShortIsStreamTruncated) {
  TlsServer server(
      [](int fd, SSL*) {
        char buffer[512];
        (void)!read(fd, buffer, sizeof(buffer));
      },
      /*raw=*/true);
  Client client(server.port());
  EXPECT_EQ(client.Handshake(), net::ssl::error::stream_truncated);
}

// A read waiting for the receiver when the connection is closed and its TlsSocket dropped ends
// with operation_aborted and touches nothing of the dropped TlsSocket. (No session tickets: with
// them the read could complete with their bytes before the close, and a completed operation's
// handler needs its TlsSocket.)
TEST(TlsSocketTest, ReadPendingAtCloseIsAborted) {
  TlsServer server([](int, SSL* ssl) { ServerRead(ssl, 1); }, /*raw=*/false, /*tickets=*/false);
  Client client(server.port());
  ASSERT_FALSE(client.Handshake());
  char buffer[64];
  std::optional<error_code> result;
  client.tls().async_read_some(net::buffer(buffer),
                               [&](error_code ec, size_t) { result = ec; });
  client.CloseAndDrop();
  client.Run();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, net::error::operation_aborted) << result->message();
}

// Zero-byte reads and writes complete at once (posted) with nothing moved.
TEST(TlsSocketTest, EmptyBuffersCompleteWithNothing) {
  TlsServer server([](int, SSL* ssl) { ServerRead(ssl, 1); });  // until the client goes
  Client client(server.port());
  ASSERT_FALSE(client.Handshake());
  int done = 0;
  client.tls().async_write_some(net::const_buffer(), [&](error_code ec, size_t n) {
    EXPECT_FALSE(ec);
    EXPECT_EQ(n, 0u);
    ++done;
  });
  client.tls().async_read_some(net::mutable_buffer(), [&](error_code ec, size_t n) {
    EXPECT_FALSE(ec);
    EXPECT_EQ(n, 0u);
    ++done;
  });
  EXPECT_EQ(done, 0);
  client.Run();
  EXPECT_EQ(done, 2);
}

}  // namespace
}  // namespace hookrelay::deliverer::http
