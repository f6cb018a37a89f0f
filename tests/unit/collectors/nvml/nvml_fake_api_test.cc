// The NvmlApi seam with an injected fake, for what a C library cannot easily produce: field
// values of unusual types and an opener that fails with a transient error. Everything else is
// tested through the real dlopen path (nvml_collector_test.cc).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectors/core/recording_sink.h"
#include "collectors/nvml/nvml_api.h"
#include "collectors/nvml/nvml_collector.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/collectors/nvml/nvml_test_util.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::testing::StatusIs;
namespace abi = nvml::abi;

// One GPU with one NVLink. Field values are answered from `fields` (by field id); the value's
// type is chosen per id to cover the decoding of nvmlValue_t.
class FakeNvmlApi final : public nvml::NvmlApi {
 public:
  std::map<unsigned int, abi::nvmlFieldValue_t> fields;
  int* destroyed = nullptr;

  ~FakeNvmlApi() override {
    if (destroyed != nullptr) {
      ++*destroyed;
    }
  }
  bool Has(nvml::Feature feature) const override {
    return feature != nvml::Feature::kNvLinkErrorCounters;
  }
  nvml::nvmlReturn_t DeviceGetCount(unsigned int* count) override {
    *count = 1;
    return abi::NVML_SUCCESS;
  }
  nvml::nvmlReturn_t DeviceGetHandleByIndex(unsigned int index, nvml::Device* device) override {
    *device = reinterpret_cast<nvml::Device>(uintptr_t{0x1000} + index);
    return abi::NVML_SUCCESS;
  }
  nvml::nvmlReturn_t DeviceGetUuid(nvml::Device, std::string* uuid) override {
    *uuid = "GPU-fake";
    return abi::NVML_SUCCESS;
  }
  nvml::nvmlReturn_t DeviceGetName(nvml::Device, std::string* name) override {
    *name = "Fake GPU";
    return abi::NVML_SUCCESS;
  }
  nvml::nvmlReturn_t DeviceGetPciBusId(nvml::Device, std::string* bus_id) override {
    *bus_id = "00000000:01:00.0";
    return abi::NVML_SUCCESS;
  }
  nvml::nvmlReturn_t DeviceGetUtilization(nvml::Device, abi::nvmlUtilization_t* u) override {
    u->gpu = 100;
    u->memory = 0;
    return abi::NVML_SUCCESS;
  }
  nvml::nvmlReturn_t DeviceGetComputePids(nvml::Device, std::vector<uint32_t>* pids) override {
    *pids = {7};
    return abi::NVML_SUCCESS;
  }
  nvml::nvmlReturn_t DeviceGetNvLinkState(nvml::Device, unsigned int link, bool* active) override {
    if (link > 0) {
      return abi::NVML_ERROR_INVALID_ARGUMENT;
    }
    *active = true;
    return abi::NVML_SUCCESS;
  }
  nvml::nvmlReturn_t DeviceGetNvLinkRemotePciBusId(nvml::Device, unsigned int,
                                                   std::string* bus_id) override {
    *bus_id = "00000000:02:00.0";
    return abi::NVML_SUCCESS;
  }
  nvml::nvmlReturn_t DeviceGetNvLinkErrorCounter(nvml::Device, unsigned int, int,
                                                 uint64_t*) override {
    return abi::NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  nvml::nvmlReturn_t DeviceGetFieldValues(nvml::Device, abi::nvmlFieldValue_t* values,
                                          size_t count) override {
    for (size_t i = 0; i < count; ++i) {
      auto it = fields.find(values[i].fieldId);
      if (it == fields.end()) {
        values[i].nvmlReturn = abi::NVML_ERROR_NOT_SUPPORTED;
        continue;
      }
      const unsigned int scope = values[i].scopeId;
      values[i] = it->second;
      values[i].scopeId = scope;
    }
    return abi::NVML_SUCCESS;
  }
  std::string ErrorString(nvml::nvmlReturn_t result) const override {
    return nvml::ReturnName(result);
  }
};

abi::nvmlFieldValue_t Field(unsigned int id, int type) {
  abi::nvmlFieldValue_t value{};
  value.fieldId = id;
  value.valueType = type;
  value.nvmlReturn = abi::NVML_SUCCESS;
  return value;
}

TEST(NvmlFakeApiTest, DecodesEveryUnsignedValueTypeAndRejectsNegatives) {
  int destroyed = 0;
  auto opener = [&destroyed]() -> absl::StatusOr<std::unique_ptr<nvml::NvmlApi>> {
    auto api = std::make_unique<FakeNvmlApi>();
    api->destroyed = &destroyed;
    abi::nvmlFieldValue_t successful =
        Field(abi::NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS,
              abi::NVML_VALUE_TYPE_UNSIGNED_INT);
    successful.value.uiVal = 4000000000u;
    abi::nvmlFieldValue_t failed = Field(abi::NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS,
                                         abi::NVML_VALUE_TYPE_SIGNED_LONG_LONG);
    failed.value.sllVal = -1;  // nonsense for a counter: rejected, counted as not_numeric
    abi::nvmlFieldValue_t all =
        Field(abi::NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS, abi::NVML_VALUE_TYPE_DOUBLE);
    all.value.dVal = 12.0;
    abi::nvmlFieldValue_t symbol =
        Field(abi::NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS, abi::NVML_VALUE_TYPE_UNSIGNED_SHORT);
    symbol.value.usVal = 65535;
    api->fields = {{successful.fieldId, successful},
                   {failed.fieldId, failed},
                   {all.fieldId, all},
                   {symbol.fieldId, symbol}};
    return std::unique_ptr<nvml::NvmlApi>(std::move(api));
  };
  absl::StatusOr<std::unique_ptr<NvmlCollector>> collector =
      NvmlCollector::Create(v1::NvmlCollectorConfig(), opener);
  FABRICMON_ASSERT_OK(collector);
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK((*collector)->Discover(inventory));
  RecordingSink sink;
  FABRICMON_ASSERT_OK((*collector)->Collect(sink));
  const std::map<std::string, uint64_t> values = nvml_test::ByKey(sink.samples());
  EXPECT_EQ(values.at("fabricmon_nvlink_recovery_events_total{gpu=\"0\",link=\"0\",outcome=\""
                      "successful\"}"),
            4000000000u);
  EXPECT_EQ(values.count("fabricmon_nvlink_recovery_events_total{gpu=\"0\",link=\"0\",outcome=\""
                         "failed\"}"),
            0u);
  EXPECT_EQ(
      values.at("fabricmon_nvlink_recovery_events_total{gpu=\"0\",link=\"0\",outcome=\"all\"}"),
      12u);
  EXPECT_EQ(values.at("fabricmon_nvlink_symbol_errors_total{gpu=\"0\",link=\"0\"}"), 65535u);
  EXPECT_EQ(values.count("fabricmon_nvlink_effective_errors_total{gpu=\"0\",link=\"0\"}"), 0u);
  EXPECT_EQ(values.at("fabricmon_collector_errors_total{collector=\"nvml\",kind=\"not_numeric\"}"),
            1u);
  // The error-counter entry point is absent: no series and nothing counted against the GPU.
  EXPECT_EQ(values.at("fabricmon_gpu_unsupported_queries{gpu=\"0\"}"), 1u);  // effective errors

  collector->reset();
  EXPECT_EQ(destroyed, 1);  // the collector owns what the opener returned
}

TEST(NvmlFakeApiTest, OpenerErrorsPassThroughAndAreRetried) {
  int calls = 0;
  auto opener = [&calls]() -> absl::StatusOr<std::unique_ptr<nvml::NvmlApi>> {
    ++calls;
    if (calls == 1) {
      return absl::UnavailableError("nvmlInit_v2 failed: NVML_ERROR_TIMEOUT");
    }
    return std::unique_ptr<nvml::NvmlApi>(std::make_unique<FakeNvmlApi>());
  };
  absl::StatusOr<std::unique_ptr<NvmlCollector>> collector =
      NvmlCollector::Create(v1::NvmlCollectorConfig(), opener);
  FABRICMON_ASSERT_OK(collector);
  v1::Inventory inventory;
  EXPECT_THAT((*collector)->Discover(inventory), StatusIs(absl::StatusCode::kUnavailable));
  FABRICMON_EXPECT_OK((*collector)->Discover(inventory));
  FABRICMON_EXPECT_OK((*collector)->Discover(inventory));
  EXPECT_EQ(calls, 2);  // opened once it worked, not per discovery
}

TEST(NvmlReturnNameTest, NamesMatchNvmlHeader) {
  EXPECT_EQ(nvml::ReturnName(abi::NVML_ERROR_GPU_IS_LOST), "NVML_ERROR_GPU_IS_LOST");
  EXPECT_EQ(nvml::ReturnName(abi::NVML_ERROR_LIB_RM_VERSION_MISMATCH),
            "NVML_ERROR_LIB_RM_VERSION_MISMATCH");
  EXPECT_EQ(nvml::ReturnName(12345), "NVML_ERROR_12345");
}

}  // namespace
}  // namespace fabricmon::collectors
