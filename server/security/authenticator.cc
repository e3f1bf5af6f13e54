#include "server/security/authenticator.h"

#include <grpcpp/server_context.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace attnserve::server {
namespace {

absl::Status Unauthenticated() {
  return absl::UnauthenticatedError(
      "missing or invalid credentials: send 'authorization: Bearer TOKEN' (or a client "
      "certificate this server trusts)");
}

bool Sha256(absl::string_view data, unsigned char out[32]) {
  unsigned int n = 0;
  return EVP_Digest(data.data(), data.size(), out, &n, EVP_sha256(), nullptr) == 1 && n == 32;
}

bool ParseHex(absl::string_view hex, unsigned char out[32]) {
  if (hex.size() != 64) return false;
  for (int i = 0; i < 32; ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[2 * i + k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    out[i] = static_cast<unsigned char>(v);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParsePrincipalList(absl::string_view text) {
  std::vector<std::string> out;
  std::string current;
  auto finish = [&] {
    absl::string_view name = absl::StripAsciiWhitespace(current);
    if (!name.empty()) out.emplace_back(name);
    current.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\') {
      if (i + 1 == text.size()) {
        return absl::InvalidArgumentError(
            "--admin_principals ends with a lone '\\' (it escapes the next character)");
      }
      current.push_back(text[i]);
      current.push_back(text[++i]);
    } else if (text[i] == ';') {
      finish();
    } else {
      current.push_back(text[i]);
    }
  }
  finish();
  return out;
}

Authenticator::Authenticator(AuthOptions options)
    : options_(std::move(options)),
      admins_(options_.admin_principals.begin(), options_.admin_principals.end()) {}

std::string Authenticator::TokenHash(absl::string_view token) {
  unsigned char digest[32];
  if (!Sha256(token, digest)) return "";
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : digest) {
    out.push_back(hex[b >> 4]);
    out.push_back(hex[b & 15]);
  }
  return out;
}

absl::StatusOr<std::vector<Authenticator::Entry>> Authenticator::ReadTokens(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::UnavailableError(absl::StrCat("cannot read --auth_tokens_file ", path));
  std::vector<Entry> entries;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    const size_t colon = text.find(':');
    Entry e;
    if (colon == absl::string_view::npos ||
        !ParseHex(absl::StripAsciiWhitespace(text.substr(colon + 1)), e.digest.data())) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " line ", number,
                       ": expected 'principal: sha256-of-the-token' (64 lowercase hex digits)"));
    }
    e.principal = std::string(absl::StripAsciiWhitespace(text.substr(0, colon)));
    if (e.principal.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " line ", number, ": no principal"));
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(AuthOptions options) {
  std::unique_ptr<Authenticator> auth(new Authenticator(std::move(options)));
  if (!auth->options_.tokens_file.empty()) {
    absl::StatusOr<std::vector<Entry>> entries = ReadTokens(auth->options_.tokens_file);
    if (!entries.ok()) return entries.status();
    absl::MutexLock lock(&auth->mu_);
    auth->entries_ = *std::move(entries);
    struct stat st;
    if (::stat(auth->options_.tokens_file.c_str(), &st) == 0) {
      auth->file_mtime_ns_ = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
      auth->file_size_ = st.st_size;
    }
    auth->last_check_ = absl::Now();
  }
  return auth;
}

void Authenticator::MaybeReload() {
  if (options_.tokens_file.empty()) return;
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now - last_check_ < absl::Seconds(1)) return;
  last_check_ = now;
  struct stat st;
  if (::stat(options_.tokens_file.c_str(), &st) != 0) {
    // Gone (a Secret being swapped, say): keep the last tokens until a file is back.
    return;
  }
  const int64_t mtime = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  if (mtime == file_mtime_ns_ && st.st_size == file_size_) return;
  absl::StatusOr<std::vector<Entry>> entries = ReadTokens(options_.tokens_file);
  if (!entries.ok()) {
    std::cerr << "attnserve-server: keeping the previous tokens: " << entries.status().message()
              << std::endl;
    return;
  }
  entries_ = *std::move(entries);
  file_mtime_ns_ = mtime;
  file_size_ = st.st_size;
  std::cout << "attnserve-server: re-read " << options_.tokens_file << ": " << entries_.size()
            << " tokens" << std::endl;
}

int Authenticator::token_count() {
  MaybeReload();
  absl::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

Caller Authenticator::Named(std::string principal) const {
  Caller caller;
  caller.admin = admins_.contains(principal);
  caller.principal = std::move(principal);
  return caller;
}

absl::StatusOr<Caller> Authenticator::Authenticate(absl::string_view authorization,
                                                   const std::string& certificate_subject) {
  if (!enabled()) return Caller{};
  if (!authorization.empty()) {
    absl::string_view token = authorization;
    if (!absl::ConsumePrefix(&token, "Bearer ") || token.empty() || options_.tokens_file.empty()) {
      return Unauthenticated();
    }
    Digest digest;
    if (!Sha256(token, digest.data())) return Unauthenticated();
    MaybeReload();
    absl::MutexLock lock(&mu_);
    const Entry* match = nullptr;
    for (const Entry& e : entries_) {  // every entry, whatever matched before
      if (CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0) match = &e;
    }
    if (match == nullptr) return Unauthenticated();
    return Named(match->principal);
  }
  // With a tokens file every call needs a token (the certificate then only admits the
  // machine); without one, the certificate's subject is the principal.
  if (options_.client_certificates && options_.tokens_file.empty() &&
      !certificate_subject.empty()) {
    return Named(certificate_subject);
  }
  return Unauthenticated();
}

Authenticator::Credentials Authenticator::CredentialsOf(const grpc::ServerContextBase& context) {
  Credentials c;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    c.authorization.assign(it->second.data(), it->second.size());
  }
  if (std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
      auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& value : auth->FindPropertyValues("x509_subject")) {
      c.certificate_subject.assign(value.data(), value.size());
    }
    if (c.certificate_subject.empty()) {  // older gRPC: the common name only
      for (const grpc::string_ref& value : auth->FindPropertyValues("x509_common_name")) {
        c.certificate_subject = absl::StrCat("CN=", std::string(value.data(), value.size()));
      }
    }
  }
  return c;
}

absl::StatusOr<Caller> Authenticator::Authenticate(const grpc::ServerContextBase& context) {
  if (!enabled()) return Caller{};
  return Authenticate(CredentialsOf(context));
}

}  // namespace attnserve::server
