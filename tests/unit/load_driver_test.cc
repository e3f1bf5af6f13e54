// attnserve-load's phase driver against an in-process fake AttnServe on loopback: counts add up
// (sent = succeeded + failed, errors by code), streams report time to first result and state
// size, phases stop by themselves, and open loop measures latency from the intended send time
// (coordinated omission), so a server that falls behind shows as latency.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <thread>

#include "attnserve/v1/inference.grpc.pb.h"
#include "client/common/channel.h"
#include "client/load/driver.h"
#include "gtest/gtest.h"

namespace attnserve::load {
namespace {

namespace v1 = attnserve::v1;

// Infer: sleeps `delay`, fails with INVALID_ARGUMENT above 100 tokens. Stream: answers each
// append with its position and a fixed state size, and a close with closed.
class FakeService final : public v1::AttnServe::Service {
 public:
  explicit FakeService(std::chrono::milliseconds delay) : delay_(delay) {}

  grpc::Status Infer(grpc::ServerContext*, const v1::InferRequest* req,
                     v1::InferResponse* resp) override {
    std::this_thread::sleep_for(delay_);
    if (req->tokens_size() > 100) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "too long");
    }
    resp->set_model(req->model());
    return grpc::Status::OK;
  }

  grpc::Status Stream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::StreamResponse, v1::StreamRequest>* stream) override {
    v1::StreamRequest req;
    int64_t position = 0;
    while (stream->Read(&req)) {
      v1::StreamResponse resp;
      if (req.has_open()) {
        if (req.open().model() == "nostream") {
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "cannot stream");
        }
        resp.mutable_opened()->set_model(req.open().model());
        resp.mutable_opened()->set_session_id("s");
      } else if (req.has_append()) {
        position += req.append().tokens_size();
        resp.mutable_result()->set_sequence_number(req.append().sequence_number());
        resp.mutable_result()->set_position(position);
        resp.mutable_result()->set_state_bytes(4096);
        if (req.append().has_generate()) {
          for (int i = 0; i < req.append().generate().max_new_tokens(); ++i) {
            v1::StreamResponse g;
            g.mutable_generated()->set_index(i);
            g.mutable_generated()->set_token(7);
            stream->Write(g);
          }
        }
      } else {
        resp.mutable_closed()->set_session_id("s");
      }
      stream->Write(resp);
    }
    return grpc::Status::OK;
  }

 private:
  std::chrono::milliseconds delay_;
};

class LoadDriverTest : public ::testing::Test {
 protected:
  void StartServer(std::chrono::milliseconds delay) {
    service_ = std::make_unique<FakeService>(delay);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    stubs_.push_back(
        v1::AttnServe::NewStub(client::MakeChannel("127.0.0.1:" + std::to_string(port))));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  static std::vector<RequestPlan> Plans(Mode mode, const std::string& model, int64_t length) {
    RequestPlan plan;
    plan.mode = mode;
    plan.model = model;
    plan.tokens = std::make_shared<std::vector<int64_t>>(length, 1);
    plan.chunk = 16;
    plan.max_new_tokens = 3;
    plan.timeout_s = 10;
    return {plan};
  }

  std::unique_ptr<FakeService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::unique_ptr<v1::AttnServe::Stub>> stubs_;
};

TEST_F(LoadDriverTest, ClosedLoopCountsAddUpAndStopsAtTheRequestCount) {
  StartServer(std::chrono::milliseconds(1));
  PhaseSettings settings;
  settings.load = {false, 4, 0};
  settings.duration_s = 0;  // count-limited only
  settings.requests = 40;
  PhaseStats ok_stats, bad_stats;
  RunPhase(stubs_, Plans(Mode::kUnary, "m", 50), settings, ok_stats);
  RunPhase(stubs_, Plans(Mode::kUnary, "m", 500), settings, bad_stats);
  const PhaseTotals ok = ok_stats.Snapshot();
  const PhaseTotals bad = bad_stats.Snapshot();
  EXPECT_EQ(ok.sent, 40u);
  EXPECT_EQ(ok.succeeded, 40u);
  EXPECT_EQ(ok.tokens_in, 40 * 50);
  EXPECT_EQ(ok.served_by.at("m"), 40u);
  EXPECT_EQ(bad.sent, 40u);
  EXPECT_EQ(bad.failed, 40u);
  EXPECT_EQ(bad.errors.at("INVALID_ARGUMENT"), 40u);
  EXPECT_EQ(bad.latency_ns.count(), 0u);  // failures are left out of the latency figures
}

TEST_F(LoadDriverTest, ClosedLoopStopsAfterItsDuration) {
  StartServer(std::chrono::milliseconds(5));
  PhaseSettings settings;
  settings.load = {false, 2, 0};
  settings.warmup_s = 0.2;
  settings.duration_s = 0.5;
  PhaseStats stats;
  const auto start = std::chrono::steady_clock::now();
  const PhaseRun run = RunPhase(stubs_, Plans(Mode::kUnary, "m", 10), settings, stats);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(elapsed, 2.0);
  EXPECT_GT(run.window_s, 0.4);
  const PhaseTotals t = stats.Snapshot();
  EXPECT_EQ(t.sent, t.succeeded + t.failed);
  // At most 2 in flight for ~0.5 s at >= 5 ms each, warmup requests not counted.
  EXPECT_GT(t.sent, 10u);
  EXPECT_LT(t.sent, 2 * 500 / 5 + 3);
}

TEST_F(LoadDriverTest, StreamsReportFirstResultStateAndErrors) {
  StartServer(std::chrono::milliseconds(0));
  PhaseSettings settings;
  settings.load = {false, 2, 0};
  settings.duration_s = 0;
  settings.requests = 10;
  PhaseStats stream_stats, gen_stats, bad_stats;
  RunPhase(stubs_, Plans(Mode::kStream, "m", 100), settings, stream_stats);
  RunPhase(stubs_, Plans(Mode::kGenerate, "m", 20), settings, gen_stats);
  RunPhase(stubs_, Plans(Mode::kStream, "nostream", 100), settings, bad_stats);
  const PhaseTotals s = stream_stats.Snapshot();
  EXPECT_EQ(s.succeeded, 10u);
  EXPECT_EQ(s.tokens_in, 10 * 100);  // 7 appends (6 x 16 + 4) acknowledged per stream
  EXPECT_EQ(s.first_result_ns.count(), 10u);
  EXPECT_EQ(s.state_bytes.count(), 10u);
  EXPECT_EQ(s.state_bytes.max(), 4096u);
  EXPECT_LE(s.first_result_ns.max(), s.latency_ns.max());
  const PhaseTotals g = gen_stats.Snapshot();
  EXPECT_EQ(g.succeeded, 10u);
  EXPECT_EQ(g.tokens_in, 10 * 20);
  EXPECT_EQ(g.tokens_out, 10 * 3);
  const PhaseTotals b = bad_stats.Snapshot();
  EXPECT_EQ(b.failed, 10u);
  EXPECT_EQ(b.errors.at("FAILED_PRECONDITION"), 10u);
}

TEST_F(LoadDriverTest, OpenLoopMeasuresFromTheIntendedSendTime) {
  // The server takes 100 ms per request and at most one is in flight, while the schedule
  // asks for one every 20 ms: request i is due at 20i ms but can only start at 100i ms, so its
  // latency is about 100 + 80i ms. Measured from the actual send time it would be 100 ms.
  StartServer(std::chrono::milliseconds(100));
  PhaseSettings settings;
  settings.load = {true, 0, 50.0};
  settings.duration_s = 0;
  settings.requests = 10;
  settings.max_inflight = 1;
  PhaseStats stats;
  RunPhase(stubs_, Plans(Mode::kUnary, "m", 10), settings, stats);
  const PhaseTotals t = stats.Snapshot();
  ASSERT_EQ(t.succeeded, 10u);
  EXPECT_GE(t.latency_ns.min(), 95'000'000u);
  EXPECT_LT(t.latency_ns.min(), 300'000'000u);
  EXPECT_GT(t.latency_ns.max(), 700'000'000u);  // ~100 + 80 * 9 = 820 ms
  EXPECT_GT(t.latency_ns.Percentile(0.5), 300'000'000);
}

}  // namespace
}  // namespace attnserve::load
