// What every protocol door (server/rpc/attnserve/, server/rpc/oip/) asks of a call before it
// reads the request, done once here so that both doors behave the same: the per-call metadata
// limit, then who is calling. Deadlines and cancellation reach the scheduler's job the same
// way from both doors (CallDeadline in server/grpc_status.h, the context's IsCancelled).
#pragma once

#include <grpcpp/server_context.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/security/authenticator.h"

namespace attnserve::server {

// The caller of a call: RESOURCE_EXHAUSTED when its metadata is above `max_metadata_bytes`
// (names, values and 32 bytes an entry, as HPACK counts; 0: no limit), else the
// authenticator's answer (null: no authentication, the anonymous principal), with
// Caller::client named for the scheduler's queue shares (the principal, or the connection's
// peer without authentication). `authenticator` is borrowed; thread-safe.
absl::StatusOr<Caller> AuthenticateCall(const grpc::ServerContextBase& context,
                                        Authenticator* authenticator, int64_t max_metadata_bytes);

}  // namespace attnserve::server
