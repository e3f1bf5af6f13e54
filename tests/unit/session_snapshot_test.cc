// Session snapshots (server/sessions/session_snapshot.h): a session continued from its
// snapshot gives exactly the outputs of the session continued unbroken, for every streaming
// model; every damaged or foreign snapshot is refused with its documented code.
#include "server/sessions/session_snapshot.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>

#include "server/model/model_repository.h"

namespace attnserve::server {
namespace {

const model::ModelRepository& Repository() {
  static const model::ModelRepository* repository = [] {
    auto built = model::ModelRepository::BuildDefault();
    return built.ok() ? built->release() : nullptr;
  }();
  return *repository;
}

at::Tensor Tokens(int64_t n, int64_t offset) {
  return (at::arange(n, at::kLong) * 37 + offset).remainder(4096).unsqueeze(0);
}

std::shared_ptr<Session> NewSession(const std::string& model_name) {
  const model::Model* m = Repository().Find(model_name);
  auto state = m->NewState();
  return std::make_shared<Session>("0123456789abcdef0123456789abcdef", m, absl::Minutes(5),
                                   *std::move(state));
}

// Re-seals `bytes` after an edit, so that only the edit is wrong, not the checksum.
void Reseal(std::string* bytes) {
  const uint64_t sum = XXH3_64bits(bytes->data(), bytes->size() - 8);
  std::memcpy(bytes->data() + bytes->size() - 8, &sum, 8);
}

class SnapshotRoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SnapshotRoundTripTest, ContinuesExactlyAsTheUnbrokenSession) {
  auto session = NewSession(GetParam());
  const model::Model& m = *session->model();
  ASSERT_TRUE(m.Forward(Tokens(33, 1), &session->state, model::OutputKind::kLastLogits).ok());
  session->last_sequence_number = 3;
  v1::AppendResult result;
  result.set_sequence_number(3);
  result.add_generated_tokens(17);
  session->recent_results.push_back({0x1234, result});

  const std::string bytes = EncodeSessionSnapshot(*session);
  // Only the state's valid bytes and a small header.
  EXPECT_LE(static_cast<int64_t>(bytes.size()), m.StateBytesPerSequence(33) + 4096);
  absl::StatusOr<SessionSnapshot> restored = DecodeSessionSnapshot(bytes, Repository());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->session_id, session->id());
  EXPECT_EQ(restored->model, &m);
  EXPECT_EQ(restored->ttl, absl::Minutes(5));
  EXPECT_FALSE(restored->expired());
  EXPECT_EQ(restored->state.position, 33);
  EXPECT_EQ(restored->last_sequence_number, 3);
  ASSERT_EQ(restored->recent_results.size(), 1u);
  EXPECT_EQ(restored->recent_results[0].request_hash, 0x1234u);
  EXPECT_EQ(restored->recent_results[0].result.generated_tokens(0), 17);

  // Both continue with a prompt chunk and single steps: bit-identical outputs.
  std::vector<at::Tensor> unbroken, resumed;
  unbroken.push_back(*m.Forward(Tokens(20, 5), &session->state, model::OutputKind::kAllLogits));
  resumed.push_back(*m.Forward(Tokens(20, 5), &restored->state, model::OutputKind::kAllLogits));
  for (int t = 0; t < 5; ++t) {
    unbroken.push_back(*m.Forward(Tokens(1, t), &session->state, model::OutputKind::kAllLogits));
    resumed.push_back(*m.Forward(Tokens(1, t), &restored->state, model::OutputKind::kAllLogits));
  }
  EXPECT_TRUE(at::equal(at::cat(unbroken, 1), at::cat(resumed, 1))) << GetParam();
  EXPECT_EQ(restored->state.position, 58);
}

INSTANTIATE_TEST_SUITE_P(StreamingModels, SnapshotRoundTripTest,
                         ::testing::Values("standard", "linear", "mamba", "hybrid"));

// A session whose KV caches share their prefix with another state (a prefix-cache hit, a fork:
// Model::CloneSharingPrefix) writes the same snapshot as one holding all of its entries.
TEST(SessionSnapshotTest, ASharingStateWritesTheSnapshotOfAFlatOne) {
  auto source = NewSession("hybrid");
  const model::Model& m = *source->model();
  ASSERT_TRUE(m.Forward(Tokens(40, 1), &source->state, model::OutputKind::kLastLogits).ok());
  auto sharing = NewSession("hybrid");
  sharing->state = *m.CloneSharingPrefix(source->state, 8);
  ASSERT_TRUE(m.Forward(Tokens(6, 2), &sharing->state, model::OutputKind::kLastLogits).ok());
  ASSERT_FALSE(sharing->state.layers[3].shared.empty());
  auto flat = NewSession("hybrid");
  flat->state = m.CompactClone(sharing->state);
  ASSERT_TRUE(flat->state.layers[3].shared.empty());
  absl::StatusOr<SessionSnapshot> restored =
      DecodeSessionSnapshot(EncodeSessionSnapshot(*sharing), Repository());
  absl::StatusOr<SessionSnapshot> restored_flat =
      DecodeSessionSnapshot(EncodeSessionSnapshot(*flat), Repository());
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(restored_flat.ok()) << restored_flat.status();
  EXPECT_EQ(restored->state.position, 46);
  for (size_t i = 0; i < restored->state.layers.size(); ++i) {
    const auto& a = restored->state.layers[i].tensors;
    const auto& b = restored_flat->state.layers[i].tensors;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(restored->state.layers[i].shared.empty());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(at::equal(a[k], b[k])) << i << " " << k;
  }
  EXPECT_TRUE(at::equal(*m.Forward(Tokens(3, 9), &restored->state, model::OutputKind::kLastLogits),
                        *m.Forward(Tokens(3, 9), &sharing->state, model::OutputKind::kLastLogits)));
}

TEST(SessionSnapshotTest, RefusesDamagedForeignAndFutureSnapshotsWithTheirCodes) {
  auto session = NewSession("mamba");
  ASSERT_TRUE(session->model()
                  ->Forward(Tokens(9, 2), &session->state, model::OutputKind::kLastLogits)
                  .ok());
  const std::string bytes = EncodeSessionSnapshot(*session);
  auto code = [](std::string_view b) {
    return DecodeSessionSnapshot(b, Repository()).status().code();
  };
  auto message = [](std::string_view b) {
    return std::string(DecodeSessionSnapshot(b, Repository()).status().message());
  };
  // Not a snapshot; truncated anywhere (header or payload); corrupt anywhere.
  EXPECT_EQ(code("hello"), absl::StatusCode::kDataLoss);
  EXPECT_NE(message("hello").find("not an attnserve session snapshot"), std::string::npos);
  for (size_t cut : {size_t{13}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_EQ(code(bytes.substr(0, cut)), absl::StatusCode::kDataLoss) << cut;
    EXPECT_NE(message(bytes.substr(0, cut)).find("truncated"), std::string::npos)
        << cut << ": " << message(bytes.substr(0, cut));
  }
  for (size_t at : {size_t{20}, size_t{200}, bytes.size() / 2, bytes.size() - 3}) {
    std::string corrupt = bytes;
    corrupt[at] ^= 0x10;
    EXPECT_EQ(code(corrupt), absl::StatusCode::kDataLoss) << at;
  }
  EXPECT_EQ(code(bytes + "x"), absl::StatusCode::kDataLoss);
  // Another format version.
  std::string future = bytes;
  const uint32_t version = kSessionSnapshotVersion + 1;
  std::memcpy(future.data() + 4, &version, 4);
  Reseal(&future);
  EXPECT_EQ(code(future), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(message(future).find("version 2"), std::string::npos) << message(future);
  // A model that is not served at all (another model's name with other weights:
  // SameNameOtherWeightsIsAnotherModel).
  auto hybrid = NewSession("hybrid");
  std::string unknown = EncodeSessionSnapshot(*hybrid);
  std::memcpy(unknown.data() + unknown.find("hybrid"), "zzzzzz", 6);
  Reseal(&unknown);
  EXPECT_EQ(code(unknown), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(message(unknown).find("does not serve"), std::string::npos) << message(unknown);
}

TEST(SessionSnapshotTest, SameNameOtherWeightsIsAnotherModel) {
  model::ModelOptions bf16;
  bf16.precision = model::WeightPrecision::kBfloat16;
  auto other = model::ModelRepository::BuildDefault(bf16);
  ASSERT_TRUE(other.ok());
  auto session = NewSession("linear");
  const std::string bytes = EncodeSessionSnapshot(*session);
  absl::StatusOr<SessionSnapshot> refused = DecodeSessionSnapshot(bytes, **other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("other architecture or weights"), std::string::npos)
      << refused.status();
}

TEST(SessionSnapshotTest, IdleTimeCarriesOverSoASessionExpiresWhereverItIs) {
  auto session = NewSession("linear");
  const std::string bytes = EncodeSessionSnapshot(*session);
  auto later = DecodeSessionSnapshot(bytes, Repository(), absl::Now() + absl::Minutes(4));
  ASSERT_TRUE(later.ok());
  EXPECT_FALSE(later->expired());
  EXPECT_GE(later->idle, absl::Minutes(4));
  auto too_late = DecodeSessionSnapshot(bytes, Repository(), absl::Now() + absl::Minutes(6));
  ASSERT_TRUE(too_late.ok());
  EXPECT_TRUE(too_late->expired());
}

}  // namespace
}  // namespace attnserve::server
