#include "tests/bench/stream/node_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectors/core/recording_sink.h"
#include "collectors/ib_sysfs/ib_counters_parser.h"
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#include "daemon/agent/collector_runner.h"
#include "daemon/common/clock.h"
#include "daemon/detectors/families.h"

namespace fabricmon::bench {
namespace {

using collectors::MetricType;
using collectors::Overflow;
using collectors::SeriesDesc;

// 400 Gb/s (NDR) in 32-bit data words per second.
constexpr double kLineRateWordsPerSecond = 400e9 / 32;

Motion MotionOf(const SeriesDesc& desc, uint64_t initial) {
  if (desc.type != MetricType::kCounter || desc.IsSaturated(initial)) {
    return Motion::kConstant;
  }
  const std::string& name = desc.name;
  if (name == "fabricmon_ib_port_xmit_data_bytes_total" ||
      name == "fabricmon_ib_port_rcv_data_bytes_total") {
    return Motion::kTrafficWords;
  }
  if (name == "fabricmon_ib_port_xmit_packets_total" ||
      name == "fabricmon_ib_port_rcv_packets_total" ||
      name == "fabricmon_ib_unicast_xmit_packets_total" ||
      name == "fabricmon_ib_unicast_rcv_packets_total") {
    return Motion::kTrafficPackets;
  }
  if (name == "fabricmon_ib_port_xmit_wait_total") {
    return Motion::kCongestion;
  }
  if (absl::StrContains(name, "_requests_total") && absl::StartsWith(name, "fabricmon_ib_hw_rx_")) {
    return Motion::kActivity;
  }
  // The counters the link detectors (link_degraded, link_flap) read: a link's own errors.
  namespace families = detectors::families;
  for (const char* link_error :
       {families::kIbLinkDowned, families::kIbLinkErrorRecovery, families::kIbSymbolError,
        families::kIbRcvErrors, families::kIbLocalLinkIntegrity, families::kIbBufferOverrun,
        families::kIbRemotePhysical, families::kRoceLinkDownEvents, families::kRocePcsSymbolErrors,
        families::kRoceCrcErrors, families::kNetdevCarrierDown}) {
    if (name == link_error) {
      return Motion::kLinkError;
    }
  }
  return Motion::kRare;
}

// The port a series belongs to ("device/port"), or "" for node-level series.
std::string PortKey(const SeriesDesc& desc) {
  std::string device, port;
  for (const auto& [name, value] : desc.labels) {
    if (name == "device") {
      device = value;
    } else if (name == "port") {
      port = value;
    }
  }
  return device.empty() ? std::string() : absl::StrCat(device, "/", port);
}

// Counter files of an mlx5 port as in the DGX H100 capture (../shared/fixtures/sysfs/gpud-h100).
constexpr const char* kPmaFiles[] = {"VL15_dropped",
                                     "excessive_buffer_overrun_errors",
                                     "link_downed",
                                     "link_error_recovery",
                                     "local_link_integrity_errors",
                                     "multicast_rcv_packets",
                                     "multicast_xmit_packets",
                                     "port_rcv_constraint_errors",
                                     "port_rcv_data",
                                     "port_rcv_errors",
                                     "port_rcv_packets",
                                     "port_rcv_remote_physical_errors",
                                     "port_rcv_switch_relay_errors",
                                     "port_xmit_constraint_errors",
                                     "port_xmit_data",
                                     "port_xmit_discards",
                                     "port_xmit_packets",
                                     "port_xmit_wait",
                                     "symbol_error",
                                     "unicast_rcv_packets",
                                     "unicast_xmit_packets"};
constexpr const char* kHwFiles[] = {"duplicate_request",
                                    "implied_nak_seq_err",
                                    "local_ack_timeout_err",
                                    "out_of_buffer",
                                    "out_of_sequence",
                                    "packet_seq_err",
                                    "req_cqe_error",
                                    "req_cqe_flush_error",
                                    "req_remote_access_errors",
                                    "req_remote_invalid_request",
                                    "resp_cqe_error",
                                    "resp_cqe_flush_error",
                                    "resp_local_length_error",
                                    "resp_remote_access_errors",
                                    "rnr_nak_retry_err",
                                    "roce_adp_retrans",
                                    "roce_adp_retrans_to",
                                    "roce_slow_restart",
                                    "roce_slow_restart_cnps",
                                    "roce_slow_restart_trans",
                                    "rx_atomic_requests",
                                    "rx_dct_connect",
                                    "rx_icrc_encapsulated",
                                    "rx_read_requests",
                                    "rx_write_requests"};

}  // namespace

absl::StatusOr<std::vector<NodeSeries>> LoadNodeSeries(const std::string& sysfs_root) {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(sysfs_root);
  auto created = collectors::IbSysfsCollector::Create(config);
  if (!created.ok()) {
    return created.status();
  }
  agent::CollectorRunner runner(*std::move(created), RealClock::Get());
  v1::Inventory inventory;
  absl::Status discovered = runner.Discover(inventory);
  if (!discovered.ok()) {
    return discovered;
  }
  collectors::RecordingSink sink;
  absl::Status collected = runner.Collect(sink);
  if (!collected.ok()) {
    return collected;
  }
  std::vector<NodeSeries> series;
  for (const collectors::RecordedSample& sample : sink.samples()) {
    // The collection's own duration is this load's timing, not data: fix it so the set is
    // deterministic.
    const uint64_t initial =
        sample.series.name == "fabricmon_collector_duration_seconds" ? 250000 : sample.raw_value;
    series.push_back({sample.series, initial, MotionOf(sample.series, initial)});
  }
  return series;
}

std::vector<NodeSeries> SyntheticNodeSeries(size_t count) {
  std::vector<NodeSeries> series;
  series.reserve(count);
  auto add = [&](SeriesDesc desc, uint64_t initial) {
    if (series.size() < count) {
      const Motion motion = MotionOf(desc, initial);
      series.push_back({std::move(desc), initial, motion});
    }
  };
  for (int device = 0; series.size() < count; ++device) {
    const std::string name = absl::StrCat("mlx5_", device);
    add(collectors::InfoSeries("ib_sysfs", "fabricmon_ib_device_info", "RDMA device identity.",
                               {{"device", name},
                                {"driver", "mlx5_core"},
                                {"fw_ver", "28.39.1002"},
                                {"board_id", "MT_0000000838"},
                                {"hca_type", "MT4129"}}),
        1);
    const collectors::Labels labels = {{"device", name}, {"port", "1"}};
    add(collectors::GaugeSeries("ib_sysfs", "fabricmon_ib_port_state", "Port logical state.",
                                collectors::Unit::kState, 1.0, labels),
        4);
    add(collectors::GaugeSeries("ib_sysfs", "fabricmon_ib_port_phys_state", "Port physical state.",
                                collectors::Unit::kState, 1.0, labels),
        5);
    add(collectors::GaugeSeries("ib_sysfs", "fabricmon_ib_port_rate_bytes_per_second",
                                "Negotiated port data rate.", collectors::Unit::kBytesPerSecond,
                                1.0 / 8, labels),
        400000000000);
    for (const char* file : kPmaFiles) {
      const collectors::ib_sysfs::CounterSpec spec = collectors::ib_sysfs::SpecForCounter(
          collectors::ib_sysfs::CounterGroup::kCounters, file, /*pma_extended=*/true, "mlx5_core");
      add(collectors::CounterSeries("ib_sysfs", spec.metric, spec.help, spec.unit, spec.width_bits,
                                    spec.overflow, spec.scale, labels),
          spec.width_bits >= 64 ? 1000000000 + device : 0);
    }
    for (const char* file : kHwFiles) {
      const collectors::ib_sysfs::CounterSpec spec = collectors::ib_sysfs::SpecForCounter(
          collectors::ib_sysfs::CounterGroup::kHwCounters, file, true, "mlx5_core");
      add(collectors::CounterSeries("ib_sysfs", spec.metric, spec.help, spec.unit, spec.width_bits,
                                    spec.overflow, spec.scale, labels),
          0);
    }
    add(collectors::GaugeSeries("ib_sysfs", "fabricmon_ib_port_unreadable_counters",
                                "Counter files of the port that are not read.",
                                collectors::Unit::kNone, 1.0, labels),
        0);
  }
  return series;
}

bool ParseProfile(const std::string& text, Profile* profile) {
  if (text == "idle") {
    *profile = Profile::kIdle;
  } else if (text == "mixed") {
    *profile = Profile::kMixed;
  } else if (text == "busy") {
    *profile = Profile::kBusy;
  } else {
    return false;
  }
  return true;
}

absl::StatusOr<NodeShape> NodeShapeFromFlags(const std::string& profile_name, int synthetic_series,
                                             const std::string& sysfs_root) {
  NodeShape shape;
  if (!ParseProfile(profile_name, &shape.profile)) {
    return absl::InvalidArgumentError("--profile must be idle, mixed or busy");
  }
  if (synthetic_series > 0) {
    shape.series = SyntheticNodeSeries(static_cast<size_t>(synthetic_series));
    return shape;
  }
  absl::StatusOr<std::vector<NodeSeries>> loaded = LoadNodeSeries(sysfs_root);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("cannot load the node's series from ", sysfs_root, ": ",
                                     loaded.status().message(), " (use --synthetic_series=500)"));
  }
  shape.series = *std::move(loaded);
  return shape;
}

ValueModel::ValueModel(const std::vector<NodeSeries>& series, Profile profile, uint64_t seed)
    : series_(series), profile_(profile), rng_(seed * 0x9E3779B97F4A7C15ull + 1) {
  values_.reserve(series.size());
  utilisation_.reserve(series.size());
  on_bad_port_.reserve(series.size());
  // One load and one link quality per port, shared by the port's series (its packets follow its
  // bytes, its errors its cable).
  struct Port {
    std::string key;
    double load = 0;
    bool bad = false;
  };
  std::vector<Port> ports;
  for (const NodeSeries& s : series) {
    values_.push_back(s.initial);
    const std::string key = PortKey(s.desc);
    auto it = std::find_if(ports.begin(), ports.end(), [&](const Port& p) { return p.key == key; });
    if (it == ports.end()) {
      Port port{key};
      switch (profile_) {
        case Profile::kIdle:
          break;
        case Profile::kMixed:
          port.load = (ports.size() % 2 == 0) ? 0.3 + 0.4 * Uniform() : 0.02 * Uniform();
          break;
        case Profile::kBusy:
          port.load = 0.8 + 0.15 * Uniform();
          break;
      }
      // Device-wide series ("mlx5_0/", no port label) have no link of their own.
      const bool has_link = !key.empty() && key.back() != '/';
      port.bad = profile_ != Profile::kIdle && has_link && Uniform() < kBadPortShare;
      if (port.bad) {
        bad_ports_.push_back(key);
      }
      ports.push_back(std::move(port));
      it = ports.end() - 1;
    }
    utilisation_.push_back(it->load);
    on_bad_port_.push_back(it->bad);
  }
}

uint64_t ValueModel::Random() {
  // xorshift64*: fast, deterministic, good enough for load shapes.
  rng_ ^= rng_ >> 12;
  rng_ ^= rng_ << 25;
  rng_ ^= rng_ >> 27;
  return rng_ * 0x2545F4914F6CDD1Dull;
}

const std::vector<uint64_t>& ValueModel::Next() {
  if (profile_ == Profile::kIdle) {
    return values_;
  }
  for (size_t i = 0; i < series_.size(); ++i) {
    const NodeSeries& s = series_[i];
    const double load = utilisation_[i];
    // ±10 % jitter around the port's load, per sample.
    const double jittered = load * (0.9 + 0.2 * Uniform());
    uint64_t delta = 0;
    switch (s.motion) {
      case Motion::kConstant:
        continue;
      case Motion::kTrafficWords:
        delta = static_cast<uint64_t>(jittered * kLineRateWordsPerSecond);
        break;
      case Motion::kTrafficPackets:
        // 4 KiB MTU: packets = words × 4 / 4096.
        delta = static_cast<uint64_t>(jittered * kLineRateWordsPerSecond / 1024);
        break;
      case Motion::kCongestion:
        // Waiting grows sharply near saturation; a lightly loaded port hardly waits.
        delta = load > 0.5 ? static_cast<uint64_t>(2e6 * (load - 0.5) * Uniform()) : 0;
        break;
      case Motion::kActivity:
        delta = static_cast<uint64_t>(jittered * 2e5 * Uniform());
        break;
      case Motion::kLinkError:
        if (on_bad_port_[i]) {
          // A marginal link: errors every few seconds (link_degraded's 10 in 5 minutes within
          // the first minute), and it goes down about every 4 minutes (so flaps, two downs in
          // link_flap's 5-minute window, now and then).
          const bool down = s.desc.name == detectors::families::kIbLinkDowned ||
                            s.desc.name == detectors::families::kRoceLinkDownEvents ||
                            s.desc.name == detectors::families::kNetdevCarrierDown;
          delta =
              down ? (Uniform() < 1.0 / 240 ? 1 : 0) : (Uniform() < 0.2 ? 1 + (Random() & 3) : 0);
        }
        break;
      case Motion::kRare:
        delta = Uniform() < 0.002 ? 1 + (Random() & 3) : 0;
        break;
    }
    const uint64_t max = s.desc.MaxRaw();
    uint64_t& value = values_[i];
    if (s.desc.overflow == Overflow::kSaturates) {
      value = max - value < delta ? max : value + delta;
    } else {
      value = (value + delta) & max;  // wraps modulo 2^width (max is all ones)
    }
  }
  return values_;
}

const std::vector<NodeSeries>& DgxNodeSeries() {
  static const std::vector<NodeSeries>* series = [] {
    auto loaded = LoadNodeSeries(FABRICMON_DEFAULT_SYSFS_ROOT);
    return new std::vector<NodeSeries>(loaded.ok() ? *std::move(loaded) : SyntheticNodeSeries(500));
  }();
  return *series;
}

}  // namespace fabricmon::bench
