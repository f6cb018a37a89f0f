#include "daemon/detectors/finding.h"

#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/detectors/cable_graph.h"

namespace fabricmon::detectors {

absl::string_view SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kCritical:
      return "critical";
  }
  return "warning";
}

std::string Endpoint::ToString() const {
  if (gpu >= 0) {
    return link >= 0 ? absl::StrCat(node, " gpu", gpu, " link", link)
                     : absl::StrCat(node, " gpu", gpu);
  }
  if (is_switch) {
    return port == 0 ? absl::StrCat("switch ", node) : absl::StrCat("switch ", node, "/", port);
  }
  if (device.empty()) {
    // A node-level subject, or a fabric CA's port ("ca:storage01 mlx4_0/1").
    return port == 0 ? node : absl::StrCat(node, "/", port);
  }
  return port == 0 ? absl::StrCat(node, " ", device) : absl::StrCat(node, " ", device, "/", port);
}

bool Endpoint::operator==(const Endpoint& other) const {
  return std::tie(node, device, port, is_switch, gpu, link) ==
         std::tie(other.node, other.device, other.port, other.is_switch, other.gpu, other.link);
}

bool Endpoint::operator<(const Endpoint& other) const {
  return std::tie(node, device, port, is_switch, gpu, link) <
         std::tie(other.node, other.device, other.port, other.is_switch, other.gpu, other.link);
}

std::string Finding::Key() const {
  if (identity == Identity::kCable && has_peer) {
    // A cable is one finding whichever end reported it.
    const Endpoint& a = subject < peer ? subject : peer;
    const Endpoint& b = subject < peer ? peer : subject;
    return absl::StrCat(kind, ":", a.ToString(), "<->", b.ToString());
  }
  return absl::StrCat(kind, ":", subject.ToString());
}

bool Finding::SharesCableEndWith(const Finding& other) const {
  if (identity != Identity::kCable || other.identity != Identity::kCable || kind != other.kind) {
    return false;
  }
  auto is_end_of = [](const Endpoint& end, const Finding& finding) {
    return end == finding.subject || (finding.has_peer && end == finding.peer);
  };
  return is_end_of(subject, other) || (has_peer && is_end_of(peer, other));
}

void Finding::OrientCable() {
  if (!has_peer) {
    return;
  }
  const bool peer_first = subject.is_switch != peer.is_switch ? subject.is_switch : peer < subject;
  if (peer_first) {
    std::swap(subject, peer);
  }
}

namespace {
// "0x" + 16 hex digits, whatever form the label or topology source gave.
std::string GuidText(const std::string& guid) {
  const std::string canonical = CanonicalGuid(guid);
  return canonical.empty() ? "" : absl::StrCat("0x", canonical);
}

v1::Subject ToSubject(const Endpoint& endpoint, const Endpoint* peer) {
  v1::Subject subject;
  // A switch port is named by its device (the switch), not a node: no agent runs on it.
  if (endpoint.is_switch) {
    subject.set_device(endpoint.node);
    subject.set_is_switch(true);
  } else {
    subject.set_node(endpoint.node);
    subject.set_device(endpoint.device);
  }
  subject.set_port(endpoint.port);
  subject.set_guid(GuidText(endpoint.guid));
  if (endpoint.gpu >= 0) {
    subject.set_has_gpu(true);
    subject.set_gpu(static_cast<uint32_t>(endpoint.gpu));
    subject.set_link(endpoint.link >= 0 ? static_cast<uint32_t>(endpoint.link) : 0);
  }
  if (peer != nullptr) {
    if (peer->is_switch) {
      subject.set_peer_device(peer->node);
      subject.set_peer_is_switch(true);
    } else {
      subject.set_peer_node(peer->node);
      subject.set_peer_device(peer->device);
    }
    subject.set_peer_port(peer->port);
    subject.set_peer_guid(GuidText(peer->guid));
  }
  return subject;
}
}  // namespace

v1::Finding ToProto(const TrackedFinding& tracked) {
  const Finding& finding = tracked.finding;
  v1::Finding out;
  out.set_id(tracked.id);
  out.set_kind(finding.kind);
  out.set_severity(static_cast<v1::Severity>(finding.severity));
  *out.mutable_subject() = ToSubject(finding.subject, finding.has_peer ? &finding.peer : nullptr);
  out.set_summary(finding.summary);
  for (const Evidence& evidence : finding.evidence) {
    v1::Evidence* e = out.add_evidence();
    e->set_series(evidence.series);
    for (const std::string& label : evidence.labels) {
      e->add_labels(label);
    }
    e->set_value(evidence.value);
    e->set_rate_per_second(evidence.rate_per_second);
    e->set_note(evidence.note);
  }
  out.set_onset_unix_nanos(tracked.onset_unix_nanos);
  out.set_updated_unix_nanos(tracked.updated_unix_nanos);
  out.set_cleared_unix_nanos(tracked.cleared_unix_nanos);
  for (const Endpoint& victim : finding.victims) {
    *out.add_victims() = ToSubject(victim, nullptr);
  }
  out.set_depth_hops(finding.depth_hops);
  return out;
}

}  // namespace fabricmon::detectors
