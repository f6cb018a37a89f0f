#pragma once

// Files an operator names on the command line or in a config (configs, TLS certificates and keys,
// topology and link lists, the port file), handled so that a careless path fails the start with
// a message naming the file and the problem instead of hanging, exhausting memory or being cut:
//
//  - only regular files are read: a directory, FIFO, socket or character/block device is refused
//    before a byte is read (opening with O_NONBLOCK keeps a FIFO without a writer from blocking
//    the open, O_NOCTTY keeps a terminal from becoming the daemon's controlling terminal);
//  - a file larger than the caller's limit is refused, never truncated: by its size, and again by
//    what is actually read (procfs files report size 0, a file may grow while it is read).
//
// The port file is written the other way round: opened (created) before anything listens, so an
// unwritable path stops the start, and renamed into place once the port is known, so a reader
// never sees a half-written number.

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricmon {

// Reads the whole file at `path`, at most `max_bytes`. `what` names the file's role in messages
// ("config file", "tls cert_file", "topology_file"); every message starts with
// `<what> "<path>"`. NotFound / PermissionDenied (errno-exact) when it cannot be opened;
// InvalidArgument when it is not a regular file ("is a directory, not a regular file") or holds
// more than `max_bytes` ("is N bytes, the limit is M").
absl::StatusOr<std::string> ReadOperatorFile(const std::string& path, size_t max_bytes,
                                             absl::string_view what);

// The file a daemon reports its bound port in (--port_file). Move-only; an unfinished one removes
// its temporary file on destruction.
class PortFile {
 public:
  // Creates `path`'s temporary sibling (`path`.tmp.<pid>) for writing: fails (with `path` and
  // the errno text in the message) when the directory is missing or not writable, or when `path`
  // exists and is not a regular file.
  // `what` names the file in errors (the flag that gave it).
  static absl::StatusOr<PortFile> Prepare(const std::string& path,
                                          absl::string_view what = "port_file");
  PortFile() = default;
  PortFile(PortFile&& other) noexcept;
  PortFile& operator=(PortFile&& other) noexcept;
  PortFile(const PortFile&) = delete;
  PortFile& operator=(const PortFile&) = delete;
  ~PortFile();

  // Writes "<port>\n" to the temporary file and renames it over `path`.
  absl::Status Commit(int port);
  const std::string& path() const { return path_; }

 private:
  PortFile(int fd, std::string what, std::string path, std::string tmp_path)
      : fd_(fd), what_(std::move(what)), path_(std::move(path)), tmp_path_(std::move(tmp_path)) {}
  void Abandon();

  int fd_ = -1;
  std::string what_;
  std::string path_;
  std::string tmp_path_;
};

}  // namespace fabricmon
