#include "collectors/ib_sysfs/ib_counters_parser.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace fabricmon::collectors::ib_sysfs {
namespace {

// Widths of the legacy PortCounters fields (IBA PortCounters attribute; libibmad fields.c;
// kernel drivers/infiniband/core/sysfs.c PORT_PMA_ATTR). They clamp at all ones: saturate.
struct PmaField {
  absl::string_view file;
  uint8_t width;
  absl::string_view help;
};
constexpr PmaField kPmaFields[] = {
    {"symbol_error", 16, "Minor link errors detected on one or more physical lanes."},
    {"link_error_recovery", 8,
     "Successful link error recoveries (the link self-healed); 8-bit, saturates at 255."},
    {"link_downed", 8,
     "Failed link error recoveries that took the link down; 8-bit, saturates at 255."},
    {"port_rcv_errors", 16, "Packets with errors received on the port."},
    {"port_rcv_remote_physical_errors", 16, "Packets received marked with EBP (bad packet)."},
    {"port_rcv_switch_relay_errors", 16, "Packets a switch could not forward."},
    {"port_xmit_discards", 16, "Outbound packets discarded (port down or congested)."},
    {"port_xmit_constraint_errors", 8, "Outbound packets not sent due to constraints."},
    {"port_rcv_constraint_errors", 8, "Inbound packets discarded due to constraints."},
    {"local_link_integrity_errors", 4, "Times the local physical error threshold was exceeded."},
    {"excessive_buffer_overrun_errors", 4, "Consecutive flow-control buffer overrun periods."},
    {"vl15_dropped", 16, "Incoming VL15 (subnet management) packets dropped."},
    {"port_rcv_discards", 16, "Received packets discarded (older kernels' name)."},
    // XmitWait is 32-bit even where the port has the extended group (README.md, "XmitWait is
    // 32-bit").
    {"port_xmit_wait", 32,
     "Ticks during which the port had data to send but no flow-control credits (congestion "
     "back-pressure). Tick length is device-specific."},
};

const PmaField* FindPmaField(absl::string_view name) {
  for (const PmaField& field : kPmaFields) {
    if (field.file == name) {
      return &field;
    }
  }
  return nullptr;
}

// Data and packet counters, which have a 32-bit legacy and a 64-bit extended form.
bool IsTrafficCounter(absl::string_view name) {
  return name == "port_xmit_data" || name == "port_rcv_data" || name == "port_xmit_packets" ||
         name == "port_rcv_packets" || absl::StrContains(name, "unicast_") ||
         absl::StrContains(name, "multicast_");
}

// mlx5 hw_counters: q-counters are 32-bit and wrap (be32_to_cpu in
// drivers/infiniband/hw/mlx5/counters.c); congestion counters (rp_cnp_*, np_*) and
// rx_icrc_encapsulated are read from 64-bit (_high) fields.
uint8_t Mlx5HwCounterWidth(absl::string_view name) {
  if (absl::StartsWith(name, "rp_") || absl::StartsWith(name, "np_") ||
      name == "rx_icrc_encapsulated") {
    return 64;
  }
  return 32;
}

}  // namespace

std::vector<absl::string_view> KnownCounterFiles() {
  std::vector<absl::string_view> files = {
      "port_xmit_data",         "port_rcv_data",         "port_xmit_packets",
      "port_rcv_packets",       "unicast_xmit_packets",  "unicast_rcv_packets",
      "multicast_xmit_packets", "multicast_rcv_packets",
  };
  for (const PmaField& field : kPmaFields) {
    files.push_back(field.file);
  }
  return files;
}

CounterSpec SpecForCounter(CounterGroup group, absl::string_view file, bool pma_extended,
                           absl::string_view driver) {
  CounterSpec spec;
  std::string name = SanitizeName(file);

  if (group == CounterGroup::kHwCounters) {
    if (name == "lifespan") {
      spec.skip = true;  // the hw_counters cache lifetime in ms, a setting (README, "hw_counters")
      return spec;
    }
    const bool mlx5 = absl::StartsWith(driver, "mlx5");
    spec.metric = absl::StrCat("fabricmon_ib_hw_", name, "_total");
    spec.help = absl::StrCat("Driver hardware counter hw_counters/", file, ".");
    spec.width_bits = mlx5 ? Mlx5HwCounterWidth(name) : 64;
    spec.overflow = Overflow::kWraps;
    if (absl::StrContains(name, "bytes") || absl::StrContains(name, "octets")) {
      spec.unit = Unit::kBytes;
    } else if (absl::StrContains(name, "packets") || absl::StrContains(name, "pkts")) {
      spec.unit = Unit::kPackets;
    }
    return spec;
  }

  if (group == CounterGroup::kCountersExt) {
    // counters_ext/port_xmit_data_64 → port_xmit_data; port_unicast_xmit_packets →
    // unicast_xmit_packets: the same counters as the newer counters/ names.
    absl::string_view view(name);
    if (absl::ConsumeSuffix(&view, "_64")) {
      name = std::string(view);
    } else if (absl::StartsWith(name, "port_unicast_") ||
               absl::StartsWith(name, "port_multicast_")) {
      name = name.substr(5);
    }
    pma_extended = true;
  }

  if (name == "port_xmit_data" || name == "port_rcv_data") {
    // PortXmitData/PortRcvData count octets divided by 4 (IBA; perfquery(8)): bytes = value × 4,
    // never × lanes (README.md, "Data counters count 4-byte words").
    spec.metric = absl::StrCat("fabricmon_ib_", name, "_bytes_total");
    spec.help = name == "port_xmit_data" ? "Bytes transmitted on the port (data words × 4)."
                                         : "Bytes received on the port (data words × 4).";
    spec.unit = Unit::kBytes;
    spec.scale = 4.0;
  } else {
    spec.metric = absl::StrCat("fabricmon_ib_", name, "_total");
  }

  if (IsTrafficCounter(name)) {
    if (spec.unit == Unit::kNone) {
      spec.unit = Unit::kPackets;
      // Named after the counter, not the file (counters_ext/port_xmit_packets_64 is
      // port_xmit_packets): one family, one HELP, whichever file or collector feeds it.
      spec.help = absl::StrCat("Packets counted by ", name, ".");
    }
    // Without the extended group the kernel exposes the 32-bit PortCounters fields, which clamp
    // at all ones: 2^32 × 4 B saturates in ~0.34 s at 400 Gb/s (README.md, "Which counter group
    // the kernel exposes").
    spec.width_bits = pma_extended ? 64 : 32;
    spec.overflow = Overflow::kSaturates;
    return spec;
  }

  if (const PmaField* field = FindPmaField(name)) {
    spec.width_bits = field->width;
    spec.overflow = Overflow::kSaturates;
    spec.help = std::string(field->help);
    if (name == "port_xmit_wait") {
      spec.unit = Unit::kTicks;
    }
    return spec;
  }

  // A counter this build does not know: still exported, as a 64-bit counter.
  spec.help = absl::StrCat("Port counter counters/", file, ".");
  spec.width_bits = 64;
  spec.overflow = Overflow::kWraps;
  return spec;
}

std::string DriverFamily(absl::string_view driver_link, absl::string_view device_name,
                         absl::string_view hca_type) {
  if (!driver_link.empty()) {
    return std::string(driver_link);
  }
  if (absl::StartsWith(device_name, "mlx5") ||
      (absl::StartsWith(hca_type, "MT41") && hca_type.size() >= 6)) {
    return "mlx5_core";
  }
  return "";
}

PortStateValue ParsePortState(absl::string_view content) {
  PortStateValue result;
  content = absl::StripAsciiWhitespace(content);
  const size_t colon = content.find(':');
  absl::string_view number = content.substr(0, colon);
  if (!absl::SimpleAtoi(number, &result.code)) {
    return result;
  }
  result.ok = true;
  if (colon != absl::string_view::npos) {
    result.name = std::string(absl::StripAsciiWhitespace(content.substr(colon + 1)));
  }
  return result;
}

uint64_t ParseRateBitsPerSecond(absl::string_view content) {
  content = absl::StripAsciiWhitespace(content);
  const size_t space = content.find(' ');
  if (space == absl::string_view::npos) {
    return 0;
  }
  double value = 0;
  if (!absl::SimpleAtod(content.substr(0, space), &value) || value < 0) {
    return 0;
  }
  absl::string_view unit = absl::StripLeadingAsciiWhitespace(content.substr(space + 1));
  double multiplier = 0;
  if (absl::StartsWith(unit, "Gb/")) {
    multiplier = 1e9;
  } else if (absl::StartsWith(unit, "Mb/")) {
    multiplier = 1e6;
  } else if (absl::StartsWith(unit, "Tb/")) {
    multiplier = 1e12;
  } else {
    return 0;
  }
  // SimpleAtod accepts "nan", "inf" and exponents: converting a non-finite or ≥ 2^64 double to
  // an integer is undefined behaviour, so junk like "inf Gb/sec" must stop here.
  const double bits = value * multiplier + 0.5;
  if (!std::isfinite(bits) || bits >= 18446744073709551616.0) {
    return 0;
  }
  return static_cast<uint64_t>(bits);
}

uint32_t ParseLid(absl::string_view content) {
  content = absl::StripAsciiWhitespace(content);
  if (!absl::ConsumePrefix(&content, "0x")) {
    return 0;
  }
  uint32_t lid = 0;
  if (!absl::SimpleHexAtoi(content, &lid)) {
    return 0;
  }
  return lid;
}

}  // namespace fabricmon::collectors::ib_sysfs
