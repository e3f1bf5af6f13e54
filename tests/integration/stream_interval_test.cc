// Generated tokens streamed in groups (GenerateSpec.stream_interval) over gRPC on loopback: the
// groups carry exactly what the one-token messages carry (tokens, log-probabilities, indices,
// text) in order, a last shorter group comes before the AppendResult, a stop inside a group
// ends it there, and interval 0 or 1 keeps one GeneratedToken per token.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/integration/test_server.h"

namespace attnserve::server::testing {
namespace {

// A generation of `max_new` tokens after the text "The stream", end-of-text ignored: greedy, or
// sampled at temperature 1 from `seed` (the same seed, the same tokens).
v1::StreamRequest TextGenerate(int32_t max_new, int32_t interval,
                               const std::vector<int64_t>& stop_ids = {}, uint64_t seed = 0) {
  v1::StreamRequest request;
  v1::StreamAppend* append = request.mutable_append();
  append->set_sequence_number(1);
  append->set_text("The stream");
  v1::GenerateSpec* g = append->mutable_generate();
  g->set_max_new_tokens(max_new);
  g->set_ignore_eos(true);
  g->set_stream_interval(interval);
  if (seed != 0) {
    g->set_temperature(1);
    g->set_seed(seed);
  }
  for (int64_t id : stop_ids) g->add_stop_token_ids(id);
  return request;
}

struct Streamed {
  std::vector<v1::GeneratedToken> tokens;
  std::vector<v1::GeneratedTokens> groups;
  v1::AppendResult result;
};

Streamed Generate(TestServer& server, const std::string& model, const v1::StreamRequest& append) {
  StreamClient stream(server.client().stub(), absl::Seconds(60));
  const std::string id = stream.Open(OpenRequest(model)).session_id();
  Streamed out;
  out.result = stream.Append(append, &out.tokens, &out.groups);
  EXPECT_TRUE(stream.Close(id).ok());
  return out;
}

TEST(StreamIntervalTest, GroupsCarryWhatOneTokenMessagesCarry) {
  TestServer server;
  for (const std::string model : {"mamba", "standard"}) {
    SCOPED_TRACE(model);
    const Streamed one = Generate(server, model, TextGenerate(10, 0));
    ASSERT_EQ(one.tokens.size(), 10u);
    EXPECT_TRUE(one.groups.empty());
    EXPECT_EQ(Generate(server, model, TextGenerate(10, 1)).tokens.size(), 10u);

    const Streamed grouped = Generate(server, model, TextGenerate(10, 4));
    EXPECT_TRUE(grouped.tokens.empty());
    ASSERT_EQ(grouped.groups.size(), 3u);  // 4 + 4 + 2
    std::vector<int64_t> tokens;
    std::string text;
    for (size_t g = 0; g < grouped.groups.size(); ++g) {
      const v1::GeneratedTokens& group = grouped.groups[g];
      EXPECT_EQ(group.sequence_number(), 1);
      EXPECT_EQ(group.first_index(), static_cast<int>(4 * g));
      ASSERT_EQ(group.tokens_size(), g < 2 ? 4 : 2);
      ASSERT_EQ(group.logprobs_size(), group.tokens_size());
      for (int i = 0; i < group.tokens_size(); ++i) {
        const v1::GeneratedToken& want = one.tokens[group.first_index() + i];
        EXPECT_EQ(group.tokens(i), want.token());
        EXPECT_EQ(group.logprobs(i), want.logprob());  // greedy and batch-invariant: same bits
        tokens.push_back(group.tokens(i));
      }
      text += group.text();
    }
    std::string one_text;
    for (const v1::GeneratedToken& t : one.tokens) one_text += t.text();
    EXPECT_EQ(text, one_text);
    EXPECT_EQ(text, grouped.result.generated_text());
    EXPECT_EQ(one_text, one.result.generated_text());
    EXPECT_THAT(tokens, ::testing::ElementsAreArray(grouped.result.generated_tokens()));
    EXPECT_EQ(grouped.result.finish_reason(), v1::FINISH_REASON_LENGTH);

    // An interval longer than the generation: everything in one message, before the result.
    const Streamed whole = Generate(server, model, TextGenerate(10, 16));
    ASSERT_EQ(whole.groups.size(), 1u);
    EXPECT_THAT(whole.groups[0].tokens(), ::testing::ElementsAreArray(tokens));
    EXPECT_EQ(whole.groups[0].text(), one_text);
  }
}

TEST(StreamIntervalTest, AStopTokenEndsTheLastGroupWhereGenerationEnds) {
  TestServer server;
  const Streamed one = Generate(server, "mamba", TextGenerate(12, 0, {}, 7));
  ASSERT_EQ(one.tokens.size(), 12u);
  // The first token, from the sixth on, not generated before: generation stops after it.
  size_t stop_at = 5;
  auto seen_before = [&](size_t i) {
    for (size_t j = 0; j < i; ++j) {
      if (one.tokens[j].token() == one.tokens[i].token()) return true;
    }
    return false;
  };
  while (stop_at < one.tokens.size() && seen_before(stop_at)) ++stop_at;
  ASSERT_LT(stop_at, one.tokens.size()) << "every sampled token from the sixth repeats one";
  const Streamed grouped =
      Generate(server, "mamba", TextGenerate(12, 4, {one.tokens[stop_at].token()}, 7));
  EXPECT_EQ(grouped.result.finish_reason(), v1::FINISH_REASON_STOP_TOKEN);
  ASSERT_EQ(grouped.result.generated_tokens_size(), static_cast<int>(stop_at + 1));
  int streamed = 0;
  for (const v1::GeneratedTokens& group : grouped.groups) {
    EXPECT_EQ(group.first_index(), streamed);
    for (int i = 0; i < group.tokens_size(); ++i) {
      EXPECT_EQ(group.tokens(i), one.tokens[streamed + i].token());
    }
    streamed += group.tokens_size();
  }
  EXPECT_EQ(streamed, static_cast<int>(stop_at + 1));
  EXPECT_EQ(grouped.groups.size(), (stop_at + 1 + 3) / 4);
}

// A client that asks for its whole generation in one group and never reads does not hold up
// another client's generation: the group is bounded by max_new_tokens and waits in that
// stream's own queue.
TEST(StreamIntervalTest, AClientThatNeverReadsItsGroupDoesNotSlowAnother) {
  TestServer server;
  StreamClient stalled(server.client().stub(), absl::Seconds(60));
  stalled.Open(OpenRequest("mamba"));
  ASSERT_TRUE(stalled.Send(TextGenerate(256, 256)));  // sent, never read
  const absl::Time start = absl::Now();
  const Streamed normal = Generate(server, "mamba", TextGenerate(32, 0));
  EXPECT_EQ(normal.tokens.size(), 32u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

}  // namespace
}  // namespace attnserve::server::testing
