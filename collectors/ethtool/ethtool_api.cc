#include "collectors/ethtool/ethtool_api.h"

#include <linux/ethtool.h>
#include <linux/netlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/status.h"

namespace fabricmon::collectors {
namespace {

// GSTRINGS is retried when the set changes between counting and reading it.
constexpr int kStringSetAttempts = 3;
// The kernel refuses sets larger than S32_MAX / ETH_GSTRING_LEN; anything near that is garbage.
constexpr uint32_t kMaxStats = 1u << 20;

std::string FixedString(const char* data, size_t capacity) {
  return std::string(data, strnlen(data, capacity));
}

// Memory for one SIOCETHTOOL reply, ending exactly at a PROT_NONE guard page. On older kernels
// GSTRINGS and GSTATS ignore the length the caller passes and copy the driver's *current* count
// (net/ethtool/ioctl.c: ethtool_get_strings / ethtool_get_stats): if the set grew since it was
// counted, the copy runs into the guard page and the ioctl fails with EFAULT instead of writing
// past a heap buffer. Reused across calls; grows on demand. Not thread-safe.
class GuardedBuffer {
 public:
  GuardedBuffer() = default;
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  ~GuardedBuffer() { Release(); }

  // Returns `bytes` of zeroed memory whose last byte is right before the guard page, or nullptr
  // (errno set) if the mapping fails.
  void* Get(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t data_pages = (bytes + page - 1) / page;
    if (data_pages > data_pages_) {
      Release();
      void* map = mmap(nullptr, (data_pages + 1) * page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (map == MAP_FAILED) {
        return nullptr;
      }
      if (mprotect(static_cast<char*>(map) + data_pages * page, page, PROT_NONE) != 0) {
        const int saved = errno;
        munmap(map, (data_pages + 1) * page);
        errno = saved;
        return nullptr;
      }
      map_ = map;
      data_pages_ = data_pages;
    }
    char* end = static_cast<char*>(map_) + data_pages_ * page;
    char* start = end - bytes;
    std::memset(start, 0, bytes);
    return start;
  }

 private:
  void Release() {
    if (map_ != nullptr) {
      munmap(map_, (data_pages_ + 1) * static_cast<size_t>(sysconf(_SC_PAGESIZE)));
      map_ = nullptr;
      data_pages_ = 0;
    }
  }

  void* map_ = nullptr;
  size_t data_pages_ = 0;
};

class IoctlEthtoolApi final : public EthtoolApi {
 public:
  IoctlEthtoolApi() {
    // ethtool(8) does the same: an AF_INET datagram socket, else a generic netlink one (kernels
    // built without IPv4). The ioctl acts in the socket's network namespace.
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
    }
    if (fd_ < 0) {
      socket_errno_ = errno;
    }
  }
  ~IoctlEthtoolApi() override {
    if (fd_ >= 0) {
      close(fd_);
    }
  }

  absl::StatusOr<EthtoolDriverInfo> GetDriver(absl::string_view netdev) override {
    ethtool_drvinfo info{};
    info.cmd = ETHTOOL_GDRVINFO;
    absl::Status status = Ioctl(netdev, &info, "ETHTOOL_GDRVINFO");
    if (!status.ok()) {
      return status;
    }
    EthtoolDriverInfo out;
    out.driver = FixedString(info.driver, sizeof(info.driver));
    out.version = FixedString(info.version, sizeof(info.version));
    out.fw_version = FixedString(info.fw_version, sizeof(info.fw_version));
    out.bus_info = FixedString(info.bus_info, sizeof(info.bus_info));
    out.n_stats = info.n_stats;
    return out;
  }

  absl::StatusOr<std::vector<std::string>> GetStringSet(absl::string_view netdev) override {
    for (int attempt = 0; attempt < kStringSetAttempts; ++attempt) {
      absl::StatusOr<uint32_t> count = CountStats(netdev);
      if (!count.ok()) {
        return count.status();
      }
      if (*count == 0) {
        return std::vector<std::string>();
      }
      if (*count > kMaxStats) {
        return absl::OutOfRangeError(
            absl::StrCat("ethtool ", netdev, ": implausible ETH_SS_STATS size ", *count));
      }
      const size_t bytes = offsetof(ethtool_gstrings, data) + size_t{*count} * ETH_GSTRING_LEN;
      auto* strings = static_cast<ethtool_gstrings*>(buffer_.Get(bytes));
      if (strings == nullptr) {
        return ErrnoToStatus(errno, "ethtool: mmap");
      }
      strings->cmd = ETHTOOL_GSTRINGS;
      strings->string_set = ETH_SS_STATS;
      strings->len = *count;
      const int error = RawIoctl(netdev, strings);
      if (error == EFAULT) {
        continue;  // the set grew between GSSET_INFO and GSTRINGS: count again
      }
      if (error != 0) {
        return ErrnoToStatus(error, absl::StrCat("ethtool ETHTOOL_GSTRINGS ", netdev));
      }
      if (strings->len != *count) {
        // Older kernels report a smaller current count; newer ones answer len 0 for any
        // mismatch (the set changed between GSSET_INFO and GSTRINGS): count again.
        continue;
      }
      std::vector<std::string> names;
      names.reserve(*count);
      const auto* data = reinterpret_cast<const char*>(strings->data);
      for (uint32_t i = 0; i < *count; ++i) {
        names.push_back(FixedString(data + size_t{i} * ETH_GSTRING_LEN, ETH_GSTRING_LEN));
      }
      return names;
    }
    return absl::AbortedError(
        absl::StrCat("ethtool ", netdev, ": ETH_SS_STATS kept changing while being read"));
  }

  absl::Status GetStats(absl::string_view netdev, std::vector<uint64_t>& values) override {
    const size_t expected = values.size();
    if (expected == 0 || expected > kMaxStats) {
      return absl::InvalidArgumentError(
          absl::StrCat("ethtool ", netdev, ": GetStats needs the string-set size, got ", expected));
    }
    // Kernels answer a count that differs from the caller's in one of two ways
    // (net/ethtool/ioctl.c, ethtool_get_stats):
    //  - older ones (up to at least 6.1) ignore the caller's n_stats and copy the driver's
    //    current count: the buffer keeps headroom, so a DCB change that adds a few per-priority
    //    keys (README.md, "The key set depends on configuration") still yields this cycle's
    //    values, and larger growth runs into the guard page (EFAULT) instead of past the buffer;
    //  - newer ones (seen on 6.18) copy nothing and answer n_stats = 0.
    const size_t capacity = expected + std::max<size_t>(64, expected / 4);
    const size_t bytes = offsetof(ethtool_stats, data) + capacity * sizeof(uint64_t);
    auto* stats = static_cast<ethtool_stats*>(buffer_.Get(bytes));
    if (stats == nullptr) {
      return ErrnoToStatus(errno, "ethtool: mmap");
    }
    stats->cmd = ETHTOOL_GSTATS;
    stats->n_stats = static_cast<uint32_t>(expected);
    const int error = RawIoctl(netdev, stats);
    if (error == EFAULT && stats->n_stats > capacity) {
      // The header (with the new count) was copied before the data hit the guard page.
      return absl::AbortedError(absl::StrCat("ethtool ", netdev, ": ETH_SS_STATS grew from ",
                                             expected, " to ", stats->n_stats));
    }
    if (error != 0) {
      return ErrnoToStatus(error, absl::StrCat("ethtool ETHTOOL_GSTATS ", netdev));
    }
    if (stats->n_stats == 0) {
      return absl::AbortedError(absl::StrCat("ethtool ", netdev, ": ETH_SS_STATS no longer has ",
                                             expected, " statistics"));
    }
    if (stats->n_stats > capacity) {
      // Cannot happen (the copy would have faulted); never trust it with memory.
      return absl::AbortedError(absl::StrCat("ethtool ", netdev, ": ETH_SS_STATS grew"));
    }
    values.assign(stats->data, stats->data + stats->n_stats);
    return absl::OkStatus();
  }

 private:
  // ETHTOOL_GSSET_INFO for ETH_SS_STATS (Linux 2.6.34+), else GDRVINFO's n_stats.
  absl::StatusOr<uint32_t> CountStats(absl::string_view netdev) {
    // ethtool_sset_info ends in a flexible array: one u32 per bit set in sset_mask.
    constexpr size_t kBytes = sizeof(ethtool_sset_info) + sizeof(uint32_t);
    alignas(ethtool_sset_info) unsigned char storage[kBytes] = {};
    auto* sset = reinterpret_cast<ethtool_sset_info*>(storage);
    sset->cmd = ETHTOOL_GSSET_INFO;
    sset->sset_mask = uint64_t{1} << ETH_SS_STATS;
    absl::Status status = Ioctl(netdev, sset, "ETHTOOL_GSSET_INFO");
    if (status.ok()) {
      // The kernel clears the bit when the driver has no such set (get_sset_count fails).
      return (sset->sset_mask & (uint64_t{1} << ETH_SS_STATS)) != 0 ? sset->data[0] : 0;
    }
    if (!absl::IsUnimplemented(status)) {
      return status;
    }
    absl::StatusOr<EthtoolDriverInfo> info = GetDriver(netdev);
    if (!info.ok()) {
      return info.status();
    }
    return info->n_stats;
  }

  // Returns 0 or the errno of the failed ioctl.
  int RawIoctl(absl::string_view netdev, void* data) {
    if (socket_errno_ != 0) {
      return socket_errno_;
    }
    if (netdev.empty() || netdev.size() >= IFNAMSIZ) {
      return ENODEV;  // no such name can exist; the kernel would say the same
    }
    ifreq request{};
    std::memcpy(request.ifr_name, netdev.data(), netdev.size());
    request.ifr_data = static_cast<char*>(data);
    return ioctl(fd_, SIOCETHTOOL, &request) == 0 ? 0 : errno;
  }

  absl::Status Ioctl(absl::string_view netdev, void* data, const char* what) {
    const int error = RawIoctl(netdev, data);
    return error == 0 ? absl::OkStatus()
                      : ErrnoToStatus(error, absl::StrCat("ethtool ", what, " ", netdev));
  }

  int fd_ = -1;
  int socket_errno_ = 0;
  GuardedBuffer buffer_;
};

}  // namespace

std::unique_ptr<EthtoolApi> CreateIoctlEthtoolApi() { return std::make_unique<IoctlEthtoolApi>(); }

}  // namespace fabricmon::collectors
