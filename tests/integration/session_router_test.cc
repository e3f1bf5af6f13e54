// Session affinity over several instances: each server returns its identity with its sessions
// and names itself in NOT_FOUND, and client::SessionRouter, over two in-process servers on
// loopback ("127.0.0.1:pa,127.0.0.1:pb"), opens new sessions round-robin, finds a session it
// has never seen on the instance that holds it, and says clearly when a session is nowhere
// or its instance is gone.
#include "client/common/session_router.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/test_server.h"

namespace attnserve::server::testing {
namespace {

using client::SessionRouter;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TestServerOptions Named(const std::string& name) {
  TestServerOptions options;
  options.instance_name = name;
  return options;
}

SessionRouter::Options FirstEndpoint(int first) {
  SessionRouter::Options options;
  options.first_endpoint = first;
  options.lookup_timeout_s = 10;
  return options;
}

std::unique_ptr<SessionRouter> MakeRouter(const std::string& target,
                                          SessionRouter::Options options) {
  absl::StatusOr<std::unique_ptr<SessionRouter>> router = SessionRouter::Create(target, options);
  EXPECT_TRUE(router.ok()) << router.status();
  return router.ok() ? *std::move(router) : nullptr;
}

// A fresh process's router: knows no session.
std::unique_ptr<SessionRouter> MakeRouter(const std::string& target) {
  return MakeRouter(target, FirstEndpoint(0));
}

// Two instances, a_ and b_, a_ the one whose endpoint sorts first (the router sorts its
// endpoints: first_endpoint 0 is a_). The target lists them in the other order.
class TwoInstancesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_name_ = "instance-1";
    b_name_ = "instance-2";
    a_ = std::make_unique<TestServer>(Named(a_name_));
    b_ = std::make_unique<TestServer>(Named(b_name_));
    if (b_->target() < a_->target()) {
      std::swap(a_, b_);
      std::swap(a_name_, b_name_);
    }
    target_ = b_->target() + "," + a_->target();
  }

  std::unique_ptr<TestServer> a_, b_;
  std::string a_name_, b_name_;
  std::string target_;
};

// Opens a new session on `route` with one append of `tokens`, leaves it detached; returns
// the StreamOpened.
v1::StreamOpened OpenSession(const SessionRouter::Route& route, const std::string& model,
                             const std::vector<int64_t>& tokens) {
  StreamClient stream(*route.stub, absl::Seconds(60));
  const v1::StreamOpened opened = stream.Open(OpenRequest(model));
  if (!tokens.empty()) stream.Append(AppendRequest(1, tokens));
  EXPECT_TRUE(stream.Finish().ok());
  return opened;
}

TEST(ServerIdentityTest, ComesBackWithEverySessionAndInNotFound) {
  TestServer server(Named("pod-7"));
  Client& client = server.client();
  const std::string address = server.target();

  std::unique_ptr<StreamClient> stream = client.Stream();
  const v1::StreamOpened opened = stream->Open(OpenRequest("mamba"));
  EXPECT_EQ(opened.server().instance_name(), "pod-7");
  EXPECT_EQ(opened.server().advertise_address(), address);
  stream->Append(AppendRequest(1, RandomTokens(4, 1)));
  ASSERT_TRUE(stream->Finish().ok());
  const std::string id = opened.session_id();
  ASSERT_TRUE(client.WaitDetached(id));

  v1::SessionInfo info;
  ASSERT_TRUE(client.GetSession(id, &info).ok());
  EXPECT_EQ(info.server().instance_name(), "pod-7");
  EXPECT_EQ(info.server().advertise_address(), address);
  std::optional<v1::SessionInfo> listed = client.Listed(id);
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->server().instance_name(), "pod-7");
  EXPECT_EQ(listed->server().advertise_address(), address);
  v1::InferRequest continued = MakeInfer("", RandomTokens(2, 2));
  continued.set_session_id(id);
  v1::InferResponse response;
  ASSERT_TRUE(client.Infer(continued, &response).ok());
  EXPECT_EQ(response.server().instance_name(), "pod-7");
  EXPECT_EQ(response.session_position(), 6);
  ASSERT_TRUE(client.Infer(MakeInfer("linear", RandomTokens(3, 3)), &response).ok());
  EXPECT_EQ(response.server().advertise_address(), address);

  // A session this instance does not hold: NOT_FOUND naming the instance, on every call that
  // names a session.
  const std::string unknown = "00000000000000000000000000000000";
  const auto names_instance =
      AllOf(HasSubstr(unknown), HasSubstr("instance 'pod-7' at " + address));
  grpc::Status status = client.GetSession(unknown, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), names_instance);
  status = client.CloseSession(unknown);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), names_instance);
  continued.set_session_id(unknown);
  status = client.Infer(continued, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), names_instance);
  std::unique_ptr<StreamClient> resume = client.Stream();
  ASSERT_TRUE(resume->Send(ResumeRequest(unknown)));
  EXPECT_FALSE(resume->Receive().has_value());
  status = resume->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), names_instance);
  EXPECT_TRUE(client.CloseSession(id).ok());
}

TEST(ServerIdentityTest, WithoutIdentityNotFoundSaysNoInstance) {
  TestServer server;
  v1::SessionInfo info;
  const grpc::Status status = server.client().GetSession("0000000000000000000000000000beef", &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), Not(HasSubstr("instance")));
  EXPECT_FALSE(info.has_server());
}

TEST_F(TwoInstancesTest, NewSessionsAlternateBetweenInstances) {
  std::unique_ptr<SessionRouter> router = MakeRouter(target_);
  ASSERT_NE(router, nullptr);
  std::map<std::string, int> per_instance;
  std::string previous;
  for (int i = 0; i < 6; ++i) {
    const SessionRouter::Route route = router->ForNewSession();
    const v1::StreamOpened opened = OpenSession(route, "linear", RandomTokens(3, i));
    EXPECT_EQ(opened.server().advertise_address(), route.endpoint);
    EXPECT_EQ(opened.server().instance_name(), i % 2 == 0 ? a_name_ : b_name_);
    EXPECT_NE(opened.server().instance_name(), previous);
    previous = opened.server().instance_name();
    ++per_instance[previous];
    router->Remember(opened.session_id(), opened.server(), route.endpoint);
    // Remembered: found without asking, on the instance that opened it.
    absl::StatusOr<SessionRouter::Route> found = router->ForSession(opened.session_id());
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->endpoint, route.endpoint);
  }
  EXPECT_EQ(per_instance[a_name_], 3);
  EXPECT_EQ(per_instance[b_name_], 3);
  EXPECT_EQ(a_->sessions().size(), 3);
  EXPECT_EQ(b_->sessions().size(), 3);
}

TEST_F(TwoInstancesTest, FreshRouterResumesOnTheHolderWithTheUnbrokenOutputs) {
  const std::vector<std::vector<int64_t>> chunks = {RandomTokens(5, 30), RandomTokens(3, 31),
                                                    RandomTokens(1, 32), RandomTokens(7, 33)};
  for (const std::string model : {"mamba", "standard"}) {
    SCOPED_TRACE(model);
    // Unbroken, on instance a (both serve the same models from the same seeds).
    const std::vector<std::vector<float>> expected =
        a_->client().UnbrokenStreamLogits(model, chunks);

    // Opened on b by one process, which goes away after two appends.
    std::string id;
    {
      std::unique_ptr<SessionRouter> first = MakeRouter(target_, FirstEndpoint(1));
      const SessionRouter::Route route = first->ForNewSession();
      ASSERT_EQ(route.endpoint, b_->target());
      StreamClient stream(*route.stub, absl::Seconds(60));
      const v1::StreamOpened opened = stream.Open(OpenRequest(model));
      EXPECT_EQ(opened.server().instance_name(), b_name_);
      id = opened.session_id();
      for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(
            MaxAbsDifference(
                Floats(stream.Append(AppendRequest(i + 1, chunks[i], v1::OUTPUT_KIND_ALL_LOGITS))
                           .outputs()
                           .tensor()),
                expected[i]),
            0);
      }
      stream.Abandon();
    }
    ASSERT_TRUE(b_->client().WaitDetached(id));

    // Resumed by another process: its router has never heard of the session.
    std::unique_ptr<SessionRouter> second = MakeRouter(target_, FirstEndpoint(0));
    absl::StatusOr<SessionRouter::Route> route = second->ForSession(id);
    ASSERT_TRUE(route.ok()) << route.status();
    EXPECT_EQ(route->endpoint, b_->target());
    StreamClient stream(*route->stub, absl::Seconds(60));
    const v1::StreamOpened opened = stream.Open(ResumeRequest(id, model));
    EXPECT_EQ(opened.server().instance_name(), b_name_);
    EXPECT_EQ(opened.position(), 8);
    EXPECT_EQ(opened.last_sequence_number(), 2);
    for (size_t i = 2; i < chunks.size(); ++i) {
      const v1::AppendResult r =
          stream.Append(AppendRequest(i + 1, chunks[i], v1::OUTPUT_KIND_ALL_LOGITS));
      EXPECT_FALSE(r.replayed());
      EXPECT_EQ(MaxAbsDifference(Floats(r.outputs().tensor()), expected[i]), 0)
          << "append " << i + 1 << " after resuming through the router differs";
    }
    EXPECT_TRUE(stream.Close(id).ok());
    EXPECT_EQ(a_->sessions().size(), 0);
  }
}

TEST_F(TwoInstancesTest, SessionHeldByNoInstanceIsNotFound) {
  std::unique_ptr<SessionRouter> router = MakeRouter(target_);
  absl::StatusOr<SessionRouter::Route> route =
      router->ForSession("0123456789abcdef0123456789abcdef");
  EXPECT_EQ(route.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(route.status().message(), AllOf(HasSubstr("0123456789abcdef0123456789abcdef"),
                                              HasSubstr(a_->target()), HasSubstr(b_->target())));
  EXPECT_EQ(router->ForSession("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TwoInstancesTest, StoppedInstanceLeavesTheOtherWorkingAndIsReportedClearly) {
  std::unique_ptr<SessionRouter> router = MakeRouter(target_);
  std::map<std::string, std::string> ids;  // by instance name
  for (int i = 0; i < 2; ++i) {
    const SessionRouter::Route route = router->ForNewSession();
    const v1::StreamOpened opened = OpenSession(route, "linear", RandomTokens(4, 40 + i));
    router->Remember(opened.session_id(), opened.server(), route.endpoint);
    ids[opened.server().instance_name()] = opened.session_id();
  }
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_TRUE(a_->client().WaitDetached(ids[a_name_]));
  ASSERT_TRUE(b_->client().WaitDetached(ids[b_name_]));
  const std::string b_target = b_->target();
  b_.reset();  // instance b stops, and its sessions with it

  // a's session goes on, through the router that knew it and through a fresh one.
  const auto continue_on_a = [&](SessionRouter& r) {
    absl::StatusOr<SessionRouter::Route> route = r.ForSession(ids[a_name_]);
    ASSERT_TRUE(route.ok()) << route.status();
    EXPECT_EQ(route->endpoint, a_->target());
    v1::InferRequest request = MakeInfer("", RandomTokens(2, 50));
    request.set_session_id(ids[a_name_]);
    v1::InferResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(30)));
    const grpc::Status status = route->stub->Infer(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.server().instance_name(), a_name_);
  };
  continue_on_a(*router);
  continue_on_a(*MakeRouter(target_));

  // b's session: the router that knew it routes to b, and the call says b is unavailable.
  absl::StatusOr<SessionRouter::Route> route = router->ForSession(ids[b_name_]);
  ASSERT_TRUE(route.ok()) << route.status();
  ASSERT_EQ(route->endpoint, b_target);
  StreamClient stream(*route->stub, absl::Seconds(30));
  stream.Send(ResumeRequest(ids[b_name_]));
  const grpc::Status failed = router->CallFailed(*route, ids[b_name_], stream.Finish());
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(failed.error_message(),
              AllOf(HasSubstr(ids[b_name_]), HasSubstr(b_target), HasSubstr("unavailable")));
  // New sessions now keep off b.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(router->ForNewSession().endpoint, a_->target());

  // A fresh router finds it nowhere, and says that b could not be asked.
  std::unique_ptr<SessionRouter> fresh = MakeRouter(target_);
  route = fresh->ForSession(ids[b_name_]);
  EXPECT_EQ(route.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(route.status().message(),
              AllOf(HasSubstr(ids[b_name_]), HasSubstr("not found on " + a_->target()),
                    HasSubstr(b_target), HasSubstr("could not be asked")));
}

// ---------------------------------------------------------------------------------------
// Targets and name resolution (a fake resolver stands for DNS).

TEST(SessionRouterTargetTest, DnsNamesResolveToEveryAddressAndAgainWhenStale) {
  std::vector<std::string> pods = {"10.0.0.2:50051", "10.0.0.1:50051"};
  bool dns_down = false;
  int lookups = 0;
  SessionRouter::Options options = FirstEndpoint(0);
  options.refresh_s = 0;  // resolve before every new session
  options.resolver = [&](const std::string& host,
                         const std::string& port) -> absl::StatusOr<std::vector<std::string>> {
    ++lookups;
    EXPECT_EQ(host, "attnserve-headless.ns.svc");
    EXPECT_EQ(port, "50051");
    if (dns_down) return absl::UnavailableError("DNS is down");
    return pods;
  };
  std::unique_ptr<SessionRouter> router =
      MakeRouter("dns:///attnserve-headless.ns.svc:50051", options);
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->ForNewSession().endpoint, "10.0.0.1:50051");
  EXPECT_EQ(router->ForNewSession().endpoint, "10.0.0.2:50051");
  // The autoscaler adds a pod: the next resolution sees it.
  pods.push_back("10.0.0.3:50051");
  std::vector<std::string> seen;
  for (int i = 0; i < 3; ++i) seen.push_back(router->ForNewSession().endpoint);
  EXPECT_THAT(
      seen, ::testing::UnorderedElementsAre("10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"));
  // A failed lookup keeps the last addresses.
  dns_down = true;
  const int before = lookups;
  EXPECT_THAT(router->ForNewSession().endpoint, HasSubstr("10.0.0."));
  EXPECT_GT(lookups, before);
  EXPECT_EQ(router->AllEndpoints().size(), 3u);
}

TEST(SessionRouterTargetTest, ParsesListsAndRefusesMalformedTargets) {
  EXPECT_TRUE(SessionRouter::IsList("a:1,b:2"));
  EXPECT_FALSE(SessionRouter::IsList("dns:///a:1"));
  std::unique_ptr<SessionRouter> router = MakeRouter(" b:2 , ipv4:10.1.1.1:3,a:1,b:2");
  ASSERT_NE(router, nullptr);
  std::vector<std::string> endpoints;
  for (const auto& route : router->AllEndpoints()) endpoints.push_back(route.endpoint);
  EXPECT_THAT(endpoints, ::testing::ElementsAre("10.1.1.1:3", "a:1", "b:2"));
  for (const std::string bad : {"", "a:1,,b:2", "dns:///name", "dns:///name:port", "dns://x"}) {
    absl::StatusOr<std::unique_ptr<SessionRouter>> made = SessionRouter::Create(bad);
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // Real name resolution (getaddrinfo): localhost is at least 127.0.0.1.
  router = MakeRouter("dns:///localhost:50051");
  ASSERT_NE(router, nullptr);
  endpoints.clear();
  for (const auto& route : router->AllEndpoints()) endpoints.push_back(route.endpoint);
  EXPECT_THAT(endpoints, ::testing::Contains("127.0.0.1:50051"));
  EXPECT_EQ(SessionRouter::Create("dns:///no-such-host.invalid:1").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(SessionRouterTargetTest, RemembersAtMostMaxRememberedSessions) {
  SessionRouter::Options options = FirstEndpoint(0);
  options.max_remembered = 2;
  options.lookup_timeout_s = 5;
  // Nothing listens on port 1: a session the router does not remember is looked up there, and
  // the lookup fails with UNAVAILABLE.
  std::unique_ptr<SessionRouter> router = MakeRouter("127.0.0.1:1", options);
  ASSERT_NE(router, nullptr);
  v1::ServerIdentity server;
  server.set_advertise_address("127.0.0.1:7");
  for (const std::string id : {"s1", "s2", "s3"}) router->Remember(id, server, "127.0.0.1:1");
  const auto where = [&](const std::string& id) {
    absl::StatusOr<SessionRouter::Route> route = router->ForSession(id);
    return route.ok() ? route->endpoint : absl::StatusCodeToString(route.status().code());
  };
  EXPECT_EQ(where("s3"), "127.0.0.1:7");
  EXPECT_EQ(where("s2"), "127.0.0.1:7");
  EXPECT_EQ(where("s1"), "UNAVAILABLE");  // the oldest, forgotten
  router->Forget("s2");
  EXPECT_EQ(where("s2"), "UNAVAILABLE");
  // Without an advertised address, the address dialled.
  router->Remember("s1", v1::ServerIdentity(), "127.0.0.1:9");
  EXPECT_EQ(where("s1"), "127.0.0.1:9");
  EXPECT_EQ(where("s3"), "127.0.0.1:7");
}

}  // namespace
}  // namespace attnserve::server::testing
