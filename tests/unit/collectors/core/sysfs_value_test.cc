#include "collectors/core/sysfs_value.h"

#include "gtest/gtest.h"

namespace fabricmon::collectors {
namespace {

struct Case {
  const char* input;
  bool ok;
  uint64_t value;
  ErrorKind error;
};

class ParseCounterTest : public ::testing::TestWithParam<Case> {};

TEST_P(ParseCounterTest, ParsesOrClassifies) {
  const Case& c = GetParam();
  ParsedCounter parsed = ParseCounter(c.input);
  EXPECT_EQ(parsed.ok, c.ok) << c.input;
  if (c.ok) {
    EXPECT_EQ(parsed.value, c.value);
  } else {
    EXPECT_EQ(parsed.error, c.error);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseCounterTest,
    ::testing::Values(
        Case{"0\n", true, 0, {}}, Case{"12345", true, 12345, {}}, Case{"  42 \n", true, 42, {}},
        Case{"\t7\r\v\f\n", true, 7, {}}, Case{"4294967295\n", true, 4294967295u, {}},
        Case{"18446744073709551615\n", true, UINT64_MAX, {}}, Case{"0x1b\n", true, 27, {}},
        Case{"0XFF", true, 255, {}}, Case{"", false, 0, ErrorKind::kEmpty},
        Case{"\n", false, 0, ErrorKind::kEmpty},
        Case{"N/A (no PMA)\n", false, 0, ErrorKind::kNoPma},
        Case{"abc", false, 0, ErrorKind::kNotNumeric}, Case{"-1", false, 0, ErrorKind::kNotNumeric},
        Case{"12 34", false, 0, ErrorKind::kNotNumeric},
        Case{"1.5", false, 0, ErrorKind::kNotNumeric},
        Case{"18446744073709551616", false, 0, ErrorKind::kNotNumeric},
        Case{"184467440737095516150", false, 0, ErrorKind::kNotNumeric},
        Case{"0x8000000000000000\n", true, uint64_t{1} << 63, {}},
        Case{"0x", false, 0, ErrorKind::kNotNumeric},
        Case{"0xfffffffffffffffff", false, 0, ErrorKind::kNotNumeric}));

}  // namespace
}  // namespace fabricmon::collectors
