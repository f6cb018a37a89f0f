#pragma once

// An EthtoolApi backed by `ethtool -S` text captures and in-memory edits: the source seam for
// tests and for replaying captures offline (node_exporter's EthtoolFixture). It behaves like the
// kernel where the collector can tell the difference:
//   - unknown netdev → NotFound (ENODEV); a netdev set up without statistics → GetDriver OK,
//     GetStringSet/GetStats Unimplemented (EOPNOTSUPP), like lo or a VLAN device;
//   - GetStats returns the *current* values and count, whatever the caller's set size was (or
//     Aborted, see SetRejectCountMismatch), so adding or removing keys reproduces a DCB key-set
//     change (collectors/ethtool/README.md, "The key set depends on configuration"); an empty
//     `values` is InvalidArgument, as for the ioctl;
//   - keys are kept exactly as given (a trailing space survives, as in the kernel string).
// Not thread-safe.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/ethtool/ethtool_api.h"
#include "collectors/ethtool/ethtool_text.h"

namespace fabricmon::collectors {

class FixtureEthtoolApi final : public EthtoolApi {
 public:
  // Adds (or replaces) a netdev with these statistics, in this order.
  void SetNetdev(const std::string& netdev, const std::string& driver,
                 std::vector<ethtool::EthtoolStat> stats);
  // Adds a netdev from an `ethtool -S` capture file. NotFound if the file is absent,
  // InvalidArgument if it is not a statistics capture (ParseEthtoolStatsText).
  absl::Status LoadCapture(const std::string& netdev, const std::string& driver,
                           const std::string& path);
  // node_exporter's fixture layout: every <dir>/<netdev>/ with a `statistics` file (`ethtool -S`
  // output) and an optional `driver` file (`ethtool -i` output or a bare name). A netdev
  // directory without `statistics` is added without statistics support.
  absl::Status LoadDirectory(const std::string& dir);
  // A netdev whose driver answers GDRVINFO but has no ETH_SS_STATS (EOPNOTSUPP).
  void SetNetdevWithoutStats(const std::string& netdev, const std::string& driver);
  // The netdev disappears: every later call answers NotFound.
  void RemoveNetdev(const std::string& netdev);

  // Edits of one netdev's statistics (no-ops for unknown netdevs). SetStat updates the first key
  // equal to `key`, else appends it (the set grows).
  void SetStat(const std::string& netdev, const std::string& key, uint64_t value);
  void RemoveStat(const std::string& netdev, const std::string& key);  // the set shrinks
  void RenameStat(const std::string& netdev, const std::string& key,
                  const std::string& new_key);  // same size, different names

  // Every call for `netdev` answers `status` until cleared with OkStatus().
  void SetError(const std::string& netdev, absl::Status status);
  // How GetStats answers a caller whose size differs from the current set. By default like
  // older kernels: the current values and count. SetGrowthLimit: Aborted when the set is larger
  // than the caller's size plus `slack` (the ioctl's headroom and guard page).
  // SetRejectCountMismatch: Aborted for any difference, like newer kernels (n_stats = 0).
  void SetGrowthLimit(size_t slack) { growth_limit_ = slack; }
  void SetRejectCountMismatch(bool reject) { reject_count_mismatch_ = reject; }

  // Calls seen per netdev (to prove what the collector does not re-ask).
  int driver_calls(const std::string& netdev) const;
  int string_set_calls(const std::string& netdev) const;
  int stats_calls(const std::string& netdev) const;

  // EthtoolApi.
  absl::StatusOr<EthtoolDriverInfo> GetDriver(absl::string_view netdev) override;
  absl::StatusOr<std::vector<std::string>> GetStringSet(absl::string_view netdev) override;
  absl::Status GetStats(absl::string_view netdev, std::vector<uint64_t>& values) override;

 private:
  struct Netdev {
    std::string driver;
    bool has_stats = true;
    std::vector<ethtool::EthtoolStat> stats;
    absl::Status error;
  };
  struct Calls {
    int driver = 0;
    int string_set = 0;
    int stats = 0;
  };

  // The netdev, or the status the call must return.
  absl::StatusOr<Netdev*> Find(absl::string_view netdev);

  std::map<std::string, Netdev, std::less<>> netdevs_;
  std::map<std::string, Calls, std::less<>> calls_;
  std::optional<size_t> growth_limit_;
  bool reject_count_mismatch_ = false;
};

}  // namespace fabricmon::collectors
