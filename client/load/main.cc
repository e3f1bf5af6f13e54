// attnserve-load: offers load to an attnserve server across model variants, sequence lengths,
// modes and load levels, and reports throughput, latency percentiles (coordinated-omission
// corrected in open loop), time to first result, session state sizes and, optionally, server
// CPU time. See client/load/README.md.
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/inference.grpc.pb.h"
#include "client/common/channel.h"
#include "client/common/grpc_status.h"
#include "client/common/session_router.h"
#include "client/load/driver.h"
#include "client/load/metrics_scrape.h"
#include "client/load/report.h"
#include "client/load/report_html.h"
#include "client/load/report_json.h"
#include "client/load/report_table.h"
#include "common/parse_flags.h"

ABSL_FLAG(std::string, target, "localhost:50051", "Server address, host:port.");
ABSL_FLAG(std::string, variants, "all",
          "Comma list of models, or 'all' (every model ListModels returns; in stream and "
          "generate modes, those that can stream). 'auto' lets the server's policy choose.");
ABSL_FLAG(std::string, mode, "unary", "Comma list of modes: unary, stream, generate.");
ABSL_FLAG(std::string, protocol, "attnserve",
          "Comma list of doors: attnserve (attnserve.v1.AttnServe: Infer, Stream) and oip (the "
          "Open Inference Protocol: ModelInfer, ModelStreamInfer with sequences); each runs "
          "every phase, so both compare in one run (oip's modes are reported as oip:MODE).");
ABSL_FLAG(std::string, lengths, "256,1024,4096", "Comma list of sequence lengths (tokens).");
ABSL_FLAG(int64_t, chunk, 64, "Stream mode: tokens per append.");
ABSL_FLAG(std::string, text_file, "",
          "Prompts from this file, one a line, used in turn and sent as text (the model's "
          "tokenizer turns them into ids); replaces --lengths: the length column then shows the "
          "prompts' mean length in bytes.");
ABSL_FLAG(std::string, concurrency, "1",
          "Closed loop: comma list of request counts kept in flight (one phase each).");
ABSL_FLAG(std::string, rps, "",
          "Open loop: comma list of offered rates in requests/s (one phase each); replaces "
          "--concurrency.");
ABSL_FLAG(double, duration, 10, "Seconds each phase is measured (0: no time limit).");
ABSL_FLAG(int64_t, requests, 0, "Measured requests per phase (0: no count limit).");
ABSL_FLAG(double, warmup, 1, "Seconds at the start of each phase that are not measured.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the random token ids.");
ABSL_FLAG(double, timeout, 60, "Deadline of each request (a whole stream), seconds.");
ABSL_FLAG(int, max_new_tokens, 16, "Generate mode: tokens to generate per request.");
ABSL_FLAG(int, stream_interval, 0,
          "Generate mode: generated tokens per streamed message (GenerateSpec.stream_interval; "
          "OIP's parameter stream_interval); 0 or 1: one each.");
ABSL_FLAG(std::string, output, "last_logits",
          "What each request (a stream's last append) asks for: last_logits, top_k, none, "
          "hidden, all_logits.");
ABSL_FLAG(int, channels, 1,
          "gRPC channels (connections) the requests are spread over (per instance with "
          "--route_sessions).");
ABSL_FLAG(bool, route_sessions, false,
          "Several server instances: resolve --target (dns:///name:port: every address of the "
          "name, e.g. a headless Service; host:port; or a comma list of them) and send each "
          "request (a unary call, or a stream with its session) to the next instance in turn. "
          "Always on for a comma list.");
ABSL_FLAG(int, max_inflight, 1000, "Open loop: most requests in flight at once.");
ABSL_FLAG(std::string, metrics_url, "",
          "Prometheus text endpoint of the server (http://host:port/metrics): its "
          "process_cpu_seconds_total is read before and after each phase.");
ABSL_FLAG(std::string, json, "", "Write the JSON report here (shape: client/load/README.md).");
ABSL_FLAG(std::string, html, "", "Write the HTML report with plots here.");

namespace {

namespace v1 = attnserve::v1;
namespace load = attnserve::load;
using attnserve::client::FormatStatus;

constexpr int kUsageError = 2;
constexpr int kTokenPool = 4;  // distinct token sequences per phase, used in turn

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::cerr << "attnserve-load: " << message << "\n";
  std::exit(code);
}

std::vector<std::string> SplitList(const std::string& s) {
  return absl::StrSplit(s, absl::ByAnyChar(", "), absl::SkipEmpty());
}

template <typename T>
std::vector<T> ParseNumbers(const std::string& flag, const std::string& s, T min) {
  std::vector<T> out;
  for (const std::string& item : SplitList(s)) {
    T v{};
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      ok = absl::SimpleAtod(item, &v);
    } else {
      ok = absl::SimpleAtoi(item, &v);
    }
    if (!ok || v < min) {
      Die(absl::StrCat("--", flag, ": '", item, "' is not a number >= ", min), kUsageError);
    }
    out.push_back(v);
  }
  return out;
}

v1::OutputKind ParseOutput(const std::string& s) {
  if (s == "last_logits") return v1::OUTPUT_KIND_LAST_LOGITS;
  if (s == "all_logits") return v1::OUTPUT_KIND_ALL_LOGITS;
  if (s == "hidden") return v1::OUTPUT_KIND_HIDDEN;
  if (s == "top_k") return v1::OUTPUT_KIND_TOP_K;
  if (s == "none") return v1::OUTPUT_KIND_NONE;
  Die(absl::StrCat("--output: unknown kind '", s, "'"), kUsageError);
}

load::Mode ParseMode(const std::string& s) {
  if (s == "unary") return load::Mode::kUnary;
  if (s == "stream") return load::Mode::kStream;
  if (s == "generate") return load::Mode::kGenerate;
  Die(absl::StrCat("--mode: unknown mode '", s, "' (unary, stream, generate)"), kUsageError);
}

// What the client needs to know of a variant.
struct VariantInfo {
  int64_t vocab_size = 2;
  bool can_stream = true;
  bool known = false;
};

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::string Ms(double s) { return absl::StrFormat("%.2f ms", s * 1e3); }

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) Die(absl::StrCat("cannot write ", path));
}

}  // namespace

int main(int argc, char** argv) {
  // --help lists this tool's flags (Abseil's default looks for a file named after the binary).
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "client/load/");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(
      "attnserve-load [--target=host:port] [--variants=all|a,b] [--mode=unary,stream,generate]\n"
      "  [--lengths=256,1024 | --text_file=F] [--concurrency=1,4 | --rps=10,50] [--duration=S | "
      "--requests=N]\n"
      "  [--warmup=S] [--json=FILE] [--html=FILE] [--metrics_url=http://host:port/metrics]\n"
      "Runs one phase per mode x load level x variant x length, in that order, and prints a\n"
      "table (times in ms). Exit status: 0 when the run completed (request errors are\n"
      "reported, not fatal), 1 when it could not run, 2 for a usage error.");
  std::vector<char*> positional = attnserve::ParseFlags(argc, argv);
  if (positional.size() > 1) Die(absl::StrCat("unexpected argument: ", positional[1]), kUsageError);
  if (absl::Status security = attnserve::client::ConfigureChannelSecurityFromFlags();
      !security.ok()) {
    Die(std::string(security.message()), kUsageError);
  }

  load::RunReport report;
  load::RunConfig& cfg = report.config;
  cfg.target = absl::GetFlag(FLAGS_target);
  cfg.modes = SplitList(absl::GetFlag(FLAGS_mode));
  cfg.lengths = ParseNumbers<int64_t>("lengths", absl::GetFlag(FLAGS_lengths), 1);
  cfg.chunk = absl::GetFlag(FLAGS_chunk);
  cfg.duration_s = absl::GetFlag(FLAGS_duration);
  cfg.requests = absl::GetFlag(FLAGS_requests);
  cfg.warmup_s = std::max(0.0, absl::GetFlag(FLAGS_warmup));
  cfg.seed = absl::GetFlag(FLAGS_seed);
  cfg.timeout_s = absl::GetFlag(FLAGS_timeout);
  cfg.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  cfg.stream_interval = absl::GetFlag(FLAGS_stream_interval);
  cfg.output = absl::GetFlag(FLAGS_output);
  cfg.metrics_url = absl::GetFlag(FLAGS_metrics_url);
  const v1::OutputKind output = ParseOutput(cfg.output);
  if (cfg.modes.empty()) Die("--mode: no mode given", kUsageError);
  const std::vector<std::string> protocols = SplitList(absl::GetFlag(FLAGS_protocol));
  bool uses_oip = false;
  for (const std::string& p : protocols) {
    if (p != "attnserve" && p != "oip") {
      Die(absl::StrCat("--protocol: unknown protocol '", p, "' (attnserve, oip)"), kUsageError);
    }
    uses_oip = uses_oip || p == "oip";
  }
  if (protocols.empty()) Die("--protocol: no protocol given", kUsageError);
  for (const std::string& m : cfg.modes) ParseMode(m);
  // --text_file: real prompts instead of random ids.
  std::vector<std::shared_ptr<const std::string>> texts;
  if (const std::string path = absl::GetFlag(FLAGS_text_file); !path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) Die(absl::StrCat("--text_file: cannot read ", path), kUsageError);
    int64_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      bytes += static_cast<int64_t>(line.size());
      texts.push_back(std::make_shared<const std::string>(std::move(line)));
    }
    if (texts.empty()) Die(absl::StrCat("--text_file: ", path, " has no lines"), kUsageError);
    if (uses_oip) Die("--text_file goes through the attnserve protocol only", kUsageError);
    cfg.lengths = {bytes / static_cast<int64_t>(texts.size())};
  }
  if (cfg.lengths.empty()) Die("--lengths: no length given", kUsageError);
  if (cfg.chunk < 1) Die("--chunk must be >= 1", kUsageError);
  if (cfg.duration_s <= 0 && cfg.requests <= 0) {
    Die("give --duration > 0 or --requests > 0: every phase must end", kUsageError);
  }
  if (cfg.timeout_s <= 0) Die("--timeout must be > 0", kUsageError);
  const std::string rps_flag = absl::GetFlag(FLAGS_rps);
  if (!SplitList(rps_flag).empty()) {
    for (double r : ParseNumbers<double>("rps", rps_flag, 0.0)) {
      if (r <= 0) Die("--rps values must be > 0", kUsageError);
      cfg.loads.push_back({true, 0, r});
    }
  } else {
    for (int c : ParseNumbers<int>("concurrency", absl::GetFlag(FLAGS_concurrency), 1)) {
      cfg.loads.push_back({false, c, 0.0});
    }
  }
  if (cfg.loads.empty()) Die("--concurrency: no value given", kUsageError);

  std::optional<load::HttpUrl> metrics_url;
  if (!cfg.metrics_url.empty()) {
    absl::StatusOr<load::HttpUrl> url = load::ParseHttpUrl(cfg.metrics_url);
    if (!url.ok()) Die(absl::StrCat("--metrics_url: ", url.status().message()), kUsageError);
    metrics_url = *url;
  }

  // Requests go to --target's channels in turn, or, routed, to its instances in turn: a
  // stream's session then lives where the stream was opened.
  std::vector<std::unique_ptr<v1::AttnServe::Stub>> stubs;
  std::unique_ptr<attnserve::client::SessionRouter> router;
  load::StubPicker pick;
  v1::AttnServe::Stub* stub = nullptr;
  std::shared_ptr<load::OipStubs> oip_stubs;
  if (absl::GetFlag(FLAGS_route_sessions) || attnserve::client::SessionRouter::IsList(cfg.target)) {
    if (uses_oip) {
      Die("--protocol=oip goes to one --target (the router finds AttnServe sessions only)",
          kUsageError);
    }
    attnserve::client::SessionRouter::Options options;
    options.channels_per_endpoint = std::max(1, absl::GetFlag(FLAGS_channels));
    options.lookup_timeout_s = cfg.timeout_s;
    absl::StatusOr<std::unique_ptr<attnserve::client::SessionRouter>> created =
        attnserve::client::SessionRouter::Create(cfg.target, options);
    if (!created.ok()) Die(std::string(created.status().message()));
    router = *std::move(created);
    std::vector<std::string> endpoints;
    for (const auto& route : router->AllEndpoints()) endpoints.push_back(route.endpoint);
    std::cerr << "attnserve-load: " << endpoints.size()
              << " instance(s): " << absl::StrJoin(endpoints, ", ") << "\n";
    stub = router->AllEndpoints().front().stub;
    pick = [&router](uint64_t) { return router->ForNewSession().stub; };
  } else {
    for (int i = 0; i < std::max(1, absl::GetFlag(FLAGS_channels)); ++i) {
      stubs.push_back(v1::AttnServe::NewStub(attnserve::client::MakeChannel(cfg.target, i)));
    }
    stub = stubs[0].get();
    pick = [&stubs](uint64_t i) { return stubs[i % stubs.size()].get(); };
    if (uses_oip) {
      std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> oip;
      for (int i = 0; i < std::max(1, absl::GetFlag(FLAGS_channels)); ++i) {
        oip.push_back(inference::GRPCInferenceService::NewStub(
            attnserve::client::MakeChannel(cfg.target, i)));
      }
      oip_stubs = std::make_shared<load::OipStubs>(std::move(oip));
    }
  }

  // The models, for --variants=all, vocabulary sizes and streaming capability.
  std::map<std::string, VariantInfo> infos;
  std::vector<std::string> listed;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(attnserve::client::DeadlineAfter(cfg.timeout_s));
    v1::ListModelsResponse models;
    grpc::Status status = stub->ListModels(&ctx, v1::ListModelsRequest(), &models);
    if (!status.ok()) Die(absl::StrCat("ListModels on ", cfg.target, ": ", FormatStatus(status)));
    for (const v1::ModelInfo& m : models.models()) {
      listed.push_back(m.name());
      infos[m.name()] = {std::max<int64_t>(2, m.config().vocab_size()), m.can_stream(), true};
    }
  }
  const bool all = absl::GetFlag(FLAGS_variants) == "all";
  cfg.variants = all ? listed : SplitList(absl::GetFlag(FLAGS_variants));
  if (cfg.variants.empty()) Die("no variants to test", all ? 1 : kUsageError);
  for (const std::string& v : cfg.variants) {
    if (infos.count(v)) continue;
    VariantInfo info;
    if (v == "auto") {
      // Valid tokens for whichever model the policy picks: below every model's vocabulary.
      info.vocab_size = INT64_MAX;
      for (const auto& [name, i] : infos) info.vocab_size = std::min(info.vocab_size, i.vocab_size);
      if (infos.empty()) info.vocab_size = 2;
      info.known = true;
    } else {
      grpc::ClientContext ctx;
      ctx.set_deadline(attnserve::client::DeadlineAfter(cfg.timeout_s));
      v1::GetModelRequest req;
      req.set_name(v);
      v1::ModelInfo m;
      grpc::Status status = stub->GetModel(&ctx, req, &m);
      if (status.ok()) {
        info = {std::max<int64_t>(2, m.config().vocab_size()), m.can_stream(), true};
      } else {
        // Still sent: the server's answer (NOT_FOUND, most likely) is part of the report.
        std::cerr << "attnserve-load: GetModel " << v << ": " << FormatStatus(status)
                  << "; its requests will use token ids 0 and 1\n";
      }
    }
    infos[v] = info;
  }

  report.tool_version = "attnserve-load 0.1.0";
  report.started_at = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  report.hostname = Hostname();
  report.cpus = static_cast<int>(std::thread::hardware_concurrency());

  // The phases, in order; variants that cannot stream are skipped in the streaming modes when
  // they were picked by --variants=all (named explicitly, they are sent and their errors shown).
  struct Phase {
    load::Mode mode;
    load::PhaseKey key;
    load::Protocol protocol = load::Protocol::kAttnServe;
  };
  std::vector<Phase> phases;
  for (const std::string& protocol_name : protocols)
    for (const std::string& base_mode : cfg.modes) {
      const load::Mode mode = ParseMode(base_mode);
      const load::Protocol protocol =
          protocol_name == "oip" ? load::Protocol::kOip : load::Protocol::kAttnServe;
      const std::string mode_name =
          protocol == load::Protocol::kOip ? absl::StrCat("oip:", base_mode) : base_mode;
      for (const std::string& v : cfg.variants) {
        if (mode != load::Mode::kUnary && all && !infos[v].can_stream) {
          report.skipped.push_back({mode_name, v, "cannot stream (not causal)"});
        }
      }
      for (const load::LoadPoint& lp : cfg.loads) {
        for (const std::string& v : cfg.variants) {
          if (mode != load::Mode::kUnary && all && !infos[v].can_stream) continue;
          for (int64_t length : cfg.lengths) {
            phases.push_back({mode, {mode_name, lp, v, length}, protocol});
          }
        }
      }
    }
  if (cfg.duration_s > 0) {
    std::cerr << absl::StrFormat(
        "attnserve-load: %d phases of %gs warmup + %gs; about %.0f s in all\n", phases.size(),
        cfg.warmup_s, cfg.duration_s,
        static_cast<double>(phases.size()) * (cfg.warmup_s + cfg.duration_s));
  }

  bool metrics_warned = false;
  auto scrape = [&]() -> std::optional<double> {
    if (!metrics_url) return std::nullopt;
    absl::StatusOr<double> v = load::ScrapeProcessCpuSeconds(*metrics_url, 5.0);
    if (v.ok()) return *v;
    if (!metrics_warned) {
      std::cerr << "attnserve-load: no server CPU time from " << cfg.metrics_url << ": "
                << v.status().message() << "\n";
      metrics_warned = true;
    }
    return std::nullopt;
  };

  for (size_t p = 0; p < phases.size(); ++p) {
    const Phase& phase = phases[p];
    const VariantInfo& info = infos[phase.key.variant];
    // Seeded per phase, so a phase's tokens do not depend on which phases ran before it.
    std::seed_seq seq{cfg.seed, static_cast<uint64_t>(phase.key.length),
                      static_cast<uint64_t>(std::hash<std::string>()(phase.key.variant))};
    std::mt19937_64 rng(seq);
    std::uniform_int_distribution<int64_t> token(0, info.vocab_size - 1);
    std::vector<load::RequestPlan> plans;
    const int pool = texts.empty() ? kTokenPool : static_cast<int>(texts.size());
    for (int i = 0; i < pool; ++i) {
      auto tokens = std::make_shared<std::vector<int64_t>>(texts.empty() ? phase.key.length : 0);
      for (int64_t& t : *tokens) t = token(rng);
      load::RequestPlan plan;
      plan.mode = phase.mode;
      plan.model = phase.key.variant;
      plan.tokens = std::move(tokens);
      if (!texts.empty()) plan.text = texts[i];
      plan.chunk = cfg.chunk;
      plan.output = output;
      plan.max_new_tokens = cfg.max_new_tokens;
      plan.stream_interval = cfg.stream_interval;
      plan.timeout_s = cfg.timeout_s;
      plan.protocol = phase.protocol;
      plan.oip = oip_stubs;
      plans.push_back(std::move(plan));
    }
    load::PhaseSettings settings;
    settings.load = phase.key.load;
    settings.warmup_s = cfg.warmup_s;
    settings.duration_s = cfg.duration_s;
    settings.requests = cfg.requests;
    settings.max_inflight = absl::GetFlag(FLAGS_max_inflight);

    const std::optional<double> cpu_before = scrape();
    load::PhaseStats stats;
    const load::PhaseRun run = load::RunPhase(pick, plans, settings, stats);
    const std::optional<double> cpu_after = cpu_before ? scrape() : std::nullopt;

    load::PhaseResult result;
    result.key = phase.key;
    result.totals = stats.Snapshot();
    result.window_s = run.window_s;
    if (cpu_before && cpu_after) result.server_cpu_s = *cpu_after - *cpu_before;
    const load::PhaseSummary s = load::Summarize(result);
    std::cerr << absl::StrFormat("[%d/%d] %s %s %s L=%d: %d ok, %d failed, p50 %s\n", p + 1,
                                 phases.size(), phase.key.mode, load::LoadLabel(phase.key.load),
                                 phase.key.variant, phase.key.length, result.totals.succeeded,
                                 result.totals.failed,
                                 s.latency_s ? Ms(s.latency_s->p50) : std::string("-"));
    report.results.push_back(std::move(result));
  }

  std::cout << load::ReportToTable(report) << std::flush;
  if (!absl::GetFlag(FLAGS_json).empty()) {
    WriteFile(absl::GetFlag(FLAGS_json), load::ReportToJson(report));
  }
  if (!absl::GetFlag(FLAGS_html).empty()) {
    WriteFile(absl::GetFlag(FLAGS_html), load::ReportToHtml(report));
  }
  return 0;
}
