// Reads one counter from a Prometheus text endpoint (attnserve-load --metrics_url), with a
// minimal HTTP/1.0 GET over a plain socket: no TLS, no redirects, no chunked encoding (an
// HTTP/1.0 server sends the body as is and closes the connection).
#ifndef ATTNSERVE_CLIENT_LOAD_METRICS_SCRAPE_H_
#define ATTNSERVE_CLIENT_LOAD_METRICS_SCRAPE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::load {

struct HttpUrl {
  std::string host;
  int port = 80;
  std::string path = "/";
};

// Parses "http://HOST[:PORT][/PATH]" (HOST may be "[v6]"); the scheme may be left out.
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

// GETs the URL and returns the body of a 200 response. Blocks for at most about
// `timeout_s` per socket operation.
absl::StatusOr<std::string> HttpGet(const HttpUrl& url, double timeout_s);

// The value of the sample(s) named `metric` in Prometheus text exposition format, summed over
// label sets; nullopt when the text has no such sample.
std::optional<double> FindPrometheusValue(absl::string_view text, absl::string_view metric);

// process_cpu_seconds_total at `url`: NotFound when the endpoint lacks it, other errors when
// it cannot be read.
absl::StatusOr<double> ScrapeProcessCpuSeconds(const HttpUrl& url, double timeout_s);

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_METRICS_SCRAPE_H_
