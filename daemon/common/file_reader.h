#pragma once

// Reading small kernel files (sysfs, procfs) the way a daemon must: errno-exact statuses, no
// exceptions, and an open-once / pread-many handle for hot counters.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricmon {

// Joins a configured root ("/sys", or a fixture tree) with an absolute kernel path
// ("/class/infiniband"). Never produces "//".
std::string JoinPath(absl::string_view root, absl::string_view path);

// Reads a whole small file (up to `max_bytes`). Errors keep the errno meaning: NotFound (ENOENT),
// PermissionDenied, InvalidArgument (EINVAL: e.g. a PMA MAD the firmware refused).
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes = 4096);

// Like ReadSmallFile, with surrounding whitespace trimmed.
absl::StatusOr<std::string> ReadTrimmed(const std::string& path);

// Names of the entries of a directory (no "." or ".."), sorted. NotFound if absent.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);

// Target of a symbolic link's last path component ("mlx5_core" for device/driver). NotFound if
// the link is absent.
absl::StatusOr<std::string> ReadLinkBasename(const std::string& path);

// An open file re-read from offset 0 with pread(2) on every call: sysfs regenerates the content
// on each read, so one open per file per process is enough. Move-only; closes on destruction.
class PreadFile {
 public:
  static absl::StatusOr<PreadFile> Open(const std::string& path);
  PreadFile() = default;
  PreadFile(PreadFile&& other) noexcept;
  PreadFile& operator=(PreadFile&& other) noexcept;
  PreadFile(const PreadFile&) = delete;
  PreadFile& operator=(const PreadFile&) = delete;
  ~PreadFile();

  // Reads up to `capacity` bytes into `buffer`; returns the number read. Errors as ReadSmallFile.
  absl::StatusOr<size_t> Read(char* buffer, size_t capacity) const;
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  PreadFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace fabricmon
