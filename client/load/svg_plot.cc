#include "client/load/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/markup_escape.h"

namespace attnserve::load {
namespace {

// Colour-blind-safe palette (Okabe-Ito), reused cyclically.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                   "#E69F00", "#56B4E9", "#000000", "#F0E442"};

bool Usable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

// Maps data values onto [lo_px, hi_px], linearly or logarithmically.
struct Axis {
  double min = 0, max = 1;
  bool log = false;
  double lo_px = 0, hi_px = 1;

  double T(double v) const { return log ? std::log10(v) : v; }
  double Px(double v) const {
    const double a = T(min), b = T(max);
    const double f = b > a ? (T(v) - a) / (b - a) : 0.5;
    return lo_px + f * (hi_px - lo_px);
  }
};

std::string Num(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return absl::StrFormat("%.0e", v);
  if (a >= 100) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.3g", v);
}

// Tick values: the distinct x values when there are few (lengths, concurrency levels);
// otherwise 1-2-5 steps (linear) or powers of ten (log).
std::vector<double> Ticks(const Axis& axis, const std::set<double>& values) {
  if (!values.empty() && values.size() <= 10) return {values.begin(), values.end()};
  std::vector<double> ticks;
  if (axis.log) {
    for (double p = std::floor(std::log10(axis.min)); p <= std::ceil(std::log10(axis.max)); ++p) {
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, p);
        if (v >= axis.min * 0.999 && v <= axis.max * 1.001) ticks.push_back(v);
      }
    }
    // Across many decades, keep the powers of ten only.
    if (ticks.size() > 10) {
      ticks.erase(std::remove_if(ticks.begin(), ticks.end(),
                                 [](double v) {
                                   const double l = std::log10(v);
                                   return std::fabs(l - std::round(l)) > 1e-9;
                                 }),
                  ticks.end());
    }
    return ticks;
  }
  const double range = axis.max - axis.min;
  double step = std::pow(10.0, std::floor(std::log10(range / 5)));
  for (double m : {2.0, 5.0, 10.0}) {
    if (range / step <= 6) break;
    step = std::pow(10.0, std::floor(std::log10(range / 5))) * m;
  }
  for (double v = std::ceil(axis.min / step) * step; v <= axis.max + step * 1e-9; v += step) {
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

// Extends [min, max] so that the data do not touch the frame and a flat series still shows.
void Pad(Axis& axis) {
  if (axis.log) {
    if (axis.max <= axis.min) {
      axis.min /= 2;
      axis.max *= 2;
    } else {
      const double f = std::pow(axis.max / axis.min, 0.05);
      axis.min /= f;
      axis.max *= f;
    }
  } else {
    if (axis.max <= axis.min) {
      const double d = axis.min == 0 ? 1 : std::fabs(axis.min) * 0.5;
      axis.min -= d;
      axis.max += d;
    } else {
      const double d = (axis.max - axis.min) * 0.05;
      axis.min = axis.min >= 0 && axis.min - d < 0 ? 0 : axis.min - d;
      axis.max += d;
    }
  }
}

}  // namespace

std::string RenderSvgPlot(const PlotSpec& spec, const std::vector<PlotSeries>& series) {
  // Layout: plot area on the left, legend column on the right.
  const int legend_w = 150;
  const int left = 64, right = spec.width - legend_w, top = 30, bottom = spec.height - 46;

  // Usable points per series, sorted by x.
  std::vector<std::vector<std::pair<double, double>>> pts(series.size());
  std::set<double> xs;
  Axis x{0, 1, spec.log_x, double(left), double(right)};
  Axis y{0, 1, spec.log_y, double(bottom), double(top)};
  bool any = false;
  for (size_t i = 0; i < series.size(); ++i) {
    for (const auto& [px, py] : series[i].points) {
      if (!Usable(px, spec.log_x) || !Usable(py, spec.log_y)) continue;
      pts[i].push_back({px, py});
      xs.insert(px);
      if (!any) {
        x.min = x.max = px;
        y.min = y.max = py;
        any = true;
      }
      x.min = std::min(x.min, px);
      x.max = std::max(x.max, px);
      y.min = std::min(y.min, py);
      y.max = std::max(y.max, py);
    }
    std::sort(pts[i].begin(), pts[i].end());
  }
  if (!any && spec.log_x) x.min = 1, x.max = 10;
  if (!any && spec.log_y) y.min = 1, y.max = 10;
  Pad(x);
  Pad(y);

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
      spec.width, spec.height, spec.width, spec.height);
  absl::StrAppend(&svg, "<title>", EscapeMarkup(spec.title), "</title>\n");
  absl::StrAppendFormat(&svg,
                        "<text x=\"%d\" y=\"18\" font-size=\"13\" font-weight=\"bold\">%s</text>\n",
                        left, EscapeMarkup(spec.title));
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                        "stroke=\"#888\"/>\n",
                        left, top, right - left, bottom - top);

  // Grid and tick labels.
  for (double t : Ticks(x, xs)) {
    const double px = x.Px(t);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>"
                          "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                          px, top, px, bottom, px, bottom + 14, Num(t));
  }
  for (double t : Ticks(y, {})) {
    const double py = y.Px(t);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>"
                          "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          left, py, right, py, left - 4, py + 4, Num(t));
  }
  absl::StrAppendFormat(&svg, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s%s</text>\n",
                        (left + right) / 2, spec.height - 12, EscapeMarkup(spec.x_label),
                        spec.log_x ? " (log scale)" : "");
  absl::StrAppendFormat(&svg,
                        "<text x=\"14\" y=\"%d\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 14 %d)\">%s%s</text>\n",
                        (top + bottom) / 2, (top + bottom) / 2, EscapeMarkup(spec.y_label),
                        spec.log_y ? " (log scale)" : "");

  // Series and legend.
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    const std::string name = EscapeMarkup(series[i].name);
    if (!pts[i].empty()) {
      std::string points;
      for (const auto& [px, py] : pts[i]) {
        absl::StrAppendFormat(&points, "%s%.1f,%.1f", points.empty() ? "" : " ", x.Px(px),
                              y.Px(py));
      }
      absl::StrAppendFormat(&svg,
                            "<polyline class=\"series\" data-series=\"%s\" fill=\"none\" "
                            "stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n",
                            name, color, points);
      for (const auto& [px, py] : pts[i]) {
        absl::StrAppendFormat(&svg,
                              "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\">"
                              "<title>%s: x=%s, y=%s</title></circle>\n",
                              x.Px(px), y.Px(py), color, name, Num(px), Num(py));
      }
    }
    const int ly = top + 8 + static_cast<int>(i) * 18;
    absl::StrAppendFormat(&svg,
                          "<g class=\"legend-entry\" data-series=\"%s\"><line x1=\"%d\" "
                          "y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
                          "<text x=\"%d\" y=\"%d\">%s%s</text></g>\n",
                          name, right + 10, ly, right + 30, ly, color, right + 36, ly + 4, name,
                          pts[i].empty() ? " (no data)" : "");
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace attnserve::load
