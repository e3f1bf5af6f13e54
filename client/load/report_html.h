// The HTML report of attnserve-load (--html FILE): one self-contained page (inline CSS and
// SVG, no scripts, no network) with the run's settings, the results table and the plots:
// latency p50/p99, tokens/s (and time to first result for streams) against length, one line
// per variant, for each mode and load point; and, when several load points of one kind were
// run, latency against concurrency (or offered rate) for each mode and length.
#ifndef ATTNSERVE_CLIENT_LOAD_REPORT_HTML_H_
#define ATTNSERVE_CLIENT_LOAD_REPORT_HTML_H_

#include <string>

#include "client/load/report.h"

namespace attnserve::load {

std::string ReportToHtml(const RunReport& report);

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_REPORT_HTML_H_
