// The session stores (server/sessions/): dir: on a temporary folder and redis:// on a real
// redis-server started by the test; and the session table spilling to, checkpointing to and
// restoring from a store.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "server/model/model_repository.h"
#include "server/sessions/dir_session_store.h"
#include "server/sessions/redis_session_store.h"
#include "server/sessions/session_persistence.h"
#include "server/sessions/session_snapshot.h"
#include "server/sessions/session_table.h"
#include "tests/common/redis_server.h"

namespace attnserve::server {
namespace {

namespace fs = std::filesystem;

constexpr char kId[] = "0123456789abcdef0123456789abcdef";
constexpr char kOtherId[] = "fedcba9876543210fedcba9876543210";

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/attnserve_store_XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

// What every store must do, run on each.
void CheckStoreContract(SessionStore& store) {
  EXPECT_EQ(store.Get(kId).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store.Put(kId, "first", absl::Minutes(1)).ok());
  ASSERT_TRUE(store.Put(kId, std::string(3 << 20, 'x'), absl::Minutes(1)).ok());  // replaces
  absl::StatusOr<std::string> got = store.Get(kId);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), size_t{3} << 20);
  ASSERT_TRUE(store.Put(kOtherId, std::string("a\0b", 3), absl::Minutes(1)).ok());
  EXPECT_EQ(*store.Get(kOtherId), std::string("a\0b", 3));  // binary-safe
  EXPECT_TRUE(store.Delete(kId).ok());
  EXPECT_EQ(store.Delete(kId).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Get(kId).status().code(), absl::StatusCode::kNotFound);
  // Ids not of the session format never become a path or a key.
  for (const std::string& bad : {std::string("../../etc/passwd"), std::string(10240, 'a'),
                                 std::string("0123456789ABCDEF0123456789ABCDEF"), std::string()}) {
    EXPECT_EQ(store.Put(bad, "x", absl::Minutes(1)).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store.Get(bad).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store.Delete(bad).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(DirSessionStoreTest, KeepsTheContractWithAtomicFilesOnly) {
  TempDir dir;
  auto store = DirSessionStore::Open(dir.path() + "/sessions", int64_t{64} << 20);
  ASSERT_TRUE(store.ok()) << store.status();
  CheckStoreContract(**store);
  // One file per stored session, no temporary left; nothing outside the folder.
  EXPECT_EQ(dir.Files(), std::vector<std::string>{"sessions"});
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir.path() + "/sessions")) {
    files.push_back(e.path().filename());
  }
  EXPECT_EQ(files, std::vector<std::string>{std::string(kOtherId) + ".snapshot"});
  EXPECT_FALSE(fs::exists("/tmp/etc/passwd.snapshot"));
}

TEST(DirSessionStoreTest, ExpiresSweepsAndBoundsItsSize) {
  TempDir dir;
  { std::ofstream(dir.path() + "/" + kId + ".snapshot.tmp.3") << "left by a crash"; }
  auto store = DirSessionStore::Open(dir.path(), 1000);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(dir.Files().empty()) << "the temporary file is swept at open";
  ASSERT_TRUE((*store)->Put(kId, std::string(600, 'a'), absl::Minutes(1)).ok());
  absl::Status full = (*store)->Put(kOtherId, std::string(600, 'b'), absl::Minutes(1));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--session_store_max_bytes=1000"), std::string::npos) << full;
  EXPECT_TRUE((*store)->Put(kId, std::string(900, 'a'), absl::Minutes(1)).ok()) << "a replacement";
  EXPECT_EQ((*store)->bytes(), 900);
  // An expired snapshot (its file's time is its expiry) is absent, and swept to make room.
  const std::string path = dir.path() + "/" + kId + ".snapshot";
  const struct timespec past[2] = {{0, UTIME_OMIT}, {1, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), past, 0), 0);
  EXPECT_TRUE((*store)->Put(kOtherId, std::string(600, 'b'), absl::Minutes(1)).ok());
  EXPECT_EQ((*store)->Get(kId).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->bytes(), 600);
  // Reopened, it counts what is there.
  auto reopened = DirSessionStore::Open(dir.path(), 1000);
  EXPECT_EQ((*reopened)->bytes(), 600);
  EXPECT_EQ((*reopened)->Get(kOtherId)->size(), 600u);
}

// store.Get(id) on a thread of its own, given `limit` to answer: a Get that blocks fails the
// test instead of hanging it (`unblock` then lets it go on, so the thread can be joined).
absl::StatusOr<std::string> GetWithin(SessionStore& store, const std::string& id,
                                      absl::Duration limit, const std::function<void()>& unblock) {
  absl::StatusOr<std::string> got = absl::UnknownError("no answer");
  absl::Notification answered;
  std::thread getter([&] {
    got = store.Get(id);
    answered.Notify();
  });
  if (!answered.WaitForNotificationWithTimeout(limit)) {
    ADD_FAILURE() << "Get(" << id << ") did not answer within " << limit;
    unblock();
  }
  getter.join();
  return got;
}

TEST(DirSessionStoreTest, RefusesWhatIsNotASnapshotFileAtOnceAsDataLoss) {
  TempDir dir;
  const int64_t limit = 1 << 20;
  auto store = DirSessionStore::Open(dir.path(), int64_t{1} << 30, limit);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put(kOtherId, "a real one", absl::Minutes(1)).ok());
  const std::string path = dir.path() + "/" + kId + ".snapshot";
  // DATA_LOSS whose message has `words`, and then `path` is removed.
  auto refused = [&](const std::string& words) {
    // Opening a FIFO for reading waits for a writer: one that comes lets a Get that regressed
    // go on.
    absl::StatusOr<std::string> got = GetWithin(**store, kId, absl::Seconds(5), [&] {
      ::close(::open(path.c_str(), O_WRONLY | O_NONBLOCK));
    });
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << words << ": " << got.status();
    EXPECT_NE(got.status().message().find(words), std::string::npos) << got.status();
  };
  auto check = [&](const std::string& words) {
    refused(words);
    fs::remove_all(path);
  };
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  // Two at once (as many lookups as a small machine has gRPC threads): neither waits, and the
  // store goes on serving.
  std::thread other([&] { refused("a FIFO"); });
  refused("a FIFO");
  other.join();
  fs::remove(path);
  EXPECT_EQ(*(*store)->Get(kOtherId), "a real one");
  // A symbolic link, even to a real snapshot, is not followed.
  fs::create_symlink(dir.path() + "/" + kOtherId + ".snapshot", path);
  check("a symbolic link");
  fs::create_directory(path);
  check("a folder");
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  check("a socket");
  ::close(sock);
  // A file above --max_snapshot_bytes (200 MB, sparse) is refused unread, naming the limit;
  // and such a snapshot is never written.
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_EQ(::ftruncate(fd, 200 << 20), 0);
    const struct timespec future[2] = {{0, UTIME_OMIT}, {::time(nullptr) + 60, 0}};
    ASSERT_EQ(::futimens(fd, future), 0);  // not expired
    ::close(fd);
  }
  check("above --max_snapshot_bytes=1048576");
  absl::Status too_large = (*store)->Put(kId, std::string(limit + 1, 'x'), absl::Minutes(1));
  EXPECT_EQ(too_large.code(), absl::StatusCode::kResourceExhausted) << too_large;
  EXPECT_NE(too_large.message().find("--max_snapshot_bytes=1048576"), std::string::npos);
  EXPECT_TRUE((*store)->Put(kId, std::string(limit, 'x'), absl::Minutes(1)).ok()) << "the limit";
  EXPECT_EQ((*store)->Get(kId)->size(), static_cast<size_t>(limit));
}

TEST(DirSessionStoreTest, SweepsOnlyItsOwnTemporaryFiles) {
  TempDir dir;
  const std::string id = kId;
  const std::vector<std::string> foreign = {
      "notes.tmp.txt", id + ".snapshot.tmp.", id + ".snapshot.tmp.7.bak",
      id + ".tmp.3",   "0123.snapshot.tmp.3", "x" + id + ".snapshot.tmp.1"};
  for (const std::string& name : foreign) std::ofstream(dir.path() + "/" + name) << "mine";
  std::ofstream(dir.path() + "/" + id + ".snapshot.tmp.12") << "left by a crash";
  std::ofstream(dir.path() + "/" + kOtherId + ".snapshot.tmp.0") << "left by a crash";
  auto store = DirSessionStore::Open(dir.path(), 1000);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::string> expected = foreign;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(dir.Files(), expected);
  EXPECT_EQ((*store)->bytes(), 0);
  // Nor does a Put that makes room remove them.
  ASSERT_TRUE((*store)->Put(kId, std::string(900, 'a'), absl::Minutes(1)).ok());
  EXPECT_EQ((*store)->Put(kOtherId, std::string(900, 'b'), absl::Minutes(1)).code(),
            absl::StatusCode::kResourceExhausted);
  expected.push_back(id + ".snapshot");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(dir.Files(), expected);
}

TEST(RedisSessionStoreTest, KeepsTheContractWithExpiringKeys) {
  if (!testing::RedisServer::Installed()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  ASSERT_NE(redis.port(), 0);
  auto store = RedisSessionStore::Open(redis.address(), absl::Seconds(1));
  ASSERT_TRUE(store.ok()) << store.status();
  CheckStoreContract(**store);
  // Above 4 MiB a snapshot goes in pieces to a temporary key renamed over the real one.
  std::string big(9 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 2654435761u >> 24);
  ASSERT_TRUE((*store)->Put(kId, big, absl::Minutes(1)).ok());
  EXPECT_EQ(*(*store)->Get(kId), big);
  FILE* keys = ::popen(("redis-cli -p " + std::to_string(redis.port()) + " --scan").c_str(), "r");
  std::vector<std::string> listed;
  char line[256];
  while (keys != nullptr && std::fgets(line, sizeof(line), keys) != nullptr) {
    listed.push_back(line);
  }
  if (keys != nullptr) ::pclose(keys);
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, (std::vector<std::string>{"attnserve:session:" + std::string(kId) + "\n",
                                              "attnserve:session:" + std::string(kOtherId) + "\n"}))
      << "no temporary key left";
  ASSERT_TRUE((*store)->Put(kId, "short", absl::Milliseconds(300)).ok());
  EXPECT_TRUE((*store)->Get(kId).ok());
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ((*store)->Get(kId).status().code(), absl::StatusCode::kNotFound) << "Redis expired it";
}

TEST(RedisSessionStoreTest, FailsFastWhileRedisIsDownAndReconnects) {
  if (!testing::RedisServer::Installed()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  auto store = RedisSessionStore::Open(redis.address(), absl::Seconds(1));
  ASSERT_TRUE((*store)->Put(kId, "kept", absl::Minutes(1)).ok());
  redis.Stop();
  const absl::Time start = absl::Now();
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ((*store)->Get(kId).status().code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "20 calls while Redis is down";
  ASSERT_TRUE(redis.Start());
  absl::SleepFor(absl::Milliseconds(1100));  // past the reconnect interval
  EXPECT_TRUE((*store)->Put(kId, "again", absl::Minutes(1)).ok());
  EXPECT_EQ(*(*store)->Get(kId), "again");
}

TEST(RedisSessionStoreTest, AKeyOfAnotherTypeOrTooLargeIsDataLoss) {
  if (!testing::RedisServer::Installed()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  ASSERT_NE(redis.port(), 0);
  const int64_t limit = 1000;
  auto store = RedisSessionStore::Open(redis.address(), absl::Seconds(1), limit);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string cli = "redis-cli -p " + std::to_string(redis.port()) + " ";
  const std::string key = RedisSessionStore::KeyOf(kId);
  for (const std::string& command : {"HSET " + key + " a b", "LPUSH " + key + " a"}) {
    ASSERT_EQ(std::system((cli + "DEL " + key + " >/dev/null").c_str()), 0);
    ASSERT_EQ(std::system((cli + command + " >/dev/null").c_str()), 0);
    absl::StatusOr<std::string> got = (*store)->Get(kId);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << command << ": " << got.status();
    EXPECT_NE(got.status().message().find("WRONGTYPE"), std::string::npos) << got.status();
  }
  EXPECT_TRUE((*store)->Put(kId, "replaces it", absl::Minutes(1)).ok());
  EXPECT_EQ(*(*store)->Get(kId), "replaces it");
  // Above --max_snapshot_bytes: never written, and refused unread.
  absl::Status too_large = (*store)->Put(kId, std::string(limit + 1, 'x'), absl::Minutes(1));
  EXPECT_EQ(too_large.code(), absl::StatusCode::kResourceExhausted) << too_large;
  auto roomy = RedisSessionStore::Open(redis.address(), absl::Seconds(1));
  ASSERT_TRUE((*roomy)->Put(kId, std::string(limit + 1, 'x'), absl::Minutes(1)).ok());
  absl::StatusOr<std::string> got = (*store)->Get(kId);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("above --max_snapshot_bytes=1000"), std::string::npos)
      << got.status();
}

TEST(OpenSessionStoreTest, RefusesUnknownSpecs) {
  for (const std::string spec : {"file:/tmp/x", "redis://nohost", "redis://h:0", "dir:"}) {
    EXPECT_EQ(OpenSessionStore(spec, {}).status().code(), absl::StatusCode::kInvalidArgument)
        << spec;
  }
}

// The table with a store: sessions spill when the budget is full and come back identical;
// checkpoints; SaveChanged; closing removes the stored copy.
class TableWithStoreTest : public ::testing::Test {
 protected:
  static const model::ModelRepository& Repository() {
    static const model::ModelRepository* repository =
        model::ModelRepository::BuildDefault()->release();
    return *repository;
  }
  void Make(int64_t budget_bytes, int checkpoint_every) {
    auto store = DirSessionStore::Open(dir_.path(), int64_t{1} << 30);
    PersistenceOptions options;
    options.checkpoint_every_appends = checkpoint_every;
    persistence_ =
        std::make_unique<SessionPersistence>(*std::move(store), Repository(), options, nullptr);
    SessionLimits limits;
    limits.state_budget_bytes = budget_bytes;
    table_ = std::make_unique<SessionTable>(limits, nullptr, persistence_.get());
  }
  static at::Tensor Tokens(int64_t n, int64_t offset) {
    return (at::arange(n, at::kLong) * 13 + offset).remainder(4096).unsqueeze(0);
  }
  TempDir dir_;
  std::unique_ptr<SessionPersistence> persistence_;
  std::unique_ptr<SessionTable> table_;
};

TEST_F(TableWithStoreTest, SessionsSpillWhenFullAndComeBackIdentical) {
  const model::Model* mamba = Repository().Find("mamba");
  const int64_t one = mamba->StateBytesPerSequence(0);
  Make(/*budget_bytes=*/2 * one, /*checkpoint_every=*/0);
  std::vector<std::string> ids;
  std::vector<at::Tensor> expected;
  for (int i = 0; i < 5; ++i) {  // 5 sessions in a budget of 2
    auto use = table_->Create(mamba, absl::Minutes(5));
    ASSERT_TRUE(use.ok()) << use.status();
    ASSERT_TRUE(mamba->Forward(Tokens(7, i), &(*use)->state, model::OutputKind::kLastLogits).ok());
    (*use)->Publish();
    table_->Applied(**use);
    ids.push_back((*use)->id());
    // What its next token gives, computed on a copy of the state.
    model::ModelState copy;
    copy.position = (*use)->state.position;
    for (const auto& layer : (*use)->state.layers) copy.layers.push_back(layer.Clone());
    expected.push_back(*mamba->Forward(Tokens(1, 99), &copy, model::OutputKind::kLastLogits));
  }
  EXPECT_LE(table_->size(), 2);
  for (int i = 0; i < 5; ++i) {
    auto use = table_->Get(ids[i]);
    ASSERT_TRUE(use.ok()) << i << ": " << use.status();
    EXPECT_EQ((*use)->position(), 7);
    at::Tensor next =
        *mamba->Forward(Tokens(1, 99), &(*use)->state, model::OutputKind::kLastLogits);
    EXPECT_TRUE(at::equal(next, expected[i])) << i;
  }
  EXPECT_LE(table_->size(), 2);
}

TEST_F(TableWithStoreTest, CheckpointsEveryNAppendsAndCloseRemovesTheCopy) {
  Make(int64_t{1} << 30, /*checkpoint_every=*/3);
  const model::Model* linear = Repository().Find("linear");
  auto use = table_->Create(linear, absl::Minutes(5));
  const std::string id = (*use)->id();
  Session& session = **use;
  for (int i = 0; i < 2; ++i) table_->Applied(session);
  persistence_->Flush(absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(dir_.Files().empty()) << "2 appends: no checkpoint yet";
  table_->Applied(session);
  persistence_->Flush(absl::Now() + absl::Seconds(5));
  EXPECT_EQ(dir_.Files(), std::vector<std::string>{id + ".snapshot"});
  EXPECT_TRUE(session.saved());
  table_->Applied(session);
  EXPECT_FALSE(session.saved());
  EXPECT_EQ(table_->SaveChanged(), 1);
  EXPECT_EQ(table_->SaveChanged(), 0) << "nothing changed since";
  EXPECT_TRUE(table_->Close(id).ok());
  persistence_->Flush(absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(dir_.Files().empty());
  EXPECT_EQ(table_->Get(id).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TableWithStoreTest, ClosesAndRestoresASessionThatIsOnlyInTheStore) {
  Make(int64_t{1} << 30, 0);
  const model::Model* linear = Repository().Find("linear");
  std::string id;
  {
    auto use = table_->Create(linear, absl::Minutes(5));
    id = (*use)->id();
  }
  EXPECT_EQ(table_->SaveChanged(), 1);
  persistence_->Flush(absl::Now() + absl::Seconds(5));
  // A second table on the same store (a restarted server).
  SessionTable restarted(SessionLimits{}, nullptr, persistence_.get());
  auto peeked = restarted.Peek(id);
  ASSERT_TRUE(peeked.ok()) << peeked.status();
  EXPECT_EQ((*peeked)->model(), linear);
  EXPECT_TRUE(restarted.Close(id).ok());
  persistence_->Flush(absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(dir_.Files().empty());
  SessionTable again(SessionLimits{}, nullptr, persistence_.get());
  EXPECT_EQ(again.Close(id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(again.Get("../../etc/passwd").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnserve::server

namespace attnserve::server {
namespace {

TEST(SessionPersistenceTest, AFullQueueDropsASpillButTheDrainWaitsForRoom) {
  TempDir dir;
  // A store whose writes take a while, so that the queue fills.
  class SlowStore final : public SessionStore {
   public:
    explicit SlowStore(std::unique_ptr<SessionStore> inner) : inner_(std::move(inner)) {}
    absl::Status Put(const std::string& id, std::string_view s, absl::Duration ttl) override {
      absl::SleepFor(absl::Milliseconds(200));
      return inner_->Put(id, s, ttl);
    }
    absl::StatusOr<std::string> Get(const std::string& id) override { return inner_->Get(id); }
    absl::Status Delete(const std::string& id) override { return inner_->Delete(id); }
    std::string Describe() const override { return "slow " + inner_->Describe(); }

   private:
    std::unique_ptr<SessionStore> inner_;
  };
  auto repository = model::ModelRepository::BuildDefault();
  const model::Model* linear = (*repository)->Find("linear");
  auto inner = DirSessionStore::Open(dir.path(), int64_t{1} << 30);
  PersistenceOptions options;
  Session probe("00000000000000000000000000000000", linear, absl::Minutes(1), *linear->NewState());
  options.max_queued_bytes = static_cast<int64_t>(EncodeSessionSnapshot(probe).size()) + 10;
  SessionPersistence persistence(std::make_unique<SlowStore>(*std::move(inner)), **repository,
                                 options, nullptr);
  std::vector<std::shared_ptr<Session>> sessions;
  for (const char* id : {kId, kOtherId, "11111111111111111111111111111111"}) {
    sessions.push_back(
        std::make_shared<Session>(id, linear, absl::Minutes(1), *linear->NewState()));
  }
  EXPECT_TRUE(persistence.Save(*sessions[0]));
  absl::SleepFor(absl::Milliseconds(50));  // the writer takes it; the queue still holds it
  EXPECT_FALSE(persistence.Save(*sessions[1])) << "no waiting: dropped";
  EXPECT_FALSE(sessions[1]->saved());
  EXPECT_TRUE(persistence.Save(*sessions[1], absl::Now() + absl::Seconds(5)));
  EXPECT_TRUE(persistence.Save(*sessions[2], absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(persistence.Flush(absl::Now() + absl::Seconds(5)), 0);
  EXPECT_EQ(dir.Files().size(), 3u);
  // Queued snapshots are visible to Load at once.
  auto loaded = persistence.Load(kOtherId);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model, linear);
}

}  // namespace
}  // namespace attnserve::server

namespace attnserve::server {
namespace {

// A store whose writes fail until it is told otherwise (Redis down, a full disk).
class FlakyStore final : public SessionStore {
 public:
  explicit FlakyStore(std::unique_ptr<SessionStore> inner) : inner_(std::move(inner)) {}
  absl::Status Put(const std::string& id, std::string_view s, absl::Duration ttl) override {
    if (failing.load()) return absl::UnavailableError("down");
    return inner_->Put(id, s, ttl);
  }
  absl::StatusOr<std::string> Get(const std::string& id) override {
    if (failing.load()) return absl::UnavailableError("down");
    return inner_->Get(id);
  }
  absl::Status Delete(const std::string& id) override {
    if (failing.load()) return absl::UnavailableError("down");
    return inner_->Delete(id);
  }
  std::string Describe() const override { return "flaky"; }
  std::atomic<bool> failing{true};

 private:
  std::unique_ptr<SessionStore> inner_;
};

TEST(SessionPersistenceTest, ASpillTheStoreRefusesLivesOnInTheQueueAndIsWrittenLater) {
  TempDir dir;
  auto repository = model::ModelRepository::BuildDefault();
  const model::Model* mamba = (*repository)->Find("mamba");
  auto flaky = std::make_unique<FlakyStore>(*DirSessionStore::Open(dir.path(), int64_t{1} << 30));
  FlakyStore* store = flaky.get();
  SessionPersistence persistence(std::move(flaky), **repository, {}, nullptr);
  SessionLimits limits;
  limits.state_budget_bytes = mamba->StateBytesPerSequence(0) + 100;  // one session
  SessionTable table(limits, nullptr, &persistence);
  std::string first;
  {
    auto use = table.Create(mamba, absl::Minutes(5));
    first = (*use)->id();
    ASSERT_TRUE(mamba
                    ->Forward(at::arange(5, at::kLong).unsqueeze(0), &(*use)->state,
                              model::OutputKind::kLastLogits)
                    .ok());
    (*use)->Publish();
  }
  ASSERT_TRUE(table.Create(mamba, absl::Minutes(5)).ok()) << "the first spills";
  EXPECT_EQ(persistence.Flush(absl::Now() + absl::Milliseconds(300)), 1) << "its write failed";
  EXPECT_TRUE(dir.Files().empty());
  // Still there, from the queue, at its position (and the other one spills in its place).
  {
    auto back = table.Peek(first);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ((*back)->position(), 5);
  }
  store->failing.store(false);
  EXPECT_EQ(persistence.Flush(absl::Now() + absl::Seconds(5)), 0) << "written on a retry";
  EXPECT_EQ(dir.Files(), std::vector<std::string>{first + ".snapshot"});
}

TEST(SessionPersistenceTest, TheDrainCountsSessionsNotWriteAttempts) {
  TempDir dir;
  auto repository = model::ModelRepository::BuildDefault();
  const model::Model* linear = (*repository)->Find("linear");
  auto flaky = std::make_unique<FlakyStore>(*DirSessionStore::Open(dir.path(), int64_t{1} << 30));
  FlakyStore* store = flaky.get();
  PersistenceOptions options;
  options.checkpoint_every_appends = 1;
  SessionPersistence persistence(std::move(flaky), **repository, options, nullptr);
  SessionTable table(SessionLimits{}, nullptr, &persistence);
  auto fresh = table.Create(linear, absl::Minutes(5));
  auto checkpointed = table.Create(linear, absl::Minutes(5));
  table.Applied(**checkpointed);  // its checkpoint is queued, and fails
  EXPECT_TRUE((*checkpointed)->saved()) << "queued";
  // Each write is tried 3 times (0, 0.5 s, 1.5 s) before the deadline: 2 sessions all the same.
  DrainSaveCounts counts = table.SaveAtDrain(absl::Now() + absl::Milliseconds(1800));
  EXPECT_EQ(counts.changed, 2);
  EXPECT_EQ(counts.saved, 0);
  EXPECT_EQ(counts.failed, 2);
  EXPECT_EQ(counts.unwritten, 0);
  store->failing.store(false);
  counts = table.SaveAtDrain(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(counts.changed, 2) << "still queued: the store lacks them";
  EXPECT_EQ(counts.saved, 2);
  EXPECT_EQ(counts.failed + counts.unwritten, 0);
  EXPECT_EQ(dir.Files().size(), 2u);
  counts = table.SaveAtDrain(absl::Now() + absl::Seconds(1));
  EXPECT_EQ(counts.changed, 0) << "nothing changed since";
}

TEST(SessionPersistenceTest, AClosedSessionIsNeverSavedAndImportsCannotTakeOverIds) {
  TempDir dir;
  auto repository = model::ModelRepository::BuildDefault();
  const model::Model* linear = (*repository)->Find("linear");
  PersistenceOptions options;
  options.checkpoint_every_appends = 1;
  SessionPersistence persistence(*DirSessionStore::Open(dir.path(), int64_t{1} << 30), **repository,
                                 options, nullptr);
  SessionTable table(SessionLimits{}, nullptr, &persistence);
  const Caller alice{"alice", false, ""}, bob{"bob", false, ""};
  auto use = table.Create(linear, absl::Minutes(5), "alice");
  Session& session = **use;
  const std::string id = session.id();
  // Bob's own session, relabelled with alice's id (a snapshot is checksummed, not signed).
  auto bobs = table.Create(linear, absl::Minutes(5), "bob");
  std::string forged = EncodeSessionSnapshot(**bobs);
  forged.replace(forged.find((*bobs)->id()), id.size(), id);
  auto resealed = [&] {
    const uint64_t sum = XXH3_64bits(forged.data(), forged.size() - 8);
    std::memcpy(forged.data() + forged.size() - 8, &sum, 8);
    return DecodeSessionSnapshot(forged, **repository);
  }();
  ASSERT_TRUE(resealed.ok()) << resealed.status();
  EXPECT_EQ(table.Import(*std::move(resealed), bob).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.Get(id, alice).ok(), true) << "alice's session is untouched";
  // Closed while a job still holds it: the job's checkpoint must not bring it back.
  EXPECT_TRUE(table.Close(id, alice).ok());
  table.Applied(session);
  EXPECT_EQ(persistence.Flush(absl::Now() + absl::Seconds(5)), 0);
  EXPECT_EQ(table.Get(id, alice).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dir.Files(), std::vector<std::string>{})
      << "bob's session was never changed, alice's is gone";
}

}  // namespace
}  // namespace attnserve::server
