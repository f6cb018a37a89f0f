#pragma once

// Certificates for tests, made with the openssl command line in a directory the caller owns:
// CAs, and leaf certificates with a chosen subject CN, subjectAltNames and validity (a negative
// number of days gives a certificate that has already expired). EC P-256 keys, mode 0600.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fabricmon::testing {

struct CertFiles {
  std::string cert;  // PEM certificate path
  std::string key;   // PEM private key path
};

class CertFactory {
 public:
  // Certificates go to `dir`, which must exist. Not thread-safe.
  explicit CertFactory(std::string dir) : dir_(std::move(dir)) {}

  // A self-signed CA (basicConstraints CA:TRUE) named `name` (file stem) with subject CN `cn`.
  absl::StatusOr<CertFiles> MakeCa(const std::string& name, const std::string& cn);

  // A leaf certificate signed by `ca`, valid for `days` from now (negative: expired already).
  // `cn` empty: a subject without CN. `sans`: subjectAltName entries as openssl spells them
  // ("DNS:node-a", "IP:127.0.0.1", "URI:spiffe://x"); empty: no extension.
  absl::StatusOr<CertFiles> Issue(const CertFiles& ca, const std::string& name,
                                  const std::string& cn, const std::vector<std::string>& sans,
                                  int days = 30);

  const std::string& dir() const { return dir_; }

 private:
  // Runs `command` (a shell command line) with output to a log; Internal with the log on failure.
  absl::Status Run(const std::string& command);

  std::string dir_;
  int serial_ = 1000;
};

}  // namespace fabricmon::testing
