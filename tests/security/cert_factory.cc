#include "tests/security/cert_factory.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fabricmon::testing {
namespace {

std::string Quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::string Subject(const std::string& cn) {
  return cn.empty() ? "/O=fabricmon-test" : absl::StrCat("/O=fabricmon-test/CN=", cn);
}

}  // namespace

absl::Status CertFactory::Run(const std::string& command) {
  const std::string log = dir_ + "/openssl.log";
  const std::string line = absl::StrCat(command, " >>", Quote(log), " 2>&1");
  const int status = std::system(line.c_str());
  if (status == 0) {
    return absl::OkStatus();
  }
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return absl::InternalError(
      absl::StrCat("openssl failed (status ", status, "): ", command, "\n", text.str()));
}

absl::StatusOr<CertFiles> CertFactory::MakeCa(const std::string& name, const std::string& cn) {
  const std::string openssl = FABRICMON_OPENSSL_BINARY;
  CertFiles files{dir_ + "/" + name + ".pem", dir_ + "/" + name + "-key.pem"};
  absl::Status status = Run(absl::StrCat(
      openssl, " req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 30",
      " -subj ", Quote(Subject(cn)), " -addext basicConstraints=critical,CA:TRUE",
      " -addext keyUsage=critical,keyCertSign,cRLSign", " -keyout ", Quote(files.key), " -out ",
      Quote(files.cert)));
  if (!status.ok()) {
    return status;
  }
  chmod(files.key.c_str(), 0600);
  return files;
}

absl::StatusOr<CertFiles> CertFactory::Issue(const CertFiles& ca, const std::string& name,
                                             const std::string& cn,
                                             const std::vector<std::string>& sans, int days) {
  const std::string openssl = FABRICMON_OPENSSL_BINARY;
  CertFiles files{dir_ + "/" + name + ".pem", dir_ + "/" + name + "-key.pem"};
  const std::string csr = dir_ + "/" + name + ".csr";
  const std::string ext = dir_ + "/" + name + ".ext";
  {
    std::ofstream out(ext);
    out << "basicConstraints=CA:FALSE\n"
        << "keyUsage=critical,digitalSignature,keyEncipherment\n"
        << "extendedKeyUsage=serverAuth,clientAuth\n";
    if (!sans.empty()) {
      out << "subjectAltName=" << absl::StrJoin(sans, ",") << "\n";
    }
  }
  absl::Status status = Run(
      absl::StrCat(openssl, " req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj ",
                   Quote(Subject(cn)), " -keyout ", Quote(files.key), " -out ", Quote(csr)));
  if (status.ok()) {
    // -days below zero puts notAfter before now: an expired certificate.
    status =
        Run(absl::StrCat(openssl, " x509 -req -sha256 -in ", Quote(csr), " -CA ", Quote(ca.cert),
                         " -CAkey ", Quote(ca.key), " -set_serial ", ++serial_, " -days ", days,
                         " -extfile ", Quote(ext), " -out ", Quote(files.cert)));
  }
  if (!status.ok()) {
    return status;
  }
  chmod(files.key.c_str(), 0600);
  return files;
}

}  // namespace fabricmon::testing
