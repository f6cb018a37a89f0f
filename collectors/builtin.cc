#include "collectors/builtin.h"

#ifdef FABRICMON_HAVE_IB_SYSFS
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#endif
#ifdef FABRICMON_HAVE_ETHTOOL
#include "collectors/ethtool/ethtool_collector.h"
#endif
#ifdef FABRICMON_HAVE_NETDEV
#include "collectors/netdev/netdev_collector.h"
#endif
#ifdef FABRICMON_HAVE_RDMA_QP
#include "collectors/rdma_qp/rdma_qp_collector.h"
#endif
#ifdef FABRICMON_HAVE_NVML
#include "collectors/nvml/nvml_collector.h"
#endif
#ifdef FABRICMON_HAVE_IB_FABRIC
#include "collectors/ib_fabric/ib_fabric_collector.h"
#endif

namespace fabricmon::collectors {

void RegisterBuiltinCollectors(CollectorRegistry& registry) {
#ifdef FABRICMON_HAVE_IB_SYSFS
  RegisterIbSysfsCollector(registry);
#endif
#ifdef FABRICMON_HAVE_ETHTOOL
  RegisterEthtoolCollector(registry);
#endif
#ifdef FABRICMON_HAVE_NETDEV
  RegisterNetdevCollector(registry);
#endif
#ifdef FABRICMON_HAVE_RDMA_QP
  RegisterRdmaQpCollector(registry);
#endif
#ifdef FABRICMON_HAVE_NVML
  RegisterNvmlCollector(registry);
#endif
#ifdef FABRICMON_HAVE_IB_FABRIC
  RegisterIbFabricCollector(registry);
#endif
}

}  // namespace fabricmon::collectors
