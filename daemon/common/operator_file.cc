#include "daemon/common/operator_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status.h"

namespace fabricmon {
namespace {

std::string Name(absl::string_view what, const std::string& path) {
  return absl::StrCat(what, " \"", path, "\"");
}

// What a non-regular file is, in the words of ls(1)/stat(1).
const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> ReadOperatorFile(const std::string& path, size_t max_bytes,
                                             absl::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  Fd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  struct stat st;
  if (fd.get() < 0) {
    const int error = errno;
    // A socket cannot be opened at all (ENXIO): say what it is rather than the errno text.
    if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Name(what, path), " is ", KindOf(st.st_mode), ", not a regular file"));
    }
    return ErrnoToStatus(error, Name(what, path));
  }
  if (fstat(fd.get(), &st) != 0) {
    return ErrnoToStatus(errno, Name(what, path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(what, path), " is ", KindOf(st.st_mode), ", not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(what, path), " is ", st.st_size, " bytes, the limit is ", max_bytes));
  }
  // The size was only a hint: read up to one byte beyond the limit, so that a file that grew or
  // reported no size (procfs) is refused rather than cut.
  std::string content;
  content.resize(static_cast<size_t>(st.st_size) + 1 > max_bytes + 1
                     ? max_bytes + 1
                     : static_cast<size_t>(st.st_size) + 1);
  size_t used = 0;
  for (;;) {
    if (used == content.size()) {
      if (content.size() > max_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(Name(what, path), " holds more than ",
                                                       max_bytes, " bytes (the limit) while read"));
      }
      content.resize(std::min(max_bytes + 1, content.size() * 2 + 4096));
    }
    const ssize_t n = read(fd.get(), content.data() + used, content.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("read ", Name(what, path)));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  content.resize(used);
  return content;
}

absl::StatusOr<PortFile> PortFile::Prepare(const std::string& path, absl::string_view what) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(what, path), " is ", KindOf(st.st_mode), ", not a regular file"));
  }
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0644);
  if (fd < 0) {
    return ErrnoToStatus(
        errno, absl::StrCat(Name(what, path), " cannot be written (", "creating ", tmp, ")"));
  }
  return PortFile(fd, std::string(what), path, std::move(tmp));
}

PortFile::PortFile(PortFile&& other) noexcept
    : fd_(other.fd_),
      what_(std::move(other.what_)),
      path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)) {
  other.fd_ = -1;
  other.tmp_path_.clear();
}

PortFile& PortFile::operator=(PortFile&& other) noexcept {
  if (this != &other) {
    Abandon();
    fd_ = other.fd_;
    what_ = std::move(other.what_);
    path_ = std::move(other.path_);
    tmp_path_ = std::move(other.tmp_path_);
    other.fd_ = -1;
    other.tmp_path_.clear();
  }
  return *this;
}

PortFile::~PortFile() { Abandon(); }

void PortFile::Abandon() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  if (!tmp_path_.empty()) {
    unlink(tmp_path_.c_str());
    tmp_path_.clear();
  }
}

absl::Status PortFile::Commit(int port) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat(Name(what_, path_), " not prepared"));
  }
  const std::string text = absl::StrCat(port, "\n");
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(fd_, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      Abandon();
      return ErrnoToStatus(error, absl::StrCat("write ", Name(what_, path_)));
    }
    written += static_cast<size_t>(n);
  }
  if (close(fd_) != 0) {
    fd_ = -1;
    const int error = errno;
    Abandon();
    return ErrnoToStatus(error, absl::StrCat("write ", Name(what_, path_)));
  }
  fd_ = -1;
  if (rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    Abandon();
    return ErrnoToStatus(error, absl::StrCat("rename into ", Name(what_, path_)));
  }
  tmp_path_.clear();
  return absl::OkStatus();
}

}  // namespace fabricmon
