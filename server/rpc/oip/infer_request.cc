#include "server/rpc/oip/infer_request.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "server/client_text.h"

namespace attnserve::server::oip {
namespace {

using inference::InferParameter;
using inference::InferTensorContents;
using inference::ModelInferRequest;

std::string ShapeText(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The number of elements `shape` declares, or an error for a negative dimension or a product
// above `limit` (checked as it multiplies, so no declared shape overflows).
absl::StatusOr<int64_t> ElementCount(const ModelInferRequest::InferInputTensor& input,
                                     int64_t limit) {
  int64_t count = 1;
  for (int64_t dim : input.shape()) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "' has shape ",
                                                     ShapeText(input.shape()),
                                                     "; dimensions must be >= 0"));
    }
    if (dim != 0 && count > limit / dim) {
      return absl::ResourceExhaustedError(
          absl::StrCat("input '", input.name(), "' declares shape ", ShapeText(input.shape()),
                       ", more than the limit of ", limit, " elements (--max_tokens_per_request)"));
    }
    count *= dim;
  }
  return count;
}

// How many typed content fields are set, and whether any other than `allowed` is.
int ContentFieldsSet(const InferTensorContents& c) {
  return (c.bool_contents_size() > 0) + (c.int_contents_size() > 0) +
         (c.int64_contents_size() > 0) + (c.uint_contents_size() > 0) +
         (c.uint64_contents_size() > 0) + (c.fp32_contents_size() > 0) +
         (c.fp64_contents_size() > 0) + (c.bytes_contents_size() > 0);
}

absl::Status SizeMismatch(const ModelInferRequest::InferInputTensor& input, int64_t expected,
                          int64_t got, const char* unit) {
  return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "': shape ",
                                                 ShapeText(input.shape()), " holds ", expected,
                                                 " elements, its contents hold ", got, unit));
}

absl::Status ReadInputIds(const ModelInferRequest::InferInputTensor& input, const std::string* raw,
                          const InferLimits& limits, ParsedInfer* out) {
  const std::string& type = input.datatype();
  if (type != "INT64" && type != "INT32") {
    return absl::InvalidArgumentError(absl::StrCat("input 'input_ids' has datatype ",
                                                   ClientText(type), "; expected INT64 or INT32"));
  }
  if (input.shape_size() != 2 || input.shape(0) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("input 'input_ids' has shape ",
                                                   ShapeText(input.shape()),
                                                   "; expected [1, L] (one sequence of L ids)"));
  }
  absl::StatusOr<int64_t> count = ElementCount(input, limits.max_tokens_per_request);
  if (!count.ok()) return count.status();
  if (*count == 0) {
    return absl::InvalidArgumentError("input 'input_ids' is empty; send at least one id");
  }
  const int64_t width = type == "INT64" ? 8 : 4;
  out->input_ids.resize(*count);
  if (raw != nullptr) {
    if (ContentFieldsSet(input.contents()) > 0) {
      return absl::InvalidArgumentError(
          "input 'input_ids' has typed contents and raw_input_contents; send one of them");
    }
    if (static_cast<int64_t>(raw->size()) != *count * width) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input 'input_ids': shape ", ShapeText(input.shape()), " of ", type, " needs ",
          *count * width, " bytes of raw_input_contents, got ", raw->size()));
    }
    for (int64_t i = 0; i < *count; ++i) {  // little endian, as the protocol and x86 have it
      if (width == 8) {
        std::memcpy(&out->input_ids[i], raw->data() + 8 * i, 8);
      } else {
        int32_t v;
        std::memcpy(&v, raw->data() + 4 * i, 4);
        out->input_ids[i] = v;
      }
    }
    return absl::OkStatus();
  }
  const InferTensorContents& c = input.contents();
  const int64_t got = width == 8 ? c.int64_contents_size() : c.int_contents_size();
  if (ContentFieldsSet(c) > (got > 0 ? 1 : 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'input_ids' of ", type, " carries its elements in ",
        width == 8 ? "int64_contents" : "int_contents", " only; another contents field is set"));
  }
  if (got != *count) return SizeMismatch(input, *count, got, "");
  for (int64_t i = 0; i < *count; ++i) {
    out->input_ids[i] = width == 8 ? c.int64_contents(i) : c.int_contents(i);
  }
  return absl::OkStatus();
}

absl::Status ReadTextInput(const ModelInferRequest::InferInputTensor& input, const std::string* raw,
                           const InferLimits& limits, ParsedInfer* out) {
  if (input.datatype() != "BYTES") {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'text_input' has datatype ", ClientText(input.datatype()), "; expected BYTES"));
  }
  absl::StatusOr<int64_t> count = ElementCount(input, 1);
  if (!count.ok() || *count != 1 || input.shape_size() < 1 || input.shape_size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat("input 'text_input' has shape ",
                                                   ShapeText(input.shape()),
                                                   "; expected [1] or [1, 1] (one text)"));
  }
  std::vector<std::string> elements;
  if (raw != nullptr) {
    if (ContentFieldsSet(input.contents()) > 0) {
      return absl::InvalidArgumentError(
          "input 'text_input' has typed contents and raw_input_contents; send one of them");
    }
    absl::StatusOr<std::vector<std::string>> decoded = DecodeRawBytes(*raw, 1, kTextInput);
    if (!decoded.ok()) return decoded.status();
    elements = *std::move(decoded);
  } else {
    const InferTensorContents& c = input.contents();
    if (ContentFieldsSet(c) > (c.bytes_contents_size() > 0 ? 1 : 0)) {
      return absl::InvalidArgumentError(
          "input 'text_input' of BYTES carries its element in bytes_contents only");
    }
    if (c.bytes_contents_size() != 1) return SizeMismatch(input, 1, c.bytes_contents_size(), "");
    elements.push_back(c.bytes_contents(0));
  }
  if (static_cast<int64_t>(elements[0].size()) > limits.max_text_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("input 'text_input' is ", elements[0].size(),
                                                     " bytes; the limit is ",
                                                     limits.max_text_bytes));
  }
  out->has_text = true;
  out->text_input = std::move(elements[0]);
  return absl::OkStatus();
}

// An integer parameter (int64 or uint64, or a double that is a whole number) in [lo, hi].
absl::StatusOr<int64_t> IntParam(const std::string& name, const InferParameter& p, int64_t lo,
                                 int64_t hi) {
  int64_t v = 0;
  bool ok = true;
  switch (p.parameter_choice_case()) {
    case InferParameter::kInt64Param:
      v = p.int64_param();
      break;
    case InferParameter::kUint64Param:
      ok = p.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      v = static_cast<int64_t>(p.uint64_param());
      break;
    default:
      ok = false;
  }
  if (!ok || v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be an integer in [",
                                                   lo, ", ", hi,
                                                   "] (int64_param or uint64_param)"));
  }
  return v;
}

absl::StatusOr<bool> BoolParam(const std::string& name, const InferParameter& p) {
  if (p.parameter_choice_case() != InferParameter::kBoolParam) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be a bool_param"));
  }
  return p.bool_param();
}

absl::Status ReadSequenceId(const InferParameter& p, ParsedInfer* out) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kInt64Param:
      if (p.int64_param() < 0) {
        return absl::InvalidArgumentError("parameter 'sequence_id' must be >= 0 (0: none)");
      }
      if (p.int64_param() != 0) out->sequence_key = absl::StrCat("u:", p.int64_param());
      return absl::OkStatus();
    case InferParameter::kUint64Param:
      if (p.uint64_param() != 0) out->sequence_key = absl::StrCat("u:", p.uint64_param());
      return absl::OkStatus();
    case InferParameter::kStringParam:
      if (p.string_param().size() > 256) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter 'sequence_id' is ", p.string_param().size(), " bytes; at most 256"));
      }
      if (!p.string_param().empty()) out->sequence_key = absl::StrCat("s:", p.string_param());
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          "parameter 'sequence_id' must be an integer (int64_param, uint64_param) or a "
          "string_param");
  }
}

absl::Status ReadStopTokenIds(const InferParameter& p, ParsedInfer* out) {
  if (p.parameter_choice_case() == InferParameter::kInt64Param) {
    out->stop.push_back(p.int64_param());
    return absl::OkStatus();
  }
  if (p.parameter_choice_case() == InferParameter::kStringParam &&
      p.string_param().size() <= 4096) {
    for (absl::string_view piece :
         absl::StrSplit(p.string_param(), absl::ByAnyChar(", "), absl::SkipEmpty())) {
      int64_t id;
      if (!absl::SimpleAtoi(piece, &id) || out->stop.size() >= 64) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter 'stop_token_ids' must be token ids (an int64_param, or up to 64 ids "
            "separated by commas or spaces in a string_param); got ",
            ClientText(p.string_param())));
      }
      out->stop.push_back(id);
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      "parameter 'stop_token_ids' must be token ids: an int64_param, or a string_param of ids "
      "separated by commas or spaces");
}

absl::Status ReadLogitBias(const InferParameter& p, ParsedInfer* out) {
  const absl::Status bad = absl::InvalidArgumentError(
      "parameter 'logit_bias' must be a string_param holding a JSON object of token id to bias "
      "(at most 1024 entries), e.g. {\"42\": -100}");
  if (p.parameter_choice_case() != InferParameter::kStringParam) return bad;
  // One flat object: nothing nested is parsed (nesting costs the parser and its destructor).
  const std::string& text = p.string_param();
  if (std::count(text.begin(), text.end(), '{') != 1 || text.find('[') != std::string::npos) {
    return bad;
  }
  const nlohmann::json bias =
      nlohmann::json::parse(p.string_param(), nullptr, /*allow_exceptions=*/false);
  if (!bias.is_object() || bias.size() > 1024) return bad;
  for (auto it = bias.begin(); it != bias.end(); ++it) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(it.key(), &id) || !it.value().is_number()) return bad;
    out->logit_bias.emplace_back(id, it.value().get<float>());
  }
  return absl::OkStatus();
}

absl::Status ReadParameters(const ModelInferRequest& request, const InferLimits& limits,
                            ParsedInfer* out) {
  for (const auto& [name, p] : request.parameters()) {
    if (name == "sequence_id") {
      if (absl::Status s = ReadSequenceId(p, out); !s.ok()) return s;
    } else if (name == "sequence_start" || name == "sequence_end") {
      absl::StatusOr<bool> v = BoolParam(name, p);
      if (!v.ok()) return v.status();
      (name == "sequence_start" ? out->sequence_start : out->sequence_end) = *v;
    } else if (name == "max_tokens") {
      absl::StatusOr<int64_t> v = IntParam(name, p, 0, limits.max_new_tokens);
      if (!v.ok()) return v.status();
      out->max_tokens = static_cast<int>(*v);
    } else if (name == "stream_interval") {
      absl::StatusOr<int64_t> v = IntParam(name, p, 0, limits.max_new_tokens);
      if (!v.ok()) return v.status();
      out->stream_interval = static_cast<int>(*v);
    } else if (name == "top_k") {
      absl::StatusOr<int64_t> v = IntParam(name, p, 0, 1 << 30);
      if (!v.ok()) return v.status();
      out->top_k = static_cast<int>(*v);
    } else if (name == "seed") {
      if (p.parameter_choice_case() == InferParameter::kUint64Param) {
        out->seed = p.uint64_param();
      } else if (p.parameter_choice_case() == InferParameter::kInt64Param) {
        out->seed = static_cast<uint64_t>(p.int64_param());
      } else {
        return absl::InvalidArgumentError(
            "parameter 'seed' must be an int64_param or uint64_param");
      }
    } else if (name == "temperature") {
      double t = p.parameter_choice_case() == InferParameter::kDoubleParam ? p.double_param()
                 : p.parameter_choice_case() == InferParameter::kInt64Param
                     ? static_cast<double>(p.int64_param())
                     : -1;
      if (!std::isfinite(t) || t < 0 || t > 1e6) {
        return absl::InvalidArgumentError(
            "parameter 'temperature' must be a finite double_param >= 0 (0: greedy)");
      }
      out->temperature = static_cast<float>(t);
    } else if (name == "top_p" || name == "min_p" || name == "repetition_penalty" ||
               name == "presence_penalty" || name == "frequency_penalty") {
      // Ranges are the scheduler's (token_sampler.h), checked when the job starts.
      const double v = p.parameter_choice_case() == InferParameter::kDoubleParam ? p.double_param()
                       : p.parameter_choice_case() == InferParameter::kInt64Param
                           ? static_cast<double>(p.int64_param())
                           : std::nan("");
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", name, "' must be a finite double_param"));
      }
      (name == "top_p"                ? out->top_p
       : name == "min_p"              ? out->min_p
       : name == "repetition_penalty" ? out->repetition_penalty
       : name == "presence_penalty"   ? out->presence_penalty
                                      : out->frequency_penalty) = static_cast<float>(v);
    } else if (name == "logit_bias") {
      if (absl::Status s = ReadLogitBias(p, out); !s.ok()) return s;
    } else if (name == "stop") {
      if (p.parameter_choice_case() == InferParameter::kStringParam) {
        out->stop_strings.push_back(p.string_param());  // checked with the model's tokenizer
      } else if (p.parameter_choice_case() == InferParameter::kInt64Param) {
        out->stop.push_back(p.int64_param());
      } else {
        return absl::InvalidArgumentError(
            "parameter 'stop' must be a stop string (string_param) or a stop token "
            "(int64_param)");
      }
    } else if (name == "stop_token_ids") {
      if (absl::Status s = ReadStopTokenIds(p, out); !s.ok()) return s;
    } else if (name == "ignore_eos") {
      absl::StatusOr<bool> v = BoolParam(name, p);
      if (!v.ok()) return v.status();
      out->ignore_eos = *v;
    }
    // Other parameters (Triton's priority, timeout, binary_data_output, ...) are ignored, as
    // a backend ignores those it does not know.
  }
  if (out->sequence_key.empty() && (out->sequence_start || out->sequence_end)) {
    return absl::InvalidArgumentError(
        "sequence_start or sequence_end without a sequence_id; set sequence_id (not 0 or \"\")");
  }
  return absl::OkStatus();
}

absl::Status ReadOutputs(const ModelInferRequest& request, ParsedInfer* out) {
  for (const auto& o : request.outputs()) {
    OutputName name;
    if (o.name() == kLogits) {
      name = OutputName::kLogits;
      out->logits = LogitsOutput::kLast;
      auto it = o.parameters().find("positions");
      if (it != o.parameters().end()) {
        const InferParameter& p = it->second;
        const bool is_string = p.parameter_choice_case() == InferParameter::kStringParam;
        if (is_string && p.string_param() == "all") {
          out->logits = LogitsOutput::kAll;
        } else if (!is_string || p.string_param() != "last") {
          return absl::InvalidArgumentError(
              "output 'logits' parameter 'positions' must be the string \"last\" ([1, vocab], "
              "the default) or \"all\" ([1, L, vocab])");
        }
      }
    } else if (o.name() == kOutputIds) {
      name = OutputName::kOutputIds;
    } else if (o.name() == kTextOutput) {
      name = OutputName::kTextOutput;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown output ", ClientText(o.name()),
                                                     "; the outputs are logits, output_ids and "
                                                     "text_output"));
    }
    for (OutputName seen : out->outputs) {
      if (seen == name) {
        return absl::InvalidArgumentError(absl::StrCat("output '", o.name(), "' is named twice"));
      }
    }
    out->outputs.push_back(name);
  }
  if (out->outputs.empty()) {
    out->outputs.push_back(OutputName::kLogits);
    out->logits = LogitsOutput::kLast;
    if (out->max_tokens > 0) out->outputs.push_back(OutputName::kOutputIds);
    if (out->has_text && out->max_tokens > 0) out->outputs.push_back(OutputName::kTextOutput);
  }
  // output_ids and text_output hold the generated tokens: without max_tokens none, so they
  // answer empty ([1, 0] and one empty string), as a client that asks for every output
  // ModelMetadata lists (perf_analyzer) expects.
  return absl::OkStatus();
}

}  // namespace

int64_t ElementBytes(const std::string& datatype) {
  if (datatype == "BOOL" || datatype == "INT8" || datatype == "UINT8") return 1;
  if (datatype == "INT16" || datatype == "UINT16" || datatype == "FP16" || datatype == "BF16")
    return 2;
  if (datatype == "INT32" || datatype == "UINT32" || datatype == "FP32") return 4;
  if (datatype == "INT64" || datatype == "UINT64" || datatype == "FP64") return 8;
  return 0;
}

absl::StatusOr<std::vector<std::string>> DecodeRawBytes(const std::string& raw, int64_t expected,
                                                        const std::string& tensor) {
  std::vector<std::string> elements;
  size_t at = 0;
  while (at < raw.size()) {
    if (raw.size() - at < 4) {
      return absl::InvalidArgumentError(absl::StrCat("input '", tensor, "': BYTES element ",
                                                     elements.size(), " at byte ", at,
                                                     " has a truncated 4-byte length prefix"));
    }
    uint32_t length;
    std::memcpy(&length, raw.data() + at, 4);
    at += 4;
    if (length > raw.size() - at) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", tensor, "': BYTES element ", elements.size(), " declares ",
                       length, " bytes, but only ", raw.size() - at, " remain"));
    }
    if (static_cast<int64_t>(elements.size()) >= expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", tensor, "': raw contents hold more than the ", expected,
                       " BYTES elements its shape declares"));
    }
    elements.emplace_back(raw.data() + at, length);
    at += length;
  }
  if (static_cast<int64_t>(elements.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("input '", tensor, "': shape declares ",
                                                   expected, " BYTES elements, its contents hold ",
                                                   elements.size()));
  }
  return elements;
}

std::string EncodeRawBytes(const std::vector<std::string>& elements) {
  std::string out;
  for (const std::string& e : elements) {
    const uint32_t length = static_cast<uint32_t>(e.size());
    out.append(reinterpret_cast<const char*>(&length), 4);
    out.append(e);
  }
  return out;
}

absl::StatusOr<ParsedInfer> ParseInferRequest(const ModelInferRequest& request,
                                              const InferLimits& limits) {
  ParsedInfer out;
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(), " entries for ",
                     request.inputs_size(), " inputs; send one per input, in the inputs' order"));
  }
  out.raw = raw;
  bool have_ids = false;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    const std::string* contents = raw ? &request.raw_input_contents(i) : nullptr;
    absl::Status s;
    if (input.name() == kInputIds && !have_ids && !out.has_text) {
      have_ids = true;
      s = ReadInputIds(input, contents, limits, &out);
    } else if (input.name() == kTextInput && !have_ids && !out.has_text) {
      s = ReadTextInput(input, contents, limits, &out);
    } else if (input.name() == kInputIds || input.name() == kTextInput) {
      s = absl::InvalidArgumentError(
          "send one input: input_ids (INT64 or INT32, [1, L]) or text_input (BYTES, [1])");
    } else {
      s = absl::InvalidArgumentError(absl::StrCat(
          "unknown input ", ClientText(input.name()),
          "; the inputs are input_ids (INT64 or INT32, [1, L]) and text_input (BYTES, [1])"));
    }
    if (!s.ok()) return s;
  }
  if (!have_ids && !out.has_text) {
    return absl::InvalidArgumentError(
        "no input: send input_ids (INT64 or INT32, [1, L]) or text_input (BYTES, [1])");
  }
  if (absl::Status s = ReadParameters(request, limits, &out); !s.ok()) return s;
  if (absl::Status s = ReadOutputs(request, &out); !s.ok()) return s;
  return out;
}

}  // namespace attnserve::server::oip
