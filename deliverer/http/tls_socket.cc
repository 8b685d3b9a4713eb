#include "deliverer/http/tls_socket.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <sys/socket.h>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace hookrelay::deliverer::http {

namespace net = boost::asio;
using boost::system::error_code;

// The BIO: sends on the descriptor (its errno kept: OpenSSL may change errno before
// SSL_get_error is asked), and hands OpenSSL what TlsSocket received into in_.
struct TlsSocketBio {
  static int Write(BIO* bio, const char* data, int size) {
    auto* tls = static_cast<TlsSocket*>(BIO_get_data(bio));
    BIO_clear_retry_flags(bio);
    const ssize_t n =
        send(tls->socket_.native_handle(), data, static_cast<size_t>(size), MSG_NOSIGNAL);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      BIO_set_retry_write(bio);
    } else {
      tls->send_error_ = errno;
    }
    return -1;
  }

  static int Read(BIO* bio, char* data, int size) {
    auto* tls = static_cast<TlsSocket*>(BIO_get_data(bio));
    BIO_clear_retry_flags(bio);
    const size_t available = tls->in_end_ - tls->in_begin_;
    if (available == 0) {
      BIO_set_retry_read(bio);  // TlsSocket receives more, then calls OpenSSL again
      return -1;
    }
    const size_t n = std::min(available, static_cast<size_t>(size));
    std::memcpy(data, tls->in_.get() + tls->in_begin_, n);
    tls->in_begin_ += n;
    return static_cast<int>(n);
  }

  static long Ctrl(BIO*, int command, long, void*) {  // NOLINT(runtime/int): OpenSSL's type
    // Writes are not buffered here: a flush has nothing to do. Nothing else is supported.
    return command == BIO_CTRL_FLUSH ? 1 : 0;
  }

  static const BIO_METHOD* Method() {
    static const BIO_METHOD* const method = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "hookrelay socket");
      if (m == nullptr) return static_cast<BIO_METHOD*>(nullptr);
      BIO_meth_set_write(m, &Write);
      BIO_meth_set_read(m, &Read);
      BIO_meth_set_ctrl(m, &Ctrl);
      return m;
    }();
    return method;
  }
};

TlsSocket::TlsSocket(Socket& socket, SSL_CTX* ctx)
    : socket_(socket), in_(new char[kInSize]) {
  const BIO_METHOD* method = TlsSocketBio::Method();
  if (method == nullptr) return;
  // send in the BIO must not block the io_context's thread.
  error_code ignored;
  socket_.native_non_blocking(true, ignored);
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return;
  BIO* bio = BIO_new(method);
  if (bio == nullptr) {
    SSL_free(ssl);
    return;
  }
  BIO_set_data(bio, this);
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl, bio, bio);  // one reference, taken by the SSL for both directions
  SSL_set_connect_state(ssl);
  // Partial writes (asio's async_write goes on with the rest) from a buffer that may move
  // between the calls of one write; OpenSSL takes all that was received at once.
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_set_read_ahead(ssl, 1);
#ifdef SSL_OP_NO_RENEGOTIATION
  SSL_set_options(ssl, SSL_OP_NO_RENEGOTIATION);
#endif
  ssl_ = ssl;
}

TlsSocket::~TlsSocket() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

bool TlsSocket::MustReceive() {
  // A pooled connection's read starts right after the last response was read whole: calling
  // SSL_read then cost a pass through OpenSSL's record layer for a WANT_READ.
  if (receiving_ || in_begin_ != in_end_ || SSL_has_pending(ssl_) != 0) return false;
  receiving_ = true;
  return true;
}

error_code TlsSocket::Received(const error_code& ec, size_t bytes) {
  receiving_ = false;
  if (ec == net::error::eof) return net::ssl::error::stream_truncated;  // no close_notify came
  if (ec) return ec;
  in_begin_ = 0;
  in_end_ = bytes;
  return {};
}

TlsSocket::Step TlsSocket::Perform(Kind kind, void* data, size_t size) {
  // SSL_get_error reads the thread's error queue: it must hold nothing from before this call.
  if (ERR_peek_error() != 0) ERR_clear_error();
  send_error_ = 0;
  const int length = static_cast<int>(size > INT_MAX ? INT_MAX : size);
  int result = 0;
  switch (kind) {
    case Kind::kHandshake:
      result = SSL_connect(ssl_);
      break;
    case Kind::kRead:
      result = SSL_read(ssl_, data, length);
      break;
    case Kind::kWrite:
      result = SSL_write(ssl_, data, length);
      break;
  }
  Step step;
  if (result > 0) {
    if (kind != Kind::kHandshake) step.bytes = static_cast<size_t>(result);
    return step;
  }
  switch (SSL_get_error(ssl_, result)) {
    case SSL_ERROR_WANT_READ:
      // Only the handshake and reads receive; a write that must read first would need the
      // renegotiation this connection refuses.
      if (kind == Kind::kWrite || receiving_) {
        step.ec = net::error::operation_not_supported;
        return step;
      }
      receiving_ = true;
      step.next = Next::kReceive;
      return step;
    case SSL_ERROR_WANT_WRITE:
      step.next = Next::kWaitWrite;
      return step;
    case SSL_ERROR_ZERO_RETURN:  // the peer's close_notify
      step.ec = net::error::eof;
      return step;
    default:
      break;
  }
  // A socket error first: a reset must read as one (the sender may send the request again).
  if (send_error_ != 0) {
    ERR_clear_error();
    step.ec = error_code(send_error_, boost::system::system_category());
    return step;
  }
  const unsigned long error = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  step.ec = error == 0 ? error_code(net::ssl::error::stream_truncated)
                       : error_code(static_cast<int>(error), net::error::get_ssl_category());
  return step;
}

}  // namespace hookrelay::deliverer::http
