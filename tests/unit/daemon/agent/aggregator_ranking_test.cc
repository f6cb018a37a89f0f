#include "daemon/agent/aggregator_ranking.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/agent/aggregator_directory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricmon::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Shards(int count) {
  std::vector<std::string> shards;
  for (int i = 0; i < count; ++i) {
    shards.push_back(absl::StrCat("fabricmon-aggregator-", i, ".fabricmon-aggregator:7470"));
  }
  return shards;
}

std::string Node(int i) { return absl::StrCat("dgx-", i / 32, "-", i % 32); }

TEST(AggregatorRankingTest, RankingIsAPermutationAndStableWhateverTheListOrder) {
  const std::vector<std::string> shards = Shards(5);
  std::vector<std::string> reversed(shards.rbegin(), shards.rend());
  for (int i = 0; i < 200; ++i) {
    const std::vector<std::string> ranked = RankAggregators(Node(i), shards);
    EXPECT_EQ(ranked, RankAggregators(Node(i), reversed)) << Node(i);
    std::vector<std::string> sorted = ranked;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::string> expected = shards;
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(sorted, expected);
  }
}

TEST(AggregatorRankingTest, WeightIsFixedAcrossBuildsAndMachines) {
  // Agents of different versions must agree on every node's primary: the weight is a fixed
  // function, pinned here (FNV-1a 64 over "node\0address", splitmix64 finalizer).
  // Values computed independently (a few lines of Python over the same definition).
  EXPECT_EQ(RendezvousWeight("", ""), 0x25fc6dd36ce04b20ull);
  EXPECT_EQ(RendezvousWeight("dgx-0-0", "fabricmon-aggregator-0.fabricmon-aggregator:7470"),
            0x010afa69dea81e07ull);
  EXPECT_EQ(RendezvousWeight("gpu-node-1", "10.0.0.1:7470"), 0x0e105c80f4a993c1ull);
  // The separator: the same bytes split differently weigh differently.
  EXPECT_NE(RendezvousWeight("ab", "c"), RendezvousWeight("a", "bc"));
}

TEST(AggregatorRankingTest, PrimariesAreBalancedOverManyNodes) {
  constexpr int kNodes = 12500;
  for (int shard_count : {2, 3, 4, 8}) {
    const std::vector<std::string> shards = Shards(shard_count);
    std::map<std::string, int> primaries;
    std::map<std::string, int> seconds;
    for (int i = 0; i < kNodes; ++i) {
      const std::vector<std::string> ranked = RankAggregators(Node(i), shards);
      ++primaries[ranked[0]];
      ++seconds[ranked[1]];
    }
    const double p = 1.0 / shard_count;
    const double fair = kNodes * p;
    // An ideal hash gives a binomial count: within 4 standard deviations (2-3 % of the share
    // here) of the fair share; plain FNV-1a without the finalizer fails it (3 shards: 4,593 of
    // 12,500).
    const double bound = 4 * std::sqrt(kNodes * p * (1 - p));
    for (const std::string& shard : shards) {
      EXPECT_NEAR(primaries[shard], fair, bound) << shard_count << " shards: " << shard;
      EXPECT_NEAR(seconds[shard], fair, bound) << shard_count << " shards: " << shard;
    }
  }
}

TEST(AggregatorRankingTest, RemovingOneAggregatorMovesOnlyItsNodesAndSpreadsThem) {
  constexpr int kNodes = 8192;
  const std::vector<std::string> shards = Shards(4);
  const std::string removed = shards[2];
  std::vector<std::string> remaining = shards;
  remaining.erase(remaining.begin() + 2);
  std::map<std::string, int> takers;
  int moved = 0;
  for (int i = 0; i < kNodes; ++i) {
    const std::vector<std::string> before = RankAggregators(Node(i), shards);
    const std::vector<std::string> after = RankAggregators(Node(i), remaining);
    if (before[0] != removed) {
      EXPECT_EQ(after[0], before[0]) << Node(i) << " moved though its primary stayed";
      continue;
    }
    ++moved;
    // The node goes where its own ranking said: its failover target is its new primary.
    EXPECT_EQ(after[0], before[1]) << Node(i);
    ++takers[after[0]];
  }
  EXPECT_NEAR(moved, kNodes / 4, kNodes / 4 * 0.08);
  ASSERT_EQ(takers.size(), 3u) << "the removed aggregator's nodes must spread over all the rest";
  for (const auto& [shard, count] : takers) {
    EXPECT_NEAR(count, moved / 3.0, moved / 3.0 * 0.15) << shard;
  }
}

TEST(AggregatorRankingTest, AddingOneAggregatorTakesAnEvenShareFromEach) {
  constexpr int kNodes = 8192;
  const std::vector<std::string> three = Shards(3);
  const std::vector<std::string> four = Shards(4);
  int moved = 0;
  for (int i = 0; i < kNodes; ++i) {
    const std::string before = RankAggregators(Node(i), three)[0];
    const std::string after = RankAggregators(Node(i), four)[0];
    if (before != after) {
      EXPECT_EQ(after, four[3]) << Node(i) << " moved between two old aggregators";
      ++moved;
    }
  }
  EXPECT_NEAR(moved, kNodes / 4, kNodes / 4 * 0.08);
}

TEST(AggregatorRankingTest, ParsesListsAndRefusesBadAddresses) {
  auto parsed = ParseAggregatorList({"a.example:7470,10.0.0.2:7470", "[fd00::1]:7470"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[0].host, "a.example");
  EXPECT_EQ((*parsed)[1].port, 7470);
  EXPECT_EQ((*parsed)[2].host, "fd00::1");
  EXPECT_EQ((*parsed)[2].text, "[fd00::1]:7470");

  struct Bad {
    std::string list;
    std::string why;
  };
  for (const Bad& bad : std::vector<Bad>{{"a.example", "no :PORT"},
                                         {"a.example:0", "1..65535"},
                                         {"a.example:70000", "1..65535"},
                                         {"a.example:+80", "1..65535"},
                                         {":7470", "empty host"},
                                         {"a:1,,b:2", "empty address"},
                                         {"a:1,", "empty address"},
                                         {"fd00::1:7470", "[ADDRESS]:PORT"},
                                         {"[fd00::1:7470", "unbalanced"},
                                         {"a b:1", "whitespace"},
                                         {"a:1,a:1", "listed twice"}}) {
    auto result = ParseAggregatorList({bad.list});
    ASSERT_FALSE(result.ok()) << bad.list;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(bad.why)) << bad.list;
  }
}

// A directory over a name that resolves to what the test says, with channels that record what
// they were made for.
struct DirectoryFixture {
  std::vector<std::string> answer;
  bool fail = false;
  std::vector<std::pair<std::string, std::string>> made;  // address, tls name

  std::unique_ptr<AggregatorDirectory> Make(std::vector<std::string> entries) {
    auto created = AggregatorDirectory::Create(
        entries, "dgx-0-1",
        [this](const std::string& address, const std::string& tls_name) {
          made.emplace_back(address, tls_name);
          return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
        },
        [this](const std::string&) -> absl::StatusOr<std::vector<std::string>> {
          if (fail) {
            return absl::UnavailableError("no DNS");
          }
          return answer;
        });
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? *std::move(created) : nullptr;
  }
};

std::vector<std::string> Addresses(const std::vector<AggregatorTarget>& targets) {
  std::vector<std::string> addresses;
  for (const AggregatorTarget& target : targets) {
    addresses.push_back(target.address);
  }
  return addresses;
}

TEST(AggregatorDirectoryTest, ANameStandsForEveryAddressItResolvesTo) {
  DirectoryFixture fixture;
  fixture.answer = {"10.0.0.3", "10.0.0.1", "10.0.0.2", "10.0.0.1"};
  auto directory = fixture.Make({"fabricmon-aggregator.fabricmon.svc:7470"});
  ASSERT_NE(directory, nullptr);
  EXPECT_TRUE(directory->resolves());
  std::vector<AggregatorTarget> targets = directory->Refresh();
  EXPECT_EQ(Addresses(targets),
            RankAggregators("dgx-0-1", {"10.0.0.1:7470", "10.0.0.2:7470", "10.0.0.3:7470"}));
  ASSERT_EQ(fixture.made.size(), 3u);
  for (const auto& [address, tls_name] : fixture.made) {
    EXPECT_EQ(tls_name, "fabricmon-aggregator.fabricmon.svc") << address;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    EXPECT_EQ(targets[i].rank, static_cast<int>(i));
  }

  // Re-resolved: one aggregator left DNS; the others keep their channels (no new ones made).
  fixture.answer = {"10.0.0.1", "10.0.0.3"};
  targets = directory->Refresh();
  EXPECT_EQ(Addresses(targets), RankAggregators("dgx-0-1", {"10.0.0.1:7470", "10.0.0.3:7470"}));
  EXPECT_EQ(fixture.made.size(), 3u);

  // DNS fails: the last good list stays.
  fixture.fail = true;
  EXPECT_EQ(Addresses(directory->Refresh()), Addresses(targets));
}

TEST(AggregatorDirectoryTest, ANameForOneServerStaysTheTargetItself) {
  DirectoryFixture fixture;
  fixture.answer = {"10.0.0.1"};
  auto directory = fixture.Make({"aggregator.example:7470"});
  ASSERT_NE(directory, nullptr);
  EXPECT_THAT(Addresses(directory->Refresh()), ElementsAre("aggregator.example:7470"));
  fixture.fail = true;  // and so it does when DNS has never answered
  auto unresolved = fixture.Make({"aggregator.example:7470"});
  EXPECT_THAT(Addresses(unresolved->Refresh()), ElementsAre("aggregator.example:7470"));
  ASSERT_FALSE(fixture.made.empty());
  EXPECT_EQ(fixture.made.back().second, "");
}

TEST(AggregatorDirectoryTest, AListIsRankedAsGivenWithoutResolving) {
  DirectoryFixture fixture;
  fixture.fail = true;  // the resolver must not be needed
  auto directory = fixture.Make({"a.example:7470,b.example:7470", "10.0.0.9:7470"});
  ASSERT_NE(directory, nullptr);
  EXPECT_FALSE(directory->resolves());
  EXPECT_EQ(Addresses(directory->Refresh()),
            RankAggregators("dgx-0-1", {"a.example:7470", "b.example:7470", "10.0.0.9:7470"}));
}

TEST(AggregatorDirectoryTest, RefusesAnEmptyOrBadList) {
  auto channels = [](const std::string& address, const std::string&) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  };
  EXPECT_FALSE(AggregatorDirectory::Create({}, "n", channels).ok());
  EXPECT_FALSE(AggregatorDirectory::Create({"a:1,b"}, "n", channels).ok());
}

TEST(AggregatorDirectoryTest, SystemResolverResolvesLoopback) {
  auto resolved = AggregatorDirectory::SystemResolver("127.0.0.1");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_THAT(*resolved, ElementsAre("127.0.0.1"));
}

}  // namespace
}  // namespace fabricmon::agent
