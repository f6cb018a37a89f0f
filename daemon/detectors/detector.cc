#include "daemon/detectors/detector.h"

#include <atomic>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::detectors {

using store::Series;
using store::StoredSample;

void FabricView::ForEachSeries(
    absl::string_view family,
    const std::function<void(const std::string&, const Series&)>& visit) const {
  for (const auto& node : nodes_) {
    node->VisitFamily(family, [&](const Series& series) { visit(node->name(), series); });
  }
}

namespace {
// PortCache epochs. 0 is no cache's (a series' memo starts there); after 2^32 resets an epoch
// comes round again, and PortOf still checks the index it reads.
std::atomic<uint32_t> last_port_cache_epoch{0};

uint32_t NewPortCacheEpoch() {
  uint32_t epoch;
  do {
    epoch = last_port_cache_epoch.fetch_add(1, std::memory_order_relaxed) + 1;
  } while (epoch == 0);
  return epoch;
}
}  // namespace

PortCache::PortCache() : epoch_(NewPortCacheEpoch()) {}

void PortCache::Reset() {
  epoch_ = NewPortCacheEpoch();
  index_by_endpoint_.clear();
  ports_.clear();
}

void PortCache::StartTick() {
  // Ports of series gone stay interned until the next rebuild; a topology that stays the same
  // for days under series churn (container netdevs come and go) must not grow it without bound.
  if (ports_.size() > 2 * lookups_ + 4096) {
    Reset();
  }
  lookups_ = 0;
}

const Port& PortCache::PortOf(const std::string& node, const store::Series& series,
                              const CableGraph& topology) {
  ++lookups_;
  if (series.memo_epoch == epoch_ && series.memo < ports_.size()) {
    return ports_[series.memo];
  }
  Endpoint endpoint = topology.Canonical(EndpointOf(node, series.desc));
  auto [it, added] = index_by_endpoint_.try_emplace(endpoint, static_cast<uint32_t>(ports_.size()));
  if (added) {
    Port& port = ports_.emplace_back();
    port.peer = topology.PeerOf(endpoint);
    port.endpoint = std::move(endpoint);
    port.index = it->second;
  }
  series.memo_epoch = epoch_;
  series.memo = it->second;
  return ports_[it->second];
}

FabricView::FabricView(std::vector<std::shared_ptr<store::NodeState>> nodes,
                       const CableGraph& topology, int64_t now_unix_nanos, PortCache* ports)
    : nodes_(std::move(nodes)), topology_(topology), now_(now_unix_nanos), ports_(ports) {
  if (ports_ == nullptr) {
    own_ports_ = std::make_unique<PortCache>();
    ports_ = own_ports_.get();
  }
  ports_->StartTick();
}

const Port& FabricView::PortOf(const std::string& node, const store::Series& series) const {
  return ports_->PortOf(node, series, topology_);
}

void ReporterChoice::Offer(const Port& port, const std::string& node) {
  const std::string*& chosen = chosen_[port];
  if (chosen == nullptr) {
    chosen = &node;
    return;
  }
  if (*chosen == port.endpoint.node) {
    return;  // the port's own node reports it
  }
  if (node == port.endpoint.node || node < *chosen) {
    chosen = &node;
  }
}

bool ReporterChoice::Judges(const Port& port, const std::string& node) const {
  const std::string* const* chosen = chosen_.Find(port);
  return chosen == nullptr || *chosen == nullptr || **chosen == node;
}

bool Debounce::Observe(bool holds, int64_t sample_time) {
  if (sample_time == last_sample_) {
    return raised_;
  }
  last_sample_ = sample_time;
  if (holds == raised_) {
    streak_ = 0;
  } else if (++streak_ >= n_) {
    raised_ = holds;
    streak_ = 0;
  }
  return raised_;
}

void ForEachNewPair(const Series& series, int64_t* cursor,
                    const std::function<void(const StoredSample&, const StoredSample&)>& visit) {
  if (series.count < 2) {
    if (const StoredSample* latest = series.Latest()) {
      if (*cursor == 0) {
        *cursor = latest->timestamp_unix_nanos - 1;  // first sample: a baseline, not an event
      }
    }
    return;
  }
  const size_t capacity = series.ring.size();
  // Oldest retained sample first.
  const size_t oldest = (series.head + capacity - (series.count - 1)) % capacity;
  for (uint32_t i = 1; i < series.count; ++i) {
    const StoredSample& previous = series.ring[(oldest + i - 1) % capacity];
    const StoredSample& current = series.ring[(oldest + i) % capacity];
    if (current.timestamp_unix_nanos <= *cursor) {
      continue;
    }
    visit(previous, current);
    *cursor = current.timestamp_unix_nanos;
  }
}

uint64_t RawIncrease(const collectors::SeriesDesc& desc, const StoredSample& previous,
                     const StoredSample& current) {
  if (current.raw >= previous.raw) {
    return current.raw - previous.raw;
  }
  if (desc.overflow == collectors::Overflow::kWraps && desc.width_bits < 64 &&
      previous.raw > desc.MaxRaw() / 2) {
    return (desc.MaxRaw() - previous.raw) + current.raw + 1;
  }
  return 0;
}

Endpoint EndpointOf(const std::string& node, const collectors::SeriesDesc& desc) {
  Endpoint endpoint;
  uint32_t port = 0;
  (void)absl::SimpleAtoi(collectors::LabelValue(desc, "port"), &port);
  endpoint.port = port;
  const absl::string_view switch_name = collectors::LabelValue(desc, "switch");
  if (!switch_name.empty()) {
    endpoint.node = std::string(switch_name);
    endpoint.is_switch = true;
    endpoint.guid = std::string(collectors::LabelValue(desc, "switch_guid"));
    return endpoint;
  }
  const absl::string_view ca_guid = collectors::LabelValue(desc, "ca_guid");
  if (!ca_guid.empty()) {
    // A CA port the fabric collector swept: not the sweeping node's port. CableGraph::Canonical
    // gives it to the node whose agent claims the GUID.
    const absl::string_view ca = collectors::LabelValue(desc, "ca");
    endpoint.node = absl::StrCat("ca:", ca.empty() ? ca_guid : ca);
    endpoint.guid = std::string(ca_guid);
    return endpoint;
  }
  endpoint.node = node;
  endpoint.device = std::string(collectors::LabelValue(desc, "device"));
  if (endpoint.device.empty()) {
    endpoint.device = std::string(collectors::LabelValue(desc, "netdev"));
    if (endpoint.port == 0 && !endpoint.device.empty()) {
      endpoint.port = 1;
    }
  }
  return endpoint;
}

Evidence MakeEvidence(const collectors::SeriesDesc& desc, double value, double rate,
                      std::string note) {
  Evidence evidence;
  evidence.series = desc.name;
  for (const auto& [name, label_value] : desc.labels) {
    evidence.labels.push_back(absl::StrCat(name, "=", label_value));
  }
  evidence.value = value;
  evidence.rate_per_second = rate;
  evidence.note = std::move(note);
  return evidence;
}

}  // namespace fabricmon::detectors
