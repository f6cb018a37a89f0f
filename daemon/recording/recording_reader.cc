#include "daemon/recording/recording_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "daemon/common/file_reader.h"

namespace fabricmon::recording {
namespace {

constexpr absl::string_view kSegmentPrefix = "segment-";
constexpr absl::string_view kSegmentSuffix = ".fmrec";

absl::Status ErrnoStatus(int error, absl::string_view what) {
  return absl::Status(error == ENOENT   ? absl::StatusCode::kNotFound
                      : error == EACCES ? absl::StatusCode::kPermissionDenied
                                        : absl::StatusCode::kUnavailable,
                      absl::StrCat(what, ": ", std::strerror(error)));
}

// A file mapped read-only; unmapped and closed on destruction.
class MappedFile {
 public:
  ~MappedFile() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  absl::Status Open(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return ErrnoStatus(errno, path);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int error = errno;
      close(fd);
      return ErrnoStatus(error, path);
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* mapped = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (mapped == MAP_FAILED) {
        const int error = errno;
        close(fd);
        return ErrnoStatus(error, path);
      }
      data_ = mapped;
      madvise(data_, size_, MADV_SEQUENTIAL);
    }
    close(fd);
    return absl::OkStatus();
  }
  absl::string_view bytes() const {
    return data_ == nullptr ? absl::string_view()
                            : absl::string_view(static_cast<char*>(data_), size_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

void AddDamage(const ReadDamage& from, ReadDamage& to) {
  to.skipped_bytes += from.skipped_bytes;
  to.damaged_regions += from.damaged_regions;
  to.torn_tail = to.torn_tail || from.torn_tail;
  to.bad_header = to.bad_header || from.bad_header;
}

}  // namespace

std::string SegmentName(int64_t start_unix_nanos, uint32_t n) {
  return absl::StrFormat("%s%020d-%d%s", kSegmentPrefix, std::max<int64_t>(0, start_unix_nanos), n,
                         kSegmentSuffix);
}

namespace {

// (start, n) from a segment's file name; false for any other name.
bool ParseSegmentName(absl::string_view name, int64_t& start, uint32_t& n) {
  if (!absl::ConsumePrefix(&name, kSegmentPrefix) || !absl::ConsumeSuffix(&name, kSegmentSuffix) ||
      name.size() < 22 || name[20] != '-') {
    return false;
  }
  return absl::SimpleAtoi(name.substr(0, 20), &start) && start >= 0 &&
         absl::SimpleAtoi(name.substr(21), &n);
}

}  // namespace

int64_t SegmentStartFromName(const std::string& file_name) {
  int64_t start = 0;
  uint32_t n = 0;
  return ParseSegmentName(file_name, start, n) ? start : -1;
}

absl::StatusOr<std::vector<std::string>> ListSegments(const std::string& directory) {
  absl::StatusOr<std::vector<std::string>> entries = ListDirectory(directory);
  if (!entries.ok()) {
    return entries.status();
  }
  // Name order with the counter compared as a number: time order, whatever the counter's width.
  std::vector<std::pair<std::pair<int64_t, uint32_t>, std::string>> found;
  for (const std::string& entry : *entries) {
    int64_t start = 0;
    uint32_t n = 0;
    if (ParseSegmentName(entry, start, n)) {
      found.push_back({{start, n}, JoinPath(directory, "/" + entry)});
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [key, file] : found) {
    out.push_back(std::move(file));
  }
  return out;
}

absl::StatusOr<ReadSummary> ReadRecording(const std::string& path,
                                          const std::function<bool(const Record&)>& visit) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return ErrnoStatus(errno, path);
  }
  std::vector<std::string> files;
  if (S_ISDIR(st.st_mode)) {
    absl::StatusOr<std::vector<std::string>> segments = ListSegments(path);
    if (!segments.ok()) {
      return segments.status();
    }
    files = *std::move(segments);
  } else {
    files.push_back(path);
  }
  ReadSummary summary;
  Record record;
  for (const std::string& file : files) {
    MappedFile mapped;
    absl::Status opened = mapped.Open(file);
    if (!opened.ok()) {
      // A segment the recorder dropped (retention) between the listing and now is not an error.
      if (absl::IsNotFound(opened) && files.size() > 1) {
        continue;
      }
      return opened;
    }
    ++summary.files;
    RecordParser parser(mapped.bytes());
    bool more = true;
    while (more && parser.Next(record)) {
      ++summary.records;
      more = visit(record);
    }
    AddDamage(parser.damage(), summary.damage);
    if (!more) {
      break;
    }
  }
  return summary;
}

}  // namespace fabricmon::recording
