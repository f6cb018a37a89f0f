#include "daemon/common/handshake_failures.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "daemon/common/logging.h"
#include "grpc/support/log.h"

namespace fabricmon {
namespace {

// Set once by WatchHandshakeFailures before the server starts; read by gRPC's threads, which
// may already be logging (RouteGrpcLogs installs the hook earlier).
std::atomic<std::function<void(HandshakeFailure)>*> g_on_failure{nullptr};

void LogHook(gpr_log_func_args* args) {
  const absl::string_view message = args->message != nullptr ? args->message : "";
  if (std::optional<HandshakeFailure> failure = ClassifyGrpcLogMessage(message)) {
    if (std::function<void(HandshakeFailure)>* on_failure = g_on_failure.load()) {
      (*on_failure)(*failure);
    }
    // A refused peer is worth a line, not one per retry of a misconfigured client: the counter
    // has the number.
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "refused a TLS handshake (" << HandshakeFailureName(*failure) << "): " << message;
    return;
  }
  switch (args->severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      FABRICMON_LOG(Debug) << "grpc " << args->file << ":" << args->line << "] " << message;
      break;
    case GPR_LOG_SEVERITY_INFO:
      FABRICMON_LOG(Info) << "grpc " << args->file << ":" << args->line << "] " << message;
      break;
    case GPR_LOG_SEVERITY_ERROR:
      FABRICMON_LOG(Error) << "grpc " << args->file << ":" << args->line << "] " << message;
      break;
  }
}

}  // namespace

absl::string_view HandshakeFailureName(HandshakeFailure failure) {
  switch (failure) {
    case HandshakeFailure::kNoClientCertificate:
      return "no_client_certificate";
    case HandshakeFailure::kCertificateNotVerified:
      return "certificate_not_verified";
    case HandshakeFailure::kNotTls:
      return "not_tls";
    case HandshakeFailure::kOther:
    case HandshakeFailure::kCount:
      break;
  }
  return "other";
}

std::optional<HandshakeFailure> ClassifyGrpcLogMessage(absl::string_view message) {
  // ssl_transport_security.cc: "Handshake failed with fatal error %s: %s." — one line per failed
  // handshake, with OpenSSL's reason.
  if (!absl::StartsWith(message, "Handshake failed with fatal error")) {
    return std::nullopt;
  }
  // OpenSSL 3 writes the reason in words ("peer did not return a certificate"), BoringSSL and
  // OpenSSL 1.1 as a code ("PEER_DID_NOT_RETURN_A_CERTIFICATE"): compare in one spelling.
  std::string reason = absl::AsciiStrToLower(message);
  std::replace(reason.begin(), reason.end(), '_', ' ');
  auto says = [&reason](absl::string_view words) { return absl::StrContains(reason, words); };
  if (says("peer did not return a certificate") || says("certificate required")) {
    return HandshakeFailure::kNoClientCertificate;
  }
  if (says("certificate verify failed")) {
    return HandshakeFailure::kCertificateNotVerified;
  }
  if (says("wrong version number") || says("http request") || says("unknown protocol") ||
      says("packet length too long")) {
    return HandshakeFailure::kNotTls;
  }
  return HandshakeFailure::kOther;
}

void RouteGrpcLogs() { gpr_set_log_function(&LogHook); }

void WatchHandshakeFailures(std::function<void(HandshakeFailure)> on_failure) {
  // Leaked on purpose: gRPC's threads may log until the process exits.
  g_on_failure.store(new std::function<void(HandshakeFailure)>(std::move(on_failure)));
  gpr_set_log_function(&LogHook);
}

}  // namespace fabricmon
