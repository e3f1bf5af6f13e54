#include "client/load/report_table.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace attnserve::load {
namespace {

std::string Ms(double seconds) { return absl::StrFormat("%.2f", seconds * 1e3); }

std::string Errors(const std::map<std::string, uint64_t>& errors) {
  if (errors.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [code, n] : errors) parts.push_back(absl::StrCat(code, ":", n));
  return absl::StrJoin(parts, ",");
}

std::string Bytes(double b) {
  if (b >= 1 << 20) return absl::StrFormat("%.1fM", b / (1 << 20));
  if (b >= 1 << 10) return absl::StrFormat("%.1fK", b / (1 << 10));
  return absl::StrFormat("%.0f", b);
}

}  // namespace

std::string ReportToTable(const RunReport& report) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"mode", "load", "variant", "length", "sent", "ok", "failed", "errors", "req/s",
                  "tok/s", "p50_ms", "p90_ms", "p99_ms", "max_ms", "ttfr_p50_ms", "state",
                  "cpu_s"});
  for (const PhaseResult& r : report.results) {
    const PhaseSummary s = Summarize(r);
    const PhaseTotals& t = r.totals;
    std::vector<std::string> row = {r.key.mode,
                                    LoadLabel(r.key.load),
                                    r.key.variant,
                                    absl::StrCat(r.key.length),
                                    absl::StrCat(t.sent),
                                    absl::StrCat(t.succeeded),
                                    absl::StrCat(t.failed),
                                    Errors(t.errors),
                                    absl::StrFormat("%.2f", s.requests_per_s),
                                    absl::StrFormat("%.0f", s.tokens_per_s)};
    if (s.latency_s) {
      for (double v : {s.latency_s->p50, s.latency_s->p90, s.latency_s->p99, s.latency_s->max}) {
        row.push_back(Ms(v));
      }
    } else {
      row.insert(row.end(), 4, "-");
    }
    row.push_back(s.first_result_s ? Ms(s.first_result_s->p50) : "-");
    row.push_back(s.state_bytes_mean ? Bytes(*s.state_bytes_mean) : "-");
    row.push_back(r.server_cpu_s ? absl::StrFormat("%.2f", *r.server_cpu_s) : "-");
    rows.push_back(std::move(row));
  }

  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      // Text columns (mode, load, variant, errors) left-aligned, numbers right-aligned.
      const bool left = i <= 2 || i == 7;
      const std::string pad(widths[i] - row[i].size(), ' ');
      line += left ? row[i] + pad : pad + row[i];
      if (i + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  for (const SkippedVariant& s : report.skipped) {
    out += absl::StrCat("skipped ", s.variant, " in ", s.mode, " mode: ", s.reason, "\n");
  }
  return out;
}

}  // namespace attnserve::load
