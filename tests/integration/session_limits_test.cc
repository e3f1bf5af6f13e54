// Integration tests on loopback, as server_test.cc: session limits, and malformed requests
// each answered with its documented code.
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
// Session limits.

TEST(LimitsTest, IdleSessionExpiresAfterItsTtl) {
  TestServerOptions options;
  options.limits.reap_interval = absl::Milliseconds(100);
  TestServer server(options);
  Client& client = server.client();
  const std::string idle = client.NewSession("mamba", {1, 2, 3}, /*ttl_seconds=*/1);
  // A session with a stream attached is in use: it does not expire.
  std::unique_ptr<StreamClient> stream = client.Stream();
  const std::string attached = stream->Open(OpenRequest("linear", 0, 1)).session_id();

  absl::SleepFor(absl::Milliseconds(2500));
  v1::SessionInfo info;
  const grpc::Status status = client.GetSession(idle, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("expired"));
  v1::InferRequest request = MakeInfer("", {4});
  request.set_session_id(idle);
  v1::InferResponse response;
  EXPECT_EQ(client.Infer(request, &response).error_code(), grpc::StatusCode::NOT_FOUND);

  ASSERT_TRUE(client.GetSession(attached, &info).ok());
  EXPECT_TRUE(info.attached());
  EXPECT_TRUE(stream->Close(attached).ok());
}

TEST(LimitsTest, MaxSessionsRefusesOpen) {
  TestServerOptions options;
  options.limits.max_sessions = 2;
  TestServer server(options);
  Client& client = server.client();
  const std::string a = client.NewSession("mamba");
  const std::string b = client.NewSession("linear");
  std::unique_ptr<StreamClient> third = client.Stream();
  third->Send(OpenRequest("mamba"));
  const grpc::Status status = third->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("--max_sessions=2"));
  v1::SessionInfo info;
  EXPECT_TRUE(client.GetSession(a, &info).ok());
  EXPECT_TRUE(client.GetSession(b, &info).ok());
  // Closing one makes room.
  ASSERT_TRUE(client.CloseSession(a).ok());
  EXPECT_FALSE(client.NewSession("mamba").empty());
}

TEST(LimitsTest, EvictWhenFullEvictsTheLeastRecentlyUsedIdleSession) {
  TestServerOptions options;
  options.limits.max_sessions = 2;
  options.limits.evict_when_full = true;
  TestServer server(options);
  Client& client = server.client();
  const std::string oldest = client.NewSession("mamba", {1});
  absl::SleepFor(absl::Milliseconds(20));
  const std::string newer = client.NewSession("linear", {2});
  absl::SleepFor(absl::Milliseconds(20));

  std::unique_ptr<StreamClient> c = client.Stream();
  const std::string c_id = c->Open(OpenRequest("mamba")).session_id();
  EXPECT_FALSE(c_id.empty());
  v1::SessionInfo info;
  EXPECT_EQ(client.GetSession(oldest, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(client.GetSession(newer, &info).ok());

  // Sessions in use are never evicted: with both attached, the table is simply full.
  std::unique_ptr<StreamClient> d = client.Stream();
  const std::string d_id = d->Open(OpenRequest("mamba")).session_id();  // evicts `newer`
  EXPECT_EQ(client.GetSession(newer, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  std::unique_ptr<StreamClient> e = client.Stream();
  e->Send(OpenRequest("mamba"));
  const grpc::Status full = e->Finish();
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(full.error_message(), HasSubstr("session table is full"));
  EXPECT_TRUE(client.GetSession(c_id, &info).ok());
  EXPECT_TRUE(client.GetSession(d_id, &info).ok());
  EXPECT_TRUE(c->Close(c_id).ok());
  EXPECT_TRUE(d->Close(d_id).ok());
}

TEST(LimitsTest, StateBudgetStopsAGrowingKvCache) {
  TestServerOptions options;
  options.limits.state_budget_bytes = 1000000;  // 122 tokens of the standard KV cache
  TestServer server(options);
  Client& client = server.client();
  std::unique_ptr<StreamClient> stream = client.Stream();
  const std::string id = stream->Open(OpenRequest("standard")).session_id();
  const v1::AppendResult first = stream->Append(AppendRequest(1, RandomTokens(64, 40)));
  EXPECT_EQ(first.state_bytes(), 64 * kStandardBytesPerToken);
  stream->Send(AppendRequest(2, RandomTokens(64, 41)));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("state memory budget"));
  EXPECT_THAT(status.error_message(), HasSubstr("--state_budget_bytes=1000000"));

  // Nothing was applied or reserved.
  ASSERT_TRUE(client.WaitDetached(id));
  v1::SessionInfo info;
  ASSERT_TRUE(client.GetSession(id, &info).ok());
  EXPECT_EQ(info.position(), 64);
  EXPECT_EQ(info.last_sequence_number(), 1);
  EXPECT_EQ(info.state_bytes(), 64 * kStandardBytesPerToken);
  EXPECT_EQ(server.sessions().state_bytes(), 64 * kStandardBytesPerToken);
  // A smaller append still fits.
  std::unique_ptr<StreamClient> again = client.Stream();
  again->Open(ResumeRequest(id));
  EXPECT_EQ(again->Append(AppendRequest(2, RandomTokens(50, 42))).position(), 114);
  EXPECT_TRUE(again->Close(id).ok());
  EXPECT_EQ(server.sessions().state_bytes(), 0);
}

TEST(LimitsTest, RefusedAppendLeavesTheStateAccountingUnchanged) {
  TestServer server;
  Client& client = server.client();
  for (const std::string& model : {std::string("standard"), std::string("hybrid")}) {
    SCOPED_TRACE(model);
    std::unique_ptr<StreamClient> stream = client.Stream();
    const std::string id = stream->Open(OpenRequest(model)).session_id();
    const v1::AppendResult first = stream->Append(AppendRequest(1, RandomTokens(10, 43)));
    // Ids outside the vocabulary are refused by the model after the state was reserved.
    stream->Send(AppendRequest(2, {1, 2, kVocab + 5, 3, 4, 5, 6, 7, 8, 9}));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    ASSERT_TRUE(client.WaitDetached(id));
    v1::SessionInfo info;
    ASSERT_TRUE(client.GetSession(id, &info).ok());
    EXPECT_EQ(info.position(), 10);
    EXPECT_EQ(info.state_bytes(), first.state_bytes())
        << "state_bytes counts tokens the session does not hold";
    EXPECT_EQ(server.sessions().state_bytes(), first.state_bytes());
    ASSERT_TRUE(client.CloseSession(id).ok());
  }
}

TEST(LimitsTest, FullSchedulerQueueRefusesWithResourceExhausted) {
  TestServerOptions options;
  options.scheduler.max_queued_jobs = 1;
  TestServer server(options);
  // A long generation holds the only place in the scheduler's queue.
  StreamClient stream(server.client().stub(), absl::Seconds(60));
  stream.Open(OpenRequest("mamba"));
  ASSERT_TRUE(stream.Send(GenerateRequest(1, {1, 2, 3}, 1000)));
  std::optional<v1::StreamResponse> first = stream.Receive();
  ASSERT_TRUE(first.has_value() && first->has_generated());
  v1::InferResponse response;
  const grpc::Status refused = server.client().Infer(MakeInfer("standard", {1, 2}), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("request queue is full"));
  // Once the generation ends (its client goes away), the place is free again.
  stream.Cancel();
  EXPECT_TRUE(WaitFor([&] { return server.scheduler().queued_jobs() == 0; }));
  EXPECT_TRUE(server.client().Infer(MakeInfer("mamba", {1, 2}), &response).ok());
}

// ---------------------------------------------------------------------------------------
// Malformed requests, each with its documented code.

struct MalformedCase {
  std::string name;
  std::function<grpc::Status(Client&)> call;
  grpc::StatusCode code;
  std::string message;
};

grpc::Status InferStatus(Client& client, const v1::InferRequest& request) {
  v1::InferResponse response;
  return client.Infer(request, &response);
}

// Sends `requests` on a new stream, half-closes, and returns the call's status.
grpc::Status StreamStatus(Client& client, const std::vector<v1::StreamRequest>& requests) {
  std::unique_ptr<StreamClient> stream = client.Stream(absl::Seconds(30));
  for (const v1::StreamRequest& request : requests) {
    if (!stream->Send(request)) break;
  }
  return stream->Finish();
}

std::vector<int64_t> OkTokens() { return {1, 2, 3}; }

std::vector<MalformedCase> MalformedCases() {
  using grpc::StatusCode;
  std::vector<MalformedCase> cases = {
      {"InferNoTokens", [](Client& c) { return InferStatus(c, MakeInfer("mamba", {})); },
       StatusCode::INVALID_ARGUMENT, "no tokens"},
      {"InferIdAboveVocabulary",
       [](Client& c) {
         return InferStatus(c, MakeInfer("mamba", {1, kVocab}));
       },
       StatusCode::INVALID_ARGUMENT, "outside the vocabulary"},
      {"InferNegativeId",
       [](Client& c) {
         return InferStatus(c, MakeInfer("linear", {1, -1}));
       },
       StatusCode::INVALID_ARGUMENT, "token id -1 is outside the vocabulary"},
      {"InferOverMaxTokensPerRequest",
       [](Client& c) { return InferStatus(c, MakeInfer("mamba", RandomTokens(1001, 1))); },
       StatusCode::RESOURCE_EXHAUSTED, "--max_tokens_per_request=1000"},
      {"InferUnknownModel",
       [](Client& c) { return InferStatus(c, MakeInfer("gpt-17", OkTokens())); },
       StatusCode::NOT_FOUND, "no model 'gpt-17'"},
      {"InferUnknownSession",
       [](Client& c) {
         v1::InferRequest r = MakeInfer("", OkTokens());
         r.set_session_id("0123456789abcdef0123456789abcdef");
         return InferStatus(c, r);
       },
       StatusCode::NOT_FOUND, "no session '0123456789abcdef0123456789abcdef'"},
      {"InferClosedSession",
       [](Client& c) {
         const std::string id = c.NewSession("mamba");
         EXPECT_TRUE(c.CloseSession(id).ok());
         v1::InferRequest r = MakeInfer("", OkTokens());
         r.set_session_id(id);
         return InferStatus(c, r);
       },
       StatusCode::NOT_FOUND, "no session"},
      {"InferWrongModelForSession",
       [](Client& c) {
         v1::InferRequest r = MakeInfer("linear", OkTokens());
         r.set_session_id(c.NewSession("mamba"));
         return InferStatus(c, r);
       },
       StatusCode::INVALID_ARGUMENT, "belongs to model 'mamba', not 'linear'"},
      {"InferOutputTopKAbove100",
       [](Client& c) {
         return InferStatus(c, MakeInfer("mamba", OkTokens(), v1::OUTPUT_KIND_TOP_K, 101));
       },
       StatusCode::INVALID_ARGUMENT, "output.top_k must be in [0, 100]"},
      {"InferOutputTopKNegative",
       [](Client& c) {
         return InferStatus(c, MakeInfer("mamba", OkTokens(), v1::OUTPUT_KIND_TOP_K, -1));
       },
       StatusCode::INVALID_ARGUMENT, "output.top_k"},
      {"InferUnknownOutputKind",
       [](Client& c) {
         return InferStatus(c, MakeInfer("mamba", OkTokens(), static_cast<v1::OutputKind>(42)));
       },
       StatusCode::INVALID_ARGUMENT, "output.kind 42 is unknown"},
      {"InferOversizeMessage",
       [](Client& c) {
         return InferStatus(c, MakeInfer("mamba", std::vector<int64_t>(40000, 4095)));
       },
       StatusCode::RESOURCE_EXHAUSTED, "larger than max"},
      {"StreamOversizeAppend",
       [](Client& c) {
         return StreamStatus(
             c, {OpenRequest("mamba"), AppendRequest(1, std::vector<int64_t>(40000, 4095))});
       },
       StatusCode::RESOURCE_EXHAUSTED, "larger than max"},
      {"StreamEmptyRequest", [](Client& c) { return StreamStatus(c, {v1::StreamRequest()}); },
       StatusCode::INVALID_ARGUMENT, "empty StreamRequest"},
      {"StreamAppendBeforeOpen",
       [](Client& c) { return StreamStatus(c, {AppendRequest(1, OkTokens())}); },
       StatusCode::FAILED_PRECONDITION, "append before open"},
      {"StreamCloseBeforeOpen", [](Client& c) { return StreamStatus(c, {CloseRequest()}); },
       StatusCode::FAILED_PRECONDITION, "close before open"},
      {"StreamOpenTwice",
       [](Client& c) {
         return StreamStatus(c, {OpenRequest("mamba"), OpenRequest("mamba")});
       },
       StatusCode::INVALID_ARGUMENT, "already opened session"},
      {"StreamAppendNoTokens",
       [](Client& c) {
         return StreamStatus(c, {OpenRequest("mamba"), AppendRequest(1, {})});
       },
       StatusCode::INVALID_ARGUMENT, "no tokens"},
      {"StreamAppendIdAboveVocabulary",
       [](Client& c) {
         return StreamStatus(c, {OpenRequest("standard"), AppendRequest(1, {5, 99999})});
       },
       StatusCode::INVALID_ARGUMENT, "token id 99999 is outside the vocabulary"},
      {"StreamAppendNegativeId",
       [](Client& c) {
         return StreamStatus(c, {OpenRequest("mamba"), AppendRequest(1, {-7, 5})});
       },
       StatusCode::INVALID_ARGUMENT, "token id -7 is outside the vocabulary"},
      {"StreamAppendOverMaxTokensPerRequest",
       [](Client& c) {
         return StreamStatus(c, {OpenRequest("mamba"), AppendRequest(1, RandomTokens(1001, 2))});
       },
       StatusCode::RESOURCE_EXHAUSTED, "--max_tokens_per_request=1000"},
      {"StreamSequenceNumberZero",
       [](Client& c) {
         return StreamStatus(c, {OpenRequest("mamba"), AppendRequest(0, OkTokens())});
       },
       StatusCode::INVALID_ARGUMENT, "sequence_number must start at 1"},
      {"StreamSkippedSequenceNumber",
       [](Client& c) {
         return StreamStatus(
             c, {OpenRequest("mamba"), AppendRequest(1, OkTokens()), AppendRequest(3, OkTokens())});
       },
       StatusCode::ABORTED, "sequence number gap: got 3, expected 2"},
      {"StreamFirstAppendNotOne",
       [](Client& c) {
         return StreamStatus(c, {OpenRequest("mamba"), AppendRequest(2, OkTokens())});
       },
       StatusCode::ABORTED, "sequence number gap: got 2, expected 1"},
      {"StreamRepeatedSequenceNumberNoLongerKept",
       [](Client& c) {
         std::vector<v1::StreamRequest> requests = {OpenRequest("mamba")};
         for (int seq = 1; seq <= Session::kDefaultRetryWindow + 1; ++seq) {
           requests.push_back(AppendRequest(seq, {seq}));
         }
         requests.push_back(AppendRequest(1, {1}));
         return StreamStatus(c, requests);
       },
       StatusCode::ABORTED, "no longer kept"},
      {"StreamGenerateZeroTokens",
       [](Client& c) {
         return StreamStatus(
             c, {OpenRequest("mamba"), WithGenerate(AppendRequest(1, OkTokens()), 0, 0, 0)});
       },
       StatusCode::INVALID_ARGUMENT, "generate.max_new_tokens must be in [1, 16]"},
      {"StreamGenerateAboveMaxNewTokens",
       [](Client& c) {
         return StreamStatus(
             c, {OpenRequest("mamba"), WithGenerate(AppendRequest(1, OkTokens()), 17, 0, 0)});
       },
       StatusCode::INVALID_ARGUMENT, "(--max_new_tokens), got 17"},
      {"StreamGenerateNegativeTemperature",
       [](Client& c) {
         return StreamStatus(
             c, {OpenRequest("mamba"), WithGenerate(AppendRequest(1, OkTokens()), 4, -0.5f, 0)});
       },
       StatusCode::INVALID_ARGUMENT, "generate.temperature must be finite and >= 0"},
      {"StreamGenerateNanTemperature",
       [](Client& c) {
         return StreamStatus(
             c, {OpenRequest("mamba"), WithGenerate(AppendRequest(1, OkTokens()), 4, NAN, 0)});
       },
       StatusCode::INVALID_ARGUMENT, "generate.temperature"},
      {"StreamGenerateNegativeStreamInterval",
       [](Client& c) {
         v1::StreamRequest append = WithGenerate(AppendRequest(1, OkTokens()), 4, 0, 0);
         append.mutable_append()->mutable_generate()->set_stream_interval(-1);
         return StreamStatus(c, {OpenRequest("mamba"), append});
       },
       StatusCode::INVALID_ARGUMENT, "generate.stream_interval must be in [0, 16]"},
      {"StreamGenerateStreamIntervalAboveMaxNewTokens",
       [](Client& c) {
         v1::StreamRequest append = WithGenerate(AppendRequest(1, OkTokens()), 4, 0, 0);
         append.mutable_append()->mutable_generate()->set_stream_interval(17);
         return StreamStatus(c, {OpenRequest("mamba"), append});
       },
       StatusCode::INVALID_ARGUMENT, "--max_new_tokens), got 17"},
      {"StreamGenerateNegativeTopK",
       [](Client& c) {
         return StreamStatus(
             c, {OpenRequest("mamba"), WithGenerate(AppendRequest(1, OkTokens()), 4, 1, -3)});
       },
       StatusCode::INVALID_ARGUMENT, "generate.top_k must be >= 0"},
      {"StreamGenerateWithHiddenOutput",
       [](Client& c) {
         return StreamStatus(
             c, {OpenRequest("mamba"),
                 WithGenerate(AppendRequest(1, OkTokens(), v1::OUTPUT_KIND_HIDDEN), 4, 0, 0)});
       },
       StatusCode::INVALID_ARGUMENT, "generate needs logits"},
      {"StreamOutputTopKAbove100",
       [](Client& c) {
         v1::StreamRequest append = AppendRequest(1, OkTokens(), v1::OUTPUT_KIND_TOP_K);
         append.mutable_append()->mutable_output()->set_top_k(1000);
         return StreamStatus(c, {OpenRequest("mamba"), append});
       },
       StatusCode::INVALID_ARGUMENT, "output.top_k must be in [0, 100]"},
      {"StreamNonCausalVariant",
       [](Client& c) { return StreamStatus(c, {OpenRequest("linformer")}); },
       StatusCode::FAILED_PRECONDITION, "model 'linformer' cannot stream"},
      {"StreamUnknownModel", [](Client& c) { return StreamStatus(c, {OpenRequest("nope")}); },
       StatusCode::NOT_FOUND, "no model 'nope'"},
      {"StreamAutoTooLongForEveryVariant",
       [](Client& c) { return StreamStatus(c, {OpenRequest("auto", int64_t{1} << 21)}); },
       StatusCode::RESOURCE_EXHAUSTED, "no variant takes 2097152 tokens"},
      {"StreamNegativeExpectedLength",
       [](Client& c) { return StreamStatus(c, {OpenRequest("auto", -5)}); },
       StatusCode::INVALID_ARGUMENT, "expected_length must be >= 0"},
      {"StreamNegativeTtl",
       [](Client& c) { return StreamStatus(c, {OpenRequest("mamba", 0, -1)}); },
       StatusCode::INVALID_ARGUMENT, "ttl_seconds must be >= 0"},
      {"StreamTtlAboveMax",
       [](Client& c) { return StreamStatus(c, {OpenRequest("mamba", 0, 7200)}); },
       StatusCode::INVALID_ARGUMENT, "session ttl must be in (0, 3600] seconds, got 7200"},
      {"StreamResumeUnknownSession",
       [](Client& c) {
         return StreamStatus(c, {ResumeRequest("feedfacefeedfacefeedfacefeedface")});
       },
       StatusCode::NOT_FOUND, "no session 'feedfacefeedfacefeedfacefeedface'"},
      {"StreamResumeMalformedSessionId",
       [](Client& c) { return StreamStatus(c, {ResumeRequest("feedface")}); },
       StatusCode::INVALID_ARGUMENT, "session_id must be 32 lowercase hex digits"},
      {"StreamResumeClosedSession",
       [](Client& c) {
         const std::string id = c.NewSession("linear");
         EXPECT_TRUE(c.CloseSession(id).ok());
         return StreamStatus(c, {ResumeRequest(id)});
       },
       StatusCode::NOT_FOUND, "no session"},
      {"StreamResumeWithWrongModel",
       [](Client& c) { return StreamStatus(c, {ResumeRequest(c.NewSession("mamba"), "linear")}); },
       StatusCode::INVALID_ARGUMENT, "belongs to model 'mamba', not 'linear'"},
      {"StreamAppendToSessionClosedMeanwhile",
       [](Client& c) {
         std::unique_ptr<StreamClient> stream = c.Stream(absl::Seconds(30));
         const std::string id = stream->Open(OpenRequest("mamba")).session_id();
         EXPECT_TRUE(c.CloseSession(id).ok());
         stream->Send(AppendRequest(1, OkTokens()));
         return stream->Finish();
       },
       StatusCode::NOT_FOUND, "was closed"},
      {"GetSessionUnknown",
       [](Client& c) {
         v1::SessionInfo info;
         return c.GetSession("feedfacefeedfacefeedfacefeedface", &info);
       },
       StatusCode::NOT_FOUND, "no session 'feedfacefeedfacefeedfacefeedface'"},
      {"GetSessionMalformedId",
       [](Client& c) {
         v1::SessionInfo info;
         return c.GetSession("nope", &info);
       },
       StatusCode::INVALID_ARGUMENT, "got 'nope'"},
      {"CloseSessionUnknown",
       [](Client& c) { return c.CloseSession("feedfacefeedfacefeedfacefeedface"); },
       StatusCode::NOT_FOUND, "no session 'feedfacefeedfacefeedfacefeedface' to close"},
      {"ListSessionsNegativeLimit",
       [](Client& c) {
         v1::ListSessionsResponse response;
         return c.ListSessions("", -1, &response);
       },
       StatusCode::INVALID_ARGUMENT, "limit must be >= 0"},
      {"GetModelUnknown",
       [](Client& c) {
         v1::ModelInfo info;
         return c.GetModel("gpt-17", &info);
       },
       StatusCode::NOT_FOUND, "no model 'gpt-17'"},
      {"GetModelAuto",
       [](Client& c) {
         v1::ModelInfo info;
         return c.GetModel("auto", &info);
       },
       StatusCode::INVALID_ARGUMENT, "name a model, not auto"},
  };
  return cases;
}

TEST(MalformedRequestTest, EachGetsItsDocumentedCodeAndTheServerGoesOn) {
  TestServerOptions options;
  options.service.max_tokens_per_request = 1000;
  options.service.max_new_tokens = 16;
  options.limits.max_ttl = absl::Hours(1);
  options.max_receive_message_bytes = 64 << 10;
  TestServer server(options);
  Client& client = server.client();
  const std::vector<MalformedCase> cases = MalformedCases();
  ASSERT_GE(cases.size(), 20u);
  for (const MalformedCase& c : cases) {
    SCOPED_TRACE(c.name);
    const grpc::Status status = c.call(client);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }

  // The server still serves normal requests.
  v1::InferResponse response;
  const grpc::Status infer = client.Infer(MakeInfer("auto", {1, 2, 3}), &response);
  ASSERT_TRUE(infer.ok()) << infer.error_message();
  EXPECT_EQ(response.model(), "standard");
  EXPECT_THAT(Shape(response.outputs().tensor()), ElementsAre(kVocab));
  std::unique_ptr<StreamClient> stream = client.Stream();
  const std::string id = stream->Open(OpenRequest("mamba")).session_id();
  EXPECT_EQ(stream->Append(AppendRequest(1, {1, 2, 3})).position(), 3);
  EXPECT_TRUE(stream->Close(id).ok());
  EXPECT_TRUE(WaitFor([&] { return server.service().inflight() == 0; }));
}

}  // namespace
}  // namespace attnserve::server::testing
