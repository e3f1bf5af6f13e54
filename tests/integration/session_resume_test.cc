// Integration tests on loopback, as server_test.cc: dropped streams resume by id, retried
// appends replay, gaps abort.
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

}  // namespace
}  // namespace attnserve::server::testing
