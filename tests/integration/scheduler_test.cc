// The scheduler seen from a gRPC client on loopback: a request waiting for its session holds
// no thread and other sessions are served meanwhile, a cancelled generation stops, requests
// past their deadline are not computed, sessions batched together get the outputs they get
// alone, and 200 sessions generating at once for 20 s (soak).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <prometheus/registry.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/metrics.h"
#include "tests/integration/test_server.h"

namespace attnserve::server::testing {
namespace {

// The value of a counter or the count of a histogram in `metrics`, labels matching exactly.
double MetricValue(ServerMetrics& metrics, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      std::map<std::string, std::string> have;
      for (const auto& l : m.label) have[l.name] = l.value;
      if (have != labels) continue;
      return family.type == prometheus::MetricType::Histogram
                 ? static_cast<double>(m.histogram.sample_count)
                 : m.counter.value;
    }
  }
  return 0;
}

// A stream that opens a session and generates `max_new_tokens`, on a thread of its own.
class Generation {
 public:
  Generation(Client& client, const std::string& model, int max_new_tokens)
      : stream_(client.stub(), absl::Seconds(120)) {
    opened_ = stream_.Open(OpenRequest(model));
    thread_ = std::thread([this, max_new_tokens] {
      stream_.Send(GenerateRequest(1, {1, 2, 3}, max_new_tokens));
      while (std::optional<v1::StreamResponse> r = stream_.Receive()) {
        if (r->has_generated()) tokens_.fetch_add(1);
        if (r->has_result()) {
          finished_.store(true);
          break;
        }
      }
      ended_.store(true);
    });
  }
  ~Generation() {
    if (!ended_.load()) stream_.Cancel();
    thread_.join();
  }
  const std::string& id() const { return opened_.session_id(); }
  int tokens() const { return tokens_.load(); }
  bool finished() const { return finished_.load(); }
  bool ended() const { return ended_.load(); }
  void Cancel() { stream_.Cancel(); }

 private:
  StreamClient stream_;
  v1::StreamOpened opened_;
  std::atomic<int> tokens_{0};
  std::atomic<bool> finished_{false}, ended_{false};
  std::thread thread_;
};

TEST(SchedulerRpcTest, InferOnAGeneratingSessionWaitsWhileOtherSessionsAreServed) {
  TestServer server;
  auto other = server.NewClient();
  StreamClient b(other->stub(), absl::Seconds(60));
  const std::string b_id = b.Open(OpenRequest("standard")).session_id();
  Generation a(server.client(), "mamba", 1000);
  ASSERT_TRUE(WaitFor([&] { return a.tokens() >= 3; }));

  std::atomic<bool> a_infer_done{false};
  std::thread a_infer([&] {
    v1::InferRequest request = MakeInfer("", {5, 6});
    request.set_session_id(a.id());
    v1::InferResponse response;
    EXPECT_TRUE(other->Infer(request, &response).ok());
    // The Infer ran after all of A's generation: its position counts A's 1000 tokens. (Whether
    // A's own stream has read its result by now is up to the two client threads: comparing
    // that here failed once in a CI run.)
    EXPECT_EQ(response.session_position(), 3 + 1000 + 2);
    a_infer_done = true;
  });
  // B's Infer and one without a session complete while A is still generating.
  v1::InferRequest on_b = MakeInfer("", {7, 8, 9});
  on_b.set_session_id(b_id);
  v1::InferResponse b_response, free_response;
  ASSERT_TRUE(other->Infer(on_b, &b_response).ok());
  ASSERT_TRUE(other->Infer(MakeInfer("linformer", RandomTokens(64, 1)), &free_response).ok());
  EXPECT_FALSE(a.finished()) << "B was served only after A's 1000 tokens";
  EXPECT_FALSE(a_infer_done.load()) << "the Infer on A did not wait for A's generation";
  EXPECT_EQ(b_response.session_position(), 3);
  a_infer.join();
  EXPECT_TRUE(WaitFor([&] { return a.finished(); }));
  EXPECT_EQ(a.tokens(), 1000);
  EXPECT_TRUE(b.Close(b_id).ok());
}

TEST(SchedulerRpcTest, CancelledGenerationStopsAndItsSessionStays) {
  ServerMetrics metrics;
  TestServerOptions options;
  options.service.metrics = &metrics;
  TestServer server(options);
  std::string id;
  {
    Generation a(server.client(), "mamba", 1000);
    id = a.id();
    ASSERT_TRUE(WaitFor([&] { return a.tokens() >= 5; }));
    a.Cancel();
    ASSERT_TRUE(WaitFor([&] { return a.ended(); }));
  }
  // Give the server a moment to see the cancellation, then the counter must stand still.
  absl::SleepFor(absl::Milliseconds(300));
  const double generated =
      MetricValue(metrics, "attnserve_tokens_total", {{"variant", "mamba"}, {"phase", "generate"}});
  v1::SessionInfo before;
  ASSERT_TRUE(server.client().GetSession(id, &before).ok());
  absl::SleepFor(absl::Milliseconds(500));
  v1::SessionInfo after;
  ASSERT_TRUE(server.client().GetSession(id, &after).ok());
  EXPECT_EQ(
      MetricValue(metrics, "attnserve_tokens_total", {{"variant", "mamba"}, {"phase", "generate"}}),
      generated);
  EXPECT_EQ(after.position(), before.position());
  EXPECT_LT(generated, 1000) << "the cancelled generation ran to its end";
  EXPECT_EQ(MetricValue(metrics, "attnserve_requests_total",
                        {{"protocol", "attnserve"},
                         {"rpc", "StreamAppend"},
                         {"variant", "mamba"},
                         {"code", "CANCELLED"}}),
            1);
  EXPECT_TRUE(server.client().CloseSession(id).ok());
}

TEST(SchedulerRpcTest, RequestsPastTheirDeadlineAreNotComputed) {
  ServerMetrics metrics;
  TestServerOptions options;
  options.service.metrics = &metrics;
  TestServer server(options);
  Generation a(server.client(), "mamba", 1000);
  ASSERT_TRUE(WaitFor([&] { return a.tokens() >= 3; }));
  // 16 Infers of 1024 tokens on A, queued behind its generation with a 50 ms deadline.
  std::vector<std::thread> threads;
  std::atomic<int> deadline_exceeded{0};
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      v1::InferRequest request = MakeInfer("", RandomTokens(1024, i));
      request.set_session_id(a.id());
      v1::InferResponse response;
      const grpc::Status status = server.client().Infer(request, &response, absl::Milliseconds(50));
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) deadline_exceeded++;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(deadline_exceeded.load(), 16);
  ASSERT_TRUE(WaitFor([&] { return a.finished(); }, absl::Seconds(60)));
  // The server ends each one at its next iteration without computing it.
  ASSERT_TRUE(WaitFor([&] {
    return MetricValue(metrics, "attnserve_requests_total",
                       {{"protocol", "attnserve"},
                        {"rpc", "Infer"},
                        {"variant", "mamba"},
                        {"code", "DEADLINE_EXCEEDED"}}) == 16;
  }));
  v1::SessionInfo info;
  ASSERT_TRUE(server.client().GetSession(a.id(), &info).ok());
  EXPECT_EQ(info.position(), 3 + 1000) << "a request past its deadline was applied";
  EXPECT_EQ(
      MetricValue(metrics, "attnserve_tokens_total", {{"variant", "mamba"}, {"phase", "prefill"}}),
      3)
      << "a request past its deadline was computed";
}

// Sessions generating together over gRPC get exactly the tokens each gets alone.
TEST(SchedulerRpcTest, SessionsBatchedTogetherGenerateWhatTheyGenerateAlone) {
  TestServer server;
  constexpr int kSessions = 12;
  auto generate = [&](int i, std::vector<int64_t>* tokens) {
    StreamClient stream(server.client().stub(), absl::Seconds(120));
    const std::string model = StreamingModels()[i % StreamingModels().size()];
    const std::string id = stream.Open(OpenRequest(model)).session_id();
    std::vector<v1::GeneratedToken> generated;
    v1::AppendResult result =
        stream.Append(GenerateRequest(1, RandomTokens(5 + 7 * i, i), 24, i % 2 ? 0.9f : 0.0f,
                                      /*top_k=*/i % 2 ? 30 : 0, /*seed=*/100 + i),
                      &generated);
    tokens->assign(result.generated_tokens().begin(), result.generated_tokens().end());
    EXPECT_EQ(static_cast<int>(generated.size()), 24);
    EXPECT_TRUE(stream.Close(id).ok());
  };
  std::vector<std::vector<int64_t>> alone(kSessions), together(kSessions);
  for (int i = 0; i < kSessions; ++i) generate(i, &alone[i]);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) threads.emplace_back(generate, i, &together[i]);
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) EXPECT_EQ(together[i], alone[i]) << "session " << i;
}

TEST(SoakTest, TwoHundredSessionsGeneratingAtOnceForTwentySeconds) {
  constexpr int kSessions = 200;
  const absl::Duration kRun = absl::Seconds(20);
  TestServer server;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(server.NewClient());
  std::atomic<int64_t> rounds{0}, generated{0}, errors{0};
  std::mutex errors_mu;
  std::vector<std::string> first_errors;
  const absl::Time stop = absl::Now() + kRun;
  std::vector<std::thread> threads;
  for (int s = 0; s < kSessions; ++s) {
    threads.emplace_back([&, s] {
      Client& client = *clients[s % clients.size()];
      const std::string& model = StreamingModels()[s % StreamingModels().size()];
      StreamClient stream(client.stub(), kRun + absl::Seconds(60));
      const std::string id = stream.Open(OpenRequest(model)).session_id();
      int64_t seq = 0;
      while (absl::Now() < stop) {
        std::vector<v1::GeneratedToken> tokens;
        ++seq;
        v1::AppendResult result =
            stream.Append(GenerateRequest(seq, RandomTokens(1 + seq % 9, s), 8), &tokens);
        if (result.sequence_number() != seq || tokens.size() != 8) {
          errors++;
          std::lock_guard<std::mutex> lock(errors_mu);
          if (first_errors.size() < 5) first_errors.push_back(result.ShortDebugString());
          break;
        }
        generated += static_cast<int64_t>(tokens.size());
        rounds++;
      }
      if (!stream.Close(id).ok()) errors++;
    });
  }
  // The level: every session open and generating (client threads, connections, buffers and
  // the sessions' states all allocated once).
  ASSERT_TRUE(WaitFor([&] { return rounds.load() >= 2 * kSessions; }, kRun));
  const int64_t resident_before = TrimmedResidentBytes();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0) << ::testing::PrintToString(first_errors);
  EXPECT_GE(rounds.load(), kSessions);
  EXPECT_EQ(server.sessions().size(), 0);
  EXPECT_EQ(server.sessions().state_bytes(), 0);
  EXPECT_TRUE(WaitFor([&] { return server.scheduler().queued_jobs() == 0; }));
  const int64_t growth = TrimmedResidentBytes() - resident_before;
  std::cout << rounds.load() << " generations, " << generated.load() << " tokens by " << kSessions
            << " sessions in " << absl::FormatDuration(kRun) << "; resident memory "
            << (growth >= 0 ? "+" : "") << growth / (1 << 20) << " MiB" << std::endl;
  if (kResidentMemoryIsMeaningful) {
    EXPECT_LT(growth, int64_t{32} << 20) << "memory did not come back after the sessions closed";
  }
}

}  // namespace
}  // namespace attnserve::server::testing
