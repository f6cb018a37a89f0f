#pragma once

// What a detector concludes: a fault of some kind at some place, with the evidence that tripped
// it. Findings are values; the FindingTracker gives them onset, update and cleared times.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "fabricmon/v1/diagnostics.pb.h"

namespace fabricmon::detectors {

enum class Severity : uint8_t { kInfo = 1, kWarning = 2, kCritical = 3 };
absl::string_view SeverityName(Severity severity);  // "info", "warning", "critical"

// Where: a port of a node's device, a switch port, a node, a GPU's NVLink, or a port of a fabric
// CA (host HCA) that no agent claims.
struct Endpoint {
  // Node name; the switch's name for switch ports; "ca:" + description (or "ca:0x" + GUID) for a
  // fabric CA no agent claims.
  std::string node;
  std::string device;  // RDMA device, netdev, or "" for node-level, switch and fabric-CA subjects
  uint32_t port = 0;
  std::string guid;  // node GUID (switches, HCAs) when known
  bool is_switch = false;
  int32_t gpu = -1;  // NVLink subjects
  int32_t link = -1;

  // "node017 mlx5_0/1", "switch leaf03/17", "ca:storage01 mlx4_0/1", "node017 gpu3 link5",
  // "node017".
  std::string ToString() const;
  bool operator==(const Endpoint& other) const;
  bool operator<(const Endpoint& other) const;
  // Over the fields operator== compares (not guid), so detectors can key per-tick hash maps by
  // endpoint: ordered maps spent most of a tick comparing node names.
  template <typename H>
  friend H AbslHashValue(H h, const Endpoint& endpoint) {
    return H::combine(std::move(h), endpoint.node, endpoint.device, endpoint.port,
                      endpoint.is_switch, endpoint.gpu, endpoint.link);
  }
};

struct Evidence {
  std::string series;               // metric family
  std::vector<std::string> labels;  // "name=value"
  double value = 0;                 // latest value (exported units)
  double rate_per_second = 0;       // or the derived quantity the detector used
  std::string note;                 // what it means, in words
};

// Every kind a detector raises (the strings in Finding::kind), so that counters per kind can
// start at 0: increase() over a counter that appears with its first finding misses that finding.
inline constexpr const char* kFindingKinds[] = {
    "link_flapping",     "link_degraded", "congestion",      "congestion_spreading", "pause_storm",
    "ecn_misconfigured", "tcp_fallback",  "nvlink_degraded", "nvlink_down",          "straggler",
};

// What makes two findings one incident. A port, node or tree root is its subject; a cable is both
// of its ends, whichever end (or topology source) reported it.
enum class Identity : uint8_t { kSubject, kCable };

struct Finding {
  std::string kind;  // link_flapping, link_degraded, congestion, congestion_spreading, pause_storm,
                     // ecn_misconfigured, tcp_fallback, nvlink_degraded, nvlink_down, straggler
  Severity severity = Severity::kWarning;
  Endpoint subject;
  Endpoint peer;  // other end of the subject's cable when known
  bool has_peer = false;
  Identity identity = Identity::kSubject;
  std::string summary;
  std::vector<Evidence> evidence;
  std::vector<Endpoint> victims;  // congestion spreading
  uint32_t depth_hops = 0;
  // Stable identity while the condition lasts: kind + subject, or kind + both cable ends in a
  // canonical order (Identity::kCable with a peer).
  std::string Key() const;
  // Whether `other` (same kind) is about the same cable: an end of one is an end of the other.
  // The tracker uses it to keep one incident when a cable's peer comes and goes.
  bool SharesCableEndWith(const Finding& other) const;
  // Makes the host end (else the smaller end) the subject of a cable finding.
  void OrientCable();
};

// A finding with its life cycle, as kept by the tracker and served to the CLI.
struct TrackedFinding {
  std::string id;
  Finding finding;
  int64_t onset_unix_nanos = 0;
  int64_t updated_unix_nanos = 0;
  int64_t cleared_unix_nanos = 0;  // 0 while active
};

v1::Finding ToProto(const TrackedFinding& tracked);

}  // namespace fabricmon::detectors
