#include "client/load/report_json.h"

#include "client/load/json_writer.h"

namespace attnserve::load {
namespace {

void WriteQuantiles(JsonWriter& w, const std::optional<Quantiles>& q) {
  if (!q) {
    w.Null();
    return;
  }
  w.BeginObject();
  w.Key("p50").Double(q->p50);
  w.Key("p90").Double(q->p90);
  w.Key("p99").Double(q->p99);
  w.Key("max").Double(q->max);
  w.Key("mean").Double(q->mean);
  w.Key("min").Double(q->min);
  w.EndObject();
}

void WriteOptionalDouble(JsonWriter& w, const std::optional<double>& v) {
  if (v) {
    w.Double(*v);
  } else {
    w.Null();
  }
}

void WriteLoad(JsonWriter& w, const LoadPoint& load) {
  w.BeginObject();
  w.Key("loop").String(load.open_loop ? "open" : "closed");
  w.Key("concurrency");
  if (load.open_loop) {
    w.Null();
  } else {
    w.Int(load.concurrency);
  }
  w.Key("rps");
  if (load.open_loop) {
    w.Double(load.rps);
  } else {
    w.Null();
  }
  w.EndObject();
}

void WriteCounts(JsonWriter& w, const std::map<std::string, uint64_t>& counts) {
  w.BeginObject();
  for (const auto& [name, n] : counts) w.Key(name).Uint(n);
  w.EndObject();
}

void WriteResult(JsonWriter& w, const PhaseResult& r) {
  const PhaseSummary s = Summarize(r);
  const PhaseTotals& t = r.totals;
  w.BeginObject();
  w.Key("mode").String(r.key.mode);
  w.Key("variant").String(r.key.variant);
  w.Key("length").Int(r.key.length);
  w.Key("load");
  WriteLoad(w, r.key.load);
  w.Key("sent").Uint(t.sent);
  w.Key("succeeded").Uint(t.succeeded);
  w.Key("failed").Uint(t.failed);
  w.Key("errors");
  WriteCounts(w, t.errors);
  w.Key("served_by");
  WriteCounts(w, t.served_by);
  w.Key("window_s").Double(r.window_s);
  w.Key("requests_per_s").Double(s.requests_per_s);
  w.Key("tokens_per_s").Double(s.tokens_per_s);
  w.Key("tokens_in").Int(t.tokens_in);
  w.Key("tokens_out").Int(t.tokens_out);
  w.Key("latency_s");
  WriteQuantiles(w, s.latency_s);
  w.Key("first_result_s");
  WriteQuantiles(w, s.first_result_s);
  w.Key("state_bytes");
  if (s.state_bytes_mean) {
    w.BeginObject();
    w.Key("mean").Double(*s.state_bytes_mean);
    w.Key("max").Double(*s.state_bytes_max);
    w.EndObject();
  } else {
    w.Null();
  }
  w.Key("server_cpu_s");
  WriteOptionalDouble(w, r.server_cpu_s);
  w.EndObject();
}

}  // namespace

std::string ReportToJson(const RunReport& report) {
  JsonWriter w;
  const RunConfig& c = report.config;
  w.BeginObject();
  w.Key("tool").String("attnserve-load");
  w.Key("schema_version").Int(kJsonSchemaVersion);
  w.Key("tool_version").String(report.tool_version);
  w.Key("started_at").String(report.started_at);
  w.Key("machine").BeginObject();
  w.Key("hostname").String(report.hostname);
  w.Key("cpus").Int(report.cpus);
  w.EndObject();

  w.Key("config").BeginObject();
  w.Key("target").String(c.target);
  w.Key("modes").BeginArray();
  for (const std::string& m : c.modes) w.String(m);
  w.EndArray();
  w.Key("variants").BeginArray();
  for (const std::string& v : c.variants) w.String(v);
  w.EndArray();
  w.Key("lengths").BeginArray();
  for (int64_t l : c.lengths) w.Int(l);
  w.EndArray();
  w.Key("loads").BeginArray();
  for (const LoadPoint& l : c.loads) WriteLoad(w, l);
  w.EndArray();
  w.Key("chunk").Int(c.chunk);
  w.Key("duration_s").Double(c.duration_s);
  w.Key("requests").Int(c.requests);
  w.Key("warmup_s").Double(c.warmup_s);
  w.Key("seed").Uint(c.seed);
  w.Key("timeout_s").Double(c.timeout_s);
  w.Key("max_new_tokens").Int(c.max_new_tokens);
  w.Key("stream_interval").Int(c.stream_interval);
  w.Key("output").String(c.output);
  w.Key("metrics_url").String(c.metrics_url);
  w.EndObject();

  w.Key("skipped").BeginArray();
  for (const SkippedVariant& s : report.skipped) {
    w.BeginObject();
    w.Key("mode").String(s.mode);
    w.Key("variant").String(s.variant);
    w.Key("reason").String(s.reason);
    w.EndObject();
  }
  w.EndArray();

  w.Key("results").BeginArray();
  for (const PhaseResult& r : report.results) WriteResult(w, r);
  w.EndArray();
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace attnserve::load
