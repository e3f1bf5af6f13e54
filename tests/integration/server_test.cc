// Integration tests of attnserve-server's gRPC API: an in-process server on loopback (the
// real service, session table, policy and worker pool) driven by the generated stub over an
// insecure channel. Each test starts its own server with the limits it needs.
// Here: every RPC, the sequence-length policy, chunked appends.
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

}  // namespace
}  // namespace attnserve::server::testing
