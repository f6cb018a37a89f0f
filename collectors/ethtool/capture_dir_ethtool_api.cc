#include "collectors/ethtool/capture_dir_ethtool_api.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectors/ethtool/ethtool_text.h"
#include "daemon/common/file_reader.h"
#include "daemon/common/status.h"

namespace fabricmon::collectors {
namespace {

// The largest real capture is 17 KB; refuse anything absurd rather than allocate for it.
constexpr size_t kMaxCaptureBytes = 16 << 20;

// Reads a whole regular file (opened afresh: a writer may have renamed a new one over it).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  std::string content;
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    content.reserve(static_cast<size_t>(st.st_size) + 1);
  }
  char buffer[16384];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const int error = errno;
      close(fd);
      return ErrnoToStatus(error, absl::StrCat("read ", path));
    }
    if (n == 0) {
      break;
    }
    content.append(buffer, static_cast<size_t>(n));
    if (content.size() > kMaxCaptureBytes) {
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": larger than ", kMaxCaptureBytes, " bytes"));
    }
  }
  close(fd);
  return content;
}

class CaptureDirEthtoolApi final : public EthtoolApi {
 public:
  explicit CaptureDirEthtoolApi(std::string dir) : dir_(std::move(dir)) {}

  absl::StatusOr<EthtoolDriverInfo> GetDriver(absl::string_view netdev) override {
    FABRICMON_RETURN_IF_ERROR(CheckNetdev(netdev));
    EthtoolDriverInfo info;
    absl::StatusOr<std::string> driver = ReadWholeFile(JoinPath(NetdevDir(netdev), "driver"));
    if (driver.ok()) {
      info.driver = ethtool::ParseEthtoolDriverText(*driver);
    } else if (!absl::IsNotFound(driver.status())) {
      return driver.status();
    }
    absl::StatusOr<std::vector<ethtool::EthtoolStat>> stats = ReadStats(netdev);
    if (stats.ok()) {
      info.n_stats = static_cast<uint32_t>(stats->size());
    }
    return info;
  }

  absl::StatusOr<std::vector<std::string>> GetStringSet(absl::string_view netdev) override {
    absl::StatusOr<std::vector<ethtool::EthtoolStat>> stats = ReadStats(netdev);
    if (!stats.ok()) {
      return stats.status();
    }
    std::vector<std::string> names;
    names.reserve(stats->size());
    for (ethtool::EthtoolStat& stat : *stats) {
      names.push_back(std::move(stat.key));
    }
    return names;
  }

  absl::Status GetStats(absl::string_view netdev, std::vector<uint64_t>& values) override {
    if (values.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ethtool ", netdev, ": GetStats needs the string-set size"));
    }
    absl::StatusOr<std::vector<ethtool::EthtoolStat>> stats = ReadStats(netdev);
    if (!stats.ok()) {
      return stats.status();
    }
    // Like older kernels: the current values and count, whatever the caller's size was; the
    // collector re-reads the names when the count differs.
    values.resize(stats->size());
    for (size_t i = 0; i < stats->size(); ++i) {
      values[i] = (*stats)[i].value;
    }
    return absl::OkStatus();
  }

 private:
  std::string NetdevDir(absl::string_view netdev) const { return JoinPath(dir_, netdev); }

  absl::Status CheckNetdev(absl::string_view netdev) const {
    // A name that is not a plain directory entry can never be a netdev (and must not walk out).
    if (netdev.empty() || netdev == "." || netdev == ".." ||
        netdev.find('/') != absl::string_view::npos) {
      return absl::NotFoundError(absl::StrCat("ethtool ", netdev, ": No such device"));
    }
    struct stat st;
    if (stat(NetdevDir(netdev).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(
          absl::StrCat("ethtool ", netdev, ": No such device (no ", NetdevDir(netdev), ")"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<ethtool::EthtoolStat>> ReadStats(absl::string_view netdev) const {
    FABRICMON_RETURN_IF_ERROR(CheckNetdev(netdev));
    const std::string path = JoinPath(NetdevDir(netdev), "statistics");
    absl::StatusOr<std::string> text = ReadWholeFile(path);
    if (!text.ok()) {
      if (absl::IsNotFound(text.status())) {
        return absl::UnimplementedError(
            absl::StrCat("ethtool ", netdev, ": Operation not supported (no ", path, ")"));
      }
      return text.status();
    }
    absl::StatusOr<ethtool::ParsedEthtoolText> parsed = ethtool::ParseEthtoolStatsText(*text);
    if (!parsed.ok()) {
      return Annotate(parsed.status(), path);
    }
    return std::move(parsed->stats);
  }

  const std::string dir_;
};

}  // namespace

std::unique_ptr<EthtoolApi> CreateCaptureDirEthtoolApi(std::string dir) {
  return std::make_unique<CaptureDirEthtoolApi>(std::move(dir));
}

}  // namespace fabricmon::collectors
