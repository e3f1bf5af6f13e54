// attnserve_decode_bench: N sessions generating at once through gRPC, as llama-batched-bench's
// S_TG measures B sequences decoding together.
//
// For each N in --sessions: opens N streams on --model, waits until all are open, then sends
// each one append of --prompt random tokens with generate {max_new_tokens: --generate,
// greedy, stream_interval: --stream_interval}, and timestamps every generated token as its
// message arrives (with an interval N > 1, N tokens share a GeneratedTokens message and its
// time; the gaps are then between messages). Reports, per N:
//   aggregate tok/s  tokens generated inside the window where all N sessions were decoding
//                    (from the last session's first token to the first session's last token),
//                    divided by the window's length: the steady rate, prefill excluded;
//   per session      aggregate / N;
//   p50/p99 gap      the time between consecutive tokens of one session inside that window,
//                    over all sessions (the steady decode, as llama-batched-bench's TG phase);
//   p99 all          the same over every gap, the sessions' prompts joining included.
// One line of JSON per N with --json. Needs a running server.
//
//   attnserve_decode_bench --target=127.0.0.1:50051 --model=mamba --sessions=1,4,16,64
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/barrier.h"
#include "attnserve/v1/inference.grpc.pb.h"
#include "common/parse_flags.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Server address.");
ABSL_FLAG(std::string, model, "mamba", "Model to decode with.");
ABSL_FLAG(std::string, sessions, "1,4,16,64", "Comma list of concurrent session counts.");
ABSL_FLAG(int, prompt, 8, "Prompt tokens per session before generation.");
ABSL_FLAG(int, generate, 64, "Tokens each session generates.");
ABSL_FLAG(int64_t, vocab, 50280, "Random prompt ids are below this.");
ABSL_FLAG(int, stream_interval, 0,
          "Tokens per streamed message (GenerateSpec.stream_interval; 0 or 1: one each). The "
          "window counts whole messages: generate at least ~16 of them a session.");
ABSL_FLAG(bool, json, false, "Also print one JSON line per session count.");

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = attnserve::v1;

struct SessionTrace {
  std::vector<Clock::time_point> tokens;  // one per generated token: its message's arrival
  grpc::Status status;
};

// One session: open, one generating append, close. Timestamps every generated token.
void RunSession(v1::AttnServe::Stub* stub, int index, absl::Barrier* ready, SessionTrace* trace) {
  grpc::ClientContext context;
  auto stream = stub->Stream(&context);
  v1::StreamRequest request;
  request.mutable_open()->set_model(absl::GetFlag(FLAGS_model));
  v1::StreamResponse response;
  const bool opened = stream->Write(request) && stream->Read(&response) && response.has_opened();
  if (ready->Block()) delete ready;  // every session opened (or failed) before any generates
  if (!opened) {
    stream->WritesDone();
    trace->status = stream->Finish();
    if (trace->status.ok()) trace->status = grpc::Status(grpc::StatusCode::UNKNOWN, "no open");
    return;
  }
  std::mt19937_64 rng(1000 + index);
  request.Clear();
  v1::StreamAppend* append = request.mutable_append();
  append->set_sequence_number(1);
  for (int i = 0; i < absl::GetFlag(FLAGS_prompt); ++i) {
    append->add_tokens(static_cast<int64_t>(rng() % absl::GetFlag(FLAGS_vocab)));
  }
  append->mutable_output()->set_kind(v1::OUTPUT_KIND_NONE);
  append->mutable_generate()->set_max_new_tokens(absl::GetFlag(FLAGS_generate));
  append->mutable_generate()->set_stream_interval(absl::GetFlag(FLAGS_stream_interval));
  stream->Write(request);
  while (stream->Read(&response)) {
    if (response.has_generated()) {
      trace->tokens.push_back(Clock::now());
    } else if (response.has_generated_tokens()) {
      trace->tokens.insert(trace->tokens.end(), response.generated_tokens().tokens_size(),
                           Clock::now());
    }
    if (response.has_result()) break;
  }
  request.Clear();
  request.mutable_close();
  stream->Write(request);
  stream->WritesDone();
  while (stream->Read(&response)) {
  }
  trace->status = stream->Finish();
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t i = std::min(values.size() - 1, static_cast<size_t>(q * (values.size() - 1) + 0.5));
  return values[i];
}

}  // namespace

int main(int argc, char** argv) {
  attnserve::ParseFlags(argc, argv);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  // One channel (HTTP/2 connection) per 16 sessions, as separate clients would have.
  std::vector<std::unique_ptr<v1::AttnServe::Stub>> stubs;
  for (int i = 0; i < 8; ++i) {
    args.SetInt("attnserve.channel", i);  // distinct args: distinct connections
    stubs.push_back(v1::AttnServe::NewStub(grpc::CreateCustomChannel(
        absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials(), args)));
  }
  std::printf("%-9s %14s %14s %12s %12s %12s %8s\n", "sessions", "aggregate t/s", "per session",
              "p50 gap ms", "p99 gap ms", "p99 all ms", "errors");
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_sessions), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      std::cerr << "--sessions: bad count '" << part << "'" << std::endl;
      return 2;
    }
    std::vector<SessionTrace> traces(n);
    absl::Barrier* ready = new absl::Barrier(n);  // deleted by the last thread through it
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back(RunSession, stubs[(i / 16) % stubs.size()].get(), i, ready, &traces[i]);
    }
    for (std::thread& t : threads) t.join();
    int errors = 0;
    Clock::time_point window_start = Clock::time_point::min(),
                      window_end = Clock::time_point::max();
    std::vector<double> all_gaps_ms, gaps_ms;
    for (const SessionTrace& t : traces) {
      if (!t.status.ok() || t.tokens.size() < 2) {
        ++errors;
        std::cerr << "session failed: " << t.status.error_code() << " " << t.status.error_message()
                  << std::endl;
        continue;
      }
      window_start = std::max(window_start, t.tokens.front());
      window_end = std::min(window_end, t.tokens.back());
    }
    int64_t in_window = 0;
    for (const SessionTrace& t : traces) {
      for (size_t i = 0; i < t.tokens.size(); ++i) {
        const bool inside = t.tokens[i] > window_start && t.tokens[i] <= window_end;
        in_window += inside;
        if (i == 0 || t.tokens[i] == t.tokens[i - 1]) continue;  // the same message
        const double gap =
            std::chrono::duration<double, std::milli>(t.tokens[i] - t.tokens[i - 1]).count();
        all_gaps_ms.push_back(gap);
        if (inside && t.tokens[i - 1] >= window_start) gaps_ms.push_back(gap);
      }
    }
    const double window_s = std::chrono::duration<double>(window_end - window_start).count();
    const double aggregate = window_s > 0 ? in_window / window_s : 0;
    const double p50 = Percentile(gaps_ms, 0.5), p99 = Percentile(gaps_ms, 0.99);
    const double p99_all = Percentile(all_gaps_ms, 0.99);
    std::printf("%-9d %14.1f %14.2f %12.2f %12.2f %12.2f %8d\n", n, aggregate, aggregate / n, p50,
                p99, p99_all, errors);
    if (absl::GetFlag(FLAGS_json)) {
      std::printf(
          "{\"sessions\": %d, \"aggregate_tok_s\": %.3f, \"gap_p50_ms\": %.3f, \"gap_p99_ms\": "
          "%.3f, \"gap_p99_all_ms\": %.3f, \"window_s\": %.3f, \"tokens_in_window\": %lld, "
          "\"errors\": %d}\n",
          n, aggregate, p50, p99, p99_all, window_s, static_cast<long long>(in_window), errors);
    }
    std::fflush(stdout);
    if (errors > 0) return 1;
  }
  return 0;
}
