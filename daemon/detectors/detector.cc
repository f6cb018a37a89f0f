#include "daemon/detectors/detector.h"

#include <atomic>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::detectors {

using store::Series;
using store::StoredSample;

namespace {
void VisitOnEveryNode(const std::vector<std::shared_ptr<store::NodeState>>& nodes,
                      absl::string_view family, bool only_changing,
                      const std::function<void(const std::string&, const Series&)>& visit) {
  if (nodes.empty()) {
    return;
  }
  // The nodes of a view share one store: the family is looked up there once for all of them.
  const store::FamilyKey key = nodes.front()->KeyOfFamily(family);
  for (const auto& node : nodes) {
    node->VisitFamily(
        key, [&](const Series& series) { visit(node->name(), series); }, only_changing);
  }
}
}  // namespace

void FabricView::ForEachSeries(
    absl::string_view family,
    const std::function<void(const std::string&, const Series&)>& visit) const {
  VisitOnEveryNode(nodes_, family, /*only_changing=*/false, visit);
}

void FabricView::ForEachChangingSeries(
    absl::string_view family,
    const std::function<void(const std::string&, const Series&)>& visit) const {
  VisitOnEveryNode(nodes_, family, /*only_changing=*/true, visit);
}

void FabricView::ForEachChangingSeriesOf(
    absl::Span<const char* const> families,
    const std::function<void(size_t, const std::string&, const Series&)>& visit) const {
  if (nodes_.empty()) {
    return;
  }
  // The nodes of a view share one store: each family is looked up there once for all of them.
  std::vector<store::FamilyKey> keys;
  keys.reserve(families.size());
  for (const char* family : families) {
    keys.push_back(nodes_.front()->KeyOfFamily(family));
  }
  for (const auto& node : nodes_) {
    node->VisitFamilies(
        keys, [&](size_t i, const Series& series) { visit(i, node->name(), series); },
        /*only_changing=*/true);
  }
}

namespace {
// Numbers unique in the process (0 is nobody's: a series' memo starts there). After 2^32 of
// them a tag comes round again; the lookups still check the slot's series id.
std::atomic<uint32_t> last_tag{0};
std::atomic<uint64_t> last_serial{0};

uint32_t NewTag() {
  uint32_t tag;
  do {
    tag = last_tag.fetch_add(1, std::memory_order_relaxed) + 1;
  } while (tag == 0);
  return tag;
}
}  // namespace

SeriesCache::SeriesCache() : memo_tag_(NewTag()), port_epoch_(NewTag()) {}

void SeriesCache::ResetPorts() {
  port_epoch_ = NewTag();
  index_by_endpoint_.clear();
  ports_.clear();
}

void SeriesCache::StartTick() {
  // Ports of series gone stay interned until the next rebuild; a topology that stays the same
  // for days under series churn (container netdevs come and go) must not grow it without bound.
  if (ports_.size() > 2 * port_lookups_ + 4096) {
    ResetPorts();
  }
  port_lookups_ = 0;
  if (++tick_ % kSweepEveryTicks == 0) {
    Sweep();
  }
}

void SeriesCache::Sweep() {
  for (auto it = slot_by_series_id_.begin(); it != slot_by_series_id_.end();) {
    Slot& slot = slots_[it->second];
    if (tick_ - slot.last_tick >= kSweepEveryTicks) {
      slot = Slot{};
      free_slots_.push_back(it->second);
      slot_by_series_id_.erase(it++);
    } else {
      ++it;
    }
  }
}

SeriesCache::Slot& SeriesCache::SlotOf(const Series& series) {
  if (series.memo_epoch == memo_tag_ && series.memo < slots_.size()) {
    Slot& slot = slots_[series.memo];
    if (slot.serial != 0 && slot.series_id == series.id) {
      slot.last_tick = tick_;
      return slot;
    }
  }
  // First sight, or the memo was another cache's: find the slot by the series' id.
  auto [it, added] = slot_by_series_id_.try_emplace(series.id, 0);
  if (added) {
    if (free_slots_.empty()) {
      it->second = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    } else {
      it->second = free_slots_.back();
      free_slots_.pop_back();
    }
    Slot& slot = slots_[it->second];
    slot.series_id = series.id;
    slot.serial = last_serial.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  series.memo_epoch = memo_tag_;
  series.memo = it->second;
  Slot& slot = slots_[it->second];
  slot.last_tick = tick_;
  return slot;
}

SeriesKey SeriesCache::KeyOf(const Series& series) {
  const Slot& slot = SlotOf(series);
  return SeriesKey{series.memo, slot.serial};
}

const Port& SeriesCache::PortOf(const std::string& node, const Series& series,
                                const CableGraph& topology) {
  ++port_lookups_;
  Slot& slot = SlotOf(series);
  if (slot.port_epoch == port_epoch_ && slot.port < ports_.size()) {
    return ports_[slot.port];
  }
  Endpoint endpoint = topology.Canonical(EndpointOf(node, series.desc));
  auto [it, added] = index_by_endpoint_.try_emplace(endpoint, static_cast<uint32_t>(ports_.size()));
  if (added) {
    Port& port = ports_.emplace_back();
    port.peer = topology.PeerOf(endpoint);
    port.endpoint = std::move(endpoint);
    port.index = it->second;
  }
  slot.port = it->second;
  slot.port_epoch = port_epoch_;
  return ports_[it->second];
}

const Port* SeriesCache::FindPort(const Endpoint& endpoint) const {
  auto it = index_by_endpoint_.find(endpoint);
  return it != index_by_endpoint_.end() ? &ports_[it->second] : nullptr;
}

FabricView::FabricView(std::vector<std::shared_ptr<store::NodeState>> nodes,
                       const CableGraph& topology, int64_t now_unix_nanos, SeriesCache* cache)
    : nodes_(std::move(nodes)), topology_(topology), now_(now_unix_nanos), cache_(cache) {
  if (cache_ == nullptr) {
    own_cache_ = std::make_unique<SeriesCache>();
    cache_ = own_cache_.get();
  }
  cache_->StartTick();
}

const Port& FabricView::PortOf(const std::string& node, const store::Series& series) const {
  return cache_->PortOf(node, series, topology_);
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

bool HoldsOneValue(const Series& series) {
  const size_t capacity = series.ring.size();
  if (series.count < 2 || capacity == 0) {
    return true;
  }
  const uint64_t value = series.ring[series.head].raw;
  for (uint32_t back = 1; back < series.count; ++back) {
    if (series.ring[(series.head + capacity - back) % capacity].raw != value) {
      return false;
    }
  }
  return true;
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
