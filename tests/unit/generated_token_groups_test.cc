// GeneratedTokenGroups (server/rpc/generated_token_groups.h): groups of `interval` tokens with
// their log-probabilities and first index, a last shorter group left for the caller, and
// interval 0 or 1 a group per token.
#include "server/rpc/generated_token_groups.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace attnserve::server {
namespace {

using ::testing::ElementsAre;

std::shared_ptr<text::GenerationText> NoTokenizer() {
  return std::make_shared<text::GenerationText>(nullptr, text::GenerationTextOptions());
}

TEST(GeneratedTokenGroupsTest, GroupsOfTheIntervalThenWhatIsLeft) {
  GeneratedTokenGroups groups(NoTokenizer(), 3, 7);
  std::vector<std::vector<int64_t>> seen;
  std::vector<int> firsts;
  for (int i = 0; i < 7; ++i) {
    const bool full = groups.Add(100 + i, -0.5f * i, i);
    EXPECT_EQ(full, i == 2 || i == 5) << i;
    if (!full) continue;
    seen.push_back(groups.group().tokens);
    firsts.push_back(groups.group().first_index);
    EXPECT_EQ(groups.group().logprobs.size(), 3u);
    EXPECT_EQ(groups.group().logprobs.back(), -0.5f * i);
    groups.Clear();
  }
  EXPECT_THAT(groups.group().tokens, ElementsAre(106));  // the last, shorter group
  EXPECT_EQ(groups.group().first_index, 6);
  EXPECT_THAT(seen, ElementsAre(ElementsAre(100, 101, 102), ElementsAre(103, 104, 105)));
  EXPECT_THAT(firsts, ElementsAre(0, 3));
  groups.Clear();
  EXPECT_TRUE(groups.group().tokens.empty());
}

TEST(GeneratedTokenGroupsTest, IntervalZeroOrOneIsATokenAGroup) {
  for (int interval : {0, 1}) {
    GeneratedTokenGroups groups(NoTokenizer(), interval, 4);
    EXPECT_EQ(groups.interval(), 1);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(groups.Add(7, 0, i));
      EXPECT_THAT(groups.group().tokens, ElementsAre(7));
      EXPECT_EQ(groups.group().first_index, i);
      groups.Clear();
    }
  }
}

}  // namespace
}  // namespace attnserve::server
