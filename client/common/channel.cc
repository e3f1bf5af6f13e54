#include "client/common/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

namespace attnserve::client {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, int index) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  // Channels with different arguments do not share a subchannel (connection).
  if (index > 0) args.SetInt("attnserve.channel_index", index);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

std::chrono::system_clock::time_point DeadlineAfter(double timeout_s) {
  if (timeout_s <= 0) return std::chrono::system_clock::now() + std::chrono::hours(24 * 365);
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(timeout_s));
}

}  // namespace attnserve::client
