// The one place internal absl::Status codes become gRPC codes. The codes keep their meaning:
// INVALID_ARGUMENT bad input, NOT_FOUND unknown model or session, RESOURCE_EXHAUSTED a limit,
// FAILED_PRECONDITION a non-causal variant asked to stream, ABORTED a sequence-number gap,
// UNAVAILABLE draining; anything else the server did not expect is INTERNAL.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace attnserve::server {

grpc::Status ToGrpcStatus(const absl::Status& status);
// The same, for a call that finishes with it on `context`: a session leased by another replica
// (sessions/session_lease.h) also puts that replica's address in the trailing metadata
// x-attnserve-session-owner, for a router or client to retry there (and, for a session held
// elsewhere, the session's id in x-attnserve-held-session).
grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContextBase* context);

// "OK", "INVALID_ARGUMENT", ... as gRPC spells the codes (for metric labels and logs).
const char* GrpcCodeName(grpc::StatusCode code);

// The call's deadline as the client set it (InfiniteFuture for none).
absl::Time CallDeadline(const grpc::ServerContextBase& context);

}  // namespace attnserve::server
