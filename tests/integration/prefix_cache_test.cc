// The prefix state cache over gRPC on loopback (server/prefix_cache/; issue #24): a new
// session's first prompt, or a sessionless Infer, that begins with a cached prefix starts from
// a copy of its state, and its outputs do not depend on the cache.
#include "server/prefix_cache/prefix_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/test_server.h"

namespace attnserve::server::testing {
namespace {

std::vector<int64_t> Concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A server whose scheduler uses `cache` (null: none), 256-token chunks; `bf16`: the default
// models with bfloat16 weights.
std::unique_ptr<TestServer> ServerWith(PrefixCache* cache, bool bf16 = false) {
  TestServerOptions options;
  options.scheduler.prefix_cache = cache;
  options.service.prefix_cache = cache;
  options.bf16 = bf16;
  return std::make_unique<TestServer>(options);
}

struct Outcome {
  std::vector<float> logits;    // the prompt's last logits
  std::vector<int64_t> greedy;  // then 6 greedy tokens
};

Outcome SessionPrompt(TestServer& server, const std::string& model,
                      const std::vector<int64_t>& prompt) {
  StreamClient stream(server.client().stub(), absl::Seconds(120));
  const std::string id = stream.Open(OpenRequest(model)).session_id();
  Outcome out;
  std::vector<v1::GeneratedToken> generated;
  v1::StreamRequest request = GenerateRequest(1, prompt, 6);
  const v1::AppendResult result = stream.Append(request, &generated);
  out.logits = Floats(result.outputs().tensor());
  for (const v1::GeneratedToken& g : generated) out.greedy.push_back(g.token());
  EXPECT_EQ(result.position(), static_cast<int64_t>(prompt.size()) + 6);
  stream.Close(id);
  return out;
}

// Every streaming default model: prompts that share a 600-token prefix (cached at its end and,
// inside, at the chunks that cross each 256 tokens), then hits at every kind of position: one
// token before the cached prompt's end, exactly at it, just past it, inside a chunk, at a chunk
// edge. Each gives the logits and greedy tokens of a server without the cache, to 1e-5 of the
// logits' scale, and the cache reports the hits. In fp32 and with bfloat16 weights.
void ExpectOutputsIndependentOfTheCache(bool bf16) {
  PrefixCacheOptions options{int64_t{1} << 30, 256, nullptr};
  options.prefault_bytes = int64_t{64} << 20;  // entries copied into blocks paged in ahead
  PrefixCache cache(options);
  auto cached = ServerWith(&cache, bf16);
  auto plain = ServerWith(nullptr, bf16);
  const std::vector<int64_t> prefix = RandomTokens(600, 11);
  const std::vector<std::vector<int64_t>> prompts = {
      prefix,                                                      // fills the cache
      std::vector<int64_t>(prefix.begin(), prefix.end() - 1),      // one before its end: hit 512
      Concat(prefix, {5}),                                         // just past its end: hit 600
      Concat(prefix, RandomTokens(130, 12)),                       // inside the next chunk
      std::vector<int64_t>(prefix.begin(), prefix.begin() + 257),  // a chunk edge + 1: hit 256
      Concat(RandomTokens(3, 13), prefix),                         // no common prefix: a miss
  };
  for (const std::string& model : StreamingModels()) {
    SCOPED_TRACE(model);
    const int64_t hits_before = cache.hits();
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE(i);
      const Outcome want = SessionPrompt(*plain, model, prompts[i]);
      const Outcome got = SessionPrompt(*cached, model, prompts[i]);
      EXPECT_LT(MaxRelativeError(got.logits, want.logits), 1e-5);
      EXPECT_EQ(got.greedy, want.greedy);
    }
    EXPECT_EQ(cache.hits() - hits_before, 4) << "prompts 1 to 4 hit";
    // Sessionless Infers hit it too (a prefix cached by a session of the same principal).
    v1::InferResponse with, without;
    ASSERT_TRUE(cached->client().Infer(MakeInfer(model, Concat(prefix, {9, 9})), &with).ok());
    ASSERT_TRUE(plain->client().Infer(MakeInfer(model, Concat(prefix, {9, 9})), &without).ok());
    EXPECT_LT(MaxRelativeError(Floats(with.outputs().tensor()), Floats(without.outputs().tensor())),
              1e-5);
    EXPECT_EQ(cache.hits() - hits_before, 5);
  }
  EXPECT_GT(cache.hit_tokens(), 0);
  EXPECT_LE(cache.bytes(), int64_t{1} << 30);
  // ListModels shows the cache as it stands.
  v1::ListModelsResponse list;
  ASSERT_TRUE(cached->client().ListModels(&list).ok());
  EXPECT_EQ(list.prefix_cache().max_bytes(), int64_t{1} << 30);
  EXPECT_EQ(list.prefix_cache().bytes(), cache.bytes());
  EXPECT_EQ(list.prefix_cache().entries(), cache.entries());
  EXPECT_EQ(list.prefix_cache().hits(), cache.hits());
  EXPECT_EQ(list.prefix_cache().hit_tokens(), cache.hit_tokens());
  EXPECT_GT(list.prefix_cache().entries(), 0);
}

TEST(PrefixCacheTest, OutputsDoNotDependOnTheCache) { ExpectOutputsIndependentOfTheCache(false); }

TEST(PrefixCacheTest, OutputsDoNotDependOnTheCacheWithBf16Weights) {
  ExpectOutputsIndependentOfTheCache(true);
}

// All logits or hidden states need every position: such prompts are not served from the
// cache (they still give what a server without it gives).
// Conversations on one 300-token system prompt, each with its own 100 tokens: the first is
// computed in full, the second from the entry at 256 (where the first prompt's chunk ended),
// and it caches the state at 300 where it leaves the first, so the third and fourth start
// exactly there. Outputs equal a server's without the cache, for every streaming model.
TEST(PrefixCacheTest, PromptsAfterTheSecondStartWhereTheyBranch) {
  PrefixCache cache(PrefixCacheOptions{int64_t{1} << 30, 256, nullptr});
  auto cached = ServerWith(&cache);
  auto plain = ServerWith(nullptr);
  const std::vector<int64_t> system = RandomTokens(300, 21);
  for (const std::string& model : StreamingModels()) {
    SCOPED_TRACE(model);
    std::vector<int64_t> saved;  // each conversation's hit tokens
    for (int64_t c = 0; c < 4; ++c) {
      const std::vector<int64_t> prompt = Concat(system, RandomTokens(100, 30 + c));
      const int64_t before = cache.hit_tokens();
      const Outcome want = SessionPrompt(*plain, model, prompt);
      const Outcome got = SessionPrompt(*cached, model, prompt);
      saved.push_back(cache.hit_tokens() - before);
      EXPECT_LT(MaxRelativeError(got.logits, want.logits), 1e-5);
      EXPECT_EQ(got.greedy, want.greedy);
    }
    EXPECT_THAT(saved, ::testing::ElementsAre(0, 256, 300, 300));
  }
}

TEST(PrefixCacheTest, AllLogitsArePromptsComputedInFull) {
  PrefixCache cache(PrefixCacheOptions{int64_t{1} << 30, 256, nullptr});
  auto cached = ServerWith(&cache);
  const std::vector<int64_t> prompt = RandomTokens(300, 21);
  v1::InferResponse first, second;
  ASSERT_TRUE(cached->client().Infer(MakeInfer("mamba", prompt), &first).ok());
  const int64_t hits = cache.hits();
  ASSERT_TRUE(
      cached->client()
          .Infer(MakeInfer("mamba", Concat(prompt, {1}), v1::OUTPUT_KIND_ALL_LOGITS), &second)
          .ok());
  EXPECT_EQ(cache.hits(), hits);
  EXPECT_EQ(Shape(second.outputs().tensor()), (std::vector<int64_t>{301, kVocab}));
}

// The tail checkpoint (--prefix_cache_tail, 64 here) costs its prompt an extra chunk, so it is
// kept only in prompts of at least 8 chunks (2048 tokens in 256-token chunks): a 2100-token
// prompt keeps the state at 2036, and a prompt that leaves it at 2040 starts there; a
// 600-token prompt keeps none at 536, so a prompt that leaves it at 590 starts at 512. Outputs
// equal a server's without the cache.
TEST(PrefixCacheTest, TheTailCheckpointIsKeptInLongPromptsOnly) {
  PrefixCache cache(PrefixCacheOptions{int64_t{1} << 30, 256, nullptr, 64});
  auto cached = ServerWith(&cache);
  auto plain = ServerWith(nullptr);
  struct Case {
    int64_t length, leaves_at, hit;
  };
  for (const std::string model : {"mamba", "hybrid"}) {
    SCOPED_TRACE(model);
    for (const Case c : {Case{2100, 2040, 2036}, Case{600, 590, 512}}) {
      SCOPED_TRACE(c.length);
      const std::vector<int64_t> first = RandomTokens(c.length, 40 + c.length);
      SessionPrompt(*cached, model, first);
      const std::vector<int64_t> second =
          Concat(std::vector<int64_t>(first.begin(), first.begin() + c.leaves_at),
                 RandomTokens(20, 41 + c.length));
      const int64_t before = cache.hit_tokens();
      const Outcome want = SessionPrompt(*plain, model, second);
      const Outcome got = SessionPrompt(*cached, model, second);
      EXPECT_EQ(cache.hit_tokens() - before, c.hit);
      EXPECT_LT(MaxRelativeError(got.logits, want.logits), 1e-5);
      EXPECT_EQ(got.greedy, want.greedy);
    }
  }
}

// A bound smaller than the states asked of it: the cache stays within it, evicting.
TEST(PrefixCacheTest, TheCacheStaysWithinItsBound) {
  const int64_t bound = 4 * Repository().Find("standard")->StateBytesPerSequence(300);
  PrefixCacheOptions options{bound, 256, nullptr};
  options.prefault_bytes = bound / 2;  // counted within the bound with the entries
  PrefixCache cache(options);
  auto cached = ServerWith(&cache);
  for (int i = 0; i < 12; ++i) {
    v1::InferResponse response;
    ASSERT_TRUE(
        cached->client()
            .Infer(MakeInfer(i % 2 == 0 ? "standard" : "hybrid", RandomTokens(300, 100 + i)),
                   &response)
            .ok());
    EXPECT_LE(cache.bytes() + cache.prefaulted().ready_bytes, bound);
  }
  EXPECT_GT(cache.evictions(), 0);
  EXPECT_GT(cache.entries(), 0);
}

}  // namespace
}  // namespace attnserve::server::testing
