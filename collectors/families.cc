#include "collectors/families.h"

#include "collectors/core/collector_errors.h"
#include "collectors/ethtool/ethtool_families.h"
#include "collectors/ib_fabric/ib_fabric_families.h"
#include "collectors/ib_sysfs/ib_sysfs_families.h"
#include "collectors/netdev/netdev_families.h"
#include "collectors/nvml/nvml_families.h"
#include "collectors/rdma_qp/rdma_qp_families.h"
#include "daemon/agent/agent_families.h"

namespace fabricmon::collectors {

void AppendProjectFamilies(std::vector<SeriesDesc>* out) {
  out->push_back(SeriesFromSpec(kCollectorErrorsFamily, "core", {}));
  AppendFamilies("agent", agent::kAgentFamilies, out);
  ib_sysfs::AppendIbSysfsFamilies(out);
  ib_fabric::AppendIbFabricFamilies(out);
  ethtool::AppendEthtoolFamilies(out);
  netdev::AppendNetdevFamilies(out);
  AppendFamilies("nvml", nvml::kNvmlFamilies, out);
  AppendFamilies("rdma_qp", rdma_qp::kRdmaQpFamilies, out);
}

}  // namespace fabricmon::collectors
