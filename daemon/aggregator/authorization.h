#pragma once

// Roles, from the aggregator's `authorization { operators: ... fabric_sweepers: ... }`:
//   - operator: a client certificate one of whose names (dNSName SANs, subject CN) fully matches
//     an `operators` pattern. Only operators may call the Diagnostics service; an operator may
//     not stream telemetry (an operator key on a laptop must not be able to pose as a node).
//   - fabric sweeper: a node whose name fully matches a `fabric_sweepers` pattern. Only a
//     sweeper's inventory may carry switch topology (fabric_nodes / fabric_links); anyone else's
//     could rewire the fabric the detectors reason about.
//   - agent: everyone else with a certificate; streams as the node its certificate names
//     (peer_identity.h).
// Without TLS there is no identity: Diagnostics is open and nobody is refused as an operator;
// sweepers are matched against the node name the agent claims.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/aggregator/peer_identity.h"
#include "fabricmon/v1/config.pb.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace fabricmon::aggregator {

class Authorization {
 public:
  // InvalidArgument naming the field and the pattern when a pattern is not valid RE2.
  // `plaintext`: the transport carries no identities (tls { insecure_plaintext: true }).
  static absl::StatusOr<std::shared_ptr<const Authorization>> Create(
      const v1::AuthorizationConfig& config, bool plaintext);
  // No operators, no sweepers; `plaintext` as above. For tests and embedders without a config.
  static std::shared_ptr<const Authorization> Empty(bool plaintext);

  ~Authorization();
  Authorization(const Authorization&) = delete;
  Authorization& operator=(const Authorization&) = delete;

  bool plaintext() const { return plaintext_; }
  // An authenticated identity with a name matching an operators pattern. Never true in plaintext.
  bool IsOperator(const PeerIdentity& identity) const;
  bool IsFabricSweeper(absl::string_view node_name) const;
  // May `identity` call the Diagnostics service? OK for an operator, and for anyone in
  // plaintext; PermissionDenied otherwise, naming the identity and the field that grants it.
  absl::Status CheckOperator(const PeerIdentity& identity) const;
  // Lines for the start-up log: what each role is, and what plaintext cannot check.
  std::vector<std::string> Describe() const;

 private:
  explicit Authorization(bool plaintext);  // defined where re2::RE2 is complete
  const bool plaintext_;
  std::vector<std::unique_ptr<re2::RE2>> operators_;
  std::vector<std::unique_ptr<re2::RE2>> sweepers_;
};

}  // namespace fabricmon::aggregator
