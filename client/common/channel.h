// Channels to an attnserve server, as both client tools open them.
#ifndef ATTNSERVE_CLIENT_COMMON_CHANNEL_H_
#define ATTNSERVE_CLIENT_COMMON_CHANNEL_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace attnserve::client {

// How channels reach the server: plaintext (all empty), TLS verified against `ca_pem`, with a
// client certificate for mutual TLS, and a bearer token sent with every call. PEM contents,
// not paths.
struct ChannelSecurity {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  std::string server_name;  // name to verify in the server's certificate (empty: the target's)
  std::string token;        // sent as "authorization: Bearer <token>"; needs TLS
};

// Sets the security of every channel MakeChannel makes from now on (the tools call it once,
// from their flags, before any channel).
void SetChannelSecurity(ChannelSecurity security);

// From the common flags --tls_ca, --tls_cert, --tls_key (files), --tls_server_name and --token (or,
// when it is empty, the environment variable ATTNSERVE_TOKEN; a token is never printed): reads the
// files and calls SetChannelSecurity. INVALID_ARGUMENT naming the flag for a file that cannot be
// read, a certificate without its key, or a token or client certificate without --tls_ca.
absl::Status ConfigureChannelSecurityFromFlags();

// A channel to `target` ("host:port") that accepts messages up to 1 GiB (whole-sequence logits
// are large), secured as SetChannelSecurity said. `index` > 0 makes a channel with its own
// connection rather than one shared with the other channels of this process (load generation
// spreads over several).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, int index = 0);

// Adds the x-attnserve-session header (common/session_header.h) for a call about `session_id`,
// so a gateway routes it to the replica that holds the session; nothing for an empty id.
void AddSessionHeader(grpc::ClientContext& context, const std::string& session_id);

// The deadline `timeout_s` seconds from now (far in the future when timeout_s <= 0).
std::chrono::system_clock::time_point DeadlineAfter(double timeout_s);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_COMMON_CHANNEL_H_
