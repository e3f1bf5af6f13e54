// An in-process attnserve server on loopback and a real gRPC client for it, for the
// integration tests. Each TestServer owns its own session table, worker pool and service, so
// every test picks its own limits (TTLs, session caps, state budgets, message sizes); the
// models are built once per process and shared.
//
// Helpers that expect success report failures through ADD_FAILURE and return an empty
// message, so a test keeps going and fails on its own checks; they are safe to call from
// several threads (each thread with its own StreamClient).
#pragma once

#include <ATen/Parallel.h>
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/inference.grpc.pb.h"
#include "server/model/model_repository.h"
#include "server/policy.h"
#include "server/rpc/attnserve/service.h"
#include "server/scheduler/batch_scheduler.h"
#include "server/sessions/session_table.h"

namespace attnserve::server::testing {

inline constexpr int64_t kVocab = 4096;                                // of every default model
inline constexpr int64_t kHidden = 256;                                // of every default model
inline constexpr int64_t kStandardBytesPerToken = 4 * 2 * 4 * 64 * 4;  // layers*KV*H*d*float

// The default models that can stream.
inline const std::vector<std::string>& StreamingModels() {
  static const auto* models = new std::vector<std::string>{
      "standard", "linear", "mamba", "hybrid", "sliding_window", "performer", "rwkv", "sparse"};
  return *models;
}

// The default models (standard, linformer, linear, mamba, hybrid, sliding_window, performer,
// rwkv, sparse), built once per process; with `bf16`, their --weight_precision=bf16 build.
inline const model::ModelRepository& Repository(bool bf16 = false) {
  const auto build = [](bool b) {
    at::set_num_threads(1);  // as the test scheduler's intra_op_threads
    model::ModelOptions options;
    if (b) options.precision = model::WeightPrecision::kBfloat16;
    absl::StatusOr<std::unique_ptr<model::ModelRepository>> built =
        model::ModelRepository::BuildDefault(options);
    if (!built.ok()) {
      std::cerr << "cannot build the default models: " << built.status() << std::endl;
      std::abort();
    }
    return built->release();
  };
  if (bf16) {
    static const model::ModelRepository* repository = build(true);
    return *repository;
  }
  static const model::ModelRepository* repository = build(false);
  return *repository;
}

inline std::chrono::system_clock::time_point DeadlineIn(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
inline bool WaitFor(const std::function<bool()>& condition,
                    absl::Duration timeout = absl::Seconds(5)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return condition();
}

// ---- requests ----

inline std::vector<int64_t> RandomTokens(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> id(0, kVocab - 1);
  std::vector<int64_t> tokens(n);
  for (int64_t& t : tokens) t = id(rng);
  return tokens;
}

inline v1::InferRequest MakeInfer(const std::string& model, const std::vector<int64_t>& tokens,
                                  v1::OutputKind kind = v1::OUTPUT_KIND_LAST_LOGITS,
                                  int32_t top_k = 0) {
  v1::InferRequest request;
  request.set_model(model);
  request.mutable_tokens()->Add(tokens.begin(), tokens.end());
  request.mutable_output()->set_kind(kind);
  request.mutable_output()->set_top_k(top_k);
  return request;
}

inline v1::StreamRequest OpenRequest(const std::string& model, int64_t expected_length = 0,
                                     int32_t ttl_seconds = 0) {
  v1::StreamRequest request;
  request.mutable_open()->set_model(model);
  request.mutable_open()->set_expected_length(expected_length);
  request.mutable_open()->set_ttl_seconds(ttl_seconds);
  return request;
}

inline v1::StreamRequest ResumeRequest(const std::string& session_id,
                                       const std::string& model = "") {
  v1::StreamRequest request;
  request.mutable_open()->set_session_id(session_id);
  request.mutable_open()->set_model(model);
  return request;
}

inline v1::StreamRequest AppendRequest(int64_t sequence_number, const std::vector<int64_t>& tokens,
                                       v1::OutputKind kind = v1::OUTPUT_KIND_LAST_LOGITS) {
  v1::StreamRequest request;
  v1::StreamAppend* append = request.mutable_append();
  append->set_sequence_number(sequence_number);
  append->mutable_tokens()->Add(tokens.begin(), tokens.end());
  append->mutable_output()->set_kind(kind);
  return request;
}

inline v1::StreamRequest GenerateRequest(int64_t sequence_number,
                                         const std::vector<int64_t>& tokens, int32_t max_new_tokens,
                                         float temperature = 0, int32_t top_k = 0,
                                         uint64_t seed = 0) {
  v1::StreamRequest request = AppendRequest(sequence_number, tokens);
  v1::GenerateSpec* generate = request.mutable_append()->mutable_generate();
  generate->set_max_new_tokens(max_new_tokens);
  generate->set_temperature(temperature);
  generate->set_top_k(top_k);
  generate->set_seed(seed);
  return request;
}

// `request` (an append) with a generation of `max_new_tokens` at this temperature and top-k.
inline v1::StreamRequest WithGenerate(v1::StreamRequest request, int32_t max_new_tokens,
                                      float temperature, int32_t top_k) {
  v1::GenerateSpec* g = request.mutable_append()->mutable_generate();
  g->set_max_new_tokens(max_new_tokens);
  g->set_temperature(temperature);
  g->set_top_k(top_k);
  return request;
}

inline v1::StreamRequest CloseRequest() {
  v1::StreamRequest request;
  request.mutable_close();
  return request;
}

// ---- tensors ----

inline std::vector<int64_t> Shape(const v1::Tensor& tensor) {
  return {tensor.shape().begin(), tensor.shape().end()};
}

inline std::vector<float> Floats(const v1::Tensor& tensor) {
  return {tensor.float_data().begin(), tensor.float_data().end()};
}

// max |a - b| over max |b|: the error relative to the scale of the reference. Infinity when
// the sizes differ.
inline double MaxRelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

inline double MaxAbsDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return diff;
}

// ---- the client ----

// One bidirectional Stream call (synchronous API). Not thread-safe: one thread per stream.
class StreamClient {
 public:
  StreamClient(v1::AttnServe::Stub& stub, absl::Duration timeout)
      : context_(std::make_unique<grpc::ClientContext>()) {
    context_->set_deadline(DeadlineIn(timeout));
    stream_ = stub.Stream(context_.get());
  }
  ~StreamClient() {
    if (finished_) return;
    context_->TryCancel();
    Finish();
  }
  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;

  bool Send(const v1::StreamRequest& request) { return stream_->Write(request); }

  std::optional<v1::StreamResponse> Receive() {
    v1::StreamResponse response;
    if (!stream_->Read(&response)) return std::nullopt;
    return response;
  }

  // Sends an open (new or resumed) and returns the StreamOpened.
  v1::StreamOpened Open(const v1::StreamRequest& open) {
    if (!Send(open)) {
      ADD_FAILURE() << "cannot send the open: the stream is broken";
      return {};
    }
    std::optional<v1::StreamResponse> response = Receive();
    if (!response.has_value() || !response->has_opened()) {
      ADD_FAILURE() << "expected StreamOpened, got "
                    << (response ? response->ShortDebugString() : Finish().error_message());
      return {};
    }
    return response->opened();
  }

  // Sends an append and returns its AppendResult; the GeneratedToken messages that came
  // before it go to `generated`, the GeneratedTokens ones (a stream_interval) to `groups`.
  v1::AppendResult Append(const v1::StreamRequest& append,
                          std::vector<v1::GeneratedToken>* generated = nullptr,
                          std::vector<v1::GeneratedTokens>* groups = nullptr) {
    if (!Send(append)) {
      ADD_FAILURE() << "cannot send the append: the stream is broken";
      return {};
    }
    while (true) {
      std::optional<v1::StreamResponse> response = Receive();
      if (!response.has_value()) {
        const grpc::Status status = Finish();
        ADD_FAILURE() << "the stream ended before the AppendResult: " << status.error_code() << " "
                      << status.error_message();
        return {};
      }
      if (response->has_generated()) {
        if (generated != nullptr) generated->push_back(response->generated());
        continue;
      }
      if (response->has_generated_tokens()) {
        if (groups != nullptr) groups->push_back(response->generated_tokens());
        continue;
      }
      if (!response->has_result()) {
        ADD_FAILURE() << "expected AppendResult, got " << response->ShortDebugString();
        return {};
      }
      return response->result();
    }
  }

  // Sends a close, expects StreamClosed for `session_id`, and finishes the call.
  grpc::Status Close(const std::string& session_id) {
    if (!Send(CloseRequest())) return Finish();
    std::optional<v1::StreamResponse> response = Receive();
    if (!response.has_value() || !response->has_closed() ||
        response->closed().session_id() != session_id) {
      ADD_FAILURE() << "expected StreamClosed for " << session_id << ", got "
                    << (response ? response->ShortDebugString() : "the end of the stream");
    }
    return Finish();
  }

  // Half-closes, reads what is left (into `rest` when given) and returns the call's status.
  grpc::Status Finish(std::vector<v1::StreamResponse>* rest = nullptr) {
    if (finished_) return status_;
    finished_ = true;
    stream_->WritesDone();
    v1::StreamResponse response;
    while (stream_->Read(&response)) {
      if (rest != nullptr) rest->push_back(response);
    }
    status_ = stream_->Finish();
    return status_;
  }

  // Cancels the call from the client side (the stream breaks; the session stays).
  void Cancel() { context_->TryCancel(); }

  // Drops the call without WritesDone or Finish: the stream and its context are destroyed.
  void Abandon() {
    finished_ = true;
    stream_.reset();
    context_.reset();
  }

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>> stream_;
  bool finished_ = false;
  grpc::Status status_;
};

// The unary calls with a deadline each, and streams. Thread-safe (a stub is).
class Client {
 public:
  explicit Client(const std::shared_ptr<grpc::Channel>& channel)
      : stub_(v1::AttnServe::NewStub(channel)) {}

  v1::AttnServe::Stub& stub() { return *stub_; }

  grpc::Status Infer(const v1::InferRequest& request, v1::InferResponse* response,
                     absl::Duration timeout = absl::Seconds(120)) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(timeout));
    return stub_->Infer(&context, request, response);
  }
  grpc::Status GetSession(const std::string& id, v1::SessionInfo* info) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(10)));
    v1::GetSessionRequest request;
    request.set_session_id(id);
    return stub_->GetSession(&context, request, info);
  }
  grpc::Status CloseSession(const std::string& id) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(10)));
    v1::CloseSessionRequest request;
    request.set_session_id(id);
    v1::CloseSessionResponse response;
    return stub_->CloseSession(&context, request, &response);
  }
  grpc::Status ListSessions(const std::string& model, int32_t limit,
                            v1::ListSessionsResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(10)));
    v1::ListSessionsRequest request;
    request.set_model(model);
    request.set_limit(limit);
    return stub_->ListSessions(&context, request, response);
  }
  grpc::Status ListModels(v1::ListModelsResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(10)));
    return stub_->ListModels(&context, v1::ListModelsRequest(), response);
  }
  grpc::Status GetModel(const std::string& name, v1::ModelInfo* info) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(10)));
    v1::GetModelRequest request;
    request.set_name(name);
    return stub_->GetModel(&context, request, info);
  }

  std::unique_ptr<StreamClient> Stream(absl::Duration timeout = absl::Seconds(120)) {
    return std::make_unique<StreamClient>(*stub_, timeout);
  }

  // The session as ListSessions shows it (which, unlike GetSession, does not touch it).
  std::optional<v1::SessionInfo> Listed(const std::string& id) {
    v1::ListSessionsResponse response;
    if (!ListSessions("", 0, &response).ok()) return std::nullopt;
    for (const v1::SessionInfo& info : response.sessions()) {
      if (info.session_id() == id) return info;
    }
    return std::nullopt;
  }

  // Waits until the server has let go of the session's stream (a dropped or finished stream
  // detaches shortly after the client sees its end). Does not touch the session.
  bool WaitDetached(const std::string& id, absl::Duration timeout = absl::Seconds(5)) {
    return WaitFor(
        [&] {
          std::optional<v1::SessionInfo> info = Listed(id);
          return info.has_value() && !info->attached();
        },
        timeout);
  }

  // The all-position logits of each of `chunks` appended in order to one new session on
  // `model`, which is closed afterwards: the reference a resumed or rerouted stream must match.
  std::vector<std::vector<float>> UnbrokenStreamLogits(
      const std::string& model, const std::vector<std::vector<int64_t>>& chunks) {
    std::vector<std::vector<float>> logits;
    std::unique_ptr<StreamClient> stream = Stream();
    const std::string id = stream->Open(OpenRequest(model)).session_id();
    for (size_t i = 0; i < chunks.size(); ++i) {
      logits.push_back(
          Floats(stream->Append(AppendRequest(i + 1, chunks[i], v1::OUTPUT_KIND_ALL_LOGITS))
                     .outputs()
                     .tensor()));
    }
    EXPECT_TRUE(stream->Close(id).ok());
    return logits;
  }

  // Opens a session on `model` with one append of `tokens` (when any), then half-closes the
  // stream, leaving the session detached in the table. Returns its id.
  std::string NewSession(const std::string& model, const std::vector<int64_t>& tokens = {},
                         int32_t ttl_seconds = 0) {
    std::unique_ptr<StreamClient> stream = Stream();
    const std::string id = stream->Open(OpenRequest(model, 0, ttl_seconds)).session_id();
    if (!tokens.empty()) stream->Append(AppendRequest(1, tokens));
    const grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(WaitDetached(id)) << "session " << id << " stays attached";
    return id;
  }

 private:
  std::unique_ptr<v1::AttnServe::Stub> stub_;
};

inline std::shared_ptr<grpc::Channel> NewChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Each channel its own connection, so that clients on different channels do not share one.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

// Resident memory of this process (the test server runs in it), after giving freed memory
// back to the system (malloc_trim), so that what is left is what is held.
inline int64_t TrimmedResidentBytes() {
  malloc_trim(0);
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Whether resident memory says what the process holds: not under AddressSanitizer, whose
// quarantine keeps freed blocks (LeakSanitizer checks for leaks there instead).
inline constexpr bool kResidentMemoryIsMeaningful =
#if defined(__SANITIZE_ADDRESS__)
    false;
#else
    true;
#endif

// Expects resident memory to come back within `allowance` bytes of `before` (a level measured
// with TrimmedResidentBytes; by default 10% of it), allowing gRPC and the allocator up to 10 s to
// hand back what the calls used (on a loaded machine they do so late); a server that keeps what
// it should have freed stays above. Nothing to check under AddressSanitizer.
inline void ExpectResidentMemoryBackTo(int64_t before, int64_t allowance = -1) {
  if (!kResidentMemoryIsMeaningful) return;
  const int64_t limit = before + (allowance >= 0 ? allowance : before / 10);
  int64_t now = 0;
  WaitFor(
      [&] {
        now = TrimmedResidentBytes();
        if (now < limit) return true;
        absl::SleepFor(absl::Milliseconds(90));
        return false;
      },
      absl::Seconds(10));
  EXPECT_LT(now, limit) << "resident memory did not come back";
}

// ---- the server ----

struct TestServerOptions {
  SessionLimits limits;
  ServiceOptions service;
  // The scheduler's limits (sessions and metrics are the test server's own); one kernel thread,
  // as tests run side by side.
  scheduler::SchedulerOptions scheduler = [] {
    scheduler::SchedulerOptions o;
    o.intra_op_threads = 1;
    return o;
  }();
  int max_receive_message_bytes = 0;  // 0: gRPC's default (4 MiB)
  std::string policy = Policy::kDefaultSpec;
  bool bf16 = false;  // the default models with bfloat16 weights (Repository(true))
  // Not empty: the server's identity is this name and its own address (127.0.0.1:port),
  // as an instance started with --instance_name and --advertise_address.
  std::string instance_name;
};

// A port on 127.0.0.1 that nothing listens on now (the kernel's pick for an ephemeral bind),
// for a server that must know its address before it starts.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::cerr << "cannot find a free port on 127.0.0.1" << std::endl;
    std::abort();
  }
  close(fd);
  return ntohs(addr.sin_port);
}

class TestServer {
 public:
  explicit TestServer(const TestServerOptions& options = TestServerOptions())
      : policy_(ParsePolicy(options.policy, options.bf16)),
        sessions_(options.limits),
        scheduler_(WithTable(options.scheduler, &sessions_, options.service.metrics)),
        fixed_port_(options.instance_name.empty() ? 0 : FreeLoopbackPort()),
        service_(Repository(options.bf16), policy_, sessions_, scheduler_,
                 WithIdentity(options, fixed_port_)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(fixed_port_),
                             grpc::InsecureServerCredentials(), &port_);
    if (options.max_receive_message_bytes > 0) {
      builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
    }
    builder.SetMaxSendMessageSize(-1);
    if (options.service.max_metadata_bytes > 0) {  // as main.cc sets it
      builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                                 TransportMetadataLimit(options.service.max_metadata_bytes));
    }
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      std::cerr << "cannot start the test server on 127.0.0.1:0" << std::endl;
      std::abort();
    }
    client_ = NewClient();
  }

  ~TestServer() {
    client_.reset();
    scheduler_.Abort(absl::UnavailableError("the test server is stopping"));
    server_->Shutdown(DeadlineIn(absl::Seconds(10)));
    scheduler_.Stop();
  }

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // A client on the server's own channel.
  Client& client() { return *client_; }
  // A client on a channel (and connection) of its own.
  // It waits (up to 30 s) for the connection, so that a test's first calls do not fail fast
  // on a channel still connecting on a loaded machine.
  std::unique_ptr<Client> NewClient() const {
    std::shared_ptr<grpc::Channel> channel = NewChannel(target());
    if (!channel->WaitForConnected(DeadlineIn(absl::Seconds(30)))) {
      ADD_FAILURE() << "cannot connect to the test server at " << target();
    }
    return std::make_unique<Client>(std::move(channel));
  }
  AttnServeService& service() { return service_; }
  SessionTable& sessions() { return sessions_; }
  scheduler::BatchScheduler& scheduler() { return scheduler_; }

 private:
  static ServiceOptions WithIdentity(const TestServerOptions& options, int port) {
    ServiceOptions service = options.service;
    if (!options.instance_name.empty()) {
      service.identity.set_instance_name(options.instance_name);
      service.identity.set_advertise_address("127.0.0.1:" + std::to_string(port));
    }
    return service;
  }

  static scheduler::SchedulerOptions WithTable(scheduler::SchedulerOptions options,
                                               SessionTable* sessions, ServerMetrics* metrics) {
    options.sessions = sessions;
    options.metrics = metrics;
    return options;
  }

  static Policy ParsePolicy(const std::string& spec, bool bf16) {
    absl::StatusOr<Policy> policy = Policy::Parse(spec, Repository(bf16));
    if (!policy.ok()) {
      std::cerr << "bad policy '" << spec << "': " << policy.status() << std::endl;
      std::abort();
    }
    return *std::move(policy);
  }

  Policy policy_;
  SessionTable sessions_;
  scheduler::BatchScheduler scheduler_;
  const int fixed_port_;  // 0: any
  AttnServeService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

}  // namespace attnserve::server::testing
