#include "client/cli/subcommand_flags.h"

#include <algorithm>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace attnserve::cli {

const std::vector<Subcommand>& Subcommands() {
  static const auto* subs = new std::vector<Subcommand>{
      {"models",
       "[--name=MODEL]",
       "List the models (ListModels), or show one (GetModel).",
       {"name"}},
      {"infer",
       "[--model=M] (--tokens=1,2,3 | --random_tokens=N | --tokens_file=F|- | --text=T | "
       "--text_file=F|-)",
       "Run one Infer call on a whole sequence, or on a chunk continuing --session.",
       {"model", "tokens", "tokens_file", "random_tokens", "text", "text_file", "no_special_tokens",
        "seed", "session", "output", "top_k", "route_sessions"}},
      {"stream",
       "[--model=M] [--chunk=64] [--tokens_file=F|- | --text_file=F|-]",
       "Open a Stream and append the token ids in chunks of --chunk as they are read (stdin by "
       "default), or the text line by line, printing each response as it arrives; then close "
       "a new session (or keep it with --keep_session); a resumed one (--session) stays open "
       "(or --close_session).",
       {"model", "tokens", "tokens_file", "random_tokens", "text", "text_file", "no_special_tokens",
        "seed", "session", "output", "top_k", "chunk", "expected_length", "ttl", "keep_session",
        "close_session", "fork_from", "route_sessions"}},
      {"generate",
       "[--model=M] (--tokens=... | --random_tokens=N | --tokens_file=F|- | --text=T | "
       "--text_file=F|-) [--stop=S,...]",
       "Open a Stream, append the prompt with a GenerateSpec and print the generated text (a "
       "text prompt) or token ids as they stream; then close a new session (or keep it with "
       "--keep_session); a resumed one (--session) stays open (or --close_session).",
       {"model",
        "tokens",
        "tokens_file",
        "random_tokens",
        "text",
        "text_file",
        "no_special_tokens",
        "stop",
        "stop_token_ids",
        "ignore_eos",
        "seed",
        "session",
        "max_new_tokens",
        "temperature",
        "sample_top_k",
        "stream_interval",
        "ttl",
        "keep_session",
        "close_session",
        "fork_from",
        "route_sessions"}},
      {"tokenize",
       "--model=M (--text=T | --text_file=F|-) [--no_special_tokens]",
       "Turn text into the model's token ids (Tokenize) and count them.",
       {"model", "text", "text_file", "no_special_tokens"}},
      {"detokenize",
       "--model=M --tokens=1,2,3 [--skip_special_tokens]",
       "Turn token ids into text with the model's tokenizer (Detokenize).",
       {"model", "tokens", "skip_special_tokens"}},
      {"sessions",
       "[--id=ID [--export=FILE] | --close=ID | --import=FILE] [--model=M] [--limit=N]",
       "List the sessions (ListSessions; of every instance with --route_sessions), show one "
       "(GetSession), close one (CloseSession), export one to a snapshot file (ExportSession) "
       "or import one from such a file (ImportSession).",
       {"id", "close", "export", "import", "model", "limit", "route_sessions"}},
      {"health",
       "[--service=NAME]",
       "Check the server's health (grpc.health.v1); exit status 0 only when SERVING.",
       {"service"}},
  };
  return *subs;
}

const Subcommand* FindSubcommand(const std::string& name) {
  for (const Subcommand& s : Subcommands()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const std::vector<std::string>& CommonFlags() {
  static const auto* flags = new std::vector<std::string>{
      "target", "timeout", "json", "tls_ca", "tls_cert", "tls_key", "tls_server_name", "token"};
  return *flags;
}

std::string ToolUsage() {
  std::string out =
      "usage: attnserve-cli SUBCOMMAND [flags]\n"
      "       attnserve-cli SUBCOMMAND --help\n\nSubcommands:\n";
  for (const Subcommand& s : Subcommands()) {
    absl::StrAppendFormat(&out, "  %-9s %s\n", s.name, s.summary);
  }
  out +=
      "\nCommon flags: --target=host:port (localhost:50051), --timeout=SECONDS, --json;\n"
      "TLS: --tls_ca=PEM (verify the server), --tls_cert=PEM --tls_key=PEM (mutual TLS),\n"
      "--tls_server_name=NAME (the name in the server's certificate, when dialling pod IPs),\n"
      "--token=TOKEN or $ATTNSERVE_TOKEN (a bearer token with every call; needs --tls_ca).\n"
      "Several instances (infer, stream, generate, sessions): --route_sessions with\n"
      "--target=dns:///name:port or a comma list host:port,host:port sends each session's\n"
      "calls to the instance that holds it.\n"
      "Exit status: 0 on success, 1 when a call fails (the gRPC code and message are "
      "printed) or the server is not serving, 2 for a usage error.\n";
  return out;
}

namespace {

std::string FlagHelp(const std::string& name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) return absl::StrCat("  --", name, "\n");
  std::string def = flag->DefaultValue();
  if (def.empty()) def = "\"\"";
  return absl::StrFormat("  --%-16s %s (default: %s)\n", name, flag->Help(), def);
}

}  // namespace

std::string SubcommandUsage(const Subcommand& sub) {
  std::string out = absl::StrCat("usage: attnserve-cli ", sub.name, " ", sub.synopsis, "\n\n",
                                 sub.summary, "\n\nFlags:\n");
  for (const std::string& f : sub.flags) out += FlagHelp(f);
  for (const std::string& f : CommonFlags()) out += FlagHelp(f);
  return out;
}

std::string CheckArgs(const Subcommand& sub, const std::vector<std::string>& args, bool* help) {
  *help = false;
  for (const std::string& arg : args) {
    if (arg == "--") break;  // everything after is positional
    absl::string_view name = arg;
    if (name.size() < 2 || name[0] != '-') continue;  // a value, or "-" (stdin)
    if (!absl::ConsumePrefix(&name, "--")) absl::ConsumePrefix(&name, "-");
    name = name.substr(0, name.find('='));
    if (name == "help" || name == "h" || name == "helpfull") {
      *help = true;
      continue;
    }
    auto known = [&](absl::string_view n) {
      const auto has = [&](const std::vector<std::string>& v) {
        return std::find(v.begin(), v.end(), n) != v.end();
      };
      return has(sub.flags) || has(CommonFlags());
    };
    // --noflag negates a boolean flag.
    if (known(name) || (absl::StartsWith(name, "no") && known(name.substr(2)))) continue;
    // A negative number given as a separate value ("--seed -5") is not a flag.
    if (absl::ascii_isdigit(static_cast<unsigned char>(name.empty() ? 'x' : name[0]))) continue;
    return absl::StrCat("unknown flag for '", sub.name, "': ", arg, " (see attnserve-cli ",
                        sub.name, " --help)");
  }
  return "";
}

}  // namespace attnserve::cli
