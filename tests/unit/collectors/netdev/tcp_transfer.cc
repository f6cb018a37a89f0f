// tcp_transfer: a bounded, exact TCP transfer for the netns tests (run under `ip netns exec`).
//
//   tcp_transfer --listen=IPV4:PORT [--timeout_s=20]
//       Accepts one connection, reads until EOF, closes, prints the byte count received.
//   tcp_transfer --connect=IPV4:PORT --bytes=N [--timeout_s=20]
//       Connects (retrying while the listener is not up yet), sends N bytes, half-closes, waits
//       for the peer to close (so every byte was read by the receiver, not just queued), prints N.
//
// Every step is bounded by --timeout_s in total. Exit code 0 on success, 1 on failure (message on
// stderr), 2 on bad arguments. Unlike iperf3 -n, the byte count is exact and delivered.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

bool ParseAddress(const std::string& text, sockaddr_in* addr) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return false;
  }
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  const long port = std::strtol(text.c_str() + colon + 1, nullptr, 10);
  if (port <= 0 || port > 65535) {
    return false;
  }
  addr->sin_port = htons(static_cast<uint16_t>(port));
  return inet_pton(AF_INET, text.substr(0, colon).c_str(), &addr->sin_addr) == 1;
}

// Socket timeouts bound every blocking call; the overall deadline bounds the loops.
void SetTimeouts(int fd, int seconds) {
  timeval tv{};
  tv.tv_sec = seconds;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int Fail(const char* what) {
  std::fprintf(stderr, "tcp_transfer: %s: %s\n", what, std::strerror(errno));
  return 1;
}

int Listen(const sockaddr_in& addr, int timeout_s) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return Fail("socket");
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  SetTimeouts(fd, timeout_s);  // SO_RCVTIMEO also bounds accept()
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Fail("bind");
  }
  if (listen(fd, 1) != 0) {
    return Fail("listen");
  }
  const int conn = accept(fd, nullptr, nullptr);
  if (conn < 0) {
    return Fail("accept");
  }
  SetTimeouts(conn, timeout_s);
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(timeout_s);
  std::vector<char> buffer(1 << 16);
  unsigned long long total = 0;
  for (;;) {
    const ssize_t n = recv(conn, buffer.data(), buffer.size(), 0);
    if (n > 0) {
      total += static_cast<unsigned long long>(n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      return Fail("recv");
    }
    if (Clock::now() > deadline) {
      errno = ETIMEDOUT;
      return Fail("receive deadline");
    }
  }
  close(conn);
  close(fd);
  std::printf("%llu\n", total);
  return 0;
}

int Connect(const sockaddr_in& addr, unsigned long long bytes, int timeout_s) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(timeout_s);
  int fd = -1;
  for (;;) {  // the listener may not be up yet: retry until the deadline
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return Fail("socket");
    }
    SetTimeouts(fd, timeout_s);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      break;
    }
    close(fd);
    if (Clock::now() > deadline) {
      return Fail("connect");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<char> buffer(1 << 16, 'x');
  unsigned long long sent = 0;
  while (sent < bytes) {
    const size_t chunk =
        static_cast<size_t>(std::min<unsigned long long>(buffer.size(), bytes - sent));
    const ssize_t n = send(fd, buffer.data(), chunk, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<unsigned long long>(n);
    } else if (errno != EINTR) {
      return Fail("send");
    }
    if (Clock::now() > deadline) {
      errno = ETIMEDOUT;
      return Fail("send deadline");
    }
  }
  shutdown(fd, SHUT_WR);
  // The receiver closes after reading EOF: our read of EOF means every byte was consumed.
  char ignored[256];
  for (;;) {
    const ssize_t n = recv(fd, ignored, sizeof(ignored), 0);
    if (n == 0) {
      break;
    }
    if (n < 0 && errno != EINTR) {
      return Fail("waiting for the receiver to close");
    }
  }
  close(fd);
  std::printf("%llu\n", sent);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen_at;
  std::string connect_to;
  unsigned long long bytes = 0;
  int timeout_s = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t n = std::strlen(flag);
      return arg.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = value("--listen=")) {
      listen_at = v;
    } else if (const char* v = value("--connect=")) {
      connect_to = v;
    } else if (const char* v = value("--bytes=")) {
      bytes = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("--timeout_s=")) {
      timeout_s = std::atoi(v);
    } else {
      std::fprintf(stderr, "tcp_transfer: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  sockaddr_in addr{};
  if (listen_at.empty() == connect_to.empty() || timeout_s <= 0 ||
      !ParseAddress(listen_at.empty() ? connect_to : listen_at, &addr)) {
    std::fprintf(stderr, "usage: tcp_transfer --listen=IP:PORT | --connect=IP:PORT --bytes=N\n");
    return 2;
  }
  return listen_at.empty() ? Connect(addr, bytes, timeout_s) : Listen(addr, timeout_s);
}
