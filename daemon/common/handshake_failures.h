#pragma once

// Counting refused TLS handshakes. gRPC C++ (1.51) completes the TLS handshake before any
// service code runs and offers no server-side callback for a handshake that failed: a client
// without a certificate, with one of another CA, expired, or speaking plaintext never reaches
// fabricmon's code. What gRPC does do is report each failure through its log ("Handshake failed
// with fatal error SSL_ERROR_SSL: ...:PEER_DID_NOT_RETURN_A_CERTIFICATE."), and gRPC's log has a
// public hook (gpr_set_log_function). WatchHandshakeFailures installs that hook: it classifies the
// failure lines, hands them to a callback, and passes every gRPC log line on to fabricmon's log.
//
// Limits, stated rather than hidden: it depends on gRPC's wording (tests/security/mtls_test.cc
// checks each case end to end, so an upgrade that changes it fails there), and it counts nothing
// when gRPC's own verbosity is set below ERROR (GRPC_VERBOSITY=NONE).

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/strings/string_view.h"

namespace fabricmon {

enum class HandshakeFailure : uint8_t {
  kNoClientCertificate,     // the client sent none (mutual TLS requires one)
  kCertificateNotVerified,  // another CA, expired, not yet valid, bad signature
  kNotTls,                  // plaintext gRPC, HTTP or anything else that is not a TLS hello
  kOther,                   // any other handshake failure gRPC reports
  kCount,
};

// "no_client_certificate", "certificate_not_verified", "not_tls", "other".
absl::string_view HandshakeFailureName(HandshakeFailure failure);

// The failure a gRPC log message reports, or nullopt if it reports none. Pure.
std::optional<HandshakeFailure> ClassifyGrpcLogMessage(absl::string_view message);

// Sends every gRPC log line through fabricmon's log (its level filter, and the journal priority
// prefix under systemd) instead of gRPC's own stderr format, which journald files at the unit's
// default priority whatever gRPC's severity. Call once, early in main, in every daemon.
void RouteGrpcLogs();

// Installs the process-wide gRPC log hook (as RouteGrpcLogs); `on_failure` is called (from gRPC's
// threads, so it must be thread-safe and quick) for every failed handshake. Call once, before
// serving.
void WatchHandshakeFailures(std::function<void(HandshakeFailure)> on_failure);

}  // namespace fabricmon
