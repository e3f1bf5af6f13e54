// Forking a session over gRPC on loopback (StreamOpen.fork_from; issue #24): the fork starts
// from a copy of the source's state, its outputs are those of a session fed the same tokens from
// the start, the source goes on untouched, and a fork obeys the same rules as a new session
// (owner-checked, counted against --max_sessions and the state budget).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/test_server.h"

namespace attnserve::server::testing {
namespace {

using ::testing::HasSubstr;

v1::StreamRequest ForkRequest(const std::string& source, const std::string& model = "") {
  v1::StreamRequest request;
  request.mutable_open()->set_fork_from(source);
  request.mutable_open()->set_model(model);
  return request;
}

// Every streaming default model (KV caches, sliding_window's ring and sinks, recurrent states,
// the hybrid): a fork of a session after a prompt (crossing the scheduler's 256-token chunks)
// gives, for the next append and a greedy generation, exactly what a session fed the whole
// conversation from the start gives; the source, fed the same, gives it too.
TEST(SessionForkTest, AForkContinuesAsASessionFedTheSameTokens) {
  TestServer server;
  for (const std::string& model : StreamingModels()) {
    SCOPED_TRACE(model);
    const std::vector<int64_t> prompt = RandomTokens(300, 1), more = RandomTokens(5, 2);
    StreamClient source(server.client().stub(), absl::Seconds(120));
    const std::string source_id = source.Open(OpenRequest(model)).session_id();
    source.Append(AppendRequest(1, prompt));
    StreamClient fork(server.client().stub(), absl::Seconds(120));
    const v1::StreamOpened opened = fork.Open(ForkRequest(source_id));
    ASSERT_FALSE(opened.session_id().empty());
    EXPECT_NE(opened.session_id(), source_id);
    EXPECT_EQ(opened.model(), model);
    EXPECT_EQ(opened.position(), 300);
    EXPECT_EQ(opened.last_sequence_number(), 0) << "a fork's appends count from 1";
    EXPECT_THAT(opened.policy_reason(), HasSubstr("forked from session " + source_id));

    // The reference: one session fed everything.
    StreamClient fresh(server.client().stub(), absl::Seconds(120));
    fresh.Open(OpenRequest(model));
    fresh.Append(AppendRequest(1, prompt));
    const v1::AppendResult want = fresh.Append(AppendRequest(2, more));
    std::vector<v1::GeneratedToken> want_generated;
    fresh.Append(GenerateRequest(3, {7}, 8), &want_generated);

    const v1::AppendResult forked = fork.Append(AppendRequest(1, more));
    EXPECT_EQ(forked.position(), 305);
    EXPECT_EQ(MaxAbsDifference(Floats(forked.outputs().tensor()), Floats(want.outputs().tensor())),
              0.0);
    std::vector<v1::GeneratedToken> fork_generated;
    fork.Append(GenerateRequest(2, {7}, 8), &fork_generated);
    ASSERT_EQ(fork_generated.size(), want_generated.size());
    for (size_t i = 0; i < want_generated.size(); ++i) {
      EXPECT_EQ(fork_generated[i].token(), want_generated[i].token()) << i;
    }
    // The source was not moved by the fork and goes on as the reference did.
    const v1::AppendResult from_source = source.Append(AppendRequest(2, more));
    EXPECT_EQ(from_source.position(), 305);
    EXPECT_EQ(
        MaxAbsDifference(Floats(from_source.outputs().tensor()), Floats(want.outputs().tensor())),
        0.0);
    EXPECT_TRUE(fork.Close(opened.session_id()).ok());
    EXPECT_TRUE(source.Close(source_id).ok());
    fresh.Finish();
  }
}

// A fork of a fork, and forks taken while the source has appends queued: each fork copies the
// state as the earlier requests left it.
TEST(SessionForkTest, AForkWaitsForTheSourcesEarlierRequests) {
  TestServer server;
  StreamClient source(server.client().stub(), absl::Seconds(60));
  const std::string id = source.Open(OpenRequest("mamba")).session_id();
  // Sent without waiting for its result: the fork below is queued behind this generation. Its
  // first token says the server has taken it (the fork comes on another stream, which the server
  // may otherwise read first: then it forks position 0, as the client could not tell apart).
  ASSERT_TRUE(source.Send(GenerateRequest(1, RandomTokens(40, 3), 20)));
  const std::optional<v1::StreamResponse> first = source.Receive();
  ASSERT_TRUE(first.has_value() && first->has_generated());
  StreamClient fork(server.client().stub(), absl::Seconds(60));
  const v1::StreamOpened opened = fork.Open(ForkRequest(id, "mamba"));
  EXPECT_EQ(opened.position(), 60) << "40 prompt tokens and 20 generated, fed back";
  StreamClient second(server.client().stub(), absl::Seconds(60));
  EXPECT_EQ(second.Open(ForkRequest(opened.session_id())).position(), 60);
}

TEST(SessionForkTest, BadForksAreRefusedAsTheirNewSessionWouldBe) {
  TestServerOptions options;
  options.limits.max_sessions = 2;
  TestServer server(options);
  const std::string never = "0123456789abcdef0123456789abcdef";
  {
    StreamClient stream(server.client().stub(), absl::Seconds(30));
    ASSERT_TRUE(stream.Send(ForkRequest(never)));
    EXPECT_FALSE(stream.Receive().has_value());
    const grpc::Status status = stream.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(status.error_message(), HasSubstr("no session '" + never + "'"));
  }
  StreamClient source(server.client().stub(), absl::Seconds(30));
  const std::string id = source.Open(OpenRequest("linear")).session_id();
  source.Append(AppendRequest(1, {1, 2, 3}));
  {
    StreamClient stream(server.client().stub(), absl::Seconds(30));
    v1::StreamRequest both = ForkRequest(id);
    both.mutable_open()->set_session_id(id);
    ASSERT_TRUE(stream.Send(both));
    EXPECT_EQ(stream.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    StreamClient stream(server.client().stub(), absl::Seconds(30));
    ASSERT_TRUE(stream.Send(ForkRequest(id, "mamba")));
    const grpc::Status status = stream.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("belongs to model 'linear'"));
  }
  // The second session fits, a third does not (--max_sessions 2).
  StreamClient fork(server.client().stub(), absl::Seconds(30));
  EXPECT_EQ(fork.Open(ForkRequest(id)).position(), 3);
  {
    StreamClient stream(server.client().stub(), absl::Seconds(30));
    ASSERT_TRUE(stream.Send(ForkRequest(id)));
    EXPECT_EQ(stream.Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  EXPECT_EQ(server.sessions().size(), 2);
}

// A fork whose state does not fit the state budget is refused and leaves nothing behind.
TEST(SessionForkTest, AForkAboveTheStateBudgetIsRefusedAndRemoved) {
  TestServerOptions options;
  options.limits.state_budget_bytes = 600 * kStandardBytesPerToken;
  TestServer server(options);
  StreamClient source(server.client().stub(), absl::Seconds(30));
  const std::string id = source.Open(OpenRequest("standard")).session_id();
  source.Append(AppendRequest(1, RandomTokens(400, 4), v1::OUTPUT_KIND_NONE));
  StreamClient stream(server.client().stub(), absl::Seconds(30));
  ASSERT_TRUE(stream.Send(ForkRequest(id)));
  const grpc::Status status = stream.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_TRUE(WaitFor([&] { return server.sessions().size() == 1; }));
  EXPECT_EQ(source.Append(AppendRequest(2, {5})).position(), 401);
}

}  // namespace
}  // namespace attnserve::server::testing
