// RenderSvgPlot: one line chart as an inline <svg> element (no scripts, no external
// resources), for the HTML report. Each series is one <polyline class="series"
// data-series="NAME"> plus a marker per point and a legend entry; a series with no point is
// listed in the legend as "(no data)" and draws no line.
#ifndef ATTNSERVE_CLIENT_LOAD_SVG_PLOT_H_
#define ATTNSERVE_CLIENT_LOAD_SVG_PLOT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace attnserve::load {

struct PlotSeries {
  std::string name;
  // (x, y) pairs, drawn in order of x. Points with a non-finite coordinate, or a non-positive
  // one on a log axis, are left out.
  std::vector<std::pair<double, double>> points;
};

struct PlotSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  bool log_y = false;
  int width = 520;
  int height = 320;
};

std::string RenderSvgPlot(const PlotSpec& spec, const std::vector<PlotSeries>& series);

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_SVG_PLOT_H_
