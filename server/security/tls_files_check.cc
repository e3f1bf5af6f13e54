#include "server/security/tls_files_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"

namespace attnserve::server {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

absl::Status Bad(const std::string& flag, const std::string& path, absl::string_view what) {
  ERR_clear_error();  // OpenSSL's queue holds the parse errors; they are ours to drop
  return absl::InvalidArgumentError(absl::StrCat(flag, "=", path, ": ", what));
}

absl::StatusOr<std::string> ReadWhole(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Bad(flag, path, "cannot read the file");
  std::string text;
  text.resize(kMaxTlsFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxTlsFileBytes) {
    return Bad(flag, path, absl::StrCat("larger than ", kMaxTlsFileBytes, " bytes"));
  }
  if (text.empty()) return Bad(flag, path, "the file is empty");
  return text;
}

Bio MemoryBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The PEM certificates of `text`, in order; none when the text holds none.
std::vector<Certificate> Certificates(const std::string& text) {
  std::vector<Certificate> out;
  Bio bio = MemoryBio(text);
  while (bio != nullptr) {
    X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (x == nullptr) break;
    out.emplace_back(x);
  }
  ERR_clear_error();  // the read past the last certificate
  return out;
}

}  // namespace

absl::StatusOr<TlsMaterial> ReadTlsMaterial(const std::string& cert_path,
                                            const std::string& key_path,
                                            const std::string& client_ca_path) {
  TlsMaterial m;
  absl::StatusOr<std::string> cert = ReadWhole("--tls_cert", cert_path);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadWhole("--tls_key", key_path);
  if (!key.ok()) return key.status();
  m.cert_chain = *std::move(cert);
  m.private_key = *std::move(key);
  const std::vector<Certificate> chain = Certificates(m.cert_chain);
  if (chain.empty()) return Bad("--tls_cert", cert_path, "no PEM certificate in the file");
  Bio key_bio = MemoryBio(m.private_key);
  // No passphrase callback: an encrypted key fails here rather than prompting on the terminal.
  Key private_key(key_bio == nullptr ? nullptr
                                     : PEM_read_bio_PrivateKey(
                                           key_bio.get(), nullptr,
                                           [](char*, int, int, void*) { return 0; }, nullptr));
  if (private_key == nullptr) {
    return Bad("--tls_key", key_path, "not an unencrypted PEM private key");
  }
  if (X509_check_private_key(chain.front().get(), private_key.get()) != 1) {
    return Bad("--tls_key", key_path,
               absl::StrCat("is not the key of the first certificate of --tls_cert=", cert_path));
  }
  if (!client_ca_path.empty()) {
    absl::StatusOr<std::string> ca = ReadWhole("--tls_client_ca", client_ca_path);
    if (!ca.ok()) return ca.status();
    m.client_ca = *std::move(ca);
    if (Certificates(m.client_ca).empty()) {
      return Bad("--tls_client_ca", client_ca_path, "no PEM certificate in the file");
    }
  }
  return m;
}

}  // namespace attnserve::server
