// LoadTransportSecurity: mutual TLS or explicit plaintext, never a silent fallback; files that
// are named but missing, empty, not PEM or too large are errors naming the file. Certificates are
// made with openssl at test time.

#include "daemon/common/tls.h"

#include <sys/stat.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/common/handshake_failures.h"
#include "daemon/common/logging.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "grpc/support/log.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "gtest/gtest.h"
#include "tests/security/cert_factory.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon {
namespace {

using ::fabricmon::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::CertFactory factory(tree_.root());
    absl::StatusOr<testing::CertFiles> ca = factory.MakeCa("ca", "fabricmon test CA");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
    absl::StatusOr<testing::CertFiles> leaf =
        factory.Issue(ca_, "node-a", "node-a", {"DNS:node-a"});
    ASSERT_TRUE(leaf.ok()) << leaf.status();
    leaf_ = *leaf;
  }

  v1::TlsConfig Full() const {
    v1::TlsConfig config;
    config.set_ca_file(ca_.cert);
    config.set_cert_file(leaf_.cert);
    config.set_key_file(leaf_.key);
    return config;
  }

  testing::TempTree tree_;
  testing::CertFiles ca_;
  testing::CertFiles leaf_;
};

TEST_F(TlsTest, MutualTlsReadsAllThreeFiles) {
  for (TlsRole role : {TlsRole::kAgent, TlsRole::kAggregator, TlsRole::kCli}) {
    absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(Full(), role);
    ASSERT_TRUE(security.ok()) << security.status();
    EXPECT_FALSE(security->plaintext);
    EXPECT_THAT(security->material.ca_pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
    EXPECT_THAT(security->material.cert_pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
    EXPECT_THAT(security->material.key_pem, HasSubstr("PRIVATE KEY-----"));
    EXPECT_THAT(security->warnings, IsEmpty());  // the factory's keys are 0600
    EXPECT_NE(MakeChannelCredentials(*security), nullptr);
    EXPECT_NE(MakeServerCredentials(*security), nullptr);
  }
}

TEST_F(TlsTest, NothingConfiguredRefusesTheDaemonsButNotTheCli) {
  for (TlsRole role : {TlsRole::kAgent, TlsRole::kAggregator}) {
    absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(v1::TlsConfig(), role);
    EXPECT_THAT(security, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(security.status().message(), HasSubstr("insecure_plaintext"));
  }
  absl::StatusOr<TransportSecurity> cli = LoadTransportSecurity(v1::TlsConfig(), TlsRole::kCli);
  ASSERT_TRUE(cli.ok()) << cli.status();
  EXPECT_TRUE(cli->plaintext);
}

TEST_F(TlsTest, PlaintextOnlyWhenAskedForAndSaidLoudly) {
  v1::TlsConfig config;
  config.set_insecure_plaintext(true);
  for (TlsRole role : {TlsRole::kAgent, TlsRole::kAggregator}) {
    absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(config, role);
    ASSERT_TRUE(security.ok()) << security.status();
    EXPECT_TRUE(security->plaintext);
    EXPECT_THAT(DescribeTransport(config, *security), HasSubstr("INSECURE"));
    EXPECT_NE(MakeChannelCredentials(*security), nullptr);
    EXPECT_NE(MakeServerCredentials(*security), nullptr);
  }
}

TEST_F(TlsTest, PlaintextTogetherWithFilesIsAContradiction) {
  v1::TlsConfig config = Full();
  config.set_insecure_plaintext(true);
  EXPECT_THAT(LoadTransportSecurity(config, TlsRole::kAgent),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(TlsTest, DaemonsNeedEveryFile) {
  for (TlsRole role : {TlsRole::kAgent, TlsRole::kAggregator}) {
    v1::TlsConfig no_ca = Full();
    no_ca.clear_ca_file();
    absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(no_ca, role);
    EXPECT_THAT(security, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(security.status().message(), HasSubstr("ca_file"));

    v1::TlsConfig no_key = Full();
    no_key.clear_key_file();
    security = LoadTransportSecurity(no_key, role);
    EXPECT_THAT(security, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(security.status().message(), HasSubstr("key_file"));

    v1::TlsConfig only_ca;
    only_ca.set_ca_file(ca_.cert);
    EXPECT_THAT(LoadTransportSecurity(only_ca, role), StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

TEST_F(TlsTest, CliMayOmitItsCertificateButNotHalfOfIt) {
  v1::TlsConfig only_ca;
  only_ca.set_ca_file(ca_.cert);
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(only_ca, TlsRole::kCli);
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_FALSE(security->plaintext);
  EXPECT_THAT(security->material.cert_pem, IsEmpty());

  v1::TlsConfig half = only_ca;
  half.set_cert_file(leaf_.cert);
  EXPECT_THAT(LoadTransportSecurity(half, TlsRole::kCli),
              StatusIs(absl::StatusCode::kInvalidArgument));
  v1::TlsConfig no_ca;
  no_ca.set_cert_file(leaf_.cert);
  no_ca.set_key_file(leaf_.key);
  EXPECT_THAT(LoadTransportSecurity(no_ca, TlsRole::kCli),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(TlsTest, MissingFileIsNotFoundNamingIt) {
  v1::TlsConfig config = Full();
  config.set_key_file(tree_.root() + "/nonexistent-key.pem");
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(config, TlsRole::kAgent);
  EXPECT_THAT(security, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(security.status().message(), HasSubstr("key_file"));
  EXPECT_THAT(security.status().message(), HasSubstr("nonexistent-key.pem"));
}

TEST_F(TlsTest, DirectoryInsteadOfFileIsAnError) {
  v1::TlsConfig config = Full();
  config.set_ca_file(tree_.root());
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(config, TlsRole::kAggregator);
  EXPECT_FALSE(security.ok());
  EXPECT_THAT(security.status().message(), HasSubstr("ca_file"));
}

TEST_F(TlsTest, EmptyOrNonPemFilesAreInvalid) {
  tree_.WriteFile("empty.pem", "");
  tree_.WriteFile("der.bin", std::string("\x30\x82\x01\x0a\x02\x82", 6));
  for (const std::string& bad : {tree_.root() + "/empty.pem", tree_.root() + "/der.bin"}) {
    v1::TlsConfig ca = Full();
    ca.set_ca_file(bad);
    EXPECT_THAT(LoadTransportSecurity(ca, TlsRole::kAgent),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
    v1::TlsConfig key = Full();
    key.set_key_file(bad);
    EXPECT_THAT(LoadTransportSecurity(key, TlsRole::kAgent),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  // A certificate where the key belongs (a classic mix-up) is caught too.
  v1::TlsConfig swapped = Full();
  swapped.set_key_file(leaf_.cert);
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(swapped, TlsRole::kAgent);
  EXPECT_THAT(security, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(security.status().message(), HasSubstr("PRIVATE KEY"));
}

TEST_F(TlsTest, OversizedFileIsInvalid) {
  std::string big = "-----BEGIN CERTIFICATE-----\n";
  big.resize(kMaxPemFileBytes + 10, 'A');
  tree_.WriteFile("big.pem", big);
  v1::TlsConfig config = Full();
  config.set_ca_file(tree_.root() + "/big.pem");
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(config, TlsRole::kAgent);
  EXPECT_THAT(security, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(security.status().message(), HasSubstr("the limit is"));
  EXPECT_THAT(security.status().message(), HasSubstr("big.pem"));
}

TEST_F(TlsTest, KeyOfAnotherCertificateIsRefusedNamingBoth) {
  testing::CertFactory factory(tree_.root());
  absl::StatusOr<testing::CertFiles> other = factory.Issue(ca_, "node-b", "node-b", {"DNS:node-b"});
  ASSERT_TRUE(other.ok()) << other.status();
  v1::TlsConfig config = Full();
  config.set_key_file(other->key);
  for (TlsRole role : {TlsRole::kAgent, TlsRole::kAggregator, TlsRole::kCli}) {
    absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(config, role);
    EXPECT_THAT(security, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(
        security.status().message(),
        HasSubstr(absl::StrCat("key_file ", other->key, " does not match cert_file ", leaf_.cert)));
  }
}

TEST_F(TlsTest, FifoAndDeviceAreRefusedWithoutReading) {
  const std::string fifo = tree_.root() + "/cert.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  v1::TlsConfig config = Full();
  config.set_cert_file(fifo);
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(config, TlsRole::kAgent);
  EXPECT_THAT(security, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(security.status().message(), HasSubstr("cert.fifo\" is a FIFO"));
  config = Full();
  config.set_ca_file("/dev/zero");
  security = LoadTransportSecurity(config, TlsRole::kAgent);
  EXPECT_THAT(security, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(security.status().message(), HasSubstr("\"/dev/zero\" is a character device"));
}

TEST_F(TlsTest, WorldReadableKeyIsWarnedAbout) {
  ASSERT_EQ(chmod(leaf_.key.c_str(), 0644), 0);
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(Full(), TlsRole::kAgent);
  ASSERT_TRUE(security.ok()) << security.status();
  ASSERT_EQ(security->warnings.size(), 1u);
  EXPECT_THAT(security->warnings[0], HasSubstr("0644"));
  ASSERT_EQ(chmod(leaf_.key.c_str(), 0640), 0);  // group-readable (root:fabricmon) is fine
  security = LoadTransportSecurity(Full(), TlsRole::kAgent);
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_THAT(security->warnings, IsEmpty());
}

// gRPC's handshake failure lines (ssl_transport_security.cc) as the aggregator's counter reads
// them; anything else gRPC logs is no failure.
TEST(HandshakeFailuresTest, ClassifiesGrpcsHandshakeFailureLines) {
  const std::string prefix = "Handshake failed with fatal error SSL_ERROR_SSL: error:";
  EXPECT_EQ(ClassifyGrpcLogMessage(prefix + "1000045c:SSL routines:OPENSSL_internal:"
                                            "PEER_DID_NOT_RETURN_A_CERTIFICATE."),
            HandshakeFailure::kNoClientCertificate);
  EXPECT_EQ(ClassifyGrpcLogMessage(prefix + "0A00045C:SSL routines::tlsv13 alert certificate "
                                            "required CERTIFICATE_REQUIRED."),
            HandshakeFailure::kNoClientCertificate);
  EXPECT_EQ(ClassifyGrpcLogMessage(prefix + "1000007d:SSL routines:OPENSSL_internal:"
                                            "CERTIFICATE_VERIFY_FAILED."),
            HandshakeFailure::kCertificateNotVerified);
  EXPECT_EQ(ClassifyGrpcLogMessage(prefix + "100000f7:SSL routines:OPENSSL_internal:"
                                            "WRONG_VERSION_NUMBER."),
            HandshakeFailure::kNotTls);
  // OpenSSL 3 spells the reason in words.
  EXPECT_EQ(ClassifyGrpcLogMessage(prefix + "0A0000C7:SSL routines::peer did not return a "
                                            "certificate."),
            HandshakeFailure::kNoClientCertificate);
  EXPECT_EQ(ClassifyGrpcLogMessage(prefix + "0A000086:SSL routines::certificate verify failed."),
            HandshakeFailure::kCertificateNotVerified);
  EXPECT_EQ(ClassifyGrpcLogMessage(prefix + "0A00009C:SSL routines::http request."),
            HandshakeFailure::kNotTls);
  EXPECT_EQ(ClassifyGrpcLogMessage(prefix + "something new."), HandshakeFailure::kOther);
  EXPECT_EQ(ClassifyGrpcLogMessage("Security handshake failed: CERTIFICATE_VERIFY_FAILED"),
            std::nullopt);
  EXPECT_EQ(ClassifyGrpcLogMessage(""), std::nullopt);
  EXPECT_EQ(HandshakeFailureName(HandshakeFailure::kNotTls), "not_tls");
}

// Under systemd every line needs its priority prefix: gRPC's own lines ("E1126 10:00:00 ...")
// would be filed at the unit's default priority, an error looking like an info line.
TEST(HandshakeFailuresTest, GrpcLogLinesGoThroughOurLogWithTheirPriority) {
  SetJournalPrefixesForTest(true);
  SetMinLogLevel(LogLevel::kInfo);
  RouteGrpcLogs();
  grpc_init();  // gRPC reads its verbosity here; before it, gpr_log writes nothing
  ::testing::internal::CaptureStderr();
  gpr_log(__FILE__, __LINE__, GPR_LOG_SEVERITY_ERROR, "%s", "connection to peer lost");
  gpr_log(__FILE__, __LINE__, GPR_LOG_SEVERITY_DEBUG, "%s", "below the level: not written");
  const std::string written = ::testing::internal::GetCapturedStderr();
  grpc_shutdown();
  SetJournalPrefixesForTest(false);
  EXPECT_THAT(written, ::testing::StartsWith("<3>"));
  EXPECT_THAT(written, HasSubstr("grpc"));
  EXPECT_THAT(written, HasSubstr("connection to peer lost"));
  EXPECT_THAT(written, ::testing::Not(HasSubstr("below the level")));
}

}  // namespace
}  // namespace fabricmon
