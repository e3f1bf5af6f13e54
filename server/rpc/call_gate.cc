#include "server/rpc/call_gate.h"

#include "absl/strings/str_cat.h"

namespace attnserve::server {

absl::StatusOr<Caller> AuthenticateCall(const grpc::ServerContextBase& context,
                                        Authenticator* authenticator, int64_t max_metadata_bytes) {
  // The per-call metadata limit, before anything reads the metadata: only this call fails
  // (gRPC's own limit, above ours, would fail the connection's other calls too).
  if (max_metadata_bytes > 0) {
    int64_t bytes = 0;
    for (const auto& [key, value] : context.client_metadata()) {
      bytes += static_cast<int64_t>(key.size() + value.size()) + 32;  // as HPACK counts it
    }
    if (bytes > max_metadata_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("the call's metadata is ", bytes,
                                                       " bytes, above --max_metadata_bytes ",
                                                       max_metadata_bytes));
    }
  }
  absl::StatusOr<Caller> caller =
      authenticator == nullptr ? Caller{} : authenticator->Authenticate(context);
  if (caller.ok()) {
    caller->client = caller->principal.empty() ? absl::StrCat("peer:", context.peer())
                                               : absl::StrCat("principal:", caller->principal);
  }
  return caller;
}

}  // namespace attnserve::server
