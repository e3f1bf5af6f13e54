// The identity an instance returns with its sessions (v1::ServerIdentity): its name and the
// address at which clients reach it. With several instances (pods behind a headless
// Service), sessions live in one instance's memory; clients use the identity to send a
// session's later calls to the instance that holds it (client/common/session_router.h).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "attnserve/v1/inference.pb.h"

namespace attnserve::server {

// `instance_name` empty: the hostname (the pod name in Kubernetes). `advertise_address`
// empty: none (clients use the address they connected to); otherwise host:port or
// [ipv6]:port with a port in 1..65535, else INVALID_ARGUMENT saying what was expected.
absl::StatusOr<v1::ServerIdentity> MakeServerIdentity(const std::string& instance_name,
                                                      const std::string& advertise_address);

}  // namespace attnserve::server
