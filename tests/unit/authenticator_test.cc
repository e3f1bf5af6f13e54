// The authenticator (server/security/authenticator.h): tokens file parsing, bearer tokens,
// certificate subjects, admins, reloads.
#include "server/security/authenticator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"

namespace attnserve::server {
namespace {

class TokensFile {
 public:
  TokensFile() {
    char pattern[] = "/tmp/attnserve_tokens_XXXXXX";
    const int fd = ::mkstemp(pattern);
    ::close(fd);
    path_ = pattern;
  }
  ~TokensFile() { std::remove(path_.c_str()); }
  void Write(const std::string& text) {
    const std::string tmp = path_ + ".new";
    std::ofstream(tmp) << text;
    std::rename(tmp.c_str(), path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(AuthenticatorTest, TokensCertificatesAndAdmins) {
  TokensFile file;
  file.Write("# comment\n\nalice: " + Authenticator::TokenHash("a-token") +
             "\n  root :  " + Authenticator::TokenHash("r-token") + "  \n");
  AuthOptions options;
  options.tokens_file = file.path();
  options.client_certificates = true;
  options.admin_principals = {"root"};
  auto auth = Authenticator::Create(options);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->enabled());
  EXPECT_EQ((*auth)->token_count(), 2);
  auto alice = (*auth)->Authenticate("Bearer a-token", "");
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->principal, "alice");
  EXPECT_FALSE(alice->admin);
  EXPECT_TRUE(alice->CanAccess("alice"));
  EXPECT_FALSE(alice->CanAccess("bob"));
  EXPECT_FALSE(alice->CanAccess(""));
  auto root = (*auth)->Authenticate("Bearer r-token", "");
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(root->admin && root->CanAccess("alice"));
  for (const char* bad :
       {"Bearer", "Bearer ", "Bearer a-token2", "Basic a-token", "a-token", "bearer a-token"}) {
    EXPECT_EQ((*auth)->Authenticate(bad, "").status().code(), absl::StatusCode::kUnauthenticated)
        << bad;
  }
  // With a tokens file every call needs a token, whatever its certificate.
  EXPECT_FALSE((*auth)->Authenticate("Bearer nope", "CN=bob").ok());
  EXPECT_FALSE((*auth)->Authenticate("", "CN=bob").ok());
  EXPECT_EQ((*auth)->Authenticate("", "").status().code(), absl::StatusCode::kUnauthenticated);
  // Without one, the certificate's subject is the principal.
  AuthOptions certificates_only;
  certificates_only.client_certificates = true;
  auto by_certificate = Authenticator::Create(certificates_only);
  auto bob = (*by_certificate)->Authenticate("", "CN=bob");
  ASSERT_TRUE(bob.ok());
  EXPECT_EQ(bob->principal, "CN=bob");
  EXPECT_FALSE((*by_certificate)->Authenticate("", "").ok());
  EXPECT_FALSE((*by_certificate)->Authenticate("Bearer x", "CN=bob").ok()) << "no tokens here";
}

// Issue #27: --admin_principals was split at commas, so the documented subject
// "CN=admin,O=team" could never be admin and its fragment "O=team" became one.
TEST(AuthenticatorTest, AdminSubjectsAreWholeAndComparedExactly) {
  auto admins = ParsePrincipalList(" CN=admin,O=team ; root;;CN=a\\;b,O=x;");
  ASSERT_TRUE(admins.ok()) << admins.status();
  EXPECT_EQ(*admins, (std::vector<std::string>{"CN=admin,O=team", "root", "CN=a\\;b,O=x"}));
  EXPECT_FALSE(ParsePrincipalList("root\\").ok());
  EXPECT_TRUE(ParsePrincipalList("")->empty());

  AuthOptions options;
  options.client_certificates = true;
  options.admin_principals = *admins;
  auto auth = Authenticator::Create(options);
  ASSERT_TRUE(auth.ok()) << auth.status();
  auto admin = (*auth)->Authenticate("", "CN=admin,O=team");
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->admin);
  EXPECT_TRUE(admin->CanAccess("CN=alice,O=team"));
  for (const char* fragment : {"O=team", "CN=admin", "CN=admin,O=team,OU=x", "cn=admin,o=team"}) {
    auto caller = (*auth)->Authenticate("", fragment);
    ASSERT_TRUE(caller.ok()) << fragment;
    EXPECT_FALSE(caller->admin) << fragment;
    EXPECT_FALSE(caller->CanAccess("CN=alice,O=team")) << fragment;
  }
  EXPECT_TRUE((*auth)->Authenticate("", "CN=a\\;b,O=x")->admin);
}

TEST(AuthenticatorTest, ReloadsOnChangeAndKeepsTheLastGoodFile) {
  TokensFile file;
  file.Write("alice: " + Authenticator::TokenHash("a") + "\n");
  AuthOptions options;
  options.tokens_file = file.path();
  auto auth = Authenticator::Create(options);
  ASSERT_TRUE((*auth)->Authenticate("Bearer a", "").ok());
  file.Write("bob: " + Authenticator::TokenHash("b") + "\n");
  absl::SleepFor(absl::Milliseconds(1100));  // reloads are checked at most once a second
  EXPECT_FALSE((*auth)->Authenticate("Bearer a", "").ok()) << "revoked";
  EXPECT_TRUE((*auth)->Authenticate("Bearer b", "").ok());
  file.Write("this is not a tokens file\n");
  absl::SleepFor(absl::Milliseconds(1100));
  EXPECT_TRUE((*auth)->Authenticate("Bearer b", "").ok()) << "a bad file keeps the last good one";
}

TEST(AuthenticatorTest, RefusesBadFilesAtStartAndIsOffWithoutCredentials) {
  TokensFile file;
  for (const std::string& bad :
       std::vector<std::string>{"alice " + Authenticator::TokenHash("a"), "alice: 1234",
                                ": " + Authenticator::TokenHash("a"),
                                "alice: " + Authenticator::TokenHash("a").substr(1) + "Z"}) {
    file.Write(bad + "\n");
    AuthOptions options;
    options.tokens_file = file.path();
    EXPECT_EQ(Authenticator::Create(options).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  AuthOptions missing;
  missing.tokens_file = "/nonexistent/tokens";
  EXPECT_FALSE(Authenticator::Create(missing).ok());
  auto off = Authenticator::Create(AuthOptions{});
  EXPECT_FALSE((*off)->enabled());
  auto anonymous = (*off)->Authenticate("Bearer anything", "");
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ(anonymous->principal, "");
  EXPECT_EQ(Authenticator::TokenHash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2
}

}  // namespace
}  // namespace attnserve::server
