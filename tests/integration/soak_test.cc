// Integration soak on loopback, as server_test.cc: 32 concurrent streams for 30 seconds (CTest
// label "soak").
#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/integration/test_server.h"

namespace attnserve::server::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------
// Soak: 32 concurrent streams for 30 seconds. Run on its own (CTest label "soak").

TEST(SoakTest, ThirtyTwoConcurrentStreamsForThirtySeconds) {
  constexpr int kStreams = 32;
  const absl::Duration kRun = absl::Seconds(30);
  TestServer server;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(server.NewClient());

  std::atomic<int64_t> opened{0}, closed{0}, appends{0}, generated{0}, errors{0};
  std::mutex errors_mu;
  std::vector<std::string> first_errors;
  auto error = [&](const std::string& what) {
    errors.fetch_add(1);
    std::lock_guard<std::mutex> lock(errors_mu);
    if (first_errors.size() < 10) first_errors.push_back(what);
  };

  const absl::Time start = absl::Now();
  const absl::Time stop = start + kRun;
  std::vector<std::thread> threads;
  for (int t = 0; t < kStreams; ++t) {
    threads.emplace_back([&, t] {
      Client& client = *clients[t % clients.size()];
      std::mt19937_64 rng(1000 + t);
      auto uniform = [&](int64_t lo, int64_t hi) {
        return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
      };
      while (absl::Now() < stop) {
        const std::string& model = StreamingModels()[uniform(0, 3)];
        StreamClient stream(client.stub(), absl::Seconds(20));
        if (!stream.Send(OpenRequest(model))) {
          error("open send failed: " + stream.Finish().error_message());
          continue;
        }
        std::optional<v1::StreamResponse> response = stream.Receive();
        if (!response || !response->has_opened()) {
          error(model + ": no StreamOpened: " + stream.Finish().error_message());
          continue;
        }
        opened.fetch_add(1);
        const std::string id = response->opened().session_id();
        int64_t position = 0;
        const int64_t count = uniform(1, 6);
        bool ok = true;
        for (int64_t seq = 1; seq <= count && ok; ++seq) {
          const std::vector<int64_t> chunk = RandomTokens(uniform(1, 48), rng());
          v1::StreamRequest request = AppendRequest(seq, chunk);
          const int kind = static_cast<int>(uniform(0, 3));
          request.mutable_append()->mutable_output()->set_kind(kind == 0
                                                                   ? v1::OUTPUT_KIND_LAST_LOGITS
                                                               : kind == 1 ? v1::OUTPUT_KIND_TOP_K
                                                                           : v1::OUTPUT_KIND_NONE);
          int64_t new_tokens = 0;
          if (uniform(0, 3) == 0) {
            new_tokens = uniform(1, 4);
            request = WithGenerate(request, static_cast<int32_t>(new_tokens),
                                   static_cast<float>(uniform(0, 10)) / 10, uniform(0, 50));
          }
          if (!stream.Send(request)) {
            ok = false;
            break;
          }
          int64_t streamed = 0;
          while (true) {
            response = stream.Receive();
            if (!response) {
              ok = false;
              break;
            }
            if (response->has_generated()) {
              ++streamed;
              continue;
            }
            break;
          }
          if (!ok) break;
          position += static_cast<int64_t>(chunk.size()) + new_tokens;
          if (!response->has_result() || response->result().sequence_number() != seq ||
              response->result().position() != position || streamed != new_tokens ||
              response->result().generated_tokens_size() != new_tokens) {
            error(model + ": unexpected append answer " + response->ShortDebugString());
            ok = false;
            break;
          }
          appends.fetch_add(1);
          generated.fetch_add(streamed);
        }
        if (!ok) {
          const grpc::Status status = stream.Finish();
          error(model + ": stream broke: " + std::to_string(status.error_code()) + " " +
                status.error_message());
          continue;
        }
        const grpc::Status status = stream.Close(id);
        if (!status.ok()) {
          error(model + ": close: " + status.error_message());
          continue;
        }
        closed.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const absl::Duration elapsed = absl::Now() - start;

  EXPECT_EQ(errors.load(), 0);
  for (const std::string& e : first_errors) ADD_FAILURE() << e;
  EXPECT_GE(opened.load(), kStreams);
  EXPECT_EQ(opened.load(), closed.load());
  EXPECT_GT(appends.load(), 0);
  EXPECT_GT(generated.load(), 0);
  EXPECT_LT(elapsed, absl::Seconds(55));
  std::cout << "soak: " << opened.load() << " sessions, " << appends.load() << " appends, "
            << generated.load() << " generated tokens in " << absl::FormatDuration(elapsed)
            << std::endl;

  // Every session was closed: nothing is left in the table, nothing in flight.
  v1::ListSessionsResponse list;
  ASSERT_TRUE(server.client().ListSessions("", 0, &list).ok());
  EXPECT_EQ(list.total(), 0);
  EXPECT_EQ(list.sessions_size(), 0);
  EXPECT_EQ(list.state_bytes(), 0);
  EXPECT_TRUE(WaitFor([&] { return server.service().inflight() == 0; }));
  v1::InferResponse response;
  EXPECT_TRUE(server.client().Infer(MakeInfer("auto", {1, 2, 3}), &response).ok());
}

}  // namespace
}  // namespace attnserve::server::testing
