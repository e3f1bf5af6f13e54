// The server's flags: security
// Transport security and authentication (README: Security).
// Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve gRPC over TLS (with --tls_key). Empty: plaintext.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require client certificates signed by it (mutual TLS); a client "
          "certificate's subject is then a principal.");
ABSL_FLAG(int, tls_reload_interval_s, 10,
          "Seconds between re-reads of the TLS files (rotated certificates take effect for new "
          "connections without a restart).");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "File of 'principal: sha256-hex-of-token' lines: calls must send 'authorization: "
          "Bearer TOKEN' (or, with --tls_client_ca, a client certificate). Re-read on change.");
ABSL_FLAG(std::string, admin_principals, "",
          "Principals that see and close every session, separated by ';' and compared exactly "
          "(a certificate subject is one principal with its commas: "
          "--admin_principals='CN=admin,O=team;root').");
