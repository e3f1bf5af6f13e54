// attnserve-load's report pieces: Prometheus text parsing, URL parsing, the SVG plot (one line
// per series), and the JSON report (well-formed, with the documented top-level fields).
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <string>

#include "client/load/metrics_scrape.h"
#include "client/load/report.h"
#include "client/load/report_html.h"
#include "client/load/report_json.h"
#include "client/load/report_table.h"
#include "client/load/svg_plot.h"
#include "gtest/gtest.h"

namespace attnserve::load {
namespace {

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

TEST(PrometheusTextTest, FindsCounterIgnoringCommentsAndLongerNames) {
  const std::string text =
      "# HELP process_cpu_seconds_total Total user and system CPU time.\n"
      "# TYPE process_cpu_seconds_total counter\n"
      "process_cpu_seconds_total_extra 99\n"
      "process_cpu_seconds_total 12.5\n"
      "other_metric{a=\"b\"} 3\n";
  EXPECT_EQ(FindPrometheusValue(text, "process_cpu_seconds_total"), 12.5);
  EXPECT_EQ(FindPrometheusValue(text, "other_metric"), 3.0);
  EXPECT_FALSE(FindPrometheusValue(text, "missing").has_value());
}

TEST(PrometheusTextTest, SumsLabelSetsAndSkipsTimestamps) {
  const std::string text =
      "requests_total{code=\"OK\"} 5 1700000000000\n"
      "requests_total{code=\"NOT_FOUND\"} 2\n";
  EXPECT_EQ(FindPrometheusValue(text, "requests_total"), 7.0);
}

TEST(HttpUrlTest, Parses) {
  absl::StatusOr<HttpUrl> u = ParseHttpUrl("http://127.0.0.1:9090/metrics");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 9090);
  EXPECT_EQ(u->path, "/metrics");
  u = ParseHttpUrl("localhost");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->path, "/");
  u = ParseHttpUrl("http://[::1]:8080/m");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_FALSE(ParseHttpUrl("https://x/").ok());
  EXPECT_FALSE(ParseHttpUrl("http://x:notaport/").ok());
}

TEST(HttpGetTest, ConnectionRefusedIsAnError) {
  // Port 1 on loopback: nothing listens there in a test environment.
  absl::StatusOr<double> v = ScrapeProcessCpuSeconds({"127.0.0.1", 1, "/metrics"}, 1.0);
  EXPECT_FALSE(v.ok());
}

TEST(SvgPlotTest, OnePolylinePerSeriesWithData) {
  PlotSpec spec;
  spec.title = "p50 <latency>";
  spec.log_x = spec.log_y = true;
  const std::string svg =
      RenderSvgPlot(spec, {{"standard", {{256, 1.0}, {1024, 4.0}, {4096, 30.0}}},
                           {"mamba", {{256, 2.0}, {1024, 3.0}}},
                           {"single", {{512, 2.0}}},
                           {"empty", {}},
                           {"bad", {{0, 1.0}, {100, -1.0}}}});  // nothing usable on log axes
  EXPECT_EQ(Count(svg, "<polyline"), 3u);
  EXPECT_EQ(Count(svg, "<polyline class=\"series\" data-series=\"standard\""), 1u);
  EXPECT_EQ(Count(svg, "<polyline class=\"series\" data-series=\"mamba\""), 1u);
  EXPECT_EQ(Count(svg, "<g class=\"legend-entry\""), 5u);
  EXPECT_NE(svg.find("empty (no data)"), std::string::npos);
  EXPECT_NE(svg.find("p50 &lt;latency&gt;"), std::string::npos);  // escaped
  EXPECT_EQ(svg.find("<script"), std::string::npos);
}

RunReport SampleReport() {
  RunReport r;
  r.tool_version = "test";
  r.started_at = "2024-01-01T00:00:00Z";
  r.hostname = "h";
  r.cpus = 2;
  r.config.target = "127.0.0.1:1";
  r.config.modes = {"unary"};
  r.config.variants = {"standard", "mamba"};
  r.config.lengths = {256, 1024};
  r.config.loads = {{false, 1, 0.0}, {false, 4, 0.0}};
  for (const LoadPoint& lp : r.config.loads) {
    for (const std::string& v : r.config.variants) {
      for (int64_t len : r.config.lengths) {
        PhaseResult p;
        p.key = {"unary", lp, v, len};
        for (int i = 1; i <= 10; ++i) {
          p.totals.latency_ns.Record(static_cast<uint64_t>(i * len * 1000));
        }
        p.totals.sent = 12;
        p.totals.succeeded = 10;
        p.totals.failed = 2;
        p.totals.errors["INVALID_ARGUMENT"] = 2;
        p.totals.tokens_in = 10 * len;
        p.window_s = 1.5;
        r.results.push_back(p);
      }
    }
  }
  return r;
}

TEST(ReportJsonTest, IsWellFormedWithTheDocumentedFields) {
  const std::string json = ReportToJson(SampleReport());
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  for (const char* key : {"tool", "schema_version", "config", "machine", "results", "skipped"}) {
    EXPECT_EQ(parsed.fields().count(key), 1u) << key;
  }
  const auto& results = parsed.fields().at("results").list_value();
  ASSERT_EQ(results.values_size(), 8);
  const auto& first = results.values(0).struct_value().fields();
  EXPECT_EQ(first.at("sent").number_value(), 12);
  EXPECT_EQ(first.at("errors").struct_value().fields().at("INVALID_ARGUMENT").number_value(), 2);
  EXPECT_NEAR(first.at("requests_per_s").number_value(), 8.0, 1e-9);
  EXPECT_TRUE(first.at("first_result_s").has_null_value());
}

TEST(ReportHtmlTest, PlotsAgainstLengthAndConcurrencyWithOneLinePerVariant) {
  const RunReport report = SampleReport();
  const std::string html = ReportToHtml(report);
  // Against length: 3 metrics x 2 load points; against concurrency: 2 metrics x 2 lengths.
  EXPECT_EQ(Count(html, "<svg"), 10u);
  EXPECT_EQ(Count(html, "data-series=\"standard\" fill"), 10u);
  EXPECT_EQ(Count(html, "data-series=\"mamba\" fill"), 10u);
  EXPECT_EQ(Count(html, "data-x=\"concurrency\""), 4u);
  EXPECT_EQ(html.find("http://") == std::string::npos ||
                html.find("http://") == html.find("http://www.w3.org/2000/svg"),
            true);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(ReportToTable(report).find("INVALID_ARGUMENT:2"), std::string::npos);
}

}  // namespace
}  // namespace attnserve::load
