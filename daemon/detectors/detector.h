#pragma once

// The detector contract. A detector reads the series store (through FabricView) and the topology
// once per tick and reports the findings that hold now. It keeps whatever per-series state it
// needs between ticks (event times for flap windows, cursors over the sample rings). Detectors
// never touch gRPC or Prometheus; the engine tracks onset/clear and exports.

#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/detectors/cable_graph.h"
#include "daemon/detectors/finding.h"
#include "daemon/detectors/series_key.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/config.pb.h"

namespace fabricmon::detectors {

// A port as the detectors see it under one topology: its canonical endpoint, the other end of its
// cable, and a dense index that per-tick tables can be keyed by (PortTable) instead of hashing or
// comparing endpoints.
struct Port {
  Endpoint endpoint;
  std::optional<Endpoint> peer;  // the topology's, when it names one
  uint32_t index = 0;            // 0, 1, 2… in the order interned; new after every Reset()
};

// What the detectors keep per series from tick to tick, found through the series' memo
// (Series::memo) instead of a hash lookup: at 1,000 nodes, hashing each series into every
// detector's state missed the cache more often than not and was a fifth of a tick.
//
// - A **slot** per series: a dense number that detector state is kept by (SeriesStates, a vector
//   indexed by it, visited in about the order the series are). A slot also carries a serial,
//   unique in the process, so state left by another series that held the slot starts fresh.
//   A slot not looked up for kSweepEveryTicks ticks is freed (a series retired, a netdev gone);
//   the series, if it comes back, gets a new serial and starts fresh, as a new one does.
// - The series' canonical **port** (for port series): building one scans the labels, copies
//   strings and looks them up in the graph. Ports are interned; ResetPorts() forgets them when
//   the graph they were made canonical in is rebuilt.
//
// The memo is tagged with this cache's own number: another cache (the diagnostics' traffic
// reader builds one per request) may overwrite it, and the next lookup here finds the slot again
// by the series' id. Not thread-safe: the detector thread's; a series' memo is read and written
// under its node's lock (ForEachSeries).
class SeriesCache {
 public:
  static constexpr uint32_t kSweepEveryTicks = 600;  // ten minutes at the default tick

  SeriesCache();
  // Forgets every port: the graph they were made canonical in is gone. Slots stay.
  void ResetPorts();
  // Call once per tick, before the lookups.
  void StartTick();
  SeriesKey KeyOf(const store::Series& series);
  // Valid until ResetPorts(): ports are interned in a deque, whose elements never move.
  const Port& PortOf(const std::string& node, const store::Series& series,
                     const CableGraph& topology);
  // The port interned for `endpoint` (canonical, as PortOf makes it) since the last
  // ResetPorts(); null: none.
  const Port* FindPort(const Endpoint& endpoint) const;
  size_t ports() const { return ports_.size(); }
  size_t series() const { return slot_by_series_id_.size(); }
  // Changes at every ResetPorts(): a detector that keeps something by Port::index across ticks
  // drops it when this changes.
  uint32_t port_epoch() const { return port_epoch_; }

 private:
  static constexpr uint32_t kNoPort = UINT32_MAX;
  struct Slot {
    uint64_t series_id = 0;
    uint64_t serial = 0;  // 0: free
    uint32_t port = kNoPort;
    uint32_t port_epoch = 0;
    uint32_t last_tick = 0;
  };
  Slot& SlotOf(const store::Series& series);
  void Sweep();

  const uint32_t memo_tag_;  // unique in the process: two caches never read each other's memos
  uint32_t port_epoch_;
  uint32_t tick_ = 0;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  absl::flat_hash_map<uint64_t, uint32_t> slot_by_series_id_;
  absl::flat_hash_map<Endpoint, uint32_t> index_by_endpoint_;
  std::deque<Port> ports_;
  size_t port_lookups_ = 0;  // in the current tick
};

// Read access for one tick. Cheap to build; valid for the tick only.
class FabricView {
 public:
  // `cache`: the engine's, kept between ticks (nullptr: one for this view only, so detector state
  // kept by its keys lasts one view).
  FabricView(std::vector<std::shared_ptr<store::NodeState>> nodes, const CableGraph& topology,
             int64_t now_unix_nanos, SeriesCache* cache = nullptr);

  const CableGraph& topology() const { return topology_; }
  // The canonical endpoint of a port series reported by `node`: a fabric-swept CA port belongs to
  // the node claiming its HCA, a netdev to its RDMA port, a switch to its graph name. Valid for
  // the tick. Call it from a ForEachSeries visitor: it keeps its answer in the series' memo,
  // which the node's lock guards.
  const Port& PortOf(const std::string& node, const store::Series& series) const;
  // The port PortOf gave for the canonical `endpoint` (null: none yet), to find a topology
  // endpoint's entry in a table kept by Port::index (congestion's measured ports).
  const Port* FindPort(const Endpoint& endpoint) const { return cache_->FindPort(endpoint); }
  // Identifies the Port::index numbering (see SeriesCache::port_epoch()).
  uint32_t port_epoch() const { return cache_->port_epoch(); }
  // The key of a series' detector state (SeriesStates). Call it from a ForEachSeries visitor,
  // like PortOf.
  SeriesKey KeyOf(const store::Series& series) const { return cache_->KeyOf(series); }
  int64_t now_unix_nanos() const { return now_; }
  const std::vector<std::shared_ptr<store::NodeState>>& nodes() const { return nodes_; }

  // Calls `visit(node_name, series)` for every series of `family` on every node, under that
  // node's lock (do not call back into the store from the visitor).
  void ForEachSeries(
      absl::string_view family,
      const std::function<void(const std::string&, const store::Series&)>& visit) const;
  // The same for only the series whose retained samples do not all read one raw value (the
  // complement of HoldsOneValue, known to the store without touching the series): what a
  // detector looking for increases or changes has to read.
  void ForEachChangingSeries(
      absl::string_view family,
      const std::function<void(const std::string&, const store::Series&)>& visit) const;
  // ForEachChangingSeries of several families, node by node: `visit(i, node_name, series)` for
  // the changing series of families[i], each node's families in their order under one taking of
  // its lock (NodeState::VisitFamilies).
  void ForEachChangingSeriesOf(
      absl::Span<const char* const> families,
      const std::function<void(size_t, const std::string&, const store::Series&)>& visit) const;

 private:
  std::vector<std::shared_ptr<store::NodeState>> nodes_;
  const CableGraph& topology_;
  const int64_t now_;
  std::unique_ptr<SeriesCache> own_cache_;  // when the caller gave none
  SeriesCache* cache_;
};

// A table with one entry per port of a tick, indexed by Port::index (a vector: no hashing).
// Entries are value-initialized; valid for one tick (indexes change when the topology does).
template <typename T>
class PortTable {
 public:
  T& operator[](const Port& port) {
    if (port.index >= entries_.size()) {
      entries_.resize(static_cast<size_t>(port.index) + 1);
    }
    return entries_[port.index];
  }
  const T* Find(const Port& port) const {
    return port.index < entries_.size() ? &entries_[port.index] : nullptr;
  }

 private:
  std::vector<T> entries_;
};

// Per-node entries filled from ForEachSeries passes. A pass visits a node's series one after the
// other, so the entry of the last node visited is remembered: the map is searched once per node
// and pass, not once per series (node names share long prefixes, and each search compares
// several of them).
template <typename T>
class ByNode {
 public:
  T& operator[](const std::string& node) {
    if (last_ == nullptr || last_->first != node) {
      last_ = &*entries_.try_emplace(node).first;
    }
    return last_->second;
  }
  std::map<std::string, T>& entries() { return entries_; }

 private:
  std::map<std::string, T> entries_;
  std::pair<const std::string, T>* last_ = nullptr;  // map nodes never move
};

// Drops the entries of nodes the view does not hold: the store forgot them (silent longer than
// node_retention). A detector that keeps state by node name would otherwise keep every name it
// ever saw, for as long as the aggregator runs.
template <typename T>
void ForgetNodesNotIn(const FabricView& view, std::map<std::string, T>& by_node) {
  absl::flat_hash_set<absl::string_view> held;
  held.reserve(view.nodes().size());
  for (const auto& node : view.nodes()) {
    held.insert(node->name());
  }
  for (auto it = by_node.begin(); it != by_node.end();) {
    it = held.contains(it->first) ? std::next(it) : by_node.erase(it);
  }
}

// Several nodes may report one port: its own agent, and fabric sweepers (a CA port swept from the
// fabric; a switch port by every sweeper of its subnet), each on its own schedule. A detector that
// accumulates events from a port must judge one of them, or count every event twice: the port's
// own node where it reports the port, else the smallest node name (stable whatever order the
// store lists nodes in). Offer() every reporter of a family, then ask Judges(). The node names
// must outlive the choice (a FabricView's node names do, for its tick).
class ReporterChoice {
 public:
  void Offer(const Port& port, const std::string& node);
  bool Judges(const Port& port, const std::string& node) const;

 private:
  PortTable<const std::string*> chosen_;  // nullptr: no reporter offered
};

// Debounces a condition judged once per sample: raised after `n` consecutive samples in which it
// holds, cleared after `n` in which it does not. A sample counts once however many detector ticks
// see it (detectors may tick faster than agents sample).
class Debounce {
 public:
  explicit Debounce(uint32_t n = 1) : n_(n < 1 ? 1 : n) {}
  // Judges the sample taken at `sample_time` and returns whether the condition is raised.
  bool Observe(bool holds, int64_t sample_time);
  bool raised() const { return raised_; }

 private:
  uint32_t n_;
  int64_t last_sample_ = 0;
  uint32_t streak_ = 0;  // consecutive samples disagreeing with raised_
  bool raised_ = false;
};

class Detector {
 public:
  virtual ~Detector() = default;
  virtual absl::string_view name() const = 0;
  // Appends the findings that hold at this tick to `out`.
  virtual void Evaluate(const FabricView& view, std::vector<Finding>& out) = 0;
};

// Walks the samples of `series` newer than `*cursor` (a timestamp), oldest first, calling
// `visit(previous, current)` for each consecutive pair, and advances the cursor. Pairs across a
// reset are skipped (the ring restarts at a reset), so deltas are always within one baseline.
void ForEachNewPair(const store::Series& series, int64_t* cursor,
                    const std::function<void(const store::StoredSample& previous,
                                             const store::StoredSample& current)>& visit);

// Whether every sample `series` retains reads the same raw value (true for none or one). A
// detector that looks only for increases or changes (error counters, link downs, port state) has
// nothing to find in such a series and can skip its cursor, which is a cache miss of its own per
// series per tick: most of a fabric's error counters stand still (FabricView::
// ForEachChangingSeries skips them without reading the series at all). Skipping leaves the
// cursor behind, which is harmless: when a change comes, the walk from the old cursor visits
// pairs that all read the same value first, which add nothing.
bool HoldsOneValue(const store::Series& series);

// Counter increase between two samples in raw units, unwinding a wrap of a wrapping counter; 0
// when the counter went down otherwise (reset).
uint64_t RawIncrease(const collectors::SeriesDesc& desc, const store::StoredSample& previous,
                     const store::StoredSample& current);

// Endpoint of a host port series (labels device, port) on `node`, of a switch port series
// (labels switch, port, switch_guid) or of a CA port series (labels ca, ca_guid, port) from the
// fabric collector. Not canonical: FabricView::PortOf is.
Endpoint EndpointOf(const std::string& node, const collectors::SeriesDesc& desc);

// Evidence line for a series.
Evidence MakeEvidence(const collectors::SeriesDesc& desc, double value, double rate,
                      std::string note);

}  // namespace fabricmon::detectors
