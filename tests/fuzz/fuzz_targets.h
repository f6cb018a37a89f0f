#pragma once

// The fuzz targets linked into the replay test (tests/fuzz/replay_test.cc). Each is defined with
// FABRICMON_FUZZ_TARGET in its own <name>_fuzz.cc; which exist depends on the build (collector
// folders can be left out; the ibnetdiscover parser needs the ib_fabric folder), and
// tests/fuzz/CMakeLists.txt defines FABRICMON_FUZZ_HAVE_<NAME> for each one compiled in.

#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace fabricmon::fuzz {

void Fuzz_sysfs_value(const uint8_t* data, size_t size);
void Fuzz_ethtool_text(const uint8_t* data, size_t size);
void Fuzz_proc_net_snmp(const uint8_t* data, size_t size);
void Fuzz_rdma_netlink(const uint8_t* data, size_t size);
void Fuzz_ibnetdiscover(const uint8_t* data, size_t size);
void Fuzz_link_list(const uint8_t* data, size_t size);
void Fuzz_text_config(const uint8_t* data, size_t size);
void Fuzz_ingest(const uint8_t* data, size_t size);
void Fuzz_exposition(const uint8_t* data, size_t size);
void Fuzz_batch_template(const uint8_t* data, size_t size);

// Every target in this build, in a fixed order.
inline std::vector<FuzzTarget> AllFuzzTargets() {
  std::vector<FuzzTarget> targets = {
#ifdef FABRICMON_FUZZ_HAVE_SYSFS_VALUE
      {"sysfs_value", &Fuzz_sysfs_value},
#endif
#ifdef FABRICMON_FUZZ_HAVE_ETHTOOL_TEXT
      {"ethtool_text", &Fuzz_ethtool_text},
#endif
#ifdef FABRICMON_FUZZ_HAVE_PROC_NET_SNMP
      {"proc_net_snmp", &Fuzz_proc_net_snmp},
#endif
#ifdef FABRICMON_FUZZ_HAVE_RDMA_NETLINK
      {"rdma_netlink", &Fuzz_rdma_netlink},
#endif
#ifdef FABRICMON_FUZZ_HAVE_IBNETDISCOVER
      {"ibnetdiscover", &Fuzz_ibnetdiscover},
#endif
#ifdef FABRICMON_FUZZ_HAVE_LINK_LIST
      {"link_list", &Fuzz_link_list},
#endif
#ifdef FABRICMON_FUZZ_HAVE_TEXT_CONFIG
      {"text_config", &Fuzz_text_config},
#endif
#ifdef FABRICMON_FUZZ_HAVE_INGEST
      {"ingest", &Fuzz_ingest},
#endif
#ifdef FABRICMON_FUZZ_HAVE_EXPOSITION
      {"exposition", &Fuzz_exposition},
#endif
#ifdef FABRICMON_FUZZ_HAVE_BATCH_TEMPLATE
      {"batch_template", &Fuzz_batch_template},
#endif
  };
  return targets;
}

}  // namespace fabricmon::fuzz
