// The scheduler queue's shares between clients (server/scheduler/queue_shares.h).
#include "server/scheduler/queue_shares.h"

#include <gtest/gtest.h>

#include <string>

namespace attnserve::server::scheduler {
namespace {

TEST(QueueSharesTest, ANewcomerIsAdmittedWhileOneClientHoldsMoreThanItsShare) {
  QueueShares shares(/*capacity=*/8, /*per_client=*/100);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(shares.Admit("hog").ok());
    shares.Add("hog");
  }
  // Full: the hog is refused, a newcomer (share 8 / 2 = 4) is admitted up to its share.
  EXPECT_EQ(shares.Admit("hog").code(), absl::StatusCode::kResourceExhausted);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(shares.Admit("b").ok()) << i;
    shares.Add("b");
  }
  EXPECT_EQ(shares.Admit("b").code(), absl::StatusCode::kResourceExhausted) << "b is at 4 of 4";
  // A third client: share 8 / 3 = 2.
  ASSERT_TRUE(shares.Admit("c").ok());
  shares.Add("c");
  ASSERT_TRUE(shares.Admit("c").ok());
  shares.Add("c");
  EXPECT_FALSE(shares.Admit("c").ok());
  EXPECT_EQ(shares.total(), 14);
  EXPECT_LT(shares.total(), 2 * 8);
  // The hog drains below the capacity: everyone is admitted again.
  for (int i = 0; i < 7; ++i) shares.Remove("hog");
  EXPECT_EQ(shares.held_by("hog"), 1);
  EXPECT_TRUE(shares.Admit("hog").ok());
  EXPECT_TRUE(shares.Admit("b").ok());
}

TEST(QueueSharesTest, AFullQueueRefusesThoseAtTheirShare) {
  QueueShares shares(4, 100);
  for (const char* c : {"a", "a", "b", "b"}) shares.Add(c);
  EXPECT_FALSE(shares.Admit("a").ok()) << "share 4 / 2 = 2: a holds 2";
  ASSERT_TRUE(shares.Admit("new").ok()) << "share 4 / 3 = 1, and a and b hold 2 each";
  shares.Add("new");
  EXPECT_FALSE(shares.Admit("new").ok()) << "new holds its share";
  EXPECT_FALSE(shares.Admit("b").ok());
}

TEST(QueueSharesTest, ThePerClientQuotaBindsBeforeTheQueueIsFull) {
  QueueShares shares(100, 3);
  for (int i = 0; i < 3; ++i) shares.Add("a");
  const absl::Status refused = shares.Admit("a");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--max_queue_per_client"), std::string::npos);
  EXPECT_TRUE(shares.Admit("b").ok());
  shares.Remove("a");
  EXPECT_TRUE(shares.Admit("a").ok());
  shares.Remove("nobody");  // no effect
  EXPECT_EQ(shares.total(), 2);
}

TEST(QueueSharesTest, TheQueueNeverHoldsTwiceItsCapacity) {
  QueueShares shares(10, 1000);
  for (int i = 0; i < 10; ++i) shares.Add("hog");
  int admitted = 0;
  for (int c = 0; c < 100; ++c) {
    const std::string client = "client" + std::to_string(c);
    while (shares.Admit(client).ok()) {
      shares.Add(client);
      ++admitted;
    }
  }
  EXPECT_GT(admitted, 0);
  EXPECT_LE(shares.total(), 2 * 10);
}

}  // namespace
}  // namespace attnserve::server::scheduler
