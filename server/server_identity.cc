#include "server/server_identity.h"

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace attnserve::server {
namespace {

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// host:port or [ipv6]:port, with a non-empty host and a port in 1..65535.
bool IsHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return false;
  }
  const absl::string_view host = address.substr(0, colon);
  if (host.front() == '[') return host.size() > 2 && host.back() == ']';
  // An unbracketed IPv6 address is ambiguous: its last group would read as the port.
  return host.find(':') == absl::string_view::npos;
}

}  // namespace

absl::StatusOr<v1::ServerIdentity> MakeServerIdentity(const std::string& instance_name,
                                                      const std::string& advertise_address) {
  if (!advertise_address.empty() && !IsHostPort(advertise_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--advertise_address must be host:port or [ipv6]:port with a port in 1..65535 (in "
        "Kubernetes: $(POD_IP):50051), got '",
        advertise_address, "'"));
  }
  v1::ServerIdentity identity;
  identity.set_instance_name(instance_name.empty() ? Hostname() : instance_name);
  identity.set_advertise_address(advertise_address);
  return identity;
}

}  // namespace attnserve::server
