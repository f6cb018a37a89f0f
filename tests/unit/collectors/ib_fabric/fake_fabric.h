#pragma once

// Test doubles for the ib_fabric collector's seams: a MadTransport that answers like a fabric of
// PMAs and SMAs (payloads encoded with libibmad's own field table, so decoding is tested against
// the encoder, not against itself), and a FabricBackend serving a scripted Subnet.
// Not thread-safe; one test thread.

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <utility>

#include "collectors/fabric_model/subnet.h"
#include "collectors/ib_fabric/ib_fabric_collector.h"
#include "collectors/ib_fabric/mad_pipeline.h"
#include "collectors/ib_fabric/pma.h"
#include "tests/testing/fake_clock.h"

namespace fabricmon::collectors::ib_fabric_testing {

using ib_fabric::MadKind;
using ib_fabric::MadRequest;
using ib_fabric::MadTransport;
using ib_fabric::PmaCapabilities;
using ib_fabric::PmaCounter;

struct FakePort {
  std::map<PmaCounter, uint64_t> counters;
  uint32_t state = 4;       // Active
  uint32_t phys_state = 5;  // LinkUp
  uint32_t width_bits = 2;  // 4X
  uint32_t speed = 4;       // QDR
};

struct FakeNode {
  PmaCapabilities caps;
  uint16_t class_port_info_status = 0;  // non-zero: ClassPortInfo answers with this MAD status
  std::map<uint32_t, FakePort> ports;
  bool dead = false;  // never answers
};

// Answers immediately (FIFO) unless the destination is dead; an empty Receive() advances the
// fake clock by its timeout, so deadlines pass without sleeping.
class FakeFabric final : public MadTransport {
 public:
  explicit FakeFabric(testing::FakeClock& clock) : clock_(clock) {}

  // Nodes by destination LID (a switch's LID; for CAs, each port's LID).
  std::map<uint16_t, FakeNode> nodes;
  // Answer requests of these LIDs only on their n-th attempt (loss), keyed by LID.
  std::map<uint16_t, int> drop_first;
  // Requests seen, in order.
  std::vector<MadRequest> log;
  size_t max_outstanding = 0;
  std::map<uint16_t, size_t> max_outstanding_per_lid;
  absl::Status fail_sends = absl::OkStatus();

  absl::Status Send(const MadRequest& request, uint32_t tid, absl::Duration timeout) override;
  absl::StatusOr<std::optional<Completion>> Receive(absl::Duration timeout) override;

  // Encoders, public for the PMA decoding tests.
  static std::array<uint8_t, ib_fabric::kGsDataBytes> EncodeClassPortInfo(
      const PmaCapabilities& caps);
  static std::array<uint8_t, ib_fabric::kGsDataBytes> EncodePortCounters(uint32_t port,
                                                                         const FakePort& state);
  static std::array<uint8_t, ib_fabric::kGsDataBytes> EncodePortCountersExtended(
      uint32_t port, const FakePort& state, bool additional);
  static std::array<uint8_t, ib_fabric::kGsDataBytes> EncodePortInfo(const FakePort& state);

 private:
  struct Pending {
    uint32_t tid;
    MadRequest request;
  };
  testing::FakeClock& clock_;
  std::deque<Pending> queue_;
  std::map<uint16_t, size_t> outstanding_per_lid_;
  std::map<std::pair<uint16_t, uint8_t>, int> attempts_;
  size_t outstanding_ = 0;
};

// A FabricBackend serving `topology` (tests mutate it between discoveries) and `fabric`.
class FakeBackend final : public ib_fabric::FabricBackend {
 public:
  FakeBackend(fabric_model::Subnet* topology, FakeFabric* fabric)
      : topology_(topology), fabric_(fabric) {}
  absl::Status discover_status = absl::OkStatus();
  absl::Status open_status = absl::OkStatus();
  int discoveries = 0;
  int opens = 0;

  absl::StatusOr<fabric_model::Subnet> Discover(ib_fabric::DiscoveryStats* stats) override {
    ++discoveries;
    if (!discover_status.ok()) {
      return discover_status;
    }
    if (stats != nullptr) {
      stats->mads = 10;
    }
    return *topology_;
  }
  absl::StatusOr<MadTransport*> OpenTransport() override {
    if (!open_status.ok()) {
      return open_status;
    }
    ++opens;
    return fabric_;
  }
  void CloseTransport() override {}

 private:
  fabric_model::Subnet* topology_;
  FakeFabric* fabric_;
};

}  // namespace fabricmon::collectors::ib_fabric_testing
