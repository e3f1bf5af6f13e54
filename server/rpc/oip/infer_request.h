// An Open Inference Protocol ModelInferRequest read into what attnserve computes: the prompt's
// token ids (input_ids, INT64 or INT32, shape [1, L]) or its text (text_input, BYTES, one
// element), the outputs asked for, generation parameters named as Triton's LLM backends name
// them (max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
// frequency_penalty, logit_bias, seed, stop, stop_token_ids, ignore_eos) and the
// sequence flags (sequence_id,
// sequence_start, sequence_end). Typed contents and raw_input_contents both work; shapes,
// datatypes and sizes are checked before anything is looked up or allocated beyond what the
// request itself holds. Torch-free: the request-validation fuzzer links it
// (tests/fuzz/request_validation_fuzzer.cc). Every error is INVALID_ARGUMENT (RESOURCE_EXHAUSTED
// for a limit) naming the tensor or parameter and what was expected, never echoing more than a
// short escaped prefix of client text (client_text.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/grpc_predict_v2.pb.h"

namespace attnserve::server::oip {

// The tensor names of every attnserve model through this protocol.
inline constexpr char kInputIds[] = "input_ids";
inline constexpr char kTextInput[] = "text_input";
inline constexpr char kLogits[] = "logits";
inline constexpr char kOutputIds[] = "output_ids";
inline constexpr char kTextOutput[] = "text_output";

enum class LogitsOutput { kNone, kLast, kAll };

// One requested output, in the order the request named them (the response keeps it).
enum class OutputName { kLogits, kOutputIds, kTextOutput };

struct InferLimits {
  int64_t max_tokens_per_request = 65536;  // --max_tokens_per_request
  int max_new_tokens = 1024;               // --max_new_tokens
  int64_t max_text_bytes = 1 << 20;        // one text_input element
};

struct ParsedInfer {
  std::vector<int64_t> input_ids;  // empty when the prompt is text
  bool has_text = false;
  std::string text_input;
  // Outputs, in the response's order. With none requested: logits (last position), and
  // output_ids when max_tokens > 0, and text_output for a text prompt.
  std::vector<OutputName> outputs;
  // logits' parameter "positions": "last" (default, [1, vocab]) or "all" ([1, L, vocab]).
  LogitsOutput logits = LogitsOutput::kNone;
  // The request sent raw_input_contents: the response answers in raw_output_contents too.
  bool raw = false;
  // Generation: max_tokens (0: none), temperature (0: greedy), top_k (0: all), seed; stop: a
  // stop string (string_param; generation ends at it, it and what follows are not returned)
  // or a stop token (int64_param); stop_token_ids: ids separated by commas or spaces (or one
  // int64); without any, for a text_input prompt the model's end-of-text ends generation
  // unless ignore_eos (an input_ids prompt has no default stop token).
  int max_tokens = 0;
  float temperature = 0;
  int top_k = 0;
  uint64_t seed = 0;
  // top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty (double_param):
  // server/scheduler/token_sampler.h.
  float top_p = 1, min_p = 0, repetition_penalty = 1, presence_penalty = 0, frequency_penalty = 0;
  // logit_bias: a string_param holding a JSON object of id -> bias, as OpenAI's ({"42": -100});
  // at most 1024 entries (ids and ranges are checked against the model when the job starts).
  std::vector<std::pair<int64_t, float>> logit_bias;
  std::vector<std::string> stop_strings;
  std::vector<int64_t> stop;
  bool ignore_eos = false;
  // ModelStreamInfer: generated tokens per streamed response (0 or 1: one each; N: groups of
  // N, the last one with what is left, before the final response). ModelInfer ignores it.
  int stream_interval = 0;
  // The sequence: "" for none (sequence_id absent, 0 or ""); else "u:<decimal>" for an
  // integer id, "s:<string>" for a string one (the two never name the same sequence).
  std::string sequence_key;
  bool sequence_start = false;
  bool sequence_end = false;
};

// Reads and checks `request` (not its model name or version: the service resolves those).
absl::StatusOr<ParsedInfer> ParseInferRequest(const inference::ModelInferRequest& request,
                                              const InferLimits& limits);

// Bytes of one element of `datatype` ("INT64": 8, ...); 0 for BYTES or an unknown name.
int64_t ElementBytes(const std::string& datatype);

// The elements of a raw BYTES tensor: each a 4-byte little-endian length, then that many
// bytes. INVALID_ARGUMENT naming `tensor` when a length runs past the end, or the count is
// not `expected`.
absl::StatusOr<std::vector<std::string>> DecodeRawBytes(const std::string& raw, int64_t expected,
                                                        const std::string& tensor);

// `elements` as a raw BYTES tensor (each a 4-byte little-endian length, then its bytes).
std::string EncodeRawBytes(const std::vector<std::string>& elements);

}  // namespace attnserve::server::oip
