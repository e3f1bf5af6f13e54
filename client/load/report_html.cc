#include "client/load/report_html.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/load/report_table.h"
#include "client/load/svg_plot.h"
#include "common/markup_escape.h"

namespace attnserve::load {
namespace {

bool SameLoad(const LoadPoint& a, const LoadPoint& b) {
  return a.open_loop == b.open_loop && a.concurrency == b.concurrency && a.rps == b.rps;
}

// A figure extracted from a phase, absent when the phase has none (e.g. no success).
using Metric = std::function<std::optional<double>(const PhaseSummary&)>;

struct MetricSpec {
  std::string id;     // data-metric attribute
  std::string label;  // y axis
  Metric get;
};

std::vector<MetricSpec> MetricsFor(const std::string& mode) {
  std::vector<MetricSpec> m = {
      {"latency_p50", "p50 latency (ms)",
       [](const PhaseSummary& s) -> std::optional<double> {
         if (!s.latency_s) return std::nullopt;
         return s.latency_s->p50 * 1e3;
       }},
      {"latency_p99", "p99 latency (ms)",
       [](const PhaseSummary& s) -> std::optional<double> {
         if (!s.latency_s) return std::nullopt;
         return s.latency_s->p99 * 1e3;
       }},
      {"tokens_per_s", "tokens/s",
       [](const PhaseSummary& s) -> std::optional<double> {
         if (!s.latency_s) return std::nullopt;
         return s.tokens_per_s;
       }},
  };
  if (mode != "unary") {
    m.push_back({"first_result_p50", "p50 time to first result (ms)",
                 [](const PhaseSummary& s) -> std::optional<double> {
                   if (!s.first_result_s) return std::nullopt;
                   return s.first_result_s->p50 * 1e3;
                 }});
  }
  return m;
}

// The variants with results in `mode`, in the order of the run's variant list.
std::vector<std::string> VariantsOf(const RunReport& report, const std::string& mode) {
  std::vector<std::string> out;
  for (const std::string& v : report.config.variants) {
    for (const PhaseResult& r : report.results) {
      if (r.key.mode == mode && r.key.variant == v) {
        out.push_back(v);
        break;
      }
    }
  }
  return out;
}

std::string Figure(const std::string& attrs, const std::string& svg) {
  return absl::StrCat("<figure class=\"plot-figure\" ", attrs, ">\n", svg, "</figure>\n");
}

// Plots against length for one mode and load point.
std::string LengthPlots(const RunReport& report, const std::string& mode, const LoadPoint& load) {
  std::string html;
  const std::vector<std::string> variants = VariantsOf(report, mode);
  for (const MetricSpec& metric : MetricsFor(mode)) {
    std::vector<PlotSeries> series;
    for (const std::string& v : variants) {
      PlotSeries s{v, {}};
      for (const PhaseResult& r : report.results) {
        if (r.key.mode != mode || r.key.variant != v || !SameLoad(r.key.load, load)) continue;
        if (auto y = metric.get(Summarize(r))) {
          s.points.push_back({static_cast<double>(r.key.length), *y});
        }
      }
      series.push_back(std::move(s));
    }
    PlotSpec spec;
    spec.title = absl::StrCat(metric.label, " vs length: ", mode, ", ", LoadLabel(load));
    spec.x_label = "sequence length (tokens)";
    spec.y_label = metric.label;
    spec.log_x = true;
    spec.log_y = true;
    html += Figure(absl::StrFormat("data-mode=\"%s\" data-load=\"%s\" data-x=\"length\" "
                                   "data-metric=\"%s\"",
                                   EscapeMarkup(mode), EscapeMarkup(LoadLabel(load)), metric.id),
                   RenderSvgPlot(spec, series));
  }
  return html;
}

// Latency against the load level (concurrency, or offered rate) for one mode and length, over
// the load points of one kind.
std::string LoadPlots(const RunReport& report, const std::string& mode, int64_t length,
                      bool open_loop) {
  std::string html;
  const std::vector<std::string> variants = VariantsOf(report, mode);
  for (const MetricSpec& metric : MetricsFor(mode)) {
    if (metric.id != "latency_p50" && metric.id != "latency_p99") continue;
    std::vector<PlotSeries> series;
    for (const std::string& v : variants) {
      PlotSeries s{v, {}};
      for (const PhaseResult& r : report.results) {
        if (r.key.mode != mode || r.key.variant != v || r.key.length != length ||
            r.key.load.open_loop != open_loop) {
          continue;
        }
        if (auto y = metric.get(Summarize(r))) {
          s.points.push_back({open_loop ? r.key.load.rps : r.key.load.concurrency, *y});
        }
      }
      series.push_back(std::move(s));
    }
    const std::string x_name = open_loop ? "offered rate (requests/s)" : "concurrency";
    PlotSpec spec;
    spec.title = absl::StrCat(metric.label, " vs ", open_loop ? "rate" : "concurrency", ": ", mode,
                              ", length ", length);
    spec.x_label = x_name;
    spec.y_label = metric.label;
    spec.log_x = true;
    spec.log_y = true;
    html += Figure(
        absl::StrFormat("data-mode=\"%s\" data-length=\"%d\" data-x=\"%s\" "
                        "data-metric=\"%s\"",
                        EscapeMarkup(mode), length, open_loop ? "rps" : "concurrency", metric.id),
        RenderSvgPlot(spec, series));
  }
  return html;
}

}  // namespace

std::string ReportToHtml(const RunReport& report) {
  const RunConfig& c = report.config;
  std::string html = R"(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>attnserve-load report</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 12px; }
figure.plot-figure { display: inline-block; margin: 0.5em; border: 1px solid #ddd; }
dt { font-weight: bold; float: left; clear: left; width: 9em; }
dd { margin-left: 10em; }
</style>
</head>
<body>
<h1>attnserve-load report</h1>
)";
  std::vector<std::string> loads;
  for (const LoadPoint& l : c.loads) loads.push_back(LoadLabel(l));
  absl::StrAppend(&html, "<dl>\n");
  auto item = [&html](const std::string& k, const std::string& v) {
    absl::StrAppend(&html, "<dt>", EscapeMarkup(k), "</dt><dd>", EscapeMarkup(v), "</dd>\n");
  };
  item("target", c.target);
  item("started", report.started_at);
  item("machine", absl::StrCat(report.hostname, ", ", report.cpus, " CPUs"));
  item("modes", absl::StrJoin(c.modes, ", "));
  item("variants", absl::StrJoin(c.variants, ", "));
  item("lengths", absl::StrJoin(c.lengths, ", "));
  item("loads", absl::StrJoin(loads, ", "));
  item("per phase", absl::StrFormat("warmup %gs, then %gs or %d requests (0: no limit); chunk %d",
                                    c.warmup_s, c.duration_s, c.requests, c.chunk));
  absl::StrAppend(&html,
                  "</dl>\n<h2>Results</h2>\n<p>Latency is measured with a steady clock "
                  "from each request's intended send time (for open loop, its slot on "
                  "the fixed schedule) to its final status; failed requests are counted "
                  "by gRPC code and left out of the latency figures.</p>\n<pre>",
                  EscapeMarkup(ReportToTable(report)), "</pre>\n");

  for (const std::string& mode : c.modes) {
    if (VariantsOf(report, mode).empty()) continue;
    absl::StrAppend(&html, "<h2>", EscapeMarkup(mode), ": against length</h2>\n");
    for (const LoadPoint& load : c.loads) html += LengthPlots(report, mode, load);
    for (bool open_loop : {false, true}) {
      const auto n = std::count_if(c.loads.begin(), c.loads.end(),
                                   [&](const LoadPoint& l) { return l.open_loop == open_loop; });
      if (n < 2) continue;
      absl::StrAppend(&html, "<h2>", EscapeMarkup(mode), ": against ",
                      open_loop ? "offered rate" : "concurrency", "</h2>\n");
      for (int64_t length : c.lengths) html += LoadPlots(report, mode, length, open_loop);
    }
  }
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace attnserve::load
