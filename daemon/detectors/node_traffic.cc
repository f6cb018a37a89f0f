#include "daemon/detectors/node_traffic.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "daemon/detectors/families.h"

namespace fabricmon::detectors {
namespace {

using store::Rate;
using store::Series;
using store::StoredSample;

// Rate of a counter in exported units per second; false while it has none (fewer than two
// samples since a reset, saturated).
bool RateOf(const Series& series, double* rate) {
  const Rate current = series.CurrentRate();
  if (current.kind != Rate::Kind::kOk) {
    return false;
  }
  *rate = current.per_second;
  return true;
}

// Raw increase over the two newest samples, and the newest sample's time.
bool LatestIncrease(const Series& series, uint64_t* increase, double* seconds, int64_t* at) {
  const StoredSample* latest = series.Latest();
  const StoredSample* previous = series.Previous();
  if (latest == nullptr || previous == nullptr) {
    return false;
  }
  *increase = RawIncrease(series.desc, *previous, *latest);
  *seconds =
      static_cast<double>(latest->timestamp_unix_nanos - previous->timestamp_unix_nanos) / 1e9;
  *at = latest->timestamp_unix_nanos;
  return *seconds > 0;
}

struct Partial {
  NodeTrafficReading reading;
  double hca = 0;
  bool has_hca = false;
  double roce = 0;
  bool has_roce = false;
  double ipoib = 0;
  int64_t hca_sampled = 0;
  int64_t roce_sampled = 0;
  std::vector<Evidence> hca_evidence;
  std::vector<Evidence> roce_evidence;
};

}  // namespace

bool SweptFromFabric(const Series& series) {
  return !collectors::LabelValue(series.desc, "switch").empty() ||
         !collectors::LabelValue(series.desc, "ca_guid").empty();
}

NetdevKinds::NetdevKinds(const FabricView& view,
                         const std::function<bool(const std::string&)>& wanted) {
  view.ForEachSeries(families::kNetdevInfo, [&](const std::string& node, const Series& series) {
    if (!wanted || wanted(node)) {
      kinds_[node][std::string(collectors::LabelValue(series.desc, "netdev"))] =
          std::string(collectors::LabelValue(series.desc, "kind"));
    }
  });
}

const std::string* NetdevKinds::HostKind(const std::string& node, const Series& series) {
  const auto& netdevs = kinds_[node];
  auto found = netdevs.find(collectors::LabelValue(series.desc, "netdev"));
  if (found == netdevs.end() || found->second == "loopback" || found->second == "virtual" ||
      found->second.empty()) {
    return nullptr;
  }
  return &found->second;
}

std::map<std::string, NodeTrafficReading> ReadNodeTraffic(const FabricView& view,
                                                          const std::set<std::string>& only) {
  ByNode<Partial> nodes;
  ByNode<std::optional<bool>> is_wanted;  // whether `only` names the node, asked once per node
  auto wanted = [&](const std::string& node) {
    if (only.empty()) return true;
    std::optional<bool>& answer = is_wanted[node];
    if (!answer.has_value()) answer = only.count(node) > 0;
    return *answer;
  };

  NetdevKinds kinds(view, wanted);
  for (const char* family : {families::kNetdevRxBytes, families::kNetdevTxBytes}) {
    view.ForEachSeries(family, [&](const std::string& node, const Series& series) {
      if (!wanted(node)) return;
      const std::string* kind = kinds.HostKind(node, series);
      if (kind == nullptr) return;
      double rate = 0;
      Partial& partial = nodes[node];
      if (partial.reading.kernel < 0) partial.reading.kernel = 0;
      if (RateOf(series, &rate)) {
        partial.reading.kernel += rate;
        if (*kind == "ipoib") partial.ipoib += rate;
      }
    });
  }
  for (const char* family : {families::kIbXmitData, families::kIbRcvData}) {
    view.ForEachSeries(family, [&](const std::string& node, const Series& series) {
      if (!wanted(node) || SweptFromFabric(series)) return;
      Partial& partial = nodes[node];
      partial.has_hca = true;
      double rate = 0;
      if (RateOf(series, &rate)) {
        partial.hca += rate;
        partial.hca_sampled = std::max(partial.hca_sampled, series.Latest()->timestamp_unix_nanos);
        partial.hca_evidence.push_back(MakeEvidence(series.desc, 0, rate, "RDMA port data"));
      }
    });
  }
  view.ForEachSeries(families::kRoceRdmaBytes, [&](const std::string& node, const Series& series) {
    if (!wanted(node)) return;
    Partial& partial = nodes[node];
    partial.has_roce = true;
    double rate = 0;
    if (RateOf(series, &rate)) {
      partial.roce += rate;
      partial.roce_sampled = std::max(partial.roce_sampled, series.Latest()->timestamp_unix_nanos);
      partial.roce_evidence.push_back(MakeEvidence(series.desc, 0, rate, "RoCE RDMA bytes"));
    }
  });

  // IB wait fraction: XmitWait against XmitData of the same port over the same interval (both
  // come from one read of the port; an interval they do not share is not judged).
  // By node and port: the view's node names and ports stay put for the tick.
  absl::flat_hash_map<std::pair<const std::string*, uint32_t>, std::pair<uint64_t, int64_t>>
      data_words;
  view.ForEachSeries(families::kIbXmitData, [&](const std::string& node, const Series& series) {
    uint64_t words;
    double seconds;
    int64_t at;
    if (wanted(node) && !SweptFromFabric(series) && LatestIncrease(series, &words, &seconds, &at)) {
      data_words[{&node, view.PortOf(node, series).index}] = {words, at};
    }
  });
  view.ForEachSeries(families::kIbXmitWait, [&](const std::string& node, const Series& series) {
    uint64_t wait;
    double seconds;
    int64_t at;
    if (!wanted(node) || SweptFromFabric(series) || !LatestIncrease(series, &wait, &seconds, &at)) {
      return;
    }
    auto data = data_words.find({&node, view.PortOf(node, series).index});
    if (data == data_words.end() || data->second.second != at) {
      return;
    }
    const double total = static_cast<double>(wait) + static_cast<double>(data->second.first);
    const double fraction = total > 0 ? static_cast<double>(wait) / total : 0;
    NodeTrafficReading& reading = nodes[node].reading;
    reading.wait_fraction = std::max(reading.wait_fraction, fraction);
  });
  view.ForEachSeries(
      families::kRocePauseDuration, [&](const std::string& node, const Series& series) {
        uint64_t increase;
        double seconds;
        int64_t at;
        if (!wanted(node) || !LatestIncrease(series, &increase, &seconds, &at)) return;
        const double fraction =
            std::min(1.0, static_cast<double>(increase) * series.desc->scale / seconds);
        NodeTrafficReading& reading = nodes[node].reading;
        reading.pause_fraction = std::max(reading.pause_fraction, fraction);
      });
  view.ForEachSeries(families::kNvlinkErrors, [&](const std::string& node, const Series& series) {
    if (!wanted(node)) return;
    NodeTrafficReading& reading = nodes[node].reading;
    if (reading.nvlink_errors < 0) reading.nvlink_errors = 0;
    double rate = 0;
    if (RateOf(series, &rate)) reading.nvlink_errors += rate;
  });
  view.ForEachSeries(families::kGpuUtilization, [&](const std::string& node, const Series& series) {
    if (!wanted(node)) return;
    if (const StoredSample* latest = series.Latest(); latest != nullptr && !series.absent) {
      NodeTrafficReading& reading = nodes[node].reading;
      reading.gpu = std::max(reading.gpu, collectors::ExportedValue(series.desc, latest->raw));
    }
  });

  std::map<std::string, NodeTrafficReading> readings;
  for (auto& [node, partial] : nodes.entries()) {
    NodeTrafficReading& reading = partial.reading;
    if (partial.has_roce) {
      reading.has_rdma = true;
      reading.rdma = partial.roce;
      reading.sampled = partial.roce_sampled;
      reading.rdma_evidence = std::move(partial.roce_evidence);
    } else if (partial.has_hca) {
      reading.has_rdma = true;
      reading.rdma = std::max(0.0, partial.hca - partial.ipoib);
      reading.sampled = partial.hca_sampled;
      reading.rdma_evidence = std::move(partial.hca_evidence);
    }
    readings.emplace(node, std::move(reading));
  }
  return readings;
}

v1::NodeTraffic ToProto(const std::string& node, const NodeTrafficReading& reading) {
  v1::NodeTraffic out;
  out.set_node(node);
  out.set_rdma_bytes_per_second(reading.has_rdma ? reading.rdma : -1);
  out.set_kernel_bytes_per_second(reading.kernel);
  out.set_wait_fraction(reading.wait_fraction);
  out.set_pause_fraction(reading.pause_fraction);
  out.set_nvlink_errors_per_second(reading.nvlink_errors);
  out.set_gpu_utilization(reading.gpu);
  return out;
}

std::vector<v1::NodeTraffic> NodeTrafficReader::Traffic(
    const std::vector<std::string>& nodes) const {
  const std::set<std::string> wanted(nodes.begin(), nodes.end());
  std::vector<std::shared_ptr<store::NodeState>> states;
  for (const std::string& name : wanted) {
    if (std::shared_ptr<store::NodeState> state = store_.Find(name)) {
      states.push_back(std::move(state));
    }
  }
  const CableGraph no_topology;  // traffic is per node: no port needs resolving
  const FabricView view(states, no_topology, clock_.NowUnixNanos());
  const std::map<std::string, NodeTrafficReading> readings = ReadNodeTraffic(view, wanted);
  std::vector<v1::NodeTraffic> out;
  for (const std::string& node : nodes) {
    if (store_.Find(node) == nullptr) continue;
    auto it = readings.find(node);
    out.push_back(ToProto(node, it != readings.end() ? it->second : NodeTrafficReading{}));
  }
  return out;
}

}  // namespace fabricmon::detectors
