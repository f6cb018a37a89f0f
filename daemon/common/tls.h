#pragma once

// Transport security of fabricmon's gRPC endpoints, decided once at start-up from a TlsConfig
// (proto/fabricmon/v1/config.proto): mutual TLS with a CA, a certificate and its key, or — only
// when explicitly asked for with `tls { insecure_plaintext: true }` / `--insecure_plaintext` —
// plaintext. There is no silent fallback: a daemon without either refuses to start, and a file
// that is named but missing, unreadable or not PEM is an error naming the file.
//
// The loading half (LoadTransportSecurity) is pure file I/O; the two Make*Credentials turn its
// result into gRPC credentials, so that the agent, the aggregator and the CLI share one policy
// (the aggregator always requires and verifies a client certificate in TLS mode).

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fabricmon/v1/config.pb.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace fabricmon {

// Who loads the configuration; decides which files are mandatory.
enum class TlsRole {
  // fabricmon-agent: ca_file (verifies the aggregator), cert_file and key_file (its identity,
  // which the aggregator binds to the node name) are all required.
  kAgent,
  // fabricmon-aggregator: cert_file and key_file (its identity) and ca_file (verifies agents'
  // and the CLI's client certificates) are all required.
  kAggregator,
  // fabricmon CLI: ca_file is required for TLS; cert_file/key_file are optional but come as a
  // pair (the aggregator in TLS mode asks every client for a certificate).
  kCli,
};

// PEM text read from the configured files.
struct TlsMaterial {
  std::string ca_pem;    // trust anchors for the peer's certificate chain
  std::string cert_pem;  // own certificate chain (leaf first); empty for a CLI without one
  std::string key_pem;   // own private key; empty when cert_pem is
};

struct TransportSecurity {
  // True only when the configuration asked for plaintext explicitly.
  bool plaintext = false;
  TlsMaterial material;  // empty when plaintext
  // Things worth a warning line at start-up (e.g. a world-readable private key).
  std::vector<std::string> warnings;
};

// Largest PEM file accepted (a CA bundle of a few hundred certificates fits).
inline constexpr size_t kMaxPemFileBytes = 1 << 20;

// Decides the transport from `config` for `role` and reads the files it names.
// InvalidArgument: neither TLS files nor insecure_plaintext (agent, aggregator); TLS files and
// insecure_plaintext together; a required file missing from the config; a cert/key pair given
// half; a file that is not a regular file (a directory, FIFO, device: ReadOperatorFile), holds no
// PEM block of the expected kind or is larger than kMaxPemFileBytes; a key_file whose key does
// not belong to cert_file's first certificate ("key_file X does not match cert_file Y").
// NotFound / PermissionDenied (errno-exact, with the file's role and path in the message): a
// named file that cannot be read. Thread-compatible; reads the files on every call.
absl::StatusOr<TransportSecurity> LoadTransportSecurity(const v1::TlsConfig& config, TlsRole role);

// One line for the start-up log: "mutual TLS (ca ..., cert ...)" or the plaintext warning.
std::string DescribeTransport(const v1::TlsConfig& config, const TransportSecurity& security);

// Client credentials: SSL with `security.material` (the server is verified against ca_pem; the
// client presents cert_pem/key_pem when given), or insecure credentials when plaintext.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TransportSecurity& security);

// Server credentials: SSL that requests AND requires a client certificate verified against
// ca_pem (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY), or insecure credentials
// when plaintext.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TransportSecurity& security);

}  // namespace fabricmon
