#include "daemon/remote_write/bearer_token_file.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "daemon/remote_write/curl_sender.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::remote_write {
namespace {

using ::fabricmon::testing::FakeClock;
using ::fabricmon::testing::StatusIs;
using ::fabricmon::testing::TempTree;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kRecheckMs = 1000;

// Replaces root/name the way a Kubernetes projected volume rotates a token: a new file renamed
// over the old one (a new inode), never an in-place rewrite a reader could see half-done.
void Rotate(const TempTree& tree, const std::string& name, const std::string& content) {
  tree.WriteFile(name + ".new", content);
  ASSERT_EQ(
      std::rename((tree.root() + "/" + name + ".new").c_str(), (tree.root() + "/" + name).c_str()),
      0);
}

TEST(BearerTokenFileTest, RefusesAMissingOrEmptyFileAtStart) {
  TempTree tree;
  tree.WriteFile("empty", " \n");
  EXPECT_THAT(BearerTokenFile::Create(tree.root() + "/missing").status(),
              StatusIs(absl::StatusCode::kNotFound));
  const absl::Status empty = BearerTokenFile::Create(tree.root() + "/empty").status();
  EXPECT_THAT(empty, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(empty.message(), HasSubstr("holds no token"));
}

TEST(BearerTokenFileTest, ARotatedTokenIsUsedAfterTheRecheckInterval) {
  TempTree tree;
  tree.WriteFile("token", "first\n");
  FakeClock clock;
  auto file = BearerTokenFile::Create(tree.root() + "/token", clock, kRecheckMs * 1000000);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Current(), "first");

  Rotate(tree, "token", "second\n");
  // Not looked at again before the interval: no stat per request.
  clock.AdvanceMillis(kRecheckMs - 1);
  EXPECT_EQ((*file)->Current(), "first");
  clock.AdvanceMillis(1);
  EXPECT_EQ((*file)->Current(), "second");
  EXPECT_EQ((*file)->reloads(), 1u);
  EXPECT_EQ((*file)->reload_failures(), 0u);

  // An in-place rewrite (another size) is a change too.
  tree.WriteFile("token", "third-token");
  clock.AdvanceMillis(kRecheckMs);
  EXPECT_EQ((*file)->Current(), "third-token");
  EXPECT_EQ((*file)->reloads(), 2u);
}

TEST(BearerTokenFileTest, ABrokenFileKeepsTheLastTokenAndCountsOncePerChange) {
  TempTree tree;
  tree.WriteFile("token", "good\n");
  FakeClock clock;
  auto file = BearerTokenFile::Create(tree.root() + "/token", clock, kRecheckMs * 1000000);
  ASSERT_TRUE(file.ok()) << file.status();

  Rotate(tree, "token", "\n");  // emptied
  for (int i = 0; i < 5; ++i) {
    clock.AdvanceMillis(kRecheckMs);
    EXPECT_EQ((*file)->Current(), "good");
  }
  EXPECT_EQ((*file)->reload_failures(), 1u);  // one change, one failure, whatever the checks

  Rotate(tree, "token", "bad\r\nX-Injected: 1\n");  // a header injection is no token
  clock.AdvanceMillis(kRecheckMs);
  EXPECT_EQ((*file)->Current(), "good");
  EXPECT_EQ((*file)->reload_failures(), 2u);

  tree.Remove("token");  // gone (unmounted)
  clock.AdvanceMillis(kRecheckMs);
  EXPECT_EQ((*file)->Current(), "good");
  EXPECT_EQ((*file)->reload_failures(), 3u);

  tree.WriteFile("token", std::string(BearerTokenFile::kMaxTokenBytes + 1, 'x'));  // too large
  clock.AdvanceMillis(kRecheckMs);
  EXPECT_EQ((*file)->Current(), "good");
  EXPECT_EQ((*file)->reload_failures(), 4u);

  Rotate(tree, "token", "fixed\n");
  clock.AdvanceMillis(kRecheckMs);
  EXPECT_EQ((*file)->Current(), "fixed");
  EXPECT_EQ((*file)->reloads(), 1u);
  EXPECT_EQ((*file)->reload_failures(), 4u);
}

// A receiver on loopback that answers 204 to every POST (keep-alive) and records each request's
// Authorization header.
class FakeReceiver {
 public:
  FakeReceiver() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd_, 4) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeReceiver() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    {
      absl::MutexLock lock(&mu_);
      if (conn_fd_ >= 0) {
        ::shutdown(conn_fd_, SHUT_RDWR);
      }
    }
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  int port() const { return port_; }
  std::vector<std::string> authorizations() {
    absl::MutexLock lock(&mu_);
    return authorizations_;
  }

 private:
  void Serve() {
    while (true) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        return;
      }
      {
        absl::MutexLock lock(&mu_);
        conn_fd_ = fd;
      }
      ServeConnection(fd);
      {
        absl::MutexLock lock(&mu_);
        conn_fd_ = -1;
      }
      ::close(fd);
    }
  }
  void ServeConnection(int fd) {
    std::string buffer;
    char chunk[4096];
    while (true) {
      size_t end;
      while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t got = ::read(fd, chunk, sizeof(chunk));
        if (got <= 0) {
          return;
        }
        buffer.append(chunk, static_cast<size_t>(got));
      }
      std::string authorization = "(none)";
      size_t body_bytes = 0;
      for (absl::string_view line : absl::StrSplit(buffer.substr(0, end), "\r\n")) {
        const size_t colon = line.find(':');
        if (colon == absl::string_view::npos) {
          continue;
        }
        const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
        const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
        if (name == "authorization") {
          authorization = std::string(value);
        } else if (name == "content-length" && !absl::SimpleAtoi(value, &body_bytes)) {
          return;
        }
      }
      buffer.erase(0, end + 4);
      while (buffer.size() < body_bytes) {
        const ssize_t got = ::read(fd, chunk, sizeof(chunk));
        if (got <= 0) {
          return;
        }
        buffer.append(chunk, static_cast<size_t>(got));
      }
      buffer.erase(0, body_bytes);
      {
        absl::MutexLock lock(&mu_);
        authorizations_.push_back(authorization);
      }
      const std::string response = "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n";
      if (::write(fd, response.data(), response.size()) != static_cast<ssize_t>(response.size())) {
        return;
      }
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  int conn_fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
};

TEST(BearerTokenFileTest, TheSenderSendsTheRotatedTokenWithoutARestart) {
  TempTree tree;
  tree.WriteFile("token", "before-rotation\n");
  FakeClock clock;
  auto file = BearerTokenFile::Create(tree.root() + "/token", clock, kRecheckMs * 1000000);
  ASSERT_TRUE(file.ok()) << file.status();
  FakeReceiver receiver;
  HttpOptions http;
  http.url = absl::StrCat("http://127.0.0.1:", receiver.port(), "/api/v1/write");
  http.bearer_token = *file;
  auto sender = CurlSender::Create(http);
  ASSERT_TRUE(sender.ok()) << sender.status();
  const int64_t timeout = int64_t{10} * 1000 * 1000 * 1000;

  EXPECT_EQ((*sender)->Send("body", timeout).http_status, 204);
  Rotate(tree, "token", "after-rotation\n");
  clock.AdvanceMillis(kRecheckMs);
  EXPECT_EQ((*sender)->Send("body", timeout).http_status, 204);
  Rotate(tree, "token", "");  // a broken rotation: the last good token goes on
  clock.AdvanceMillis(kRecheckMs);
  EXPECT_EQ((*sender)->Send("body", timeout).http_status, 204);

  EXPECT_THAT(
      receiver.authorizations(),
      ElementsAre("Bearer before-rotation", "Bearer after-rotation", "Bearer after-rotation"));
  EXPECT_EQ((*file)->reload_failures(), 1u);
}

}  // namespace
}  // namespace fabricmon::remote_write
