// Where attnserve-cli's calls go: one stub for --target, or a SessionRouter (--route_sessions
// or a --target list) that sends each session's calls to the instance holding it. Used by one
// subcommand at a time, on the main thread.
#ifndef ATTNSERVE_CLIENT_CLI_CALLS_H_
#define ATTNSERVE_CLIENT_CLI_CALLS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "attnserve/v1/inference.grpc.pb.h"
#include "client/cli/flags.h"
#include "client/cli/printer.h"
#include "client/common/grpc_status.h"
#include "client/common/session_router.h"

namespace attnserve::cli {

using Stub = v1::AttnServe::Stub;
using Route = client::SessionRouter::Route;

// A stub on --target's channel.
std::unique_ptr<Stub> NewStub();

// The --timeout deadline on `ctx` (none when --timeout is 0).
void SetDeadline(grpc::ClientContext& ctx);

// Where a session-bearing subcommand's calls go: straight to --target, or, with
// --route_sessions (or a --target list), through a SessionRouter to the instance that holds
// the session.
class Calls {
 public:
  // False (after printing why) when the target cannot be routed.
  bool Init(Printer& out, const std::string& sub);

  client::SessionRouter* router() { return router_.get(); }

  // New sessions (and calls without one) go to the next instance in turn.
  Route NewSession() {
    return router_ ? router_->ForNewSession() : Route{absl::GetFlag(FLAGS_target), direct_.get()};
  }
  // How many instances a new session may try (each answering UNAVAILABLE sends it to the next).
  int NewSessionAttempts() {
    return router_ ? static_cast<int>(router_->AllEndpoints().size()) : 1;
  }
  // Some instance, for questions every instance answers alike (the models' vocabularies).
  Route AnyInstance() { return router_ ? router_->AllEndpoints().front() : NewSession(); }

  // The instance that holds `session_id`; false (after printing why) when none does.
  bool ForSession(Printer& out, const std::string& sub, const std::string& session_id,
                  Route* route);

  void Remember(const std::string& session_id, const v1::ServerIdentity& server,
                const Route& route) {
    if (router_) router_->Remember(session_id, server, route.endpoint);
  }

  // A failed call, with the instance named when routing.
  grpc::Status Failed(const Route& route, const std::string& session_id,
                      const grpc::Status& status) {
    return router_ ? router_->CallFailed(route, session_id, status) : status;
  }

 private:
  std::unique_ptr<Stub> direct_;
  std::unique_ptr<client::SessionRouter> router_;
};

// " on instance NAME (ADDRESS)", or "" when the server did not say.
std::string FormatServer(const v1::ServerIdentity& server);

}  // namespace attnserve::cli

#endif  // ATTNSERVE_CLIENT_CLI_CALLS_H_
