#include "client/common/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/session_header.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle: connect with TLS and verify the server's certificate against it.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for servers with mutual TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "The name to verify in the server's certificate, when it differs from the address "
          "dialled (pod IPs with --route_sessions: e.g. the Service's DNS name).");
ABSL_FLAG(std::string, token, "",
          "Bearer token sent with every call (default: $ATTNSERVE_TOKEN; prefer the variable: "
          "a flag shows in the process list). Needs --tls_ca.");

namespace attnserve::client {
namespace {

absl::Mutex security_mu;
ChannelSecurity* security ABSL_GUARDED_BY(security_mu) = nullptr;

absl::Status ReadFile(const char* flag, const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": cannot read"));
  std::ostringstream text;
  text << in.rdbuf();
  *out = text.str();
  return absl::OkStatus();
}

}  // namespace

void SetChannelSecurity(ChannelSecurity s) {
  absl::MutexLock lock(&security_mu);
  delete security;
  security = new ChannelSecurity(std::move(s));
}

absl::Status ConfigureChannelSecurityFromFlags() {
  ChannelSecurity s;
  if (const std::string path = absl::GetFlag(FLAGS_tls_ca); !path.empty()) {
    if (absl::Status read = ReadFile("tls_ca", path, &s.ca_pem); !read.ok()) return read;
  }
  const std::string cert = absl::GetFlag(FLAGS_tls_cert), key = absl::GetFlag(FLAGS_tls_key);
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!cert.empty()) {
    if (absl::Status read = ReadFile("tls_cert", cert, &s.cert_pem); !read.ok()) return read;
    if (absl::Status read = ReadFile("tls_key", key, &s.key_pem); !read.ok()) return read;
  }
  s.server_name = absl::GetFlag(FLAGS_tls_server_name);
  s.token = absl::GetFlag(FLAGS_token);
  if (s.token.empty()) {
    if (const char* env = std::getenv("ATTNSERVE_TOKEN"); env != nullptr) s.token = env;
  }
  if (s.ca_pem.empty() && (!s.token.empty() || !s.cert_pem.empty())) {
    return absl::InvalidArgumentError(
        "a token or a client certificate needs --tls_ca (it would travel in plaintext)");
  }
  SetChannelSecurity(std::move(s));
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, int index) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  // Channels with different arguments do not share a subchannel (connection).
  if (index > 0) args.SetInt("attnserve.channel_index", index);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  {
    absl::MutexLock lock(&security_mu);
    if (security != nullptr && !security->ca_pem.empty()) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = security->ca_pem;
      ssl.pem_cert_chain = security->cert_pem;
      ssl.pem_private_key = security->key_pem;
      credentials = grpc::SslCredentials(ssl);
      if (!security->server_name.empty()) {
        args.SetSslTargetNameOverride(security->server_name);
      }
      if (!security->token.empty()) {
        credentials = grpc::CompositeChannelCredentials(
            credentials, grpc::AccessTokenCredentials(security->token));
      }
    }
  }
  return grpc::CreateCustomChannel(target, credentials, args);
}

std::chrono::system_clock::time_point DeadlineAfter(double timeout_s) {
  if (timeout_s <= 0) return std::chrono::system_clock::now() + std::chrono::hours(24 * 365);
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(timeout_s));
}

void AddSessionHeader(grpc::ClientContext& context, const std::string& session_id) {
  if (!session_id.empty()) context.AddMetadata(kSessionHeader, session_id);
}

}  // namespace attnserve::client
