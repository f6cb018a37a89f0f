#pragma once

// Who is on the other end of a telemetry stream, as its verified client certificate says, and the
// rule that binds the node name an agent claims in its Hello to that identity: with mutual TLS a
// node can only ever speak for itself, so a stolen or misconfigured agent on node A can neither
// write node B's series nor take over node B's stream.
//
// The identity is read from gRPC's AuthContext, which the TLS handshake filled after verifying the
// chain against the aggregator's CA: subjectAltName dNSName entries (property "peer_dns") and the
// subject common name ("x509_common_name"). IP, URI and e-mail SANs are not node names and are
// ignored. Matching is exact and case-sensitive (the node name becomes a label value verbatim);
// wildcard SANs ("*.example.com") are not expanded.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace grpc {
class AuthContext;
}  // namespace grpc

namespace fabricmon::aggregator {

struct PeerIdentity {
  // True when the transport authenticated the peer (a client certificate verified by TLS).
  // False on plaintext and in-process channels.
  bool authenticated = false;
  std::vector<std::string> dns_names;  // subjectAltName dNSName entries, in certificate order
  std::string common_name;             // subject CN; empty if the subject has none

  // "DNS:a, DNS:b, CN=c" (or "no certificate identity") for log and Reject messages.
  std::string Describe() const;
};

// Extracts the identity. Thread-compatible; `context` is only read during the call.
PeerIdentity PeerIdentityFromAuthContext(const grpc::AuthContext& context);
// Same for CallbackServerContext::auth_context(); nullptr gives an unauthenticated identity.
PeerIdentity PeerIdentityFromAuthContext(const std::shared_ptr<const grpc::AuthContext>& context);

// OK when `node_name` equals one of `identity`'s DNS names or its common name. PermissionDenied
// otherwise (also for an unauthenticated identity), with a message naming the claimed node and
// what the certificate does say. Pure.
absl::Status CheckNodeIdentity(const PeerIdentity& identity, absl::string_view node_name);

}  // namespace fabricmon::aggregator
