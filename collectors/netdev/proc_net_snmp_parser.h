#pragma once

// Generic parser for the "header line / value line" tables of /proc/net/snmp and
// /proc/net/netstat:
//
//   Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens ... InSegs OutSegs RetransSegs ...
//   Tcp: 1 200 120000 -1 20 ... 1108 676 0 ...
//
// Every section is two lines with the same "Name:" prefix: the first names the fields, the second
// holds their values in the same order (kernel net/ipv4/proc.c, snmp_seq_show_* and
// netstat_seq_show). The set and order of fields change between kernel versions, so nothing here
// assumes a position: callers look fields up by section and name.
//
// Pure functions of their input; no I/O, no allocation beyond the returned table. Thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace fabricmon::collectors::netdev {

// One section ("Tcp", "TcpExt", "IpExt", ...). `keys` and `values` have the same length and
// order; fields whose value was not a number are left out of both.
struct SnmpSection {
  std::string name;
  std::vector<std::string> keys;
  // Raw 64-bit values. The kernel prints unsigned long counters with %lu; a few fields are signed
  // (Tcp MaxConn is "-1", RFC 2012) and are stored in two's complement: read them with
  // static_cast<int64_t>.
  std::vector<uint64_t> values;

  // Index of `key` in `keys`, or -1. `hint` is tried first (callers cache the index they found
  // last time, so a steady-state lookup is one string compare).
  int IndexOf(absl::string_view key, int hint = -1) const;
};

struct SnmpTable {
  std::vector<SnmpSection> sections;
  // Sections that were dropped whole: a header line with no value line (or the reverse), a
  // value line whose field count differs from its header (positions cannot be trusted then), a
  // section name seen twice (the first one is kept), or a line without "Name:".
  int malformed_sections = 0;
  // Values that were not numbers; only that field is dropped, the rest of the section is kept.
  int malformed_values = 0;

  const SnmpSection* Find(absl::string_view section) const;
  // Value of `section`.`key`, or nullopt when the section or field is absent.
  std::optional<uint64_t> Value(absl::string_view section, absl::string_view key) const;
};

// Parses the whole content of /proc/net/snmp or /proc/net/netstat. Never fails: malformed parts
// are counted in the table and left out, so one bad section never hides the others.
SnmpTable ParseSnmpTable(absl::string_view content);

// Parses one kernel integer as printed by %d, %ld, %u, %lu or %llu, with surrounding whitespace:
// "-1" → 0xffff'ffff'ffff'ffff. nullopt when empty or not an integer that fits 64 bits
// (unsigned) or int64 (negative).
std::optional<uint64_t> ParseKernelInteger(absl::string_view text);

}  // namespace fabricmon::collectors::netdev
