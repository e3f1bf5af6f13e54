// AttnServe.Stream: one session over a bidirectional stream. Messages are handled strictly
// one after another: the next read starts only when the previous message is done (open and
// close inline; an append as a scheduler job, whose completion on the scheduler's thread
// starts the next read), so appends apply in order and a slow model applies backpressure; and
// while more than --max_stream_buffer_bytes of responses wait for a client that does not read
// them, nothing more is read from it.
// Responses are queued and written one at a time; generated tokens are written as they are
// produced, or in groups of the append's generate.stream_interval. A cancelled stream ends its
// generation within one scheduler step. The session outlives the stream: a broken stream leaves it
// for resumption.
#include <ATen/ATen.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/session_header.h"
#include "kernels/common/status_macros.h"
#include "server/client_text.h"
#include "server/grpc_status.h"
#include "server/inference.h"
#include "server/rpc/attnserve/generated_token_stream.h"
#include "server/rpc/attnserve/service.h"
#include "server/rpc/text_requests.h"
#include "server/scheduler/job.h"
#include "server/sessions/session_lease.h"

namespace attnserve::server {

class AttnServeService::StreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(AttnServeService* service, grpc::CallbackServerContext* context, Caller caller)
      : service_(service), context_(context), caller_(std::move(caller)) {
    if (service_->options_.authenticator != nullptr) {
      credentials_ = Authenticator::CredentialsOf(*context);
    }
    service_->inflight_.fetch_add(1);
    StartRead(&read_buffer_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client finished sending, or the stream broke
      EndStream(absl::OkStatus());
      return;
    }
    const auto arrival = std::chrono::steady_clock::now();
    // Parsed here rather than by gRPC, which reports a message it cannot parse as the end of
    // the client's writes: a corrupted append would end the stream with OK.
    grpc::ProtoBufferReader reader(&read_buffer_);
    if (!request_.ParseFromZeroCopyStream(&reader)) {
      Done("StreamInvalid",
           absl::InvalidArgumentError(
               "a message on this stream is not a valid attnserve.v1.StreamRequest "
               "(corrupted or of another type); the stream ends here"),
           arrival);
      return;
    }
    // The credentials again, as they stand now: a token revoked while the stream is open
    // ends it at its next message.
    if (Authenticator* auth = service_->options_.authenticator;
        auth != nullptr && auth->enabled()) {
      absl::StatusOr<Caller> now = auth->Authenticate(credentials_);
      if (!now.ok() || now->principal != caller_.principal) {
        Done("StreamInvalid",
             now.ok() ? absl::UnauthenticatedError("credentials changed") : now.status(), arrival);
        return;
      }
    }
    const v1::StreamRequest::KindCase kind = request_.kind_case();
    if (kind == v1::StreamRequest::kOpen && !request_.open().fork_from().empty()) {
      absl::Status submitted = SubmitFork(request_.open(), arrival);
      if (!submitted.ok()) Done("StreamFork", submitted, arrival);
      return;  // the fork job's completion continues
    }
    if (kind == v1::StreamRequest::kAppend) {
      // A text is tokenized where the request work pool says (inline when small); nothing more
      // is read from the stream until the append is done, so appends keep their order.
      absl::Status queued = RunRequestWork(
          service_->options_.work_pool, caller_.client,
          static_cast<int64_t>(request_.append().text().size()), [this, arrival] {
            absl::Status submitted =
                cancelled_.load() || context_->IsCancelled()
                    ? absl::CancelledError("the stream was cancelled")  // no tokenizing then
                    : SubmitAppend(request_.append(), arrival);
            if (!submitted.ok()) Done("StreamAppend", submitted, arrival);
          });
      if (!queued.ok()) Done("StreamAppend", queued, arrival);
      return;  // the job's completion continues
    }
    absl::Status status = kind == v1::StreamRequest::kOpen    ? Open(request_.open())
                          : kind == v1::StreamRequest::kClose ? Close()
                                                              : absl::InvalidArgumentError(
                                                                    "empty StreamRequest: set one "
                                                                    "of open, append or close");
    Done(kind == v1::StreamRequest::kOpen    ? "StreamOpen"
         : kind == v1::StreamRequest::kClose ? "StreamClose"
                                             : "StreamEmpty",
         status, arrival);
  }

  void OnCancel() override { cancelled_.store(true); }

  void OnWriteDone(bool ok) override {
    const grpc::ByteBuffer* next = nullptr;
    bool finish = false, read = false;
    {
      absl::MutexLock lock(&mu_);
      queued_bytes_ -= static_cast<int64_t>(writes_.front().Length());
      writes_.pop_front();
      if (!ok) {
        write_failed_ = true;
        writes_.clear();
        queued_bytes_ = 0;
      }
      if (!writes_.empty()) {
        next = &writes_.front();
      } else {
        writing_ = false;
        finish = TakeFinishLocked();
      }
      // The client caught up: read its next message.
      if (read_paused_ && queued_bytes_ <= service_->options_.max_stream_buffer_bytes) {
        read_paused_ = false;
        read = !finish_requested_;
      }
    }
    if (next != nullptr) StartWrite(next);
    if (read) StartRead(&read_buffer_);
    if (finish) Finish(finish_status_);
  }

  void OnDone() override {
    if (session_.has_value()) (*session_)->Detach();
    session_.reset();
    service_->inflight_.fetch_sub(1);
    delete this;
  }

 private:
  // A message is done: records it, then reads the next one or ends the stream.
  void Done(const char* rpc, const absl::Status& status,
            std::chrono::steady_clock::time_point arrival) {
    const std::string variant = session_.has_value() ? (*session_)->model()->name() : "";
    service_->Record(
        rpc, variant, status,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count());
    if (!status.ok() || closed_) {
      EndStream(status);
      return;
    }
    {
      // Backpressure: while more than --max_stream_buffer_bytes of responses wait for the
      // client, read nothing more from it (OnWriteDone resumes).
      absl::MutexLock lock(&mu_);
      if (queued_bytes_ > service_->options_.max_stream_buffer_bytes) {
        read_paused_ = true;
        return;
      }
    }
    StartRead(&read_buffer_);
  }

  // What every open checks first: one open a stream, a TTL and a length that make sense.
  absl::Status CheckOpen(const v1::StreamOpen& open) const {
    if (session_.has_value() || pending_fork_.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("this stream already opened session '",
                       (session_.has_value() ? *session_ : *pending_fork_)->id(), "'"));
    }
    if (open.ttl_seconds() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ttl_seconds must be >= 0 (0: the default), got ", open.ttl_seconds()));
    }
    if (open.expected_length() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected_length must be >= 0 (0: unknown), got ", open.expected_length()));
    }
    return absl::OkStatus();
  }

  // The caller's session `id` (resumed or forked), of `open.model()` when that names one.
  absl::StatusOr<SessionUse> FindSession(const std::string& id, const v1::StreamOpen& open) {
    absl::StatusOr<SessionUse> found = service_->sessions_.Get(id, caller_);
    if (!found.ok()) return service_->OnThisInstance(found.status());
    const std::string& name = (*found)->model()->name();
    if (!open.model().empty() && open.model() != "auto" && open.model() != name) {
      return absl::InvalidArgumentError(absl::StrCat("session '", (*found)->id(),
                                                     "' belongs to model '", name, "', not ",
                                                     ClientText(open.model())));
    }
    return found;
  }

  // Open with fork_from. The fork is created here as a new session would be (fresh state,
  // admitted against --max_sessions and the state budget); a state-only job at the head of the
  // source's queue (between the source's requests, on the scheduler's thread) reserves the
  // state's bytes and copies the source's state into it. Nothing else can touch the fork
  // meanwhile: its id is not known outside this stream, which reads nothing more until the
  // job's completion answers the open.
  absl::Status SubmitFork(const v1::StreamOpen& open,
                          std::chrono::steady_clock::time_point arrival) {
    RETURN_IF_ERROR(CheckOpen(open));
    if (!open.session_id().empty()) {
      return absl::InvalidArgumentError(
          "set session_id (resume a session) or fork_from (fork one), not both");
    }
    ASSIGN_OR_RETURN(SessionUse source, FindSession(open.fork_from(), open));
    ASSIGN_OR_RETURN(SessionUse fork,
                     service_->sessions_.Create(source->model(), absl::Seconds(open.ttl_seconds()),
                                                caller_.principal));
    const std::shared_ptr<Session> from = source.get(), to = fork.get();
    pending_fork_.emplace(std::move(fork));
    auto job = std::make_unique<scheduler::Job>();
    job->client = caller_.client;
    job->model = from->model();
    job->session.emplace(std::move(source));
    job->deadline = CallDeadline(*context_);
    job->is_cancelled = [this] { return cancelled_.load() || context_->IsCancelled(); };
    job->on_start = [this, from, to]() -> absl::StatusOr<bool> {
      RETURN_IF_ERROR(service_->sessions_.CopyState(*from, *to));
      return true;
    };
    job->on_done = [this, from, to, arrival](const absl::Status& status, scheduler::JobResult) {
      if (!status.ok()) {
        pending_fork_.reset();
        service_->sessions_.Close(to->id(), caller_).IgnoreError();
        Done("StreamFork", status, arrival);
        return;
      }
      session_.emplace(std::move(*pending_fork_));
      pending_fork_.reset();
      SendOpened(absl::StrCat("forked from session ", from->id(), " at position ", to->position()));
      Done("StreamFork", absl::OkStatus(), arrival);
    };
    return service_->scheduler_.Submit(std::move(job));
  }

  absl::Status Open(const v1::StreamOpen& open) {
    RETURN_IF_ERROR(CheckOpen(open));
    std::string reason;
    if (!open.session_id().empty()) {
      ASSIGN_OR_RETURN(SessionUse use, FindSession(open.session_id(), open));
      reason = absl::StrCat("resumed session of model ", use->model()->name());
      session_.emplace(std::move(use));
    } else {
      ASSIGN_OR_RETURN(PolicyDecision decision,
                       service_->policy_.Resolve(open.model(), open.expected_length(),
                                                 /*stream=*/true));
      ASSIGN_OR_RETURN(SessionUse use,
                       service_->sessions_.Create(decision.model, absl::Seconds(open.ttl_seconds()),
                                                  caller_.principal));
      reason = decision.reason;
      service_->CountDecision(decision);
      session_.emplace(std::move(use));
      created_session_ = true;
    }
    SendOpened(reason);
    return absl::OkStatus();
  }

  // Attaches the stream to its session and answers the open.
  void SendOpened(const std::string& reason) {
    Session& s = **session_;
    s.Attach();
    // The first response: a gateway learns from its headers where the session lives.
    context_->AddInitialMetadata(kSessionHeader, s.id());
    v1::StreamResponse response;
    v1::StreamOpened* opened = response.mutable_opened();
    opened->set_session_id(s.id());
    opened->set_model(s.model()->name());
    opened->set_policy_reason(reason);
    opened->set_state_bytes(s.state_bytes());
    opened->set_position(s.position());
    opened->set_last_sequence_number(s.last_sequence());
    *opened->mutable_server() = service_->options_.identity;
    Send(std::move(response));
  }

  // Validates an append and submits its job. The sequence-number check runs when the job
  // reaches the head of the session's queue (on_start), the result is built in on_done.
  absl::Status SubmitAppend(const v1::StreamAppend& append,
                            std::chrono::steady_clock::time_point arrival) {
    if (!session_.has_value()) {
      return absl::FailedPreconditionError("append before open: send open first");
    }
    // Still this replica's (a pause past its lease lets another take it over).
    RETURN_IF_ERROR(service_->sessions_.ConfirmLease(**session_));
    RETURN_IF_ERROR(ValidateOutputSpec(append.output()));
    const bool generate = append.has_generate();
    if (generate) {
      RETURN_IF_ERROR(ValidateGenerateSpec(append.generate(), service_->options_.max_new_tokens));
      if (append.output().kind() == v1::OUTPUT_KIND_HIDDEN) {
        return absl::InvalidArgumentError(
            "generate needs logits: use an output kind other than OUTPUT_KIND_HIDDEN");
      }
    }
    const int64_t seq = append.sequence_number();
    if (seq <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence_number must start at 1 and grow by one, got ", seq));
    }
    // Text: tokenized here (a gRPC thread for a small text, else the request work pool's); a
    // template's tokens (a BOS) only at the start of a session this stream created.
    std::vector<int64_t> text_ids;
    at::Tensor tokens;
    if (!append.text().empty()) {
      if (!append.tokens().empty()) {
        return absl::InvalidArgumentError("set tokens or text in an append, not both");
      }
      const bool first = seq == 1 && created_session_ && !append.no_special_tokens();
      ASSIGN_OR_RETURN(text_ids, TokenizeForModel(*(*session_)->model(), append.text(), first,
                                                  service_->options_.max_tokens_per_request,
                                                  service_->options_.text_limits));
      tokens = IdsTensor(text_ids);
    } else {
      ASSIGN_OR_RETURN(tokens,
                       TokensTensor(append.tokens(), service_->options_.max_tokens_per_request));
    }
    auto job = std::make_unique<scheduler::Job>();
    job->client = caller_.client;
    job->cache_scope = service_->options_.prefix_cache_global ? "" : caller_.principal;
    job->model = (*session_)->model();
    job->session.emplace(SessionUse(session_->get()));
    job->tokens = std::move(tokens);
    job->output = generate && append.output().kind() != v1::OUTPUT_KIND_ALL_LOGITS
                      ? model::OutputKind::kLastLogits
                      : ModelOutputKind(append.output());
    std::shared_ptr<text::GenerationText> generation;
    if (generate) {
      const v1::GenerateSpec& g = append.generate();
      job->max_new_tokens = g.max_new_tokens();
      ASSIGN_OR_RETURN(job->sampling, SamplingOf(g, job->model->vocab_size()));
      ASSIGN_OR_RETURN(generation,
                       AttachGenerationText(*job->model,
                                            {{g.stop().begin(), g.stop().end()},
                                             {g.stop_token_ids().begin(), g.stop_token_ids().end()},
                                             g.ignore_eos(),
                                             !append.text().empty()},
                                            service_->options_.text_limits, job.get()));
    }
    job->deadline = CallDeadline(*context_);
    job->is_cancelled = [this] { return cancelled_.load() || context_->IsCancelled(); };
    replayed_ = false;
    const uint64_t request_hash = AppendHash(append);
    job->on_start = [this, seq, request_hash]() { return CheckSequence(seq, request_hash); };
    const int max_new = job->max_new_tokens;
    std::shared_ptr<GeneratedTokenStream> streamed;
    if (generate) {
      streamed = std::make_shared<GeneratedTokenStream>(seq, append.generate().stream_interval(),
                                                        max_new, generation);
    }
    job->on_token = [this, streamed](const scheduler::SampledToken& sampled, int index) {
      if (std::optional<v1::StreamResponse> r = streamed->Add(sampled, index)) Send(*r);
    };
    job->on_done = [this, seq, request_hash, arrival, generation, text_ids, max_new, streamed](
                       const absl::Status& status, scheduler::JobResult result) {
      // The tokens of a last, shorter group go before the result.
      if (streamed != nullptr) {
        if (std::optional<v1::StreamResponse> r = streamed->Flush()) Send(*r);
      }
      // An append whose prompt ran is applied even when its generation was cut short (the
      // client went away, the deadline or the drain came): its result, with the tokens generated
      // so far, is what a retry of this sequence number gets.
      absl::Status s = status;
      std::shared_ptr<StoredReply> waiting;
      if (!replayed_ && result.prompt_applied) {
        v1::AppendResult text_fields;
        for (const int64_t id : text_ids) text_fields.add_prompt_tokens(id);
        if (generation != nullptr) FillGenerationFields(*generation, result, max_new, &text_fields);
        const absl::Status applied = Applied(seq, request_hash, std::move(result), arrival,
                                             std::move(text_fields), &waiting);
        if (s.ok()) s = applied;
      }
      if (waiting != nullptr) {
        waiting->status = s;
        if (waiting->pending.fetch_sub(1) == 1) AnswerStored(*waiting);
        return;  // the checkpoint's write answers (AnswerStored)
      }
      Done("StreamAppend", s, arrival);
    };
    return service_->scheduler_.Submit(std::move(job));
  }

  // What a retry must repeat to be the same append: everything but its sequence number. A
  // stable hash (XXH3 of the deterministic serialization; absl::Hash is seeded per process):
  // snapshots carry it to other processes.
  static uint64_t AppendHash(const v1::StreamAppend& append) {
    v1::StreamAppend copy = append;
    copy.clear_sequence_number();
    std::string bytes;
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    copy.SerializeToCodedStream(&coded);
    coded.Trim();
    return XXH3_64bits(bytes.data(), bytes.size());
  }

  // At the head of the session's queue: whether append `seq` is the next one (true), was
  // applied already and its stored result is sent again (false), or is out of order or a
  // retry that differs from what was applied.
  absl::StatusOr<bool> CheckSequence(int64_t seq, uint64_t request_hash) {
    Session& s = **session_;
    if (seq <= s.last_sequence_number) {
      for (const Session::StoredResult& stored : s.recent_results) {
        if (stored.result.sequence_number() != seq) continue;
        if (stored.request_hash != request_hash) {
          return absl::InvalidArgumentError(absl::StrCat(
              "sequence number ", seq,
              " was applied with other tokens, output or generate; a retry must resend the "
              "same append (or use the next sequence number, ",
              s.last_sequence_number + 1, ", for a new one)"));
        }
        v1::StreamResponse response;
        *response.mutable_result() = stored.result;
        response.mutable_result()->set_replayed(true);
        RETURN_IF_ERROR(service_->CheckResponseSize(response));
        Send(std::move(response));
        replayed_ = true;
        return false;
      }
      return absl::AbortedError(
          absl::StrCat("sequence number ", seq,
                       " was already applied and its result is no longer kept (the last ",
                       service_->options_.retry_window, " are, --retry_window); the session is at ",
                       s.last_sequence_number));
    }
    if (seq != s.last_sequence_number + 1) {
      return absl::AbortedError(absl::StrCat("sequence number gap: got ", seq, ", expected ",
                                             s.last_sequence_number + 1,
                                             "; resend the missing appends in order"));
    }
    return true;
  }

  // Append `seq` was computed: the session moves to it, the result is stored for retries and
  // sent.
  // `text_fields`: the result's text, finish reason and prompt ids (FillGenerationFields).
  // An append answered once its checkpoint is written: the job's completion and the store's
  // callback each count `pending` down, and whichever is last answers (AnswerStored).
  struct StoredReply {
    std::atomic<int> pending{2};
    v1::StreamResponse response;
    std::chrono::steady_clock::time_point arrival;
    absl::Status status;  // the append's (set by the job's completion before it counts down)
    absl::Status stored;  // the write's (set by the callback before it counts down)
  };

  // With its checkpoint written, the append's result goes out marked stored; when the store
  // failed once it goes out unmarked (the write is retried); when this replica lost the
  // session's lease meanwhile, the append is not acknowledged: the stream ends with that error
  // (UNAVAILABLE naming the owner), and the client resends it where the session now is.
  void AnswerStored(StoredReply& reply) {
    if (IsLeaseLost(reply.stored)) {
      // Where the session is now (UNAVAILABLE naming the owner, as for any later call here).
      absl::Status moved = service_->sessions_.ConfirmLease(**session_);
      Done("StreamAppend",
           moved.ok() ? absl::UnavailableError(
                            "this replica lost the session's lease before the append's "
                            "checkpoint was written; resume the session and resend the append")
                      : moved,
           reply.arrival);
      return;
    }
    if (reply.stored.code() == absl::StatusCode::kNotFound) {  // closed meanwhile
      Done("StreamAppend", reply.stored, reply.arrival);
      return;
    }
    reply.response.mutable_result()->set_stored(reply.stored.ok());
    Send(reply.response);
    Done("StreamAppend", reply.status, reply.arrival);
  }

  // `waiting`: set when the answer waits for the append's checkpoint (see StoredReply);
  // otherwise the result has been sent.
  absl::Status Applied(int64_t seq, uint64_t request_hash, scheduler::JobResult computed,
                       std::chrono::steady_clock::time_point arrival, v1::AppendResult text_fields,
                       std::shared_ptr<StoredReply>* waiting) {
    const v1::StreamAppend& append = request_.append();
    Session& s = **session_;
    v1::StreamResponse response;
    v1::AppendResult* result = response.mutable_result();
    *result = std::move(text_fields);
    result->set_sequence_number(seq);
    RETURN_IF_ERROR(FillOutputs(computed.output, append.output(), result->mutable_outputs()));
    for (int64_t token : computed.generated) result->add_generated_tokens(token);
    s.last_sequence_number = seq;
    s.Publish();
    result->set_position(s.state.position);
    result->set_state_bytes(s.state_bytes());
    v1::Timings* t = result->mutable_timings();
    t->set_queue_seconds(computed.queue_seconds);
    t->set_compute_seconds(computed.compute_seconds);
    t->set_total_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count());
    // A result too large to send still applied: it is kept for a retry, which gets the same
    // error (the client asks again with a smaller output on the next sequence number).
    const absl::Status size = service_->CheckResponseSize(response);
    s.recent_results.push_back({request_hash, *result});
    while (static_cast<int>(s.recent_results.size()) > service_->options_.retry_window) {
      s.recent_results.pop_front();
    }
    if (!size.ok()) {
      service_->sessions_.Applied(s);  // with its stored result: a checkpoint has it
      return size;
    }
    auto reply = std::make_shared<StoredReply>();
    reply->arrival = arrival;
    reply->response = std::move(response);
    if (service_->sessions_.Applied(s, [this, reply](const absl::Status& stored) {
          reply->stored = stored;
          if (reply->pending.fetch_sub(1) == 1) AnswerStored(*reply);
        })) {
      *waiting = std::move(reply);
      return absl::OkStatus();
    }
    Send(reply->response);
    return absl::OkStatus();
  }

  // Why generation ended and its whole text (what the pieces held back and did not send, when
  // it ended otherwise than at its length or a stop, comes here only).
  static void FillGenerationFields(text::GenerationText& generation,
                                   const scheduler::JobResult& result, int max_new,
                                   v1::AppendResult* out) {
    const text::StopReason why = generation.stop_reason();
    if (why == text::StopReason::kNone) generation.Finish();
    out->set_generated_text(generation.text());
    out->set_stop_string(generation.matched_stop_string());
    out->set_finish_reason(why == text::StopReason::kStopString  ? v1::FINISH_REASON_STOP_STRING
                           : why == text::StopReason::kStopToken ? v1::FINISH_REASON_STOP_TOKEN
                           : static_cast<int>(result.generated.size()) >= max_new
                               ? v1::FINISH_REASON_LENGTH
                               : v1::FINISH_REASON_UNSPECIFIED);
  }

  absl::Status Close() {
    if (!session_.has_value()) {
      return absl::FailedPreconditionError("close before open: nothing to close");
    }
    const std::string id = (*session_)->id();
    RETURN_IF_ERROR(service_->OnThisInstance(service_->sessions_.Close(id, caller_)));
    v1::StreamResponse response;
    response.mutable_closed()->set_session_id(id);
    Send(std::move(response));
    closed_ = true;
    return absl::OkStatus();
  }

  // Queues a response; writes it now when no write is in flight.
  void Send(const v1::StreamResponse& response) {
    grpc::ByteBuffer buffer;
    bool own_buffer = false;
    if (!grpc::SerializationTraits<v1::StreamResponse>::Serialize(response, &buffer, &own_buffer)
             .ok()) {
      return;  // cannot happen for a message we built; nothing to send
    }
    const grpc::ByteBuffer* start = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (write_failed_) return;  // the client is gone; the work still counts
      queued_bytes_ += static_cast<int64_t>(buffer.Length());
      writes_.push_back(std::move(buffer));
      if (!writing_) {
        writing_ = true;
        start = &writes_.front();
      }
    }
    if (start != nullptr) StartWrite(start);
  }

  // Finishes with `status` once the queued responses are written.
  void EndStream(const absl::Status& status) {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (finish_requested_) return;
      finish_requested_ = true;
      finish_status_ = ToGrpcStatus(status, context_);
      finish = !writing_ && TakeFinishLocked();
    }
    if (finish) Finish(finish_status_);
  }

  bool TakeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!finish_requested_ || finished_) return false;
    finished_ = true;
    return true;
  }

  AttnServeService* const service_;
  grpc::CallbackServerContext* const context_;
  const Caller caller_;                     // authenticated when the stream started
  Authenticator::Credentials credentials_;  // what the stream presented, checked per message
  std::atomic<bool> cancelled_{false};
  grpc::ByteBuffer read_buffer_;  // the message being read, raw
  v1::StreamRequest request_;     // the last message read, parsed
  bool replayed_ = false;         // the append being served was answered from the stored results
  std::optional<SessionUse> session_;       // touched only by the one step running at a time
  std::optional<SessionUse> pending_fork_;  // a fork whose state is being copied
  bool closed_ = false;
  bool created_session_ = false;  // opened as a new session (not resumed, not forked)

  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> writes_ ABSL_GUARDED_BY(mu_);  // serialized responses
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // bytes in writes_
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;  // a read waits for the client to catch up
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_;  // written once under mu_ before Finish
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* AttnServeService::Stream(
    grpc::CallbackServerContext* context) {
  class Refused : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit Refused(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
    void OnDone() override { delete this; }
  };
  if (absl::Status s = CheckServing(); !s.ok()) return new Refused(s);
  absl::StatusOr<Caller> caller = Authenticate(*context);
  if (!caller.ok()) {
    Record("StreamOpen", "", caller.status(), 0);
    return new Refused(caller.status());
  }
  return new StreamReactor(this, context, *std::move(caller));
}

}  // namespace attnserve::server
