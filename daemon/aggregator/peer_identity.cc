#include "daemon/aggregator/peer_identity.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"

namespace fabricmon::aggregator {
namespace {

// Names longer than a DNS name can be (RFC 1035: 253 characters) never match a node name (the
// aggregator refuses longer ones) and are not worth echoing in messages.
constexpr size_t kMaxNameBytes = 253;

std::vector<std::string> Values(const grpc::AuthContext& context, const char* property) {
  std::vector<std::string> values;
  for (const grpc::string_ref& value : context.FindPropertyValues(property)) {
    if (value.size() <= kMaxNameBytes) {
      values.emplace_back(value.data(), value.size());
    }
  }
  return values;
}

// Printable form of a certificate name for messages: the names come from a peer that may be
// hostile (any CA-signed certificate), so control bytes are escaped.
std::string Printable(absl::string_view name) {
  std::string out;
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || u >= 0x80) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string PeerIdentity::Describe() const {
  if (!authenticated) {
    return "no certificate identity";
  }
  std::vector<std::string> parts;
  for (const std::string& name : dns_names) {
    parts.push_back(absl::StrCat("DNS:", Printable(name)));
  }
  if (!common_name.empty()) {
    parts.push_back(absl::StrCat("CN=", Printable(common_name)));
  }
  if (parts.empty()) {
    return "a certificate with neither DNS names nor a common name";
  }
  return absl::StrJoin(parts, ", ");
}

PeerIdentity PeerIdentityFromAuthContext(const grpc::AuthContext& context) {
  PeerIdentity identity;
  // An SSL peer is "authenticated" by gRPC only once its certificate chain verified (the server
  // runs with REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY); plaintext and in-process peers
  // never are.
  identity.authenticated = context.IsPeerAuthenticated();
  if (!identity.authenticated) {
    return identity;
  }
#ifdef GRPC_PEER_DNS_PROPERTY_NAME
  // dNSName SANs only (gRPC ≥ 1.43); x509_subject_alternative_name also holds IP, URI and e-mail.
  identity.dns_names = Values(context, GRPC_PEER_DNS_PROPERTY_NAME);
#else
  identity.dns_names = Values(context, GRPC_X509_SAN_PROPERTY_NAME);
#endif
  std::vector<std::string> cn = Values(context, GRPC_X509_CN_PROPERTY_NAME);
  if (!cn.empty()) {
    identity.common_name = std::move(cn.front());
  }
  return identity;
}

PeerIdentity PeerIdentityFromAuthContext(const std::shared_ptr<const grpc::AuthContext>& context) {
  if (context == nullptr) {
    return PeerIdentity();
  }
  return PeerIdentityFromAuthContext(*context);
}

absl::Status CheckNodeIdentity(const PeerIdentity& identity, absl::string_view node_name) {
  if (identity.authenticated && !node_name.empty()) {
    for (const std::string& name : identity.dns_names) {
      if (name == node_name) {
        return absl::OkStatus();
      }
    }
    if (identity.common_name == node_name) {
      return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(absl::StrCat("node name \"", Printable(node_name),
                                                  "\" does not match the client certificate (",
                                                  identity.Describe(), ")"));
}

}  // namespace fabricmon::aggregator
