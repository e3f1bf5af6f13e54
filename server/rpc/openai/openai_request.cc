#include "server/rpc/openai/openai_request.h"

#include <cmath>
#include <limits>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"

namespace attnserve::server::openai {
namespace {

using json = nlohmann::ordered_json;

const char* TypeName(const json& v) { return v.type_name(); }

absl::StatusOr<double> Number(const json& body, const char* name, double lo, double hi) {
  const json& v = body[name];
  if (!v.is_number()) {
    return FieldError(name, absl::StrCat("expected a number, got ", TypeName(v)));
  }
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return FieldError(name, absl::StrCat(x, " is outside [", lo, ", ", hi, "]"));
  }
  return x;
}

absl::StatusOr<int64_t> Integer(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json& v = body[name];
  if (!v.is_number_integer()) {
    return FieldError(name, absl::StrCat("expected an integer, got ", TypeName(v)));
  }
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{1} << 62
                        ? std::numeric_limits<int64_t>::max()
                        : v.get<int64_t>();
  if (x < lo || x > hi) {
    return FieldError(name, absl::StrCat(x, " is outside [", lo, ", ", hi, "]"));
  }
  return x;
}

absl::StatusOr<bool> Bool(const json& body, const char* name) {
  const json& v = body[name];
  if (!v.is_boolean())
    return FieldError(name, absl::StrCat("expected a boolean, got ", TypeName(v)));
  return v.get<bool>();
}

// Present and not null (OpenAI's clients send null for unset optional fields).
bool Has(const json& body, const char* name) {
  auto it = body.find(name);
  return it != body.end() && !it->is_null();
}

absl::StatusOr<std::vector<int64_t>> Ids(const json& list, const std::string& param) {
  std::vector<int64_t> ids;
  ids.reserve(list.size());
  for (const json& v : list) {
    if (!v.is_number_integer()) {
      return FieldError(param, absl::StrCat("token ids must be integers, got ", TypeName(v)));
    }
    ids.push_back(v.get<int64_t>());
  }
  return ids;
}

absl::Status ReadPrompts(const json& p, const RequestLimits& limits, CompletionRequest* out) {
  auto text = [&](const json& v) {
    Prompt prompt;
    prompt.text = v.get<std::string>();
    out->prompts.push_back(std::move(prompt));
  };
  if (p.is_string()) {
    text(p);
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    Prompt prompt;
    ASSIGN_OR_RETURN(prompt.ids, Ids(p, "prompt"));
    prompt.is_ids = true;
    out->prompts.push_back(std::move(prompt));
  } else if (p.is_array() && !p.empty()) {
    if (static_cast<int64_t>(p.size()) > limits.max_prompts) {
      return FieldError("prompt", absl::StrCat(p.size(), " prompts, above ", limits.max_prompts));
    }
    for (const json& one : p) {
      if (one.is_string()) {
        text(one);
      } else if (one.is_array() && !one.empty()) {
        Prompt prompt;
        ASSIGN_OR_RETURN(prompt.ids, Ids(one, "prompt"));
        prompt.is_ids = true;
        out->prompts.push_back(std::move(prompt));
      } else {
        return FieldError("prompt", "a list of prompts holds strings or non-empty lists of ids");
      }
    }
  } else {
    return FieldError("prompt",
                      "expected a string, a list of strings, a list of token ids or a list of "
                      "such lists (non-empty)");
  }
  return absl::OkStatus();
}

absl::Status ReadMessages(const json& m, const RequestLimits& limits, CompletionRequest* out) {
  if (!m.is_array() || m.empty()) return FieldError("messages", "expected a non-empty array");
  if (static_cast<int64_t>(m.size()) > limits.max_messages) {
    return FieldError("messages", absl::StrCat(m.size(), " messages, above ", limits.max_messages));
  }
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string param = absl::StrCat("messages[", i, "]");
    if (!m[i].is_object()) return FieldError(param, "expected an object");
    if (!m[i].contains("role") || !m[i]["role"].is_string()) {
      return FieldError(param + ".role", "expected a string");
    }
    const json& content = m[i].contains("content") ? m[i]["content"] : json();
    if (content.is_array()) {
      for (const json& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return FieldError(param + ".content",
                            "only parts of type text are supported (no images or audio)");
        }
      }
    } else if (!content.is_string() && !content.is_null()) {
      return FieldError(param + ".content", "expected a string or an array of text parts");
    }
  }
  // Ordered: the template sees each message's keys in the order the client sent them.
  out->messages = m;
  return absl::OkStatus();
}

absl::Status ReadStop(const json& body, const RequestLimits& limits, CompletionRequest* out) {
  const json& v = body["stop"];
  if (v.is_string()) {
    out->stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (static_cast<int>(v.size()) > limits.max_stop_strings) {
      return FieldError("stop", absl::StrCat(v.size(), " stop strings, above --max_stop_strings=",
                                             limits.max_stop_strings));
    }
    for (const json& s : v) {
      if (!s.is_string()) return FieldError("stop", "expected strings");
      out->stop.push_back(s.get<std::string>());
    }
  } else {
    return FieldError("stop", "expected a string or a list of strings");
  }
  return absl::OkStatus();
}

absl::Status ReadSampling(const json& body, CompletionRequest* out) {
  scheduler::Sampling& s = out->sampling;
  // OpenAI's default temperature is 1 (sampling); 0 is greedy.
  s.temperature = 1;
  if (Has(body, "temperature")) {
    ASSIGN_OR_RETURN(double t, Number(body, "temperature", 0, 1e6));
    s.temperature = static_cast<float>(t);
  }
  if (Has(body, "top_p")) {
    ASSIGN_OR_RETURN(double v, Number(body, "top_p", 0, 1));
    if (v == 0) return FieldError("top_p", "must be above 0");
    s.top_p = static_cast<float>(v);
  }
  if (Has(body, "min_p")) {
    ASSIGN_OR_RETURN(double v, Number(body, "min_p", 0, 1));
    s.min_p = static_cast<float>(v);
  }
  if (Has(body, "top_k")) {
    // vLLM sends -1 for "all".
    ASSIGN_OR_RETURN(int64_t v, Integer(body, "top_k", -1, 1 << 30));
    s.top_k = v < 0 ? 0 : static_cast<int>(v);
  }
  if (Has(body, "repetition_penalty")) {
    ASSIGN_OR_RETURN(double v, Number(body, "repetition_penalty", 1e-6, 1e6));
    s.repetition_penalty = static_cast<float>(v);
  }
  if (Has(body, "presence_penalty")) {
    ASSIGN_OR_RETURN(double v, Number(body, "presence_penalty", -2, 2));
    s.presence_penalty = static_cast<float>(v);
  }
  if (Has(body, "frequency_penalty")) {
    ASSIGN_OR_RETURN(double v, Number(body, "frequency_penalty", -2, 2));
    s.frequency_penalty = static_cast<float>(v);
  }
  if (Has(body, "seed")) {
    const json& v = body["seed"];
    if (!v.is_number_integer()) return FieldError("seed", "expected an integer");
    s.seed = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
    out->seeded = true;
  }
  if (Has(body, "logit_bias")) {
    const json& v = body["logit_bias"];
    if (!v.is_object()) return FieldError("logit_bias", "expected an object of id: bias");
    if (v.size() > 1024) return FieldError("logit_bias", "more than 1024 entries");
    for (auto it = v.begin(); it != v.end(); ++it) {
      int64_t id = 0;
      size_t used = 0;
      try {
        id = std::stoll(it.key(), &used);
      } catch (...) {
        used = 0;
      }
      if (used == 0 || used != it.key().size()) {
        return FieldError("logit_bias", "keys must be token ids (decimal integers)");
      }
      if (!it.value().is_number() || !std::isfinite(it.value().get<double>()) ||
          std::fabs(it.value().get<double>()) > 100) {
        return FieldError("logit_bias", absl::StrCat("bias of ", id, " must be in [-100, 100]"));
      }
      s.logit_bias.emplace_back(id, it.value().get<float>());
    }
  }
  return absl::OkStatus();
}

absl::Status Refuse(const json& body) {
  if (Has(body, "suffix")) return FieldError("suffix", "is not supported");
  if (Has(body, "tools") && !(body["tools"].is_array() && body["tools"].empty())) {
    return FieldError("tools", "tool calling is not supported yet");
  }
  if (Has(body, "functions")) return FieldError("functions", "function calling is not supported");
  if (Has(body, "tool_choice") &&
      !(body["tool_choice"].is_string() && body["tool_choice"].get<std::string>() == "none")) {
    return FieldError("tool_choice", "tool calling is not supported yet (only \"none\")");
  }
  if (Has(body, "response_format")) {
    const json& f = body["response_format"];
    if (!f.is_object() || f.value("type", "") != "text") {
      return FieldError("response_format", "only {\"type\": \"text\"} is supported yet");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FieldError(const std::string& param, const std::string& message) {
  absl::Status status = absl::InvalidArgumentError(absl::StrCat(param, ": ", message));
  status.SetPayload(kParamPayload, absl::Cord(param));
  return status;
}

std::string ParamOf(const absl::Status& status) {
  absl::optional<absl::Cord> param = status.GetPayload(kParamPayload);
  return param.has_value() ? std::string(*param) : std::string();
}

absl::StatusOr<json> ParseJsonBody(const std::string& body) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("the body nests deeper than ", kMaxJsonDepth, " levels"));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    json value = json::parse(body);
    if (!value.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
    return value;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the body is not valid JSON: ", e.what()));
  }
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(const json& body, bool chat,
                                                         const RequestLimits& limits) {
  if (!body.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  CompletionRequest out;
  out.chat = chat;
  RETURN_IF_ERROR(Refuse(body));
  if (Has(body, "model")) {
    if (!body["model"].is_string()) return FieldError("model", "expected a string");
    out.model = body["model"].get<std::string>();
  }
  if (chat) {
    if (!Has(body, "messages")) return FieldError("messages", "is required");
    RETURN_IF_ERROR(ReadMessages(body["messages"], limits, &out));
    if (Has(body, "add_generation_prompt")) {
      ASSIGN_OR_RETURN(out.add_generation_prompt, Bool(body, "add_generation_prompt"));
    }
    if (Has(body, "chat_template_kwargs")) {
      if (!body["chat_template_kwargs"].is_object()) {
        return FieldError("chat_template_kwargs", "expected an object");
      }
      out.chat_template_kwargs = body["chat_template_kwargs"];
    }
    out.max_tokens = limits.max_new_tokens;
  } else {
    if (!Has(body, "prompt")) return FieldError("prompt", "is required");
    RETURN_IF_ERROR(ReadPrompts(body["prompt"], limits, &out));
  }
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (Has(body, name)) {
      ASSIGN_OR_RETURN(int64_t v, Integer(body, name, 0, limits.max_new_tokens));
      out.max_tokens = static_cast<int>(v);
      out.max_tokens_given = true;
    }
  }
  if (Has(body, "n")) {
    ASSIGN_OR_RETURN(int64_t n, Integer(body, "n", 1, limits.max_choices));
    out.n = static_cast<int>(n);
  }
  if (Has(body, "best_of")) {
    ASSIGN_OR_RETURN(int64_t b, Integer(body, "best_of", 1, limits.max_choices));
    if (b != out.n) return FieldError("best_of", "only best_of equal to n is supported");
  }
  if (Has(body, "stream")) {
    ASSIGN_OR_RETURN(out.stream, Bool(body, "stream"));
  }
  if (Has(body, "stream_options")) {
    const json& o = body["stream_options"];
    if (!o.is_object()) return FieldError("stream_options", "expected an object");
    if (!out.stream) return FieldError("stream_options", "is only allowed with stream: true");
    if (Has(o, "include_usage")) {
      ASSIGN_OR_RETURN(out.include_usage, Bool(o, "include_usage"));
    }
  }
  if (Has(body, "echo")) {
    if (chat) return FieldError("echo", "is a /v1/completions field");
    ASSIGN_OR_RETURN(out.echo, Bool(body, "echo"));
  }
  if (chat) {
    bool logprobs = false;
    if (Has(body, "logprobs")) {
      ASSIGN_OR_RETURN(logprobs, Bool(body, "logprobs"));
    }
    if (Has(body, "top_logprobs")) {
      if (!logprobs) return FieldError("top_logprobs", "needs logprobs: true");
      ASSIGN_OR_RETURN(int64_t k, Integer(body, "top_logprobs", 0, scheduler::kMaxTopLogprobs));
      out.logprobs = static_cast<int>(k);
    } else if (logprobs) {
      out.logprobs = 0;
    }
  } else if (Has(body, "logprobs")) {
    ASSIGN_OR_RETURN(int64_t k, Integer(body, "logprobs", 0, scheduler::kMaxTopLogprobs));
    out.logprobs = static_cast<int>(k);
  }
  out.sampling.top_logprobs = std::max(out.logprobs, 0);
  if (Has(body, "stop")) RETURN_IF_ERROR(ReadStop(body, limits, &out));
  if (Has(body, "stop_token_ids")) {
    if (!body["stop_token_ids"].is_array()) return FieldError("stop_token_ids", "expected ids");
    if (body["stop_token_ids"].size() > 64) return FieldError("stop_token_ids", "more than 64");
    ASSIGN_OR_RETURN(out.stop_token_ids, Ids(body["stop_token_ids"], "stop_token_ids"));
  }
  if (Has(body, "ignore_eos")) {
    ASSIGN_OR_RETURN(out.ignore_eos, Bool(body, "ignore_eos"));
  }
  if (Has(body, "return_tokens_as_token_ids")) {
    ASSIGN_OR_RETURN(out.tokens_as_ids, Bool(body, "return_tokens_as_token_ids"));
  }
  RETURN_IF_ERROR(ReadSampling(body, &out));
  if (Has(body, "user") && body["user"].is_string()) out.user = body["user"].get<std::string>();
  if (Has(body, "session_id")) {
    if (!body["session_id"].is_string()) return FieldError("session_id", "expected a string");
    out.session_id = body["session_id"].get<std::string>();
  }
  return out;
}

}  // namespace attnserve::server::openai
