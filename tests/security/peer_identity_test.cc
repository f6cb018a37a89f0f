// The node-name ↔ certificate binding: which certificate names count (DNS SANs and the CN, not IP,
// URI or e-mail SANs), exact matching, and the messages a refused agent sees. The AuthContext here
// is a fake holding the properties gRPC's SSL transport sets; tests/security/mtls_test.cc checks
// the same rule through real TLS handshakes.

#include "daemon/aggregator/peer_identity.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::aggregator {
namespace {

using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class NoProperties : public grpc::AuthPropertyIterator {
 public:
  NoProperties() = default;
};

// What SecureAuthContext answers after an SSL handshake, without the handshake.
class FakeAuthContext final : public grpc::AuthContext {
 public:
  explicit FakeAuthContext(bool authenticated) : authenticated_(authenticated) {}
  bool IsPeerAuthenticated() const override { return authenticated_; }
  std::vector<grpc::string_ref> GetPeerIdentity() const override { return {}; }
  std::string GetPeerIdentityPropertyName() const override { return ""; }
  std::vector<grpc::string_ref> FindPropertyValues(const std::string& name) const override {
    std::vector<grpc::string_ref> values;
    auto range = properties_.equal_range(name);
    for (auto it = range.first; it != range.second; ++it) {
      values.emplace_back(it->second);
    }
    return values;
  }
  grpc::AuthPropertyIterator begin() const override { return NoProperties(); }
  grpc::AuthPropertyIterator end() const override { return NoProperties(); }
  void AddProperty(const std::string& key, const grpc::string_ref& value) override {
    properties_.emplace(key, std::string(value.data(), value.size()));
  }
  bool SetPeerIdentityPropertyName(const std::string&) override { return false; }

 private:
  bool authenticated_;
  std::multimap<std::string, std::string> properties_;
};

// The properties gRPC 1.51 sets for a certificate with `dns` SANs, an IP SAN and CN `cn`.
FakeAuthContext Certificate(const std::vector<std::string>& dns, const std::string& cn) {
  FakeAuthContext context(/*authenticated=*/true);
  context.AddProperty(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME, GRPC_SSL_TRANSPORT_SECURITY_TYPE);
  for (const std::string& name : dns) {
    context.AddProperty(GRPC_X509_SAN_PROPERTY_NAME, name);
    context.AddProperty(GRPC_PEER_DNS_PROPERTY_NAME, name);
  }
  context.AddProperty(GRPC_X509_SAN_PROPERTY_NAME, "10.0.0.7");
  context.AddProperty(GRPC_PEER_IP_PROPERTY_NAME, "10.0.0.7");
  if (!cn.empty()) {
    context.AddProperty(GRPC_X509_CN_PROPERTY_NAME, cn);
  }
  return context;
}

TEST(PeerIdentityTest, ReadsDnsSansAndCommonNameOnly) {
  const PeerIdentity identity =
      PeerIdentityFromAuthContext(Certificate({"node017", "node017.cluster.example"}, "node017"));
  EXPECT_TRUE(identity.authenticated);
  EXPECT_THAT(identity.dns_names, ElementsAre("node017", "node017.cluster.example"));
  EXPECT_EQ(identity.common_name, "node017");
  EXPECT_EQ(identity.Describe(), "DNS:node017, DNS:node017.cluster.example, CN=node017");
}

TEST(PeerIdentityTest, UnauthenticatedContextHasNoIdentity) {
  FakeAuthContext plaintext(/*authenticated=*/false);
  plaintext.AddProperty(GRPC_X509_CN_PROPERTY_NAME, "node017");  // never trusted unverified
  const PeerIdentity identity = PeerIdentityFromAuthContext(plaintext);
  EXPECT_FALSE(identity.authenticated);
  EXPECT_THAT(identity.dns_names, IsEmpty());
  EXPECT_THAT(CheckNodeIdentity(identity, "node017"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(
      PeerIdentityFromAuthContext(std::shared_ptr<const grpc::AuthContext>()).authenticated);
}

TEST(PeerIdentityTest, NodeNameMustBeADnsSanOrTheCommonName) {
  const PeerIdentity identity =
      PeerIdentityFromAuthContext(Certificate({"node017", "node017.cluster.example"}, "gpu-17"));
  EXPECT_THAT(CheckNodeIdentity(identity, "node017"), IsOk());
  EXPECT_THAT(CheckNodeIdentity(identity, "node017.cluster.example"), IsOk());
  EXPECT_THAT(CheckNodeIdentity(identity, "gpu-17"), IsOk());
  for (const char* other : {"node018", "NODE017", "node01", "node0177", "", "10.0.0.7"}) {
    EXPECT_THAT(CheckNodeIdentity(identity, other), StatusIs(absl::StatusCode::kPermissionDenied))
        << other;
  }
}

TEST(PeerIdentityTest, CommonNameAloneIsEnough) {
  const PeerIdentity identity = PeerIdentityFromAuthContext(Certificate({}, "node017"));
  EXPECT_THAT(CheckNodeIdentity(identity, "node017"), IsOk());
  EXPECT_THAT(CheckNodeIdentity(identity, "node018"),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(PeerIdentityTest, WildcardsAreNotExpanded) {
  const PeerIdentity identity = PeerIdentityFromAuthContext(Certificate({"*.cluster.example"}, ""));
  EXPECT_THAT(CheckNodeIdentity(identity, "node017.cluster.example"),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(PeerIdentityTest, MismatchMessageNamesBothSides) {
  const PeerIdentity identity = PeerIdentityFromAuthContext(Certificate({"node018"}, "node018"));
  const absl::Status status = CheckNodeIdentity(identity, "node017");
  EXPECT_THAT(status.message(), HasSubstr("\"node017\""));
  EXPECT_THAT(status.message(), HasSubstr("DNS:node018"));
  EXPECT_THAT(status.message(), HasSubstr("CN=node018"));
}

TEST(PeerIdentityTest, HostileCertificateNamesAreEscapedInMessages) {
  FakeAuthContext context(/*authenticated=*/true);
  context.AddProperty(GRPC_PEER_DNS_PROPERTY_NAME, std::string("evil\nname\x01", 11));
  context.AddProperty(GRPC_X509_CN_PROPERTY_NAME, std::string(300, 'x'));  // longer than DNS allows
  const PeerIdentity identity = PeerIdentityFromAuthContext(context);
  EXPECT_THAT(identity.common_name, IsEmpty());
  const std::string described = identity.Describe();
  EXPECT_EQ(described.find('\n'), std::string::npos);
  EXPECT_THAT(described, HasSubstr("evil\\x0aname\\x01"));
  EXPECT_THAT(CheckNodeIdentity(identity, "evil"), StatusIs(absl::StatusCode::kPermissionDenied));
}

}  // namespace
}  // namespace fabricmon::aggregator
