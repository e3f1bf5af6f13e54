#include "client/load/metrics_scrape.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace attnserve::load {
namespace {

// Closes the socket when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  HttpUrl out;
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("https is not supported: ", url));
  }
  absl::ConsumePrefix(&rest, "http://");
  const size_t slash = rest.find('/');
  absl::string_view hostport = rest.substr(0, slash);
  if (slash != absl::string_view::npos) out.path = std::string(rest.substr(slash));
  absl::string_view port_text;
  if (absl::ConsumePrefix(&hostport, "[")) {
    const size_t close = hostport.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad IPv6 host in ", url));
    }
    out.host = std::string(hostport.substr(0, close));
    absl::string_view after = hostport.substr(close + 1);
    if (absl::ConsumePrefix(&after, ":")) port_text = after;
  } else {
    const size_t colon = hostport.rfind(':');
    out.host = std::string(hostport.substr(0, colon));
    if (colon != absl::string_view::npos) port_text = hostport.substr(colon + 1);
  }
  if (out.host.empty()) return absl::InvalidArgumentError(absl::StrCat("no host in ", url));
  if (!port_text.empty() &&
      (!absl::SimpleAtoi(port_text, &out.port) || out.port <= 0 || out.port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("bad port in ", url));
  }
  return out;
}

absl::StatusOr<std::string> HttpGet(const HttpUrl& url, double timeout_s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  const std::string port = absl::StrCat(url.port);
  if (int rc = getaddrinfo(url.host.c_str(), port.c_str(), &hints, &addrs); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", url.host, ": ", gai_strerror(rc)));
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_s);
  tv.tv_usec = static_cast<suseconds_t>((timeout_s - std::floor(timeout_s)) * 1e6);
  int fd = -1;
  for (addrinfo* a = addrs; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    // SO_SNDTIMEO bounds connect() too on Linux.
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(addrs);
  if (fd < 0) return Errno(absl::StrCat("cannot connect to ", url.host, ":", url.port));
  Fd sock(fd);

  const std::string request = absl::StrCat("GET ", url.path, " HTTP/1.0\r\nHost: ", url.host,
                                           "\r\nAccept: text/plain\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(sock.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return Errno("cannot send the request");
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[16384];
  // Bounded: a metrics page is small; 64 MiB is far beyond any real one.
  while (response.size() < (64u << 20)) {
    const ssize_t n = recv(sock.get(), buf, sizeof(buf), 0);
    if (n < 0) return Errno("cannot read the response");
    if (n == 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) return absl::DataLossError("truncated HTTP response");
  absl::string_view status_line = absl::string_view(response).substr(0, response.find("\r\n"));
  std::vector<absl::string_view> parts = absl::StrSplit(status_line, ' ');
  if (parts.size() < 2 || !absl::StartsWith(parts[0], "HTTP/")) {
    return absl::DataLossError(absl::StrCat("not an HTTP response: ", status_line));
  }
  if (parts[1] != "200") {
    return absl::UnavailableError(absl::StrCat("HTTP status: ", status_line));
  }
  return response.substr(header_end + 4);
}

std::optional<double> FindPrometheusValue(absl::string_view text, absl::string_view metric) {
  std::optional<double> total;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#' || !absl::ConsumePrefix(&line, metric)) continue;
    // The name must end here: followed by labels or the value, not by a longer name.
    if (line.empty() || (line[0] != '{' && line[0] != ' ' && line[0] != '\t')) continue;
    if (line[0] == '{') {
      const size_t close = line.find('}');
      if (close == absl::string_view::npos) continue;
      line.remove_prefix(close + 1);
    }
    line = absl::StripLeadingAsciiWhitespace(line);
    // The value, then an optional timestamp.
    absl::string_view value = line.substr(0, line.find_first_of(" \t"));
    double v = 0;
    if (!absl::SimpleAtod(value, &v)) continue;
    total = total.value_or(0.0) + v;
  }
  return total;
}

absl::StatusOr<double> ScrapeProcessCpuSeconds(const HttpUrl& url, double timeout_s) {
  absl::StatusOr<std::string> body = HttpGet(url, timeout_s);
  if (!body.ok()) return body.status();
  std::optional<double> v = FindPrometheusValue(*body, "process_cpu_seconds_total");
  if (!v) return absl::NotFoundError("the endpoint has no process_cpu_seconds_total");
  return *v;
}

}  // namespace attnserve::load
