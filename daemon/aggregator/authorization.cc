#include "daemon/aggregator/authorization.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "re2/re2.h"

namespace fabricmon::aggregator {
namespace {

// Compiles each pattern of `field`; InvalidArgument naming the first that is not valid RE2.
absl::Status Compile(const google::protobuf::RepeatedPtrField<std::string>& patterns,
                     absl::string_view field, std::vector<std::unique_ptr<re2::RE2>>& out) {
  re2::RE2::Options options;
  options.set_log_errors(false);
  for (const std::string& pattern : patterns) {
    auto re = std::make_unique<re2::RE2>(pattern, options);
    if (!re->ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "authorization.", field, " pattern \"", pattern, "\" is not a valid RE2: ", re->error()));
    }
    out.push_back(std::move(re));
  }
  return absl::OkStatus();
}

bool AnyFullMatch(const std::vector<std::unique_ptr<re2::RE2>>& patterns, absl::string_view text) {
  for (const auto& re : patterns) {
    if (re2::RE2::FullMatch(re2::StringPiece(text.data(), text.size()), *re)) {
      return true;
    }
  }
  return false;
}

std::string Patterns(const std::vector<std::unique_ptr<re2::RE2>>& patterns) {
  std::vector<std::string> quoted;
  for (const auto& re : patterns) {
    quoted.push_back(absl::StrCat("\"", re->pattern(), "\""));
  }
  return absl::StrJoin(quoted, ", ");
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Authorization>> Authorization::Create(
    const v1::AuthorizationConfig& config, bool plaintext) {
  std::shared_ptr<Authorization> authorization(new Authorization(plaintext));
  absl::Status status = Compile(config.operators(), "operators", authorization->operators_);
  if (status.ok()) {
    status = Compile(config.fabric_sweepers(), "fabric_sweepers", authorization->sweepers_);
  }
  if (!status.ok()) {
    return status;
  }
  return std::shared_ptr<const Authorization>(std::move(authorization));
}

std::shared_ptr<const Authorization> Authorization::Empty(bool plaintext) {
  return std::shared_ptr<const Authorization>(new Authorization(plaintext));
}

Authorization::Authorization(bool plaintext) : plaintext_(plaintext) {}

Authorization::~Authorization() = default;

bool Authorization::IsOperator(const PeerIdentity& identity) const {
  if (!identity.authenticated) {
    return false;
  }
  for (const std::string& name : identity.dns_names) {
    if (AnyFullMatch(operators_, name)) {
      return true;
    }
  }
  return !identity.common_name.empty() && AnyFullMatch(operators_, identity.common_name);
}

bool Authorization::IsFabricSweeper(absl::string_view node_name) const {
  return !node_name.empty() && AnyFullMatch(sweepers_, node_name);
}

absl::Status Authorization::CheckOperator(const PeerIdentity& identity) const {
  if (plaintext_ || IsOperator(identity)) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      identity.authenticated ? absl::StrCat("certificate identity (", identity.Describe(), ")")
                             : std::string("a caller without a verified client certificate"),
      " is not an operator: only certificates matching the aggregator's authorization.operators "
      "may call the Diagnostics service",
      operators_.empty() ? " (none configured)" : ""));
}

std::vector<std::string> Authorization::Describe() const {
  std::vector<std::string> lines;
  if (plaintext_) {
    lines.push_back(
        "plaintext: roles cannot be checked (no certificates): anyone who reaches the port may "
        "call the Diagnostics service (the CLI) and stream as any node name" +
        std::string(sweepers_.empty() ? ""
                                      : ", including a fabric sweeper's (authorization."
                                        "fabric_sweepers matches the claimed name)"));
  } else if (operators_.empty()) {
    lines.push_back(
        "authorization.operators is empty: no certificate may call the Diagnostics service "
        "(the fabricmon CLI gets PERMISSION_DENIED)");
  } else {
    lines.push_back(
        absl::StrCat("operators (Diagnostics service, may not stream): certificates "
                     "with a name matching ",
                     Patterns(operators_)));
  }
  lines.push_back(sweepers_.empty()
                      ? std::string("authorization.fabric_sweepers is empty: switch topology in "
                                    "agents' inventories is dropped")
                      : absl::StrCat("fabric sweepers (switch topology in their inventory): "
                                     "nodes matching ",
                                     Patterns(sweepers_)));
  return lines;
}

}  // namespace fabricmon::aggregator
