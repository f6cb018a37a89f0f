#include "daemon/common/file_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status.h"

namespace fabricmon {

std::string JoinPath(absl::string_view root, absl::string_view path) {
  while (!root.empty() && root.back() == '/') {
    root.remove_suffix(1);
  }
  while (!path.empty() && path.front() == '/') {
    path.remove_prefix(1);
  }
  if (root.empty()) {
    return absl::StrCat("/", path);
  }
  if (path.empty()) {
    return std::string(root);
  }
  return absl::StrCat(root, "/", path);
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  absl::StatusOr<PreadFile> file = PreadFile::Open(path);
  if (!file.ok()) {
    return file.status();
  }
  std::string content(max_bytes, '\0');
  absl::StatusOr<size_t> n = file->Read(content.data(), content.size());
  if (!n.ok()) {
    return n.status();
  }
  content.resize(*n);
  return content;
}

absl::StatusOr<std::string> ReadTrimmed(const std::string& path) {
  absl::StatusOr<std::string> content = ReadSmallFile(path);
  if (!content.ok()) {
    return content.status();
  }
  return std::string(absl::StripAsciiWhitespace(*content));
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) {
    return ErrnoToStatus(errno, absl::StrCat("opendir ", path));
  }
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir)) {
    absl::string_view name(entry->d_name);
    if (name == "." || name == "..") {
      continue;
    }
    names.emplace_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> ReadLinkBasename(const std::string& path) {
  char target[PATH_MAX];
  const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  if (n < 0) {
    return ErrnoToStatus(errno, absl::StrCat("readlink ", path));
  }
  absl::string_view view(target, static_cast<size_t>(n));
  while (!view.empty() && view.back() == '/') {
    view.remove_suffix(1);
  }
  const size_t slash = view.rfind('/');
  if (slash != absl::string_view::npos) {
    view.remove_prefix(slash + 1);
  }
  return std::string(view);
}

absl::StatusOr<PreadFile> PreadFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  return PreadFile(fd, path);
}

PreadFile::PreadFile(PreadFile&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

PreadFile& PreadFile::operator=(PreadFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      close(fd_);
    }
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

PreadFile::~PreadFile() {
  if (fd_ >= 0) {
    close(fd_);
  }
}

absl::StatusOr<size_t> PreadFile::Read(char* buffer, size_t capacity) const {
  if (fd_ < 0) {
    return absl::FailedPreconditionError("read of a closed file");
  }
  for (;;) {
    // libc's pread, not the raw syscall, although in a multi-threaded process glibc makes it a
    // cancellation point (about 1 % of the agent's CPU at 10 Hz): the tests interpose libc's
    // pread to fail reads the way sysfs does (EINVAL, ENODEV), and that seam must stay the
    // production path.
    const ssize_t n = pread(fd_, buffer, capacity, 0);
    if (n >= 0) {
      return static_cast<size_t>(n);
    }
    if (errno != EINTR) {
      return ErrnoToStatus(errno, absl::StrCat("read ", path_));
    }
  }
}

}  // namespace fabricmon
