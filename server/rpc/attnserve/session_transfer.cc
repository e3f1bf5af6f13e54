// AttnServe.ExportSession and AttnServe.ImportSession: a session as a snapshot
// (sessions/session_snapshot.h) in chunks, out of this instance and into one.
//
// Export takes the snapshot with a state-only scheduler job, so it sees the session between
// two of its requests, then writes it in chunks of at most kChunkBytes (less when
// --max_message_bytes is smaller), one write at a time. Import gathers the chunks up to
// --max_snapshot_bytes, decodes the whole snapshot and admits the session only if all of it
// is valid.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/grpc_status.h"
#include "server/rpc/attnserve/service.h"
#include "server/scheduler/job.h"
#include "server/sessions/session_snapshot.h"

namespace attnserve::server {
namespace {

constexpr int64_t kChunkBytes = int64_t{1} << 20;
constexpr int64_t kChunkOverhead = 64;  // the chunk message's own bytes around its data

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

class AttnServeService::ExportReactor final
    : public grpc::ServerWriteReactor<v1::SessionSnapshotChunk> {
 public:
  ExportReactor(AttnServeService* service, grpc::CallbackServerContext* context,
                const v1::ExportSessionRequest& request)
      : service_(service), context_(context), arrival_(std::chrono::steady_clock::now()) {
    service_->inflight_.fetch_add(1);
    chunk_bytes_ = kChunkBytes;
    if (service_->options_.max_message_bytes > 0) {
      chunk_bytes_ = std::clamp<int64_t>(service_->options_.max_message_bytes - kChunkOverhead, 1,
                                         kChunkBytes);
    }
    absl::Status submitted = Submit(context, request);
    if (!submitted.ok()) End(submitted);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(absl::CancelledError("the client went away during the export"));
      return;
    }
    WriteNext();
  }

  void OnDone() override {
    service_->inflight_.fetch_sub(1);
    delete this;
  }

 private:
  absl::Status Submit(grpc::CallbackServerContext* context,
                      const v1::ExportSessionRequest& request) {
    if (absl::Status serving = service_->CheckServing(); !serving.ok()) return serving;
    ASSIGN_OR_RETURN(Caller caller, service_->Authenticate(*context));
    absl::StatusOr<SessionUse> found = service_->sessions_.Get(request.session_id(), caller);
    if (!found.ok()) return service_->OnThisInstance(found.status());
    variant_ = (*found)->model()->name();
    auto job = std::make_unique<scheduler::Job>();
    job->client = caller.client;
    job->model = (*found)->model();
    Session* session = found->get().get();
    job->session.emplace(*std::move(found));
    job->deadline = CallDeadline(*context);
    job->is_cancelled = [context] { return context->IsCancelled(); };
    job->on_start = [this, session]() -> absl::StatusOr<bool> {
      snapshot_ = EncodeSessionSnapshot(*session);  // between the session's requests
      return true;
    };
    job->on_done = [this](const absl::Status& status, scheduler::JobResult) {
      if (!status.ok()) {
        End(status);
        return;
      }
      WriteNext();
    };
    return service_->scheduler_.Submit(std::move(job));
  }

  void WriteNext() {
    if (offset_ >= snapshot_.size() && offset_ > 0) {
      End(absl::OkStatus());
      return;
    }
    chunk_.Clear();
    if (offset_ == 0) chunk_.set_total_bytes(static_cast<int64_t>(snapshot_.size()));
    const size_t n = std::min<size_t>(chunk_bytes_, snapshot_.size() - offset_);
    chunk_.set_data(snapshot_.data() + offset_, n);
    offset_ += std::max<size_t>(n, 1);  // an empty snapshot cannot happen; never loop on one
    StartWrite(&chunk_);
  }

  void End(const absl::Status& status) {
    service_->Record("ExportSession", variant_, status, SecondsSince(arrival_));
    // A session leased by another replica: its address in x-attnserve-session-owner.
    Finish(ToGrpcStatus(status, context_));
  }

  AttnServeService* const service_;
  grpc::CallbackServerContext* const context_;
  const std::chrono::steady_clock::time_point arrival_;
  std::string variant_;
  int64_t chunk_bytes_;
  std::string snapshot_;  // written by the job's on_start, read after its on_done
  size_t offset_ = 0;
  v1::SessionSnapshotChunk chunk_;
};

class AttnServeService::ImportReactor final
    : public grpc::ServerReadReactor<v1::SessionSnapshotChunk> {
 public:
  ImportReactor(AttnServeService* service, grpc::CallbackServerContext* context,
                v1::SessionInfo* response)
      : service_(service),
        context_(context),
        response_(response),
        arrival_(std::chrono::steady_clock::now()) {
    service_->inflight_.fetch_add(1);
    if (absl::Status serving = service_->CheckServing(); !serving.ok()) {
      End(serving);
      return;
    }
    absl::StatusOr<Caller> caller = service_->Authenticate(*context);
    if (!caller.ok()) {
      End(caller.status());
      return;
    }
    caller_ = *std::move(caller);
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client sent everything
      End(Admit());
      return;
    }
    const int64_t limit = service_->options_.max_snapshot_bytes;
    if (chunk_.total_bytes() > limit ||
        static_cast<int64_t>(snapshot_.size() + chunk_.data().size()) > limit) {
      End(absl::ResourceExhaustedError(
          absl::StrCat("the snapshot is larger than --max_snapshot_bytes=", limit)));
      return;
    }
    // The declared size is the client's word: reserve at most 64 MiB on it, grow past that as
    // the bytes really come.
    if (snapshot_.empty() && chunk_.total_bytes() > 0) {
      snapshot_.reserve(std::min<int64_t>(chunk_.total_bytes(), int64_t{64} << 20));
    }
    snapshot_.append(chunk_.data());
    StartRead(&chunk_);
  }

  void OnDone() override {
    service_->inflight_.fetch_sub(1);
    delete this;
  }

 private:
  absl::Status Admit() {
    absl::StatusOr<SessionSnapshot> snapshot =
        DecodeSessionSnapshot(snapshot_, service_->repository_);
    if (!snapshot.ok()) return snapshot.status();
    variant_ = snapshot->model->name();
    absl::StatusOr<SessionUse> session = service_->sessions_.Import(*std::move(snapshot), caller_);
    if (!session.ok()) return session.status();
    *response_ = (*session)->Info();
    *response_->mutable_server() = service_->options_.identity;
    return absl::OkStatus();
  }

  void End(const absl::Status& status) {
    service_->Record("ImportSession", variant_, status, SecondsSince(arrival_));
    // A session leased by another replica: its address in x-attnserve-session-owner.
    Finish(ToGrpcStatus(status, context_));
  }

  AttnServeService* const service_;
  grpc::CallbackServerContext* const context_;
  v1::SessionInfo* const response_;
  const std::chrono::steady_clock::time_point arrival_;
  Caller caller_;
  std::string variant_;
  std::string snapshot_;
  v1::SessionSnapshotChunk chunk_;
};

grpc::ServerWriteReactor<v1::SessionSnapshotChunk>* AttnServeService::ExportSession(
    grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request) {
  return new ExportReactor(this, context, *request);
}

grpc::ServerReadReactor<v1::SessionSnapshotChunk>* AttnServeService::ImportSession(
    grpc::CallbackServerContext* context, v1::SessionInfo* response) {
  return new ImportReactor(this, context, response);
}

}  // namespace attnserve::server
