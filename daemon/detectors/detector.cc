#include "daemon/detectors/detector.h"

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

Endpoint FabricView::PortOf(const std::string& node, const collectors::SeriesDesc& desc) const {
  return topology_.Canonical(EndpointOf(node, desc));
}

void ReporterChoice::Offer(const Endpoint& endpoint, const std::string& node) {
  auto [it, inserted] = chosen_.emplace(endpoint, node);
  if (inserted || it->second == endpoint.node) {
    return;
  }
  if (node == endpoint.node || node < it->second) {
    it->second = node;
  }
}

bool ReporterChoice::Judges(const Endpoint& endpoint, const std::string& node) const {
  auto it = chosen_.find(endpoint);
  return it == chosen_.end() || it->second == node;
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
