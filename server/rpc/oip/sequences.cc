#include "server/rpc/oip/sequences.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"

namespace attnserve::server::oip {

std::string SequenceSessionId(const std::string& principal, const std::string& sequence_key) {
  std::string input("attnserve-oip-sequence");
  input.push_back('\0');
  input += principal;
  input.push_back('\0');
  input += sequence_key;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(input.data(), input.size(), digest, &length, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), 16));
}

}  // namespace attnserve::server::oip
