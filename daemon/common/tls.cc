#include "daemon/common/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/common/operator_file.h"
#include "daemon/common/status.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace fabricmon {
namespace {

enum class PemKind { kCertificate, kPrivateKey };

// Reads one configured PEM file. `what` names its role in messages ("ca_file").
absl::StatusOr<std::string> ReadPem(absl::string_view what, const std::string& path, PemKind kind) {
  // A regular file within the limit, or an error naming it (a FIFO, a device, a directory).
  FABRICMON_ASSIGN_OR_RETURN(std::string content,
                             ReadOperatorFile(path, kMaxPemFileBytes, absl::StrCat("tls ", what)));
  // RFC 7468 encapsulation boundaries. Only presence is checked here: the TLS library parses the
  // blocks, and a corrupt one still fails (the server does not start, a client cannot connect).
  const bool ok = kind == PemKind::kCertificate
                      ? absl::StrContains(content, "-----BEGIN CERTIFICATE-----")
                      : absl::StrContains(content, "-----BEGIN ") &&
                            absl::StrContains(content, "PRIVATE KEY-----");
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls ", what, " \"", path, "\" holds no PEM ",
                     kind == PemKind::kCertificate ? "CERTIFICATE" : "PRIVATE KEY", " block"));
  }
  return content;
}

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x509) const { X509_free(x509); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

// The first certificate of `cert_pem` (the leaf) and the key of `key_pem` must be one pair: gRPC
// finds out only when it builds the listener or the first handshake, and says "cannot listen" or
// nothing useful. Encrypted keys are not supported by gRPC either (no passphrase callback), so a
// key that does not parse without one is refused here too.
absl::Status CheckKeyMatchesCert(const v1::TlsConfig& config, const std::string& cert_pem,
                                 const std::string& key_pem) {
  std::unique_ptr<BIO, BioFree> cert_bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  std::unique_ptr<BIO, BioFree> key_bio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  if (cert_bio == nullptr || key_bio == nullptr) {
    return absl::ResourceExhaustedError("tls: cannot allocate an OpenSSL BIO");
  }
  // An empty passphrase callback: an encrypted key fails instead of prompting on the terminal.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, no_passphrase, nullptr));
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "tls cert_file \"", config.cert_file(), "\": its first CERTIFICATE block does not parse"));
  }
  std::unique_ptr<EVP_PKEY, PkeyFree> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr));
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("tls key_file \"", config.key_file(),
                     "\": its PRIVATE KEY block does not parse (or is encrypted; gRPC needs an "
                     "unencrypted key)"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "tls key_file ", config.key_file(), " does not match cert_file ", config.cert_file()));
  }
  return absl::OkStatus();
}

// A private key others can read is no longer private.
void CheckKeyMode(const std::string& path, std::vector<std::string>* warnings) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return;  // read it a moment ago; a race here is not worth an error
  }
  if ((st.st_mode & (S_IROTH | S_IWOTH | S_IWGRP)) != 0) {
    warnings->push_back(absl::StrFormat(
        "tls key_file \"%s\" has mode %04o: readable or writable by others; use 0600 (owner) or "
        "0640 (group of the daemon's user)",
        path, st.st_mode & 07777));
  }
}

absl::string_view RoleName(TlsRole role) {
  switch (role) {
    case TlsRole::kAgent:
      return "agent";
    case TlsRole::kAggregator:
      return "aggregator";
    case TlsRole::kCli:
      return "cli";
  }
  return "?";
}

}  // namespace

absl::StatusOr<TransportSecurity> LoadTransportSecurity(const v1::TlsConfig& config, TlsRole role) {
  const bool any_file =
      !config.ca_file().empty() || !config.cert_file().empty() || !config.key_file().empty();
  TransportSecurity security;
  if (!any_file) {
    if (config.insecure_plaintext() || role == TlsRole::kCli) {
      // The CLI is a client the operator runs by hand: plaintext is its historical default and
      // it carries no credentials. The daemons need the explicit opt-in.
      security.plaintext = true;
      return security;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "no TLS configured for the ", RoleName(role),
        ": set tls { ca_file cert_file key_file } (mutual TLS), or opt in to plaintext explicitly "
        "with tls { insecure_plaintext: true } or --insecure_plaintext"));
  }
  if (config.insecure_plaintext()) {
    return absl::InvalidArgumentError(
        "tls: insecure_plaintext is set together with TLS files; choose one");
  }
  std::vector<std::string> missing;
  if (config.ca_file().empty()) {
    missing.push_back("ca_file");
  }
  const bool pair_optional = role == TlsRole::kCli;
  if (!pair_optional || !config.cert_file().empty() || !config.key_file().empty()) {
    if (config.cert_file().empty()) {
      missing.push_back("cert_file");
    }
    if (config.key_file().empty()) {
      missing.push_back("key_file");
    }
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls for the ", RoleName(role), " is incomplete: missing ", absl::StrJoin(missing, ", "),
        role == TlsRole::kCli ? " (--tls_ca, and --tls_cert with --tls_key)"
                              : " (mutual TLS needs all of ca_file, cert_file, key_file)"));
  }
  FABRICMON_ASSIGN_OR_RETURN(security.material.ca_pem,
                             ReadPem("ca_file", config.ca_file(), PemKind::kCertificate));
  if (!config.cert_file().empty()) {
    FABRICMON_ASSIGN_OR_RETURN(security.material.cert_pem,
                               ReadPem("cert_file", config.cert_file(), PemKind::kCertificate));
    FABRICMON_ASSIGN_OR_RETURN(security.material.key_pem,
                               ReadPem("key_file", config.key_file(), PemKind::kPrivateKey));
    FABRICMON_RETURN_IF_ERROR(
        CheckKeyMatchesCert(config, security.material.cert_pem, security.material.key_pem));
    CheckKeyMode(config.key_file(), &security.warnings);
  }
  return security;
}

std::string DescribeTransport(const v1::TlsConfig& config, const TransportSecurity& security) {
  if (security.plaintext) {
    return "INSECURE: plaintext gRPC (tls { insecure_plaintext: true } / --insecure_plaintext): "
           "nothing is encrypted, peers are not authenticated and node names are not bound to "
           "certificates; use it on a trusted loopback or test network only";
  }
  if (config.cert_file().empty()) {
    return absl::StrCat("TLS without a client certificate (ca ", config.ca_file(), ")");
  }
  return absl::StrCat("mutual TLS (ca ", config.ca_file(), ", cert ", config.cert_file(), ")");
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const TransportSecurity& security) {
  if (security.plaintext) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = security.material.ca_pem;
  options.pem_cert_chain = security.material.cert_pem;
  options.pem_private_key = security.material.key_pem;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TransportSecurity& security) {
  if (security.plaintext) {
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = security.material.ca_pem;
  options.pem_key_cert_pairs.push_back({security.material.key_pem, security.material.cert_pem});
  return grpc::SslServerCredentials(options);
}

}  // namespace fabricmon
