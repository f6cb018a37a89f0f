// Protobuf text-format configuration (ParseTextConfig) into AgentConfig and AggregatorConfig, and
// what the daemons derive from a parsed config without touching the machine: device filters (RE2
// patterns compiled from the file) and the transport-security decision for an insecure config.
// The input's first byte picks the message so one corpus serves both.

#include <string>

#include "collectors/core/device_filter.h"
#include "daemon/common/config_loader.h"
#include "daemon/common/tls.h"
#include "fabricmon/v1/config.pb.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/message_differencer.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// Printing a parsed config and parsing it again gives the same config (what `--config` would
// read back from a config written by a tool).
template <typename Message>
void CheckRoundTrip(const Message& parsed) {
  std::string printed;
  FABRICMON_FUZZ_CHECK(google::protobuf::TextFormat::PrintToString(parsed, &printed));
  Message again;
  const absl::Status status = fabricmon::ParseTextConfig(printed, "printed", &again);
  FABRICMON_FUZZ_CHECK(status.ok());
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);  // "nan" prints and parses, but NaN != NaN
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  FABRICMON_FUZZ_CHECK(differencer.Compare(parsed, again));
}

void CheckFilter(const fabricmon::v1::DeviceFilter& config) {
  absl::StatusOr<fabricmon::collectors::DeviceFilter> filter =
      fabricmon::collectors::DeviceFilter::Create(config);
  if (filter.ok()) {
    (void)filter->Allows("mlx5_0");
    (void)filter->Allows("");
  } else {
    FABRICMON_FUZZ_CHECK(filter.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

// Only configs without file names: the fuzzer must not read arbitrary paths.
void CheckTransport(const fabricmon::v1::TlsConfig& tls, fabricmon::TlsRole role) {
  if (!tls.ca_file().empty() || !tls.cert_file().empty() || !tls.key_file().empty()) {
    return;
  }
  absl::StatusOr<fabricmon::TransportSecurity> security =
      fabricmon::LoadTransportSecurity(tls, role);
  // Plaintext only when asked for (or for the CLI), never as a fallback.
  FABRICMON_FUZZ_CHECK(security.ok() ==
                       (tls.insecure_plaintext() || role == fabricmon::TlsRole::kCli));
  if (security.ok()) {
    FABRICMON_FUZZ_CHECK(security->plaintext);
  }
}

}  // namespace

FABRICMON_FUZZ_TARGET(text_config) {
  if (size == 0) {
    return;
  }
  const absl::string_view text = ::fabricmon::fuzz::AsText(data + 1, size - 1);
  if (data[0] & 1) {
    fabricmon::v1::AggregatorConfig config;
    const absl::Status status = fabricmon::ParseTextConfig(text, "fuzz", &config);
    if (!status.ok()) {
      FABRICMON_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument);
      return;
    }
    CheckRoundTrip(config);
    CheckTransport(config.tls(), fabricmon::TlsRole::kAggregator);
  } else {
    fabricmon::v1::AgentConfig config;
    const absl::Status status = fabricmon::ParseTextConfig(text, "fuzz", &config);
    if (!status.ok()) {
      FABRICMON_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument);
      return;
    }
    CheckRoundTrip(config);
    CheckTransport(config.tls(), fabricmon::TlsRole::kAgent);
    CheckFilter(config.collectors().ib_sysfs().devices());
    CheckFilter(config.collectors().ethtool().netdevs());
    CheckFilter(config.collectors().netdev().netdevs());
  }
}
