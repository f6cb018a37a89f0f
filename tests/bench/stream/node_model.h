#pragma once

// A GPU node's telemetry as the streaming benchmarks see it: the series set of one DGX-class node
// (9 ConnectX HCA ports with PMA counters, mlx5 hw_counters, port attributes and collector health,
// about 500 series) and a value model that moves the counters like real ones between two
// samples. Shared by fabricmon_load_generator and fabricmon_exposition_bench.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/core/sample.h"

namespace fabricmon::bench {

// How a series moves between two samples one nominal second apart.
enum class Motion : uint8_t {
  kConstant,        // gauges, info, state; and saturating counters pinned at their maximum
  kTrafficWords,    // port_xmit_data / port_rcv_data: 32-bit words, line rate × utilisation
  kTrafficPackets,  // port/unicast xmit/rcv packets: traffic / ~4 KiB MTU
  kCongestion,      // port_xmit_wait: ticks without credits, grows with load
  kActivity,        // hw_counters requests (rx_write/read/atomic_requests): thousands per second
  kLinkError,       // the link's own error counters (symbol errors, link downed, ...): zero on a
                    // healthy link, rising only on a marginal one (ValueModel: bad ports)
  kRare,            // other error and event counters (transport retries, ...): almost always
                    // unchanged
};

struct NodeSeries {
  collectors::SeriesDesc desc;
  uint64_t initial = 0;
  Motion motion = Motion::kConstant;
};

// The series of one node as the real ib_sysfs collector reports them for the sysfs tree at
// `sysfs_root` (one Discover + Collect), with their captured values as initial values.
// NotFound when the tree has no RDMA device.
absl::StatusOr<std::vector<NodeSeries>> LoadNodeSeries(const std::string& sysfs_root);

// The series of the DGX node the benchmarks model: the fixture tree's
// (FABRICMON_DEFAULT_SYSFS_ROOT, loaded once), or 500 synthetic ones where the tree is missing.
// Thread-safe.
const std::vector<NodeSeries>& DgxNodeSeries();

// A synthetic node with exactly `count` series shaped like the ib_sysfs collector's for mlx5
// ports (same metric names, widths, scales and labels via ib_sysfs::SpecForCounter), spread over
// as many HCA ports as needed (about 52 series per port). For exposition benchmarks that need
// many series per node without a fixture.
std::vector<NodeSeries> SyntheticNodeSeries(size_t count);

enum class Profile {
  kIdle,   // no traffic, no errors: every delta is 0
  kMixed,  // half the ports busy at 30-70 % of 400 Gb/s, the rest nearly idle; a few bad links
  kBusy,   // every port at 80-95 %, congestion
};
// In the mixed and busy profiles, the share of ports with a marginal link (ValueModel::bad_ports):
// its error counters rise every few seconds and it goes down now and then, so it stays degraded
// and sometimes flaps; every other port's link error counters stay where they are. A fabric whose
// findings are a fixed few bad cables reaches a steady state a benchmark can measure, where one
// whose every port collects rare errors grows worse for as long as it runs (the detectors'
// windows fill: minutes).
inline constexpr double kBadPortShare = 0.01;
// "idle", "mixed", "busy"; false on anything else.
bool ParseProfile(const std::string& text, Profile* profile);

// What a load generator simulates per node, from its flags: the profile named `profile_name`,
// and `synthetic_series` synthetic series when positive, else the series of the tree at
// `sysfs_root`. InvalidArgument or the loader's error, saying which flag to fix.
struct NodeShape {
  Profile profile = Profile::kMixed;
  std::vector<NodeSeries> series;
};
absl::StatusOr<NodeShape> NodeShapeFromFlags(const std::string& profile_name, int synthetic_series,
                                             const std::string& sysfs_root);

// Advances one node's raw values by one nominal sampling interval (1 s of counter time) per
// Next() call, honouring each counter's width (wrap) and saturation. Deterministic per seed.
// Not thread-safe.
class ValueModel {
 public:
  ValueModel(const std::vector<NodeSeries>& series, Profile profile, uint64_t seed);

  // Values after one more interval, parallel to the series vector.
  const std::vector<uint64_t>& Next();
  const std::vector<uint64_t>& values() const { return values_; }
  // Ports ("device/port") drawn as marginal links, about kBadPortShare of the node's ports.
  const std::vector<std::string>& bad_ports() const { return bad_ports_; }

 private:
  uint64_t Random();
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Random() >> 11) * 0x1.0p-53; }

  const std::vector<NodeSeries>& series_;
  const Profile profile_;
  uint64_t rng_;
  std::vector<uint64_t> values_;
  std::vector<double> utilisation_;  // per series: load of the series' port (0..1)
  std::vector<bool> on_bad_port_;    // per series: its port is a marginal link
  std::vector<std::string> bad_ports_;
};

}  // namespace fabricmon::bench
