#pragma once

// The detector contract. A detector reads the series store (through FabricView) and the topology
// once per tick and reports the findings that hold now. It keeps whatever per-series state it
// needs between ticks (event times for flap windows, cursors over the sample rings). Detectors
// never touch gRPC or Prometheus; the engine tracks onset/clear and exports.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "daemon/detectors/cable_graph.h"
#include "daemon/detectors/finding.h"
#include "daemon/detectors/series_key.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/config.pb.h"

namespace fabricmon::detectors {

// The canonical endpoint of each port series, kept from tick to tick. Building one scans the
// series' labels, copies strings and looks them up in the graph; every detector asked for it,
// for every port series, every tick, and that was the largest part of a tick per series. The
// endpoints are interned here; each series remembers its own in its memo (Series::memo), under
// an epoch that is this cache's and this graph's alone, so a lookup is a compare and an index.
// The engine calls Reset() when it rebuilds the topology. Not thread-safe: the detector
// thread's, and a series' memo is read and written under its node's lock (ForEachSeries).
class PortCache {
 public:
  PortCache();
  // Forgets every endpoint: the graph they were made canonical in is gone.
  void Reset();
  // Call once per tick, before the lookups.
  void StartTick();
  // Valid until Reset(): endpoints are interned in a deque, whose elements never move.
  const Endpoint& PortOf(const std::string& node, const store::Series& series,
                         const CableGraph& topology);
  size_t endpoints() const { return endpoints_.size(); }

 private:
  uint32_t epoch_;  // unique in the process: two caches never read each other's memos
  absl::flat_hash_map<Endpoint, uint32_t> index_by_endpoint_;
  std::deque<Endpoint> endpoints_;
  size_t lookups_ = 0;  // in the current tick
};

// Read access for one tick. Cheap to build; valid for the tick only.
class FabricView {
 public:
  // `ports`: the engine's cache, kept between ticks (nullptr: one for this view only).
  FabricView(std::vector<std::shared_ptr<store::NodeState>> nodes, const CableGraph& topology,
             int64_t now_unix_nanos, PortCache* ports = nullptr);

  const CableGraph& topology() const { return topology_; }
  // The canonical endpoint of a port series reported by `node`: a fabric-swept CA port belongs to
  // the node claiming its HCA, a netdev to its RDMA port, a switch to its graph name. Valid for
  // the tick. Call it from a ForEachSeries visitor: it keeps its answer in the series' memo,
  // which the node's lock guards.
  const Endpoint& PortOf(const std::string& node, const store::Series& series) const;
  int64_t now_unix_nanos() const { return now_; }
  const std::vector<std::shared_ptr<store::NodeState>>& nodes() const { return nodes_; }

  // Calls `visit(node_name, series)` for every series of `family` on every node, under that
  // node's lock (do not call back into the store from the visitor).
  void ForEachSeries(
      absl::string_view family,
      const std::function<void(const std::string&, const store::Series&)>& visit) const;

 private:
  std::vector<std::shared_ptr<store::NodeState>> nodes_;
  const CableGraph& topology_;
  const int64_t now_;
  std::unique_ptr<PortCache> own_ports_;  // when the caller gave none
  PortCache* ports_;
};

// Several nodes may report one port: its own agent, and fabric sweepers (a CA port swept from the
// fabric; a switch port by every sweeper of its subnet), each on its own schedule. A detector that
// accumulates events from a port must judge one of them, or count every event twice: the port's
// own node where it reports the port, else the smallest node name (stable whatever order the
// store lists nodes in). Offer() every reporter of a family, then ask Judges().
class ReporterChoice {
 public:
  // `expected_ports`: room reserved up front (a tick's table grown from empty spends more time
  // rehashing than looking up).
  explicit ReporterChoice(size_t expected_ports = 0) { chosen_.reserve(expected_ports); }
  void Offer(const Endpoint& endpoint, const std::string& node);
  bool Judges(const Endpoint& endpoint, const std::string& node) const;
  size_t ports() const { return chosen_.size(); }

 private:
  absl::flat_hash_map<Endpoint, std::string> chosen_;  // looked up only, never iterated
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
