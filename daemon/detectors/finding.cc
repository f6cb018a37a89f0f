#include "daemon/detectors/finding.h"

#include <tuple>

#include "absl/strings/str_cat.h"

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
  if (device.empty() && port == 0) {
    return is_switch ? absl::StrCat("switch ", node) : node;
  }
  if (is_switch) {
    return absl::StrCat("switch ", node, "/", port);
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
  if (has_peer) {
    // A link is one finding whichever end reported it.
    const Endpoint& a = subject < peer ? subject : peer;
    const Endpoint& b = subject < peer ? peer : subject;
    return absl::StrCat(kind, ":", a.ToString(), "<->", b.ToString());
  }
  return absl::StrCat(kind, ":", subject.ToString());
}

namespace {
v1::Subject ToSubject(const Endpoint& endpoint, const Endpoint* peer) {
  v1::Subject subject;
  subject.set_node(endpoint.node);
  subject.set_device(endpoint.device);
  subject.set_port(endpoint.port);
  subject.set_guid(endpoint.guid);
  if (endpoint.gpu >= 0) {
    subject.set_has_gpu(true);
    subject.set_gpu(static_cast<uint32_t>(endpoint.gpu));
    subject.set_link(endpoint.link >= 0 ? static_cast<uint32_t>(endpoint.link) : 0);
  }
  if (peer != nullptr) {
    subject.set_peer_node(peer->node);
    subject.set_peer_device(peer->device);
    subject.set_peer_port(peer->port);
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
