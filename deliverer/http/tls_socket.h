// A TLS client connection driven by OpenSSL through a small BIO of this file instead of Asio's TLS
// stream: records are sent straight from OpenSSL to the socket (send with MSG_NOSIGNAL), and
// received with the socket's own async_read_some into one buffer that OpenSSL reads from. Asio's
// TLS stream runs OpenSSL against a memory BIO pair, copies every record through it, and has
// OpenSSL free and allocate its record buffers around each record (docs/BENCHMARKS.md, "HTTPS
// deliveries"). Reading through async_read_some rather than recv in the BIO and a readiness wait
// keeps Asio's speculative read: waiting with async_wait re-arms the descriptor in epoll each time.
//
// TlsSocket is an Asio AsyncReadStream and AsyncWriteStream (Beast's async_read and asio's
// async_write use it as they would a socket) with an async_handshake. Completions never run inside
// the initiating call (they are posted then). Errors as asio's TLS stream reports them: an orderly
// TLS close is net::error::eof, a connection closed without one net::ssl::error::stream_truncated,
// socket errors in the system category (a reset is net::error::connection_reset), TLS failures in
// net::error::get_ssl_category().
//
// Renegotiation is refused (a write never has to wait for a read); OpenSSL calls only from the
// subset BoringSSL shares. Not thread-safe: one thread (the socket's io_context) drives it; one
// read and one write may be in progress at once. The socket must outlive it, and it must outlive
// its operations' handlers, except that closing the socket ends an operation still waiting with
// operation_aborted without touching the TlsSocket (one that already completed needs it).
#ifndef HOOKRELAY_DELIVERER_HTTP_TLS_SOCKET_H_
#define HOOKRELAY_DELIVERER_HTTP_TLS_SOCKET_H_

#include <openssl/ssl.h>

#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <utility>

namespace hookrelay::deliverer::http {

class TlsSocket {
 public:
  // The io_context's own executor rather than the type-erased any_io_executor of
  // boost::asio::ip::tcp::socket: every operation's work tracking copies the executor, and a
  // type-erased one costs a call per copy and per destruction.
  using executor_type = boost::asio::io_context::executor_type;
  using Socket = boost::asio::basic_stream_socket<boost::asio::ip::tcp, executor_type>;

  // A client connection over `socket` (connected) with `ctx`'s settings. ok() is false when
  // OpenSSL could not make it.
  TlsSocket(Socket& socket, SSL_CTX* ctx);
  ~TlsSocket();

  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  bool ok() const { return ssl_ != nullptr; }
  SSL* native_handle() { return ssl_; }
  executor_type get_executor() { return socket_.get_executor(); }

  // Completion: void(error_code).
  template <class Token>
  auto async_handshake(Token&& token) {
    return boost::asio::async_compose<Token, void(boost::system::error_code)>(
        IoOp<Kind::kHandshake>{this, nullptr, 0}, token, socket_);
  }

  // Completion: void(error_code, size_t). Reads into the first non-empty buffer.
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    const boost::asio::mutable_buffer b = First<boost::asio::mutable_buffer>(buffers);
    return boost::asio::async_compose<Token, void(boost::system::error_code, size_t)>(
        IoOp<Kind::kRead>{this, b.data(), b.size()}, token, socket_);
  }

  // Completion: void(error_code, size_t). Writes (part of) the first non-empty buffer.
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    const boost::asio::const_buffer b = First<boost::asio::const_buffer>(buffers);
    return boost::asio::async_compose<Token, void(boost::system::error_code, size_t)>(
        IoOp<Kind::kWrite>{this, const_cast<void*>(b.data()), b.size()}, token, socket_);
  }

 private:
  enum class Kind { kHandshake, kRead, kWrite };
  // After one call into OpenSSL: done, or receive more (into in_), or wait to send.
  enum class Next { kDone, kReceive, kWaitWrite };
  struct Step {
    Next next = Next::kDone;
    boost::system::error_code ec;
    size_t bytes = 0;
  };
  // A result posted from the initiating call.
  struct Posted {};

  static constexpr size_t kInSize = 16 * 1024;

  // One call of SSL_connect, SSL_read or SSL_write.
  Step Perform(Kind kind, void* data, size_t size);
  // Whether a read must receive before OpenSSL has anything to give (then the receive is under
  // way: it starts it).
  bool MustReceive();
  // Received bytes for OpenSSL, or the receive's error.
  boost::system::error_code Received(const boost::system::error_code& ec, size_t bytes);

  template <class Buffer, class Buffers>
  static Buffer First(const Buffers& buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      Buffer b(*it);
      if (b.size() > 0) return b;
    }
    return Buffer();
  }

  template <Kind kKind>
  struct IoOp {
    TlsSocket* tls;
    void* data;
    size_t size;
    bool started = false;

    // The start, and the end of a wait for the socket to take more bytes.
    template <class Self>
    void operator()(Self& self, boost::system::error_code wait_error = {}) {
      const bool initiating = !started;
      started = true;
      if (wait_error) {
        Finish(self, initiating, wait_error, 0);
        return;
      }
      Go(self, initiating);
    }

    // The end of a receive into the TLS input buffer.
    template <class Self>
    void operator()(Self& self, boost::system::error_code ec, size_t bytes) {
      if (ec == boost::asio::error::operation_aborted) {
        // The socket was closed: its TlsSocket may already be replaced by the next connection's.
        Complete(self, ec, 0);
        return;
      }
      ec = tls->Received(ec, bytes);
      if (ec) {
        Finish(self, false, ec, 0);
        return;
      }
      Go(self, false);
    }

    template <class Self>
    void operator()(Self& self, Posted, boost::system::error_code ec, size_t bytes) {
      Complete(self, ec, bytes);
    }

    template <class Self>
    void Go(Self& self, bool initiating) {
      if (kKind != Kind::kHandshake && size == 0) {
        Finish(self, initiating, {}, 0);
        return;
      }
      // Nothing received and nothing in OpenSSL: SSL_read could only ask for more.
      const Step step = kKind == Kind::kRead && tls->MustReceive()
                            ? Step{Next::kReceive}
                            : tls->Perform(kKind, data, size);
      switch (step.next) {
        case Next::kReceive:
          tls->socket_.async_read_some(boost::asio::buffer(tls->in_.get(), kInSize),
                                       std::move(self));
          return;
        case Next::kWaitWrite:
          tls->socket_.async_wait(Socket::wait_write, std::move(self));
          return;
        case Next::kDone:
          Finish(self, initiating, step.ec, step.bytes);
          return;
      }
    }

    template <class Self>
    void Finish(Self& self, bool initiating, boost::system::error_code ec, size_t bytes) {
      if (!initiating) {
        Complete(self, ec, bytes);
        return;
      }
      boost::asio::post(tls->socket_.get_executor(),
                        boost::asio::append(std::move(self), Posted{}, ec, bytes));
    }

    template <class Self>
    static void Complete(Self& self, boost::system::error_code ec, size_t bytes) {
      if constexpr (kKind == Kind::kHandshake) {
        self.complete(ec);
      } else {
        self.complete(ec, bytes);
      }
    }
  };

  Socket& socket_;
  SSL* ssl_ = nullptr;
  // Received and not yet taken by OpenSSL: in_[in_begin_, in_end_).
  std::unique_ptr<char[]> in_;
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  bool receiving_ = false;  // an operation's receive into in_ is under way
  // errno of the BIO's last failed send (0: none).
  int send_error_ = 0;

  friend struct TlsSocketBio;
};

}  // namespace hookrelay::deliverer::http

#endif  // HOOKRELAY_DELIVERER_HTTP_TLS_SOCKET_H_
