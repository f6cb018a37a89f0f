#include "tests/fakes/ethtool/fixture_ethtool_api.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/file_reader.h"
#include "daemon/common/status.h"

namespace fabricmon::collectors {
namespace {

// Captures are small (the largest real one is 17 KB); refuse anything absurd.
constexpr size_t kMaxCaptureBytes = 16 << 20;

}  // namespace

void FixtureEthtoolApi::SetNetdev(const std::string& netdev, const std::string& driver,
                                  std::vector<ethtool::EthtoolStat> stats) {
  Netdev& entry = netdevs_[netdev];
  entry.driver = driver;
  entry.has_stats = true;
  entry.stats = std::move(stats);
  entry.error = absl::OkStatus();
}

absl::Status FixtureEthtoolApi::LoadCapture(const std::string& netdev, const std::string& driver,
                                            const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxCaptureBytes);
  if (!text.ok()) {
    return text.status();
  }
  absl::StatusOr<ethtool::ParsedEthtoolText> parsed = ethtool::ParseEthtoolStatsText(*text);
  if (!parsed.ok()) {
    return Annotate(parsed.status(), path);
  }
  SetNetdev(netdev, driver, std::move(parsed->stats));
  return absl::OkStatus();
}

absl::Status FixtureEthtoolApi::LoadDirectory(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(dir);
  if (!names.ok()) {
    return names.status();
  }
  for (const std::string& name : *names) {
    const std::string base = JoinPath(dir, name);
    absl::StatusOr<std::string> driver_text = ReadSmallFile(JoinPath(base, "driver"));
    const std::string driver =
        driver_text.ok() ? ethtool::ParseEthtoolDriverText(*driver_text) : std::string();
    const std::string statistics = JoinPath(base, "statistics");
    absl::Status status = LoadCapture(name, driver, statistics);
    if (absl::IsNotFound(status)) {
      SetNetdevWithoutStats(name, driver);
    } else if (!status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

void FixtureEthtoolApi::SetNetdevWithoutStats(const std::string& netdev,
                                              const std::string& driver) {
  Netdev& entry = netdevs_[netdev];
  entry.driver = driver;
  entry.has_stats = false;
  entry.stats.clear();
  entry.error = absl::OkStatus();
}

void FixtureEthtoolApi::RemoveNetdev(const std::string& netdev) { netdevs_.erase(netdev); }

void FixtureEthtoolApi::SetStat(const std::string& netdev, const std::string& key, uint64_t value) {
  auto it = netdevs_.find(netdev);
  if (it == netdevs_.end()) {
    return;
  }
  for (ethtool::EthtoolStat& stat : it->second.stats) {
    if (stat.key == key) {
      stat.value = value;
      return;
    }
  }
  it->second.stats.push_back({key, value});
}

void FixtureEthtoolApi::RemoveStat(const std::string& netdev, const std::string& key) {
  auto it = netdevs_.find(netdev);
  if (it == netdevs_.end()) {
    return;
  }
  auto& stats = it->second.stats;
  stats.erase(std::remove_if(stats.begin(), stats.end(),
                             [&](const ethtool::EthtoolStat& s) { return s.key == key; }),
              stats.end());
}

void FixtureEthtoolApi::RenameStat(const std::string& netdev, const std::string& key,
                                   const std::string& new_key) {
  auto it = netdevs_.find(netdev);
  if (it == netdevs_.end()) {
    return;
  }
  for (ethtool::EthtoolStat& stat : it->second.stats) {
    if (stat.key == key) {
      stat.key = new_key;
      return;
    }
  }
}

void FixtureEthtoolApi::SetError(const std::string& netdev, absl::Status status) {
  auto it = netdevs_.find(netdev);
  if (it != netdevs_.end()) {
    it->second.error = std::move(status);
  }
}

int FixtureEthtoolApi::driver_calls(const std::string& netdev) const {
  auto it = calls_.find(netdev);
  return it == calls_.end() ? 0 : it->second.driver;
}

int FixtureEthtoolApi::string_set_calls(const std::string& netdev) const {
  auto it = calls_.find(netdev);
  return it == calls_.end() ? 0 : it->second.string_set;
}

int FixtureEthtoolApi::stats_calls(const std::string& netdev) const {
  auto it = calls_.find(netdev);
  return it == calls_.end() ? 0 : it->second.stats;
}

absl::StatusOr<FixtureEthtoolApi::Netdev*> FixtureEthtoolApi::Find(absl::string_view netdev) {
  auto it = netdevs_.find(netdev);
  if (it == netdevs_.end()) {
    return absl::NotFoundError(absl::StrCat("ethtool ", netdev, ": No such device"));
  }
  if (!it->second.error.ok()) {
    return it->second.error;
  }
  return &it->second;
}

absl::StatusOr<EthtoolDriverInfo> FixtureEthtoolApi::GetDriver(absl::string_view netdev) {
  ++calls_[std::string(netdev)].driver;
  absl::StatusOr<Netdev*> found = Find(netdev);
  if (!found.ok()) {
    return found.status();
  }
  EthtoolDriverInfo info;
  info.driver = (*found)->driver;
  info.n_stats = static_cast<uint32_t>((*found)->stats.size());
  return info;
}

absl::StatusOr<std::vector<std::string>> FixtureEthtoolApi::GetStringSet(absl::string_view netdev) {
  ++calls_[std::string(netdev)].string_set;
  absl::StatusOr<Netdev*> found = Find(netdev);
  if (!found.ok()) {
    return found.status();
  }
  if (!(*found)->has_stats) {
    return absl::UnimplementedError(absl::StrCat("ethtool ", netdev, ": Operation not supported"));
  }
  std::vector<std::string> names;
  names.reserve((*found)->stats.size());
  for (const ethtool::EthtoolStat& stat : (*found)->stats) {
    names.push_back(stat.key);
  }
  return names;
}

absl::Status FixtureEthtoolApi::GetStats(absl::string_view netdev, std::vector<uint64_t>& values) {
  ++calls_[std::string(netdev)].stats;
  absl::StatusOr<Netdev*> found = Find(netdev);
  if (!found.ok()) {
    return found.status();
  }
  if (!(*found)->has_stats) {
    return absl::UnimplementedError(absl::StrCat("ethtool ", netdev, ": Operation not supported"));
  }
  if (values.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ethtool ", netdev, ": GetStats needs the string-set size"));
  }
  const std::vector<ethtool::EthtoolStat>& stats = (*found)->stats;
  if ((growth_limit_.has_value() && stats.size() > values.size() + *growth_limit_) ||
      (reject_count_mismatch_ && stats.size() != values.size())) {
    return absl::AbortedError(absl::StrCat("ethtool ", netdev, ": ETH_SS_STATS changed"));
  }
  values.resize(stats.size());
  for (size_t i = 0; i < stats.size(); ++i) {
    values[i] = stats[i].value;
  }
  return absl::OkStatus();
}

}  // namespace fabricmon::collectors
