// Roles from authorization { operators fabric_sweepers }: RE2 full match over a certificate's
// names (operators) and node names (sweepers), invalid patterns refused, and plaintext open.

#include "daemon/aggregator/authorization.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricmon::aggregator {
namespace {

using ::testing::HasSubstr;

PeerIdentity Certificate(std::vector<std::string> dns, std::string cn) {
  PeerIdentity identity;
  identity.authenticated = true;
  identity.dns_names = std::move(dns);
  identity.common_name = std::move(cn);
  return identity;
}

std::shared_ptr<const Authorization> Make(const std::string& operators, const std::string& sweepers,
                                          bool plaintext = false) {
  v1::AuthorizationConfig config;
  if (!operators.empty()) config.add_operators(operators);
  if (!sweepers.empty()) config.add_fabric_sweepers(sweepers);
  auto made = Authorization::Create(config, plaintext);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *made : Authorization::Empty(plaintext);
}

TEST(AuthorizationTest, OperatorsMatchAnyDnsNameOrTheCommonNameInFull) {
  auto authorization = Make("ops-[0-9]+|fabricmon-operator", "");
  EXPECT_TRUE(authorization->IsOperator(Certificate({"ops-12"}, "")));
  EXPECT_TRUE(authorization->IsOperator(Certificate({"node-a", "ops-1"}, "node-a")));
  EXPECT_TRUE(authorization->IsOperator(Certificate({}, "fabricmon-operator")));
  // Full match: neither a prefix nor a suffix is enough.
  EXPECT_FALSE(authorization->IsOperator(Certificate({"ops-12.evil"}, "")));
  EXPECT_FALSE(authorization->IsOperator(Certificate({"x-ops-12"}, "")));
  EXPECT_FALSE(authorization->IsOperator(Certificate({}, "fabricmon-operator2")));
  EXPECT_FALSE(authorization->IsOperator(Certificate({"node-a"}, "node-a")));
  // A name without a verified certificate is nobody's.
  PeerIdentity unauthenticated = Certificate({"ops-1"}, "ops-1");
  unauthenticated.authenticated = false;
  EXPECT_FALSE(authorization->IsOperator(unauthenticated));
}

TEST(AuthorizationTest, CheckOperatorNamesTheIdentityAndTheField) {
  auto authorization = Make("ops", "");
  EXPECT_TRUE(authorization->CheckOperator(Certificate({"ops"}, "")).ok());
  absl::Status refused = authorization->CheckOperator(Certificate({"node-a"}, "node-a"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("DNS:node-a, CN=node-a"));
  EXPECT_THAT(refused.message(), HasSubstr("authorization.operators"));
}

TEST(AuthorizationTest, WithoutOperatorsNoCertificateMayReadInMutualTls) {
  auto authorization = Authorization::Empty(/*plaintext=*/false);
  absl::Status refused = authorization->CheckOperator(Certificate({"ops"}, "fabricmon-operator"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("none configured"));
  EXPECT_THAT(authorization->Describe()[0], HasSubstr("no certificate may call"));
}

TEST(AuthorizationTest, PlaintextCannotCheckRolesAndSaysSo) {
  auto authorization = Make("ops", "sweeper-.*", /*plaintext=*/true);
  EXPECT_TRUE(authorization->CheckOperator(PeerIdentity()).ok());
  EXPECT_FALSE(authorization->IsOperator(PeerIdentity()));
  EXPECT_THAT(authorization->Describe()[0], HasSubstr("roles cannot be checked"));
}

TEST(AuthorizationTest, SweepersMatchNodeNamesInFull) {
  auto authorization = Make("", "sweeper-[ab]");
  EXPECT_TRUE(authorization->IsFabricSweeper("sweeper-a"));
  EXPECT_FALSE(authorization->IsFabricSweeper("sweeper-ab"));
  EXPECT_FALSE(authorization->IsFabricSweeper("node1"));
  EXPECT_FALSE(authorization->IsFabricSweeper(""));
  EXPECT_FALSE(Authorization::Empty(false)->IsFabricSweeper("sweeper-a"));
}

TEST(AuthorizationTest, AnInvalidPatternIsRefusedNamingTheField) {
  v1::AuthorizationConfig config;
  config.add_operators("ops");
  config.add_fabric_sweepers("node(");
  auto made = Authorization::Create(config, false);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(made.status().message(), HasSubstr("authorization.fabric_sweepers"));
  EXPECT_THAT(made.status().message(), HasSubstr("node("));
}

}  // namespace
}  // namespace fabricmon::aggregator
