#pragma once

// Metric families the detectors read, in one place. Each is produced by a collector (see the
// README's metric tables); a detector that finds none of its families on a node simply has
// nothing to say about it.

namespace fabricmon::detectors::families {

// ib_sysfs (HCA ports; labels device, port) and ib_fabric (switch ports; labels switch,
// switch_guid, port) share these names.
inline constexpr char kIbLinkDowned[] = "fabricmon_ib_link_downed_total";
inline constexpr char kIbLinkErrorRecovery[] = "fabricmon_ib_link_error_recovery_total";
inline constexpr char kIbSymbolError[] = "fabricmon_ib_symbol_error_total";
inline constexpr char kIbRcvErrors[] = "fabricmon_ib_port_rcv_errors_total";
inline constexpr char kIbLocalLinkIntegrity[] = "fabricmon_ib_local_link_integrity_errors_total";
inline constexpr char kIbBufferOverrun[] = "fabricmon_ib_excessive_buffer_overrun_errors_total";
inline constexpr char kIbRemotePhysical[] = "fabricmon_ib_port_rcv_remote_physical_errors_total";
inline constexpr char kIbPortState[] = "fabricmon_ib_port_state";
inline constexpr char kIbXmitWait[] = "fabricmon_ib_port_xmit_wait_total";
inline constexpr char kIbXmitData[] = "fabricmon_ib_port_xmit_data_bytes_total";
inline constexpr char kIbRcvData[] = "fabricmon_ib_port_rcv_data_bytes_total";
inline constexpr char kIbRpCnpIgnored[] = "fabricmon_ib_hw_rp_cnp_ignored_total";
inline constexpr char kIbRpCnpHandled[] = "fabricmon_ib_hw_rp_cnp_handled_total";
inline constexpr char kIbNpEcnMarked[] = "fabricmon_ib_hw_np_ecn_marked_roce_packets_total";
inline constexpr char kIbNpCnpSent[] = "fabricmon_ib_hw_np_cnp_sent_total";
inline constexpr char kIbPortInfo[] = "fabricmon_ib_port_info";

// ethtool (RoCE NICs; labels netdev, direction, priority).
inline constexpr char kRoceLinkDownEvents[] = "fabricmon_roce_link_down_events_total";
inline constexpr char kRocePauseDuration[] = "fabricmon_roce_pfc_pause_duration_seconds_total";
inline constexpr char kRocePauseFrames[] = "fabricmon_roce_pfc_pause_frames_total";
inline constexpr char kRocePauseStormWarning[] = "fabricmon_roce_pause_storm_warning_events_total";
inline constexpr char kRocePauseStormError[] = "fabricmon_roce_pause_storm_error_events_total";
inline constexpr char kRoceEcnMarked[] = "fabricmon_roce_rx_prio_ecn_marked_packets_total";
inline constexpr char kRoceRdmaBytes[] = "fabricmon_roce_rdma_bytes_total";
inline constexpr char kRoceRxOutOfBuffer[] = "fabricmon_roce_rx_out_of_buffer_total";
inline constexpr char kRocePcsSymbolErrors[] = "fabricmon_roce_phy_rx_pcs_symbol_errors_total";
inline constexpr char kRoceCrcErrors[] = "fabricmon_roce_phy_rx_crc_errors_total";

// netdev (labels netdev) and TCP.
inline constexpr char kNetdevCarrierDown[] = "fabricmon_netdev_carrier_down_total";
inline constexpr char kNetdevRxBytes[] = "fabricmon_netdev_rx_bytes_total";
inline constexpr char kNetdevTxBytes[] = "fabricmon_netdev_tx_bytes_total";
inline constexpr char kNetdevInfo[] = "fabricmon_netdev_info";

// nvml (labels gpu, link).
inline constexpr char kGpuUtilization[] = "fabricmon_gpu_utilization_ratio";
inline constexpr char kNvlinkState[] = "fabricmon_nvlink_state";
inline constexpr char kNvlinkErrors[] = "fabricmon_nvlink_errors_total";
inline constexpr char kNvlinkRecoveryEvents[] = "fabricmon_nvlink_recovery_events_total";

// rdma_qp (labels pid, comm, device, type).
inline constexpr char kRdmaProcessQps[] = "fabricmon_rdma_process_qps";
inline constexpr char kRdmaQpProcessesDropped[] = "fabricmon_rdma_qp_processes_dropped";
inline constexpr char kRdmaQpSeesAllProcesses[] = "fabricmon_rdma_qp_sees_all_processes";

}  // namespace fabricmon::detectors::families
