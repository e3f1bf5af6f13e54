#include "client/cli/calls.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/cli/flags.h"
#include "client/common/channel.h"

namespace attnserve::cli {

std::unique_ptr<Stub> NewStub() {
  return v1::AttnServe::NewStub(client::MakeChannel(absl::GetFlag(FLAGS_target)));
}

void SetDeadline(grpc::ClientContext& ctx) {
  if (absl::GetFlag(FLAGS_timeout) > 0) {
    ctx.set_deadline(client::DeadlineAfter(absl::GetFlag(FLAGS_timeout)));
  }
}

std::string FormatServer(const v1::ServerIdentity& server) {
  if (server.instance_name().empty() && server.advertise_address().empty()) return "";
  std::string out = absl::StrCat(" on instance ", server.instance_name());
  if (!server.advertise_address().empty())
    absl::StrAppend(&out, " (", server.advertise_address(), ")");
  return out;
}

bool Calls::Init(Printer& out, const std::string& sub) {
  const std::string target = absl::GetFlag(FLAGS_target);
  if (!absl::GetFlag(FLAGS_route_sessions) && !client::SessionRouter::IsList(target)) {
    direct_ = NewStub();
    return true;
  }
  client::SessionRouter::Options options;
  if (absl::GetFlag(FLAGS_timeout) > 0) options.lookup_timeout_s = absl::GetFlag(FLAGS_timeout);
  absl::StatusOr<std::unique_ptr<client::SessionRouter>> router =
      client::SessionRouter::Create(target, options);
  if (!router.ok()) {
    out.Error(sub, client::ToGrpcStatus(router.status()));
    return false;
  }
  router_ = *std::move(router);
  return true;
}

bool Calls::ForSession(Printer& out, const std::string& sub, const std::string& session_id,
                       Route* route) {
  if (!router_) {
    *route = NewSession();
    return true;
  }
  absl::StatusOr<Route> found = router_->ForSession(session_id);
  if (!found.ok()) {
    out.Error(sub, client::ToGrpcStatus(found.status()));
    return false;
  }
  *route = *found;
  return true;
}

}  // namespace attnserve::cli
