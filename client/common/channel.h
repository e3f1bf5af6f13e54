// Channels to an attnserve server, as both client tools open them.
#ifndef ATTNSERVE_CLIENT_COMMON_CHANNEL_H_
#define ATTNSERVE_CLIENT_COMMON_CHANNEL_H_

#include <grpcpp/channel.h>

#include <chrono>
#include <memory>
#include <string>

namespace attnserve::client {

// An insecure channel to `target` ("host:port") that accepts messages up to 1 GiB (whole-
// sequence logits are large). `index` > 0 makes a channel with its own connection rather than
// one shared with the other channels of this process (load generation spreads over several).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, int index = 0);

// The deadline `timeout_s` seconds from now (far in the future when timeout_s <= 0).
std::chrono::system_clock::time_point DeadlineAfter(double timeout_s);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_COMMON_CHANNEL_H_
