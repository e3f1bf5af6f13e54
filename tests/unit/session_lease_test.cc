// Leases with fencing (server/sessions/session_lease.h) on a real redis-server started by the
// test: two stores with their own tokens stand for two replicas; then two session tables.
#include "server/sessions/session_lease.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "server/model/model_repository.h"
#include "server/sessions/redis_session_store.h"
#include "server/sessions/session_persistence.h"
#include "server/sessions/session_table.h"
#include "tests/common/redis_server.h"

namespace attnserve::server {
namespace {

constexpr char kId[] = "0123456789abcdef0123456789abcdef";
constexpr char kOtherId[] = "fedcba9876543210fedcba9876543210";
using Acquired = SessionLeases::Acquired;

std::unique_ptr<RedisSessionStore> Store(const testing::RedisServer& redis, absl::Duration lease,
                                         const std::string& token) {
  auto store = RedisSessionStore::Open(redis.address(), absl::Seconds(1), kDefaultMaxSnapshotBytes,
                                       lease, token);
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

// What redis-cli says to `command` on `redis` (the test's view of the keys).
std::string RedisCli(const testing::RedisServer& redis, const std::string& command) {
  const std::string line = "redis-cli -p " + std::to_string(redis.port()) + " " + command + " 2>&1";
  std::string out;
  if (FILE* pipe = ::popen(line.c_str(), "r")) {
    char buffer[256];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
    ::pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

TEST(RedisSessionLeasesTest, OneHolderAtATimeAndEveryWriteFencedByItsToken) {
  if (!testing::RedisServer::Installed()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  ASSERT_GT(redis.port(), 0);
  const absl::Duration lease = absl::Milliseconds(800);
  auto a = Store(redis, lease, "aaaa@replica-a:1");
  auto b = Store(redis, lease, "bbbb@replica-b:2");
  ASSERT_NE(a->leases(), nullptr);

  ASSERT_EQ(*a->Acquire(kId), Acquired::kTaken);
  ASSERT_EQ(*a->Acquire(kId), Acquired::kOwn);
  absl::StatusOr<Acquired> refused = b->Acquire(kId);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(LeaseOwnerOf(refused.status()).value_or("none"), "replica-a:1");
  ASSERT_TRUE(a->Put(kId, "one", absl::Minutes(1)).ok());
  absl::Status stale = b->Put(kId, "b's", absl::Minutes(1));
  EXPECT_TRUE(IsLeaseLost(stale)) << stale;
  EXPECT_EQ(LeaseOwnerOf(stale).value_or("none"), "replica-a:1");
  EXPECT_TRUE(IsLeaseLost(b->Delete(kId)));
  EXPECT_EQ(*b->Get(kId), "one");  // reads are not fenced

  // A pauses past its lease; B takes the session over and writes; A's write when it wakes is
  // refused, whether small or in pieces, and leaves nothing behind.
  absl::SleepFor(lease + absl::Milliseconds(100));
  ASSERT_EQ(*b->Acquire(kId), Acquired::kTaken);
  ASSERT_TRUE(b->Put(kId, "two", absl::Minutes(1)).ok());
  stale = a->Put(kId, "stale", absl::Minutes(1));
  EXPECT_TRUE(IsLeaseLost(stale)) << stale;
  EXPECT_EQ(LeaseOwnerOf(stale).value_or("none"), "replica-b:2");
  const std::string large(size_t{9} << 20, 'x');
  EXPECT_TRUE(IsLeaseLost(a->Put(kId, large, absl::Minutes(1))));
  EXPECT_EQ(*b->Get(kId), "two");
  EXPECT_EQ(RedisCli(redis, "--scan --pattern 'attnserve:session:*:writing:*'"), "");
  // B renews (kOwn, or kResumed if the large write outlasted the lease: still B's).
  ASSERT_NE(*b->Acquire(kId), Acquired::kTaken);
  absl::StatusOr<std::vector<bool>> renewed = a->Renew({kId});
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE((*renewed)[0]);  // lost: A's renewal does not take it back
  EXPECT_EQ(LeaseOwnerOf(a->Acquire(kId).status()).value_or("none"), "replica-b:2");
  ASSERT_TRUE(b->Put(kId, large, absl::Minutes(1)).ok());
  EXPECT_EQ(b->Get(kId)->size(), large.size());

  // Lapsed with nobody taking it: its last holder's write and renewal take it again.
  absl::SleepFor(lease + absl::Milliseconds(100));
  ASSERT_TRUE(b->Put(kId, "three", absl::Minutes(1)).ok());
  EXPECT_EQ(LeaseOwnerOf(a->Acquire(kId).status()).value_or("none"), "replica-b:2");
  absl::SleepFor(lease + absl::Milliseconds(100));
  renewed = b->Renew({kId});
  ASSERT_TRUE(renewed.ok());
  EXPECT_FALSE((*renewed)[0]);
  EXPECT_EQ(LeaseOwnerOf(a->Acquire(kId).status()).value_or("none"), "replica-b:2");

  // Released: the next holder takes it at once; its last holder resumes it.
  ASSERT_TRUE(b->Release(kId).ok());
  ASSERT_EQ(*a->Acquire(kId), Acquired::kTaken);
  ASSERT_TRUE(a->Release(kId).ok());
  ASSERT_EQ(*a->Acquire(kId), Acquired::kResumed);
  ASSERT_TRUE(b->Release(kId).ok());  // not B's: nothing happens
  EXPECT_EQ(LeaseOwnerOf(b->Acquire(kId).status()).value_or("none"), "replica-a:1");

  // One renewal for many sessions says which are lost.
  ASSERT_EQ(*b->Acquire(kOtherId), Acquired::kTaken);
  renewed = b->Renew({kId, kOtherId});
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(*renewed, (std::vector<bool>{true, false}));

  // Deleting (close, expiry) removes the snapshot, the lease and its holder.
  ASSERT_TRUE(a->Delete(kId).ok());
  EXPECT_EQ(a->Get(kId).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(
      RedisCli(redis, std::string("EXISTS attnserve:lease:") + kId + " attnserve:holder:" + kId),
      "0");
  EXPECT_EQ(*b->Acquire(kId), Acquired::kTaken);
}

// Two session tables on one Redis, as two replicas: a session is served by its lease holder
// only; one whose lease another took is dropped at its next write, and the store keeps the
// newer state.
class TablesWithLeasesTest : public ::testing::Test {
 protected:
  struct Replica {
    std::unique_ptr<SessionPersistence> persistence;
    std::unique_ptr<SessionTable> table;
  };
  static const model::ModelRepository& Repository() {
    static const model::ModelRepository* repository =
        model::ModelRepository::BuildDefault()->release();
    return *repository;
  }
  Replica Make(const std::string& token) {
    PersistenceOptions options;
    options.checkpoint_every_appends = 1;
    Replica r;
    r.persistence = std::make_unique<SessionPersistence>(Store(redis_, absl::Seconds(10), token),
                                                         Repository(), options, nullptr);
    r.table = std::make_unique<SessionTable>(SessionLimits{}, nullptr, r.persistence.get());
    return r;
  }
  testing::RedisServer redis_;
};

TEST_F(TablesWithLeasesTest, OnlyTheHolderServesAndAStaleCopyIsDroppedAtItsWrite) {
  if (!testing::RedisServer::Installed()) GTEST_SKIP() << "redis-server is not installed";
  ASSERT_GT(redis_.port(), 0);
  Replica a = Make("aaaa@10.0.0.1:50051");
  Replica b = Make("bbbb@10.0.0.2:50051");
  const model::Model* mamba = Repository().Find("mamba");
  absl::StatusOr<SessionUse> created = a.table->Create(mamba, absl::ZeroDuration());
  ASSERT_TRUE(created.ok()) << created.status();
  SessionUse session = *std::move(created);
  const std::string id = session->id();
  session->last_sequence_number = 1;
  a.table->Applied(*session);  // a checkpoint, fenced by A's lease
  a.persistence->Flush(absl::Now() + absl::Seconds(10));
  absl::StatusOr<SessionUse> elsewhere = b.table->Get(id);
  EXPECT_EQ(elsewhere.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(LeaseOwnerOf(elsewhere.status()).value_or("none"), "10.0.0.1:50051");

  // A stalls past its lease and B's token takes it (one script, so that A's renewal cannot
  // come between the expiry and the takeover); B restores the stored copy and moves it on.
  ASSERT_EQ(RedisCli(redis_,
                     "EVAL \"redis.call('SET', KEYS[1], ARGV[1]) redis.call('SET', "
                     "KEYS[2], ARGV[1]) return 1\" 2 attnserve:lease:" +
                         id + " attnserve:holder:" + id + " bbbb@10.0.0.2:50051"),
            "1");
  absl::StatusOr<SessionUse> taken = b.table->Get(id);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ((*taken)->last_sequence_number, 1);
  (*taken)->last_sequence_number = 2;
  b.table->Applied(**taken);
  b.persistence->Flush(absl::Now() + absl::Seconds(10));

  // A wakes and writes: refused; A drops its copy and points at B.
  session->last_sequence_number = 7;
  a.table->Applied(*session);
  a.persistence->Flush(absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(session->moved());
  EXPECT_TRUE(session->closed());
  EXPECT_EQ(a.table->size(), 0);
  absl::Status confirmed = a.table->ConfirmLease(*session);
  EXPECT_EQ(confirmed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(LeaseOwnerOf(confirmed).value_or("none"), "10.0.0.2:50051");
  absl::StatusOr<SessionUse> again = a.table->Get(id);
  EXPECT_EQ(LeaseOwnerOf(again.status()).value_or("none"), "10.0.0.2:50051");
  absl::StatusOr<SessionSnapshot> stored = b.persistence->Load(id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->last_sequence_number, 2);  // B's, not the stale 7

  // Closing on B removes the copy and the lease; A can no longer find it.
  ASSERT_TRUE(b.table->Close(id).ok());
  b.persistence->Flush(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(a.table->Get(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RedisCli(redis_, "EXISTS attnserve:lease:" + id + " attnserve:holder:" + id), "0");
}

TEST_F(TablesWithLeasesTest, ASpillReleasesItsLeaseOnceWrittenAndTheDrainReleasesTheRest) {
  if (!testing::RedisServer::Installed()) GTEST_SKIP() << "redis-server is not installed";
  ASSERT_GT(redis_.port(), 0);
  Replica a = Make("aaaa@10.0.0.1:50051");
  Replica b = Make("bbbb@10.0.0.2:50051");
  const model::Model* mamba = Repository().Find("mamba");
  std::string kept;
  {
    absl::StatusOr<SessionUse> s = a.table->Create(mamba, absl::ZeroDuration());
    ASSERT_TRUE(s.ok()) << s.status();
    kept = (*s)->id();
  }
  EXPECT_EQ(a.persistence->leases_held(), 1);
  const DrainSaveCounts drained = a.table->SaveAtDrain(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(drained.saved, 1);
  EXPECT_EQ(drained.leases_released, 1);
  EXPECT_EQ(a.persistence->leases_held(), 0);
  // B takes it at once, without waiting for A's lease to expire.
  absl::StatusOr<SessionUse> moved = b.table->Get(kept);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(b.persistence->leases_held(), 1);
}

}  // namespace
}  // namespace attnserve::server
