#include "daemon/recording/record_format.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricmon::recording {
namespace {

Record Make(int i) {
  Record r;
  r.type = i % 5 == 4 ? RecordType::kStreamEnd : RecordType::kMessage;
  r.stream = 100 + i / 5;
  r.receive_unix_nanos = 1'700'000'000'000'000'000 + int64_t{i} * 1'000'000;
  r.node = absl::StrCat("node", i % 3);
  if (r.type == RecordType::kMessage) {
    r.payload = std::string(10 + i * 7, static_cast<char>('a' + i % 26));
  }
  return r;
}

std::string FileOf(int count) {
  std::string file(kFileHeader);
  for (int i = 0; i < count; ++i) AppendRecord(Make(i), file);
  return file;
}

std::vector<Record> ReadAll(const std::string& file, ReadDamage* damage = nullptr) {
  RecordParser parser(file);
  std::vector<Record> out;
  Record r;
  while (parser.Next(r)) out.push_back(r);
  if (damage != nullptr) *damage = parser.damage();
  return out;
}

void ExpectSame(const Record& a, const Record& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.stream, b.stream);
  EXPECT_EQ(a.receive_unix_nanos, b.receive_unix_nanos);
  EXPECT_EQ(a.node, b.node);
  EXPECT_EQ(a.payload, b.payload);
}

TEST(RecordFormatTest, RoundTrip) {
  ReadDamage damage;
  std::vector<Record> read = ReadAll(FileOf(20), &damage);
  ASSERT_EQ(read.size(), 20u);
  for (int i = 0; i < 20; ++i) ExpectSame(read[i], Make(i));
  EXPECT_EQ(damage.damaged_regions, 0u);
  EXPECT_EQ(damage.skipped_bytes, 0u);
  EXPECT_FALSE(damage.torn_tail);
}

TEST(RecordFormatTest, NotARecordingIsRefusedWhole) {
  ReadDamage damage;
  EXPECT_TRUE(ReadAll("# HELP something else\n", &damage).empty());
  EXPECT_TRUE(damage.bad_header);
  EXPECT_TRUE(ReadAll("", &damage).empty());
  EXPECT_TRUE(damage.bad_header);
}

// A crash mid-write cuts the last record anywhere: every earlier record survives, the torn one
// is reported, never returned in part.
TEST(RecordFormatTest, TornTailAtEveryByteIsSkipped) {
  const std::string nine = FileOf(9);
  const std::string ten = FileOf(10);
  for (size_t cut = nine.size() + 1; cut < ten.size(); ++cut) {
    SCOPED_TRACE(cut);
    ReadDamage damage;
    std::vector<Record> read = ReadAll(ten.substr(0, cut), &damage);
    ASSERT_EQ(read.size(), 9u);
    ExpectSame(read[8], Make(8));
    EXPECT_TRUE(damage.torn_tail);
    EXPECT_EQ(damage.skipped_bytes, cut - nine.size());
  }
}

// A flipped byte anywhere in one record costs that record only; the reader finds the next.
TEST(RecordFormatTest, FlippedByteLosesOneRecord) {
  const std::string before = FileOf(4);
  const std::string five = FileOf(5);
  const std::string file = FileOf(10);
  for (size_t at = before.size(); at < five.size(); ++at) {
    SCOPED_TRACE(at);
    std::string damaged = file;
    damaged[at] ^= 0x5a;
    ReadDamage damage;
    std::vector<Record> read = ReadAll(damaged, &damage);
    ASSERT_EQ(read.size(), 9u);
    for (int i = 0; i < 4; ++i) ExpectSame(read[i], Make(i));
    for (int i = 5; i < 10; ++i) ExpectSame(read[i - 1], Make(i));
    EXPECT_GE(damage.damaged_regions, 1u);
    EXPECT_FALSE(damage.torn_tail);
  }
}

// Random garbage (including a length that claims a gigabyte) never crashes the reader nor yields
// a record that was not written.
TEST(RecordFormatTest, GarbageBetweenRecordsIsSkipped) {
  std::string file(kFileHeader);
  AppendRecord(Make(0), file);
  file += std::string(kRecordMagic) + std::string("\xff\xff\xff\x3f", 4) + "junkjunk";
  file += "random bytes FMr";
  AppendRecord(Make(1), file);
  ReadDamage damage;
  std::vector<Record> read = ReadAll(file, &damage);
  ASSERT_EQ(read.size(), 2u);
  ExpectSame(read[0], Make(0));
  ExpectSame(read[1], Make(1));
  EXPECT_EQ(damage.skipped_bytes, 4u + 4 + 8 + 16);
}

// A compressed block reads as the records in it; a damaged block costs its records only, and a
// block that claims an absurd size is refused without allocating it.
TEST(RecordFormatTest, CompressedBlocks) {
  std::string inner_a, inner_b;
  for (int i = 0; i < 5; ++i) AppendRecord(Make(i), inner_a);
  for (int i = 5; i < 10; ++i) AppendRecord(Make(i), inner_b);
  std::string file(kFileHeader);
  ASSERT_TRUE(AppendZstdBlock(inner_a, 1, 1, file));
  const size_t second = file.size();
  ASSERT_TRUE(AppendZstdBlock(inner_b, 2, 1, file));
  AppendRecord(Make(10), file);
  std::vector<Record> read = ReadAll(file);
  ASSERT_EQ(read.size(), 11u);
  for (int i = 0; i < 11; ++i) ExpectSame(read[i], Make(i));

  std::string damaged = file;
  damaged[second + kRecordPrefixBytes + kBodyFixedBytes + 10] ^= 0x40;  // inside block 2's frame
  ReadDamage damage;
  read = ReadAll(damaged, &damage);
  ASSERT_EQ(read.size(), 6u);
  ExpectSame(read[4], Make(4));
  ExpectSame(read[5], Make(10));
  // At least the block; the reader may also stop at record magics in its literals on the way.
  EXPECT_GE(damage.damaged_regions, 1u);

  // A well-framed block whose zstd frame claims 2^40 bytes of content.
  std::string liar(kFileHeader);
  const std::string frame("\x28\xb5\x2f\xfd\x84\x00\x00\x00\x00\x00\x01\x00\x00", 13);
  AppendRecord(RecordType::kZstdBlock, 0, 1, "", frame, liar);
  EXPECT_TRUE(ReadAll(liar, &damage).empty());
  EXPECT_EQ(damage.damaged_regions, 1u);
}

TEST(RecordFormatTest, BodyWithImpossibleNodeLengthIsRefused) {
  std::string body(kBodyFixedBytes, '\0');
  body[0] = 1;
  body[17] = 10;  // node of 10 bytes in a body that has none
  Record r;
  EXPECT_FALSE(ParseBody(body, r));
  body[0] = 9;  // unknown type (3 is a compressed block)
  body[17] = 0;
  EXPECT_FALSE(ParseBody(body, r));
  body[0] = 2;
  EXPECT_TRUE(ParseBody(body, r));
}

}  // namespace
}  // namespace fabricmon::recording
