// Integration tests of attnserve-server's gRPC API: an in-process server on loopback (the
// real service, session table, policy and worker pool) driven by the generated stub over an
// insecure channel. Each test starts its own server with the limits it needs.
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
// Every RPC, with its content.

TEST(RpcTest, InferReturnsEveryOutputKind) {
  TestServer server;
  Client& client = server.client();
  const std::vector<int64_t> tokens = RandomTokens(16, 1);
  for (const std::string& model :
       std::vector<std::string>{"standard", "linformer", "linear", "mamba", "hybrid",
                                "sliding_window", "performer", "rwkv", "sparse"}) {
    SCOPED_TRACE(model);
    v1::InferResponse last, unspecified, all, hidden, top, top7, none;
    ASSERT_TRUE(client.Infer(MakeInfer(model, tokens, v1::OUTPUT_KIND_LAST_LOGITS), &last).ok());
    ASSERT_TRUE(
        client.Infer(MakeInfer(model, tokens, v1::OUTPUT_KIND_UNSPECIFIED), &unspecified).ok());
    ASSERT_TRUE(client.Infer(MakeInfer(model, tokens, v1::OUTPUT_KIND_ALL_LOGITS), &all).ok());
    ASSERT_TRUE(client.Infer(MakeInfer(model, tokens, v1::OUTPUT_KIND_HIDDEN), &hidden).ok());
    ASSERT_TRUE(client.Infer(MakeInfer(model, tokens, v1::OUTPUT_KIND_TOP_K), &top).ok());
    ASSERT_TRUE(client.Infer(MakeInfer(model, tokens, v1::OUTPUT_KIND_TOP_K, 7), &top7).ok());
    ASSERT_TRUE(client.Infer(MakeInfer(model, tokens, v1::OUTPUT_KIND_NONE), &none).ok());

    for (const v1::InferResponse* r : {&last, &unspecified, &all, &hidden, &top, &top7, &none}) {
      EXPECT_EQ(r->model(), model);
      EXPECT_THAT(r->policy_reason(), HasSubstr("requested by name"));
      EXPECT_EQ(r->session_position(), 0);
      EXPECT_GE(r->timings().total_seconds(), r->timings().compute_seconds());
      EXPECT_GE(r->timings().compute_seconds(), 0);
      EXPECT_GE(r->timings().queue_seconds(), 0);
    }
    EXPECT_THAT(Shape(last.outputs().tensor()), ElementsAre(kVocab));
    EXPECT_EQ(last.outputs().tensor().dtype(), v1::DATA_TYPE_FLOAT32);
    EXPECT_EQ(last.outputs().tensor().float_data_size(), kVocab);
    EXPECT_EQ(last.outputs().top_k_size(), 0);
    EXPECT_EQ(
        MaxAbsDifference(Floats(unspecified.outputs().tensor()), Floats(last.outputs().tensor())),
        0);
    EXPECT_THAT(Shape(all.outputs().tensor()), ElementsAre(16, kVocab));
    EXPECT_EQ(all.outputs().tensor().float_data_size(), 16 * kVocab);
    // The last row of all the logits is the last logits.
    const std::vector<float> all_floats = Floats(all.outputs().tensor());
    const std::vector<float> last_row(all_floats.end() - kVocab, all_floats.end());
    EXPECT_LE(MaxRelativeError(last_row, Floats(last.outputs().tensor())), 1e-5);
    EXPECT_THAT(Shape(hidden.outputs().tensor()), ElementsAre(16, kHidden));
    EXPECT_EQ(hidden.outputs().tensor().float_data_size(), 16 * kHidden);

    // Top-k: 5 by default, most likely first, and the first is the argmax of the logits.
    EXPECT_FALSE(top.outputs().has_tensor());
    ASSERT_EQ(top.outputs().top_k_size(), 5);
    ASSERT_EQ(top7.outputs().top_k_size(), 7);
    const std::vector<float> logits = Floats(last.outputs().tensor());
    const int64_t argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(top.outputs().top_k(0).token(), argmax);
    for (int i = 0; i < top7.outputs().top_k_size(); ++i) {
      const v1::TokenProbability& p = top7.outputs().top_k(i);
      EXPECT_GE(p.token(), 0);
      EXPECT_LT(p.token(), kVocab);
      EXPECT_LE(p.logprob(), 0);
      if (i > 0) {
        EXPECT_LE(p.logprob(), top7.outputs().top_k(i - 1).logprob());
      }
      if (i < 5) {
        EXPECT_EQ(p.token(), top.outputs().top_k(i).token());
      }
    }
    EXPECT_FALSE(none.outputs().has_tensor());
    EXPECT_EQ(none.outputs().top_k_size(), 0);
  }
}

TEST(RpcTest, StreamOpenAppendGenerateClose) {
  TestServer server;
  Client& client = server.client();
  std::unique_ptr<StreamClient> stream = client.Stream();
  const v1::StreamOpened opened = stream->Open(OpenRequest("standard"));
  const std::string id = opened.session_id();
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(opened.model(), "standard");
  EXPECT_THAT(opened.policy_reason(), HasSubstr("requested by name"));
  EXPECT_EQ(opened.position(), 0);
  EXPECT_EQ(opened.last_sequence_number(), 0);
  EXPECT_EQ(opened.state_bytes(), 0);  // an empty KV cache

  const v1::AppendResult first =
      stream->Append(AppendRequest(1, RandomTokens(10, 2), v1::OUTPUT_KIND_ALL_LOGITS));
  EXPECT_EQ(first.sequence_number(), 1);
  EXPECT_EQ(first.position(), 10);
  EXPECT_FALSE(first.replayed());
  EXPECT_THAT(Shape(first.outputs().tensor()), ElementsAre(10, kVocab));
  EXPECT_EQ(first.state_bytes(), 10 * kStandardBytesPerToken);
  EXPECT_GT(first.state_bytes(), 0);

  const v1::AppendResult second =
      stream->Append(AppendRequest(2, RandomTokens(5, 3), v1::OUTPUT_KIND_HIDDEN));
  EXPECT_EQ(second.position(), 15);
  EXPECT_THAT(Shape(second.outputs().tensor()), ElementsAre(5, kHidden));
  EXPECT_GT(second.state_bytes(), first.state_bytes());  // the KV cache grows
  EXPECT_EQ(second.state_bytes(), 15 * kStandardBytesPerToken);

  std::vector<v1::GeneratedToken> generated;
  const v1::AppendResult third = stream->Append(GenerateRequest(3, {7}, 4), &generated);
  EXPECT_EQ(third.sequence_number(), 3);
  ASSERT_EQ(generated.size(), 4u);
  ASSERT_EQ(third.generated_tokens_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(generated[i].sequence_number(), 3);
    EXPECT_EQ(generated[i].index(), i);
    EXPECT_EQ(generated[i].token(), third.generated_tokens(i));
    EXPECT_GE(generated[i].token(), 0);
    EXPECT_LT(generated[i].token(), kVocab);
    EXPECT_LE(generated[i].logprob(), 0);
  }
  // The prompt token and the generated ones are all in the session.
  EXPECT_EQ(third.position(), 15 + 1 + 4);
  EXPECT_EQ(third.state_bytes(), 20 * kStandardBytesPerToken);
  EXPECT_THAT(Shape(third.outputs().tensor()), ElementsAre(kVocab));

  v1::SessionInfo info;
  ASSERT_TRUE(client.GetSession(id, &info).ok());
  EXPECT_EQ(info.position(), 20);
  EXPECT_EQ(info.last_sequence_number(), 3);
  EXPECT_TRUE(info.attached());

  EXPECT_TRUE(stream->Close(id).ok());
  EXPECT_EQ(client.GetSession(id, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::ListSessionsResponse list;
  ASSERT_TRUE(client.ListSessions("", 0, &list).ok());
  EXPECT_EQ(list.total(), 0);
  EXPECT_EQ(list.state_bytes(), 0);
}

TEST(RpcTest, RecurrentStateIsFixedAndKvCacheGrows) {
  TestServer server;
  Client& client = server.client();
  for (const std::string& model : StreamingModels()) {
    SCOPED_TRACE(model);
    v1::ModelInfo info;
    ASSERT_TRUE(client.GetModel(model, &info).ok());
    std::unique_ptr<StreamClient> stream = client.Stream();
    const v1::StreamOpened opened = stream->Open(OpenRequest(model));
    EXPECT_EQ(opened.state_bytes(), info.state_bytes_per_session());
    std::vector<int64_t> sizes;
    int64_t position = 0;
    for (int seq = 1; seq <= 3; ++seq) {
      const v1::AppendResult r = stream->Append(AppendRequest(seq, RandomTokens(20 * seq, seq)));
      position += 20 * seq;
      EXPECT_EQ(r.position(), position);
      EXPECT_EQ(r.state_bytes(),
                info.state_bytes_per_session() + position * info.state_bytes_per_token());
      EXPECT_GT(r.state_bytes(), 0);
      sizes.push_back(r.state_bytes());
    }
    // A recurrent state, a sliding window's ring, Performer's and RWKV's sums: fixed size.
    // standard's, hybrid's and sparse's KV caches grow.
    if (model != "standard" && model != "hybrid" && model != "sparse") {
      EXPECT_GT(info.state_bytes_per_session(), 0);
      EXPECT_EQ(info.state_bytes_per_token(), 0);
      EXPECT_THAT(sizes, ElementsAre(sizes[0], sizes[0], sizes[0]));  // fixed
    } else {
      EXPECT_GT(info.state_bytes_per_token(), 0);
      EXPECT_LT(sizes[0], sizes[1]);  // a KV cache grows
      EXPECT_LT(sizes[1], sizes[2]);
    }
    EXPECT_TRUE(stream->Close(opened.session_id()).ok());
  }
}

TEST(RpcTest, GetSessionAndListSessions) {
  TestServer server;
  Client& client = server.client();
  std::unique_ptr<StreamClient> mamba = client.Stream();
  const std::string mamba_id = mamba->Open(OpenRequest("mamba", 0, 120)).session_id();
  mamba->Append(AppendRequest(1, RandomTokens(12, 4)));
  mamba->Append(AppendRequest(2, RandomTokens(3, 5)));
  const std::string linear_id = client.NewSession("linear", RandomTokens(9, 6));
  const std::string standard_id = client.NewSession("standard", RandomTokens(4, 7));

  v1::SessionInfo info;
  ASSERT_TRUE(client.GetSession(mamba_id, &info).ok());
  EXPECT_EQ(info.session_id(), mamba_id);
  EXPECT_EQ(info.model(), "mamba");
  EXPECT_EQ(info.position(), 15);
  EXPECT_EQ(info.last_sequence_number(), 2);
  EXPECT_EQ(info.ttl_seconds(), 120);
  EXPECT_TRUE(info.attached());
  EXPECT_GT(info.state_bytes(), 0);
  EXPECT_GE(info.idle_seconds(), 0);
  EXPECT_LT(info.idle_seconds(), 60);

  ASSERT_TRUE(client.GetSession(linear_id, &info).ok());
  EXPECT_EQ(info.model(), "linear");
  EXPECT_EQ(info.position(), 9);
  EXPECT_EQ(info.last_sequence_number(), 1);
  EXPECT_EQ(info.ttl_seconds(), 600);  // the default
  EXPECT_FALSE(info.attached());

  v1::ListSessionsResponse all;
  ASSERT_TRUE(client.ListSessions("", 0, &all).ok());
  EXPECT_EQ(all.total(), 3);
  ASSERT_EQ(all.sessions_size(), 3);
  int64_t bytes = 0;
  for (const v1::SessionInfo& s : all.sessions()) bytes += s.state_bytes();
  EXPECT_EQ(all.state_bytes(), bytes);
  EXPECT_EQ(server.sessions().state_bytes(), bytes);

  v1::ListSessionsResponse only_mamba;
  ASSERT_TRUE(client.ListSessions("mamba", 0, &only_mamba).ok());
  ASSERT_EQ(only_mamba.sessions_size(), 1);
  EXPECT_EQ(only_mamba.sessions(0).session_id(), mamba_id);
  EXPECT_EQ(only_mamba.total(), 3);  // total counts every session

  v1::ListSessionsResponse limited;
  ASSERT_TRUE(client.ListSessions("", 2, &limited).ok());
  EXPECT_EQ(limited.sessions_size(), 2);
  EXPECT_EQ(limited.total(), 3);

  // A finished stream detaches; its session stays.
  ASSERT_TRUE(mamba->Finish().ok());
  EXPECT_TRUE(client.WaitDetached(mamba_id));
  ASSERT_TRUE(client.GetSession(mamba_id, &info).ok());
  EXPECT_EQ(info.position(), 15);
}

TEST(RpcTest, CloseSession) {
  TestServer server;
  Client& client = server.client();
  const std::string id = client.NewSession("mamba", RandomTokens(5, 8));
  const std::string other = client.NewSession("linear", RandomTokens(5, 9));
  ASSERT_TRUE(client.CloseSession(id).ok());
  v1::SessionInfo info;
  EXPECT_EQ(client.GetSession(id, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(client.GetSession(other, &info).ok());
  v1::ListSessionsResponse list;
  ASSERT_TRUE(client.ListSessions("", 0, &list).ok());
  EXPECT_EQ(list.total(), 1);
  EXPECT_EQ(list.state_bytes(), info.state_bytes());
  EXPECT_EQ(client.CloseSession(id).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(client.CloseSession(other).ok());
  ASSERT_TRUE(client.ListSessions("", 0, &list).ok());
  EXPECT_EQ(list.total(), 0);
  EXPECT_EQ(list.state_bytes(), 0);
}

TEST(RpcTest, InferContinuesASession) {
  TestServer server;
  Client& client = server.client();
  const std::vector<int64_t> a = RandomTokens(11, 10), b = RandomTokens(6, 11);
  std::vector<int64_t> whole = a;
  whole.insert(whole.end(), b.begin(), b.end());

  const std::string id = client.NewSession("hybrid", a);
  v1::InferRequest request = MakeInfer("", b, v1::OUTPUT_KIND_ALL_LOGITS);
  request.set_session_id(id);
  v1::InferResponse continued;
  ASSERT_TRUE(client.Infer(request, &continued).ok());
  EXPECT_EQ(continued.model(), "hybrid");
  EXPECT_EQ(continued.session_position(), 17);
  EXPECT_THAT(continued.policy_reason(), HasSubstr(id));
  v1::SessionInfo info;
  ASSERT_TRUE(client.GetSession(id, &info).ok());
  EXPECT_EQ(info.position(), 17);
  EXPECT_EQ(info.last_sequence_number(), 1);  // Infer is not an append

  v1::InferResponse reference;
  ASSERT_TRUE(
      client.Infer(MakeInfer("hybrid", whole, v1::OUTPUT_KIND_ALL_LOGITS), &reference).ok());
  const std::vector<float> ref = Floats(reference.outputs().tensor());
  const std::vector<float> tail(ref.end() - 6 * kVocab, ref.end());
  EXPECT_LE(MaxRelativeError(Floats(continued.outputs().tensor()), tail), 1e-4);
}

TEST(RpcTest, ListModelsAndGetModel) {
  TestServer server;
  Client& client = server.client();
  v1::ListModelsResponse list;
  ASSERT_TRUE(client.ListModels(&list).ok());
  std::vector<std::string> names;
  for (const v1::ModelInfo& m : list.models()) names.push_back(m.name());
  EXPECT_THAT(names, ElementsAre("hybrid", "linear", "linformer", "mamba", "performer", "rwkv",
                                 "sliding_window", "sparse", "standard"));
  for (const v1::ModelInfo& m : list.models()) {
    SCOPED_TRACE(m.name());
    EXPECT_EQ(m.config().vocab_size(), kVocab);
    EXPECT_EQ(m.config().hidden_size(), kHidden);
    EXPECT_EQ(m.config().layers_size(), 4);
    const bool streams = m.name() != "linformer";
    EXPECT_EQ(m.causal(), streams);
    EXPECT_EQ(m.can_stream(), streams);
    v1::ModelInfo one;
    ASSERT_TRUE(client.GetModel(m.name(), &one).ok());
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(one, m))
        << one.ShortDebugString() << " vs " << m.ShortDebugString();
  }
  const auto& models = list.models();
  EXPECT_EQ(models[2].max_sequence_length(), 32768);  // linformer
  EXPECT_EQ(models[2].state_bytes_per_session(), 0);
  EXPECT_EQ(models[8].max_sequence_length(), 65536);  // standard
  EXPECT_EQ(models[8].state_bytes_per_session(), 0);
  EXPECT_EQ(models[8].state_bytes_per_token(), kStandardBytesPerToken);
  // sparse: a KV cache like standard's (a step reads fewer of its keys, it keeps them all).
  EXPECT_EQ(models[7].state_bytes_per_session(), 0);
  EXPECT_EQ(models[7].state_bytes_per_token(), kStandardBytesPerToken);
  // The keys a step reads (4 layers): standard every earlier one; sparse (l = 128) the last 128
  // and every 128th before them; sliding_window its 1024 and 4 sinks; recurrent states none.
  EXPECT_EQ(models[8].step_keys_read_at_1k(), 4 * 1024);
  EXPECT_EQ(models[8].step_keys_read_at_32k(), 4 * 32768);
  EXPECT_EQ(models[7].step_keys_read_at_1k(), 4 * (128 + 7));
  EXPECT_EQ(models[7].step_keys_read_at_32k(), 4 * (128 + 255));
  EXPECT_EQ(models[6].step_keys_read_at_32k(), 4 * (1024 + 4));
  EXPECT_EQ(models[0].step_keys_read_at_32k(), 32768);  // hybrid: one standard layer
  for (int recurrent : {1, 3, 4, 5}) {                  // linear, mamba, performer, rwkv
    EXPECT_EQ(models[recurrent].step_keys_read_at_32k(), 0) << models[recurrent].name();
  }
  EXPECT_EQ(models[2].step_keys_read_at_32k(), 0);  // linformer cannot step
  for (int fixed : {4, 5, 6}) {  // performer, rwkv, sliding_window: fixed-size states
    EXPECT_GT(models[fixed].state_bytes_per_session(), 0) << models[fixed].name();
    EXPECT_EQ(models[fixed].state_bytes_per_token(), 0) << models[fixed].name();
  }
  EXPECT_GT(models[3].state_bytes_per_session(), 0);  // mamba
  EXPECT_EQ(models[3].state_bytes_per_token(), 0);
  EXPECT_GT(models[0].state_bytes_per_session(), 0);  // hybrid: mamba layers and a KV cache
  EXPECT_EQ(models[0].state_bytes_per_token(), kStandardBytesPerToken / 4);
}

TEST(RpcTest, DrainingRefusesNewCallsAndFinishesOpenStreams) {
  TestServer server;
  Client& client = server.client();
  std::unique_ptr<StreamClient> stream = client.Stream();
  const std::string id = stream->Open(OpenRequest("mamba")).session_id();
  EXPECT_EQ(server.service().inflight(), 1);
  server.service().StartDraining();

  v1::InferResponse response;
  const grpc::Status infer = client.Infer(MakeInfer("mamba", {1, 2, 3}), &response);
  EXPECT_EQ(infer.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(infer.error_message(), HasSubstr("draining"));
  std::unique_ptr<StreamClient> refused = client.Stream();
  refused->Send(OpenRequest("mamba"));
  const grpc::Status stream_status = refused->Finish();
  EXPECT_EQ(stream_status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(stream_status.error_message(), HasSubstr("draining"));

  // The stream in flight is still served to its end.
  EXPECT_EQ(stream->Append(AppendRequest(1, {4, 5})).position(), 2);
  EXPECT_TRUE(stream->Close(id).ok());
  EXPECT_TRUE(WaitFor([&] { return server.service().inflight() == 0; }));
}

// ---------------------------------------------------------------------------------------
// The sequence-length policy through model "auto". The long requests take seconds each.

struct PolicyCase {
  int64_t length;
  std::string model;
  std::string reason;
};

void PrintTo(const PolicyCase& c, std::ostream* os) { *os << c.length << " tokens -> " << c.model; }

class PolicyTest : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(PolicyTest, AutoChoosesByLength) {
  TestServerOptions options;
  options.service.max_tokens_per_request = 40000;
  TestServer server(options);
  const PolicyCase& c = GetParam();
  v1::InferResponse response;
  const grpc::Status status = server.client().Infer(
      MakeInfer("auto", RandomTokens(c.length, c.length)), &response, absl::Seconds(300));
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model(), c.model);
  EXPECT_THAT(response.policy_reason(), HasSubstr(c.reason));
  EXPECT_THAT(response.policy_reason(), HasSubstr(absl::StrCat("request: ", c.length, " tokens")));
  EXPECT_THAT(Shape(response.outputs().tensor()), ElementsAre(kVocab));
}

INSTANTIATE_TEST_SUITE_P(Boundaries, PolicyTest,
                         ::testing::Values(PolicyCase{4095, "standard",
                                                      "rule 1: standard up to 4095 tokens"},
                                           PolicyCase{4096, "sliding_window",
                                                      "rule 2: sliding_window up to 32768 tokens"},
                                           PolicyCase{32768, "sliding_window",
                                                      "rule 2: sliding_window up to 32768 tokens"},
                                           PolicyCase{32769, "mamba", "rule 3: mamba beyond"}),
                         [](const ::testing::TestParamInfo<PolicyCase>& info) {
                           return absl::StrCat("Length", info.param.length);
                         });

TEST(PolicyStreamTest, StreamTakesTheFirstCausalVariantThatFits) {
  TestServerOptions options;
  options.policy = "standard:4095,linformer:32768,mamba";
  TestServer server(options);
  Client& client = server.client();
  {
    // Linformer's rule fits 5000 tokens, but it cannot stream: mamba's rule is next.
    std::unique_ptr<StreamClient> stream = client.Stream();
    const v1::StreamOpened opened = stream->Open(OpenRequest("auto", 5000));
    EXPECT_EQ(opened.model(), "mamba");
    EXPECT_THAT(opened.policy_reason(), HasSubstr("rule 3: mamba beyond"));
    EXPECT_THAT(opened.policy_reason(), HasSubstr("5000 tokens, streaming"));
    EXPECT_TRUE(stream->Close(opened.session_id()).ok());
  }
  {
    // With no unbounded rule, an unknown length only needs a streaming variant: the first.
    std::unique_ptr<StreamClient> stream = client.Stream();
    const v1::StreamOpened opened = stream->Open(OpenRequest("", 0));
    EXPECT_EQ(opened.model(), "standard");
    EXPECT_THAT(opened.policy_reason(), HasSubstr("rule 1: standard up to 4095 tokens"));
    EXPECT_TRUE(stream->Close(opened.session_id()).ok());
  }
}

TEST(PolicyStreamTest, DefaultPolicySendsStreamsOfUnknownLengthToAFixedSizeState) {
  TestServer server;
  Client& client = server.client();
  {
    std::unique_ptr<StreamClient> stream = client.Stream();
    const v1::StreamOpened opened = stream->Open(OpenRequest("auto", 0));
    EXPECT_EQ(opened.model(), "rwkv");
    EXPECT_THAT(opened.policy_reason(),
                HasSubstr("rule 4: rwkv for streams of unknown length (request: unknown length"));
    EXPECT_TRUE(stream->Close(opened.session_id()).ok());
  }
  {
    // A declared length in the middle range: the window, which streams too.
    std::unique_ptr<StreamClient> stream = client.Stream();
    const v1::StreamOpened opened = stream->Open(OpenRequest("auto", 5000));
    EXPECT_EQ(opened.model(), "sliding_window");
    EXPECT_THAT(opened.policy_reason(), HasSubstr("rule 2: sliding_window up to 32768 tokens"));
    EXPECT_TRUE(stream->Close(opened.session_id()).ok());
  }
}

// ---------------------------------------------------------------------------------------
// Chunked appends equal one whole pass.

// One process per test under CTest, each building the models: the streaming models are
// looped over inside one test rather than parameterized.
TEST(ChunkedStreamTest, ChunksEqualOneInferForEveryStreamingModel) {
  TestServer server;
  Client& client = server.client();
  const std::vector<int64_t> sizes = {1, 7, 64, 100};
  const std::vector<int64_t> tokens = RandomTokens(172, 12);
  for (const std::string& model : StreamingModels()) {
    SCOPED_TRACE(model);
    std::unique_ptr<StreamClient> stream = client.Stream();
    const std::string id = stream->Open(OpenRequest(model)).session_id();
    std::vector<float> chunked;
    int64_t begin = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<int64_t> chunk(tokens.begin() + begin, tokens.begin() + begin + sizes[i]);
      begin += sizes[i];
      const v1::AppendResult r = stream->Append(
          AppendRequest(static_cast<int64_t>(i + 1), chunk, v1::OUTPUT_KIND_ALL_LOGITS));
      EXPECT_EQ(r.position(), begin);
      EXPECT_THAT(Shape(r.outputs().tensor()), ElementsAre(sizes[i], kVocab));
      chunked.insert(chunked.end(), r.outputs().tensor().float_data().begin(),
                     r.outputs().tensor().float_data().end());
    }
    EXPECT_TRUE(stream->Close(id).ok());

    v1::InferResponse whole;
    ASSERT_TRUE(client.Infer(MakeInfer(model, tokens, v1::OUTPUT_KIND_ALL_LOGITS), &whole).ok());
    ASSERT_THAT(Shape(whole.outputs().tensor()), ElementsAre(172, kVocab));
    EXPECT_LE(MaxRelativeError(chunked, Floats(whole.outputs().tensor())), 1e-4);
  }
}

// ---------------------------------------------------------------------------------------
// Dropped streams resume by id; retries replay; gaps abort.

enum class Drop { kCancel, kAbandon };

struct ResumeCase {
  std::string model;
  Drop drop;
};

void CheckResume(TestServer& server, const ResumeCase& c) {
  Client& client = server.client();
  const std::string& model = c.model;
  const std::vector<std::vector<int64_t>> chunks = {RandomTokens(5, 20), RandomTokens(3, 21),
                                                    RandomTokens(1, 22), RandomTokens(9, 23)};

  const std::vector<std::vector<float>> expected = client.UnbrokenStreamLogits(model, chunks);

  // Broken after two appends, by a client that goes away without saying so.
  std::unique_ptr<Client> first_client = server.NewClient();
  std::unique_ptr<StreamClient> first = first_client->Stream();
  const std::string id = first->Open(OpenRequest(model)).session_id();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(MaxAbsDifference(
                  Floats(first->Append(AppendRequest(i + 1, chunks[i], v1::OUTPUT_KIND_ALL_LOGITS))
                             .outputs()
                             .tensor()),
                  expected[i]),
              0);
  }
  if (c.drop == Drop::kCancel) {
    first->Cancel();
    EXPECT_EQ(first->Finish().error_code(), grpc::StatusCode::CANCELLED);
  } else {
    first->Abandon();
  }
  first.reset();
  first_client.reset();
  ASSERT_TRUE(client.WaitDetached(id)) << "the server keeps the dropped stream attached";

  // Resumed on a new stream (and a new channel).
  std::unique_ptr<Client> second_client = server.NewClient();
  std::unique_ptr<StreamClient> second = second_client->Stream();
  const v1::StreamOpened opened = second->Open(ResumeRequest(id, model));
  EXPECT_EQ(opened.session_id(), id);
  EXPECT_EQ(opened.model(), model);
  EXPECT_THAT(opened.policy_reason(), HasSubstr("resumed"));
  EXPECT_EQ(opened.position(), 8);
  EXPECT_EQ(opened.last_sequence_number(), 2);
  for (size_t i = 2; i < chunks.size(); ++i) {
    const v1::AppendResult r =
        second->Append(AppendRequest(i + 1, chunks[i], v1::OUTPUT_KIND_ALL_LOGITS));
    EXPECT_FALSE(r.replayed());
    EXPECT_EQ(MaxAbsDifference(Floats(r.outputs().tensor()), expected[i]), 0)
        << "append " << i + 1 << " after resuming differs from the unbroken stream";
  }
  EXPECT_TRUE(second->Close(id).ok());
}

TEST(ResumeTest, DroppedStreamResumesWithTheUnbrokenOutputs) {
  TestServer server;
  for (const ResumeCase& c :
       {ResumeCase{"standard", Drop::kCancel}, ResumeCase{"mamba", Drop::kCancel},
        ResumeCase{"hybrid", Drop::kAbandon}, ResumeCase{"linear", Drop::kAbandon}}) {
    SCOPED_TRACE(c.model + (c.drop == Drop::kCancel ? ", cancelled" : ", abandoned"));
    CheckResume(server, c);
  }
}

TEST(RetryTest, RetriedAppendIsReplayedAndGapIsAborted) {
  TestServer server;
  Client& client = server.client();
  const std::vector<int64_t> a = RandomTokens(4, 30), b = RandomTokens(6, 31);

  std::unique_ptr<StreamClient> first = client.Stream();
  const std::string id = first->Open(OpenRequest("standard")).session_id();
  const v1::AppendResult r1 = first->Append(AppendRequest(1, a, v1::OUTPUT_KIND_TOP_K));
  const v1::AppendResult r2 = first->Append(AppendRequest(2, b, v1::OUTPUT_KIND_ALL_LOGITS));
  ASSERT_EQ(r2.position(), 10);
  first->Cancel();  // as if the answer to append 2 had been lost with the connection
  first->Finish();
  ASSERT_TRUE(client.WaitDetached(id));

  std::unique_ptr<StreamClient> second = client.Stream();
  EXPECT_EQ(second->Open(ResumeRequest(id)).last_sequence_number(), 2);
  // The client resends append 2: the stored result comes back, nothing is applied again.
  const v1::AppendResult again = second->Append(AppendRequest(2, b, v1::OUTPUT_KIND_ALL_LOGITS));
  EXPECT_TRUE(again.replayed());
  EXPECT_EQ(again.sequence_number(), 2);
  EXPECT_EQ(again.position(), 10);
  EXPECT_EQ(again.state_bytes(), r2.state_bytes());
  EXPECT_EQ(MaxAbsDifference(Floats(again.outputs().tensor()), Floats(r2.outputs().tensor())), 0);
  // An older one too, with its own result.
  const v1::AppendResult again1 = second->Append(AppendRequest(1, a, v1::OUTPUT_KIND_TOP_K));
  EXPECT_TRUE(again1.replayed());
  EXPECT_EQ(again1.position(), 4);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(again1.outputs(), r1.outputs()));
  v1::SessionInfo info;
  ASSERT_TRUE(client.GetSession(id, &info).ok());
  EXPECT_EQ(info.position(), 10);
  EXPECT_EQ(info.last_sequence_number(), 2);
  EXPECT_EQ(info.state_bytes(), 10 * kStandardBytesPerToken);

  // A gap: 4 after 2.
  second->Send(AppendRequest(4, {1, 2}));
  const grpc::Status gap = second->Finish();
  EXPECT_EQ(gap.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(gap.error_message(), HasSubstr("gap"));
  EXPECT_THAT(gap.error_message(), HasSubstr("expected 3"));
  ASSERT_TRUE(client.WaitDetached(id));
  ASSERT_TRUE(client.GetSession(id, &info).ok());
  EXPECT_EQ(info.position(), 10);
  EXPECT_EQ(info.last_sequence_number(), 2);

  // And the session goes on with 3.
  std::unique_ptr<StreamClient> third = client.Stream();
  third->Open(ResumeRequest(id));
  const v1::AppendResult r3 = third->Append(AppendRequest(3, {1, 2}));
  EXPECT_FALSE(r3.replayed());
  EXPECT_EQ(r3.position(), 12);
  EXPECT_TRUE(third->Close(id).ok());
}

TEST(RetryTest, StreamDroppedDuringAnAppendIsRetriedExactlyOnce) {
  TestServer server;
  Client& client = server.client();
  const std::vector<int64_t> tokens = RandomTokens(1500, 32);
  v1::InferResponse reference;
  ASSERT_TRUE(client.Infer(MakeInfer("standard", tokens), &reference).ok());

  std::unique_ptr<StreamClient> first = client.Stream();
  const std::string id = first->Open(OpenRequest("standard")).session_id();
  ASSERT_TRUE(first->Send(AppendRequest(1, tokens)));
  first->Cancel();  // while the append is queued or running
  first->Finish();
  ASSERT_TRUE(client.WaitDetached(id, absl::Seconds(60)));

  // Whether or not the append was applied, resending it gives its result once.
  std::unique_ptr<StreamClient> second = client.Stream();
  const v1::StreamOpened opened = second->Open(ResumeRequest(id));
  ASSERT_TRUE(opened.last_sequence_number() == 0 || opened.last_sequence_number() == 1);
  EXPECT_EQ(opened.position(), opened.last_sequence_number() == 1 ? 1500 : 0);
  const v1::AppendResult result = second->Append(AppendRequest(1, tokens));
  EXPECT_EQ(result.replayed(), opened.last_sequence_number() == 1);
  EXPECT_EQ(result.position(), 1500);
  EXPECT_LE(
      MaxRelativeError(Floats(result.outputs().tensor()), Floats(reference.outputs().tensor())),
      1e-4);
  EXPECT_EQ(second->Append(AppendRequest(2, {5})).position(), 1501);
  EXPECT_TRUE(second->Close(id).ok());
}

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

v1::StreamRequest WithGenerate(v1::StreamRequest request, int32_t max_new_tokens, float temperature,
                               int32_t top_k) {
  v1::GenerateSpec* g = request.mutable_append()->mutable_generate();
  g->set_max_new_tokens(max_new_tokens);
  g->set_temperature(temperature);
  g->set_top_k(top_k);
  return request;
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
