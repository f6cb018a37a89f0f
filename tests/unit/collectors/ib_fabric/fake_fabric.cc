#include "tests/unit/collectors/ib_fabric/fake_fabric.h"

#include <infiniband/mad.h>

namespace fabricmon::collectors::ib_fabric_testing {
namespace {

using Payload = std::array<uint8_t, ib_fabric::kGsDataBytes>;

uint64_t CounterOr0(const FakePort& port, PmaCounter counter) {
  auto it = port.counters.find(counter);
  return it == port.counters.end() ? 0 : it->second;
}

// The PortCounters layout, spelled out here independently of pma.cc (IBA Table 247 via libibmad
// field ids).
const std::pair<PmaCounter, MAD_FIELDS> kLegacy[] = {
    {PmaCounter::kSymbolError, IB_PC_ERR_SYM_F},
    {PmaCounter::kLinkErrorRecovery, IB_PC_LINK_RECOVERS_F},
    {PmaCounter::kLinkDowned, IB_PC_LINK_DOWNED_F},
    {PmaCounter::kRcvErrors, IB_PC_ERR_RCV_F},
    {PmaCounter::kRcvRemotePhysicalErrors, IB_PC_ERR_PHYSRCV_F},
    {PmaCounter::kRcvSwitchRelayErrors, IB_PC_ERR_SWITCH_REL_F},
    {PmaCounter::kXmitDiscards, IB_PC_XMT_DISCARDS_F},
    {PmaCounter::kXmitConstraintErrors, IB_PC_ERR_XMTCONSTR_F},
    {PmaCounter::kRcvConstraintErrors, IB_PC_ERR_RCVCONSTR_F},
    {PmaCounter::kLocalLinkIntegrityErrors, IB_PC_ERR_LOCALINTEG_F},
    {PmaCounter::kExcessiveBufferOverrunErrors, IB_PC_ERR_EXCESS_OVR_F},
    {PmaCounter::kVl15Dropped, IB_PC_VL15_DROPPED_F},
    {PmaCounter::kXmitWait, IB_PC_XMT_WAIT_F},
    {PmaCounter::kXmitData, IB_PC_XMT_BYTES_F},
    {PmaCounter::kRcvData, IB_PC_RCV_BYTES_F},
    {PmaCounter::kXmitPackets, IB_PC_XMT_PKTS_F},
    {PmaCounter::kRcvPackets, IB_PC_RCV_PKTS_F},
};
const std::pair<PmaCounter, MAD_FIELDS> kExtended[] = {
    {PmaCounter::kXmitData, IB_PC_EXT_XMT_BYTES_F},
    {PmaCounter::kRcvData, IB_PC_EXT_RCV_BYTES_F},
    {PmaCounter::kXmitPackets, IB_PC_EXT_XMT_PKTS_F},
    {PmaCounter::kRcvPackets, IB_PC_EXT_RCV_PKTS_F},
    {PmaCounter::kUnicastXmitPackets, IB_PC_EXT_XMT_UPKTS_F},
    {PmaCounter::kUnicastRcvPackets, IB_PC_EXT_RCV_UPKTS_F},
    {PmaCounter::kMulticastXmitPackets, IB_PC_EXT_XMT_MPKTS_F},
    {PmaCounter::kMulticastRcvPackets, IB_PC_EXT_RCV_MPKTS_F},
};
const std::pair<PmaCounter, MAD_FIELDS> kAdditional[] = {
    {PmaCounter::kSymbolError, IB_PC_EXT_ERR_SYM_F},
    {PmaCounter::kLinkErrorRecovery, IB_PC_EXT_LINK_RECOVERS_F},
    {PmaCounter::kLinkDowned, IB_PC_EXT_LINK_DOWNED_F},
    {PmaCounter::kRcvErrors, IB_PC_EXT_ERR_RCV_F},
    {PmaCounter::kRcvRemotePhysicalErrors, IB_PC_EXT_ERR_PHYSRCV_F},
    {PmaCounter::kRcvSwitchRelayErrors, IB_PC_EXT_ERR_SWITCH_REL_F},
    {PmaCounter::kXmitDiscards, IB_PC_EXT_XMT_DISCARDS_F},
    {PmaCounter::kXmitConstraintErrors, IB_PC_EXT_ERR_XMTCONSTR_F},
    {PmaCounter::kRcvConstraintErrors, IB_PC_EXT_ERR_RCVCONSTR_F},
    {PmaCounter::kLocalLinkIntegrityErrors, IB_PC_EXT_ERR_LOCALINTEG_F},
    {PmaCounter::kExcessiveBufferOverrunErrors, IB_PC_EXT_ERR_EXCESS_OVR_F},
    {PmaCounter::kVl15Dropped, IB_PC_EXT_VL15_DROPPED_F},
    {PmaCounter::kXmitWait, IB_PC_EXT_XMT_WAIT_F},
    {PmaCounter::kQp1Dropped, IB_PC_EXT_QP1_DROP_F},
};

}  // namespace

Payload FakeFabric::EncodeClassPortInfo(const PmaCapabilities& caps) {
  Payload data{};
  mad_set_field(data.data(), 0, IB_CPI_CAPMASK_F, caps.cap_mask);
  mad_set_field(data.data(), 0, IB_CPI_CAPMASK2_F, caps.cap_mask2);
  return data;
}

Payload FakeFabric::EncodePortCounters(uint32_t port, const FakePort& state) {
  Payload data{};
  mad_set_field(data.data(), 0, IB_PC_PORT_SELECT_F, port);
  for (const auto& [counter, field] : kLegacy) {
    // Narrow fields hold the low bits, as a saturated hardware counter would hold all ones.
    mad_set_field(data.data(), 0, field, static_cast<uint32_t>(CounterOr0(state, counter)));
  }
  return data;
}

Payload FakeFabric::EncodePortCountersExtended(uint32_t port, const FakePort& state,
                                               bool additional) {
  Payload data{};
  mad_set_field(data.data(), 0, IB_PC_EXT_PORT_SELECT_F, port);
  for (const auto& [counter, field] : kExtended) {
    mad_set_field64(data.data(), 0, field, CounterOr0(state, counter));
  }
  if (additional) {
    for (const auto& [counter, field] : kAdditional) {
      mad_set_field64(data.data(), 0, field, CounterOr0(state, counter));
    }
  }
  return data;
}

Payload FakeFabric::EncodePortInfo(const FakePort& state) {
  Payload data{};
  mad_set_field(data.data(), 0, IB_PORT_STATE_F, state.state);
  mad_set_field(data.data(), 0, IB_PORT_PHYS_STATE_F, state.phys_state);
  mad_set_field(data.data(), 0, IB_PORT_LINK_WIDTH_ACTIVE_F, state.width_bits);
  mad_set_field(data.data(), 0, IB_PORT_LINK_SPEED_ACTIVE_F, state.speed);
  return data;
}

absl::Status FakeFabric::Send(const MadRequest& request, uint32_t tid, absl::Duration timeout) {
  if (!fail_sends.ok()) {
    return fail_sends;
  }
  log.push_back(request);
  ++outstanding_;
  max_outstanding = std::max(max_outstanding, outstanding_);
  size_t& per_lid = outstanding_per_lid_[request.lid];
  ++per_lid;
  max_outstanding_per_lid[request.lid] = std::max(max_outstanding_per_lid[request.lid], per_lid);
  auto node = nodes.find(request.lid);
  if (node == nodes.end() || node->second.dead) {
    return absl::OkStatus();  // lost: the pipeline's deadline will notice
  }
  auto drop = drop_first.find(request.lid);
  if (drop != drop_first.end()) {
    int& seen = attempts_[{request.lid, request.port}];
    if (++seen <= drop->second) {
      return absl::OkStatus();
    }
  }
  queue_.push_back({tid, request});
  return absl::OkStatus();
}

absl::StatusOr<std::optional<MadTransport::Completion>> FakeFabric::Receive(
    absl::Duration timeout) {
  if (queue_.empty()) {
    clock_.AdvanceNanos(absl::ToInt64Nanoseconds(timeout));
    // Lost requests stay "outstanding" for the fake's accounting until the pipeline retries.
    outstanding_ = 0;
    outstanding_per_lid_.clear();
    return std::optional<Completion>();
  }
  Pending pending = queue_.front();
  queue_.pop_front();
  if (outstanding_ > 0) {
    --outstanding_;
  }
  if (outstanding_per_lid_[pending.request.lid] > 0) {
    --outstanding_per_lid_[pending.request.lid];
  }
  const FakeNode& node = nodes.at(pending.request.lid);
  Completion completion;
  completion.tid = pending.tid;
  const uint32_t port = pending.request.port;
  static const FakePort kNoPort;
  auto it = node.ports.find(port);
  const FakePort& state = it == node.ports.end() ? kNoPort : it->second;
  switch (pending.request.kind) {
    case MadKind::kClassPortInfo:
      completion.mad_status = node.class_port_info_status;
      completion.data = EncodeClassPortInfo(node.caps);
      break;
    case MadKind::kPortCounters:
      completion.data = EncodePortCounters(port, state);
      break;
    case MadKind::kPortCountersExtended:
      completion.data = EncodePortCountersExtended(port, state, node.caps.additional_extended());
      break;
    case MadKind::kPortInfo:
      completion.data = EncodePortInfo(state);
      break;
  }
  if (it == node.ports.end() && pending.request.kind != MadKind::kClassPortInfo) {
    completion.mad_status = 7 << 2;  // "invalid attribute or modifier" (IBA Table 107)
  }
  return std::optional<Completion>(completion);
}

}  // namespace fabricmon::collectors::ib_fabric_testing
