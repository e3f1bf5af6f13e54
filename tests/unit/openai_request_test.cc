// The OpenAI door's request reading (server/rpc/openai/openai_request.h) and error mapping
// (openai_error.h), without a server: every field's reading, defaults and refusals, and the
// HTTP status of each kind of error.
#include "server/rpc/openai/openai_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "server/rpc/openai/openai_error.h"

namespace attnserve::server::openai {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

absl::StatusOr<CompletionRequest> Parse(const std::string& body, bool chat = false) {
  absl::StatusOr<nlohmann::ordered_json> parsed = ParseJsonBody(body);
  if (!parsed.ok()) return parsed.status();
  return ParseCompletionRequest(*parsed, chat, RequestLimits{});
}

// The param an error names ("" when it parsed).
std::string ParamOfError(const std::string& body, bool chat = false) {
  absl::StatusOr<CompletionRequest> r = Parse(body, chat);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? "" : ParamOf(r.status());
}

TEST(OpenAiRequestTest, BodiesMustBeShallowJsonObjects) {
  EXPECT_TRUE(ParseJsonBody(R"({"a": [1, {"b": "[[[["}]})").ok());
  EXPECT_THAT(ParseJsonBody("[1, 2]").status().message(), HasSubstr("must be a JSON object"));
  EXPECT_THAT(ParseJsonBody("{\"a\": ").status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(ParseJsonBody("").status().message(), HasSubstr("not valid JSON"));
  const std::string deep =
      std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  EXPECT_THAT(ParseJsonBody("{\"a\": " + deep + "}").status().message(),
              HasSubstr("nests deeper than 64"));
  // Brackets inside strings (escaped quotes too) do not nest.
  const std::string quoted = "{\"a\": \"\\\"" + std::string(1000, '[') + "\"}";
  EXPECT_TRUE(ParseJsonBody(quoted).ok());
}

TEST(OpenAiRequestTest, CompletionPromptsInEveryForm) {
  absl::StatusOr<CompletionRequest> r = Parse(R"({"model": "m", "prompt": "hi"})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].text, "hi");
  EXPECT_EQ(r->max_tokens, 16);  // OpenAI's default for completions
  EXPECT_EQ(r->sampling.temperature, 1);
  r = Parse(R"({"prompt": ["a", "b"]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompts.size(), 2u);
  r = Parse(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_TRUE(r->prompts[0].is_ids);
  EXPECT_EQ(r->prompts[0].ids, (std::vector<int64_t>{1, 2, 3}));
  r = Parse(R"({"prompt": [[1, 2], [3]]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompts.size(), 2u);
  EXPECT_EQ(ParamOfError(R"({"prompt": []})"), "prompt");
  EXPECT_EQ(ParamOfError(R"({"prompt": [1, "a"]})"), "prompt");
  EXPECT_EQ(ParamOfError(R"({"model": "m"})"), "prompt");
}

TEST(OpenAiRequestTest, SamplingFieldsAndTheirRanges) {
  absl::StatusOr<CompletionRequest> r = Parse(
      R"({"prompt": "x", "temperature": 0.5, "top_p": 0.9, "min_p": 0.1, "top_k": -1,
          "repetition_penalty": 1.2, "presence_penalty": -1, "frequency_penalty": 2,
          "seed": 18446744073709551615, "logit_bias": {"5": -100, "7": 3.5}, "logprobs": 4,
          "max_tokens": 0, "n": 3, "stop": ["a", "b"], "stop_token_ids": [9],
          "ignore_eos": true, "user": "u", "metadata": {"x": 1}, "unknown": [1]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const scheduler::Sampling& s = r->sampling;
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_EQ(s.top_k, 0);  // vLLM's -1: all
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(s.presence_penalty, -1);
  EXPECT_FLOAT_EQ(s.frequency_penalty, 2);
  EXPECT_EQ(s.seed, 18446744073709551615ull);
  EXPECT_TRUE(r->seeded);
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.top_logprobs, 4);
  EXPECT_EQ(r->logprobs, 4);
  EXPECT_EQ(r->max_tokens, 0);
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r->ignore_eos);
  // null is unset, as OpenAI's clients send it.
  r = Parse(R"({"prompt": "x", "temperature": null, "stop": null, "seed": null})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->seeded);
  for (const char* bad :
       {R"("temperature": -1)", R"("temperature": "hot")", R"("top_p": 0)", R"("top_p": 1.5)",
        R"("min_p": 2)", R"("presence_penalty": 3)", R"("frequency_penalty": -2.5)",
        R"("repetition_penalty": 0)", R"("n": 0)", R"("n": 17)", R"("logprobs": 21)",
        R"("max_tokens": 5000)", R"("max_tokens": 1.5)", R"("seed": "s")",
        R"("logit_bias": {"x": 1})", R"("logit_bias": {"5": 101})", R"("stop": 5)"}) {
    const std::string body = std::string(R"({"prompt": "x", )") + bad + "}";
    const std::string field = std::string(bad).substr(1, std::string(bad).find('"', 1) - 1);
    EXPECT_EQ(ParamOfError(body), field) << body;
  }
  std::string many = R"({"prompt": "x", "stop": [)";
  for (int i = 0; i < 17; ++i) many += (i ? ",\"" : "\"") + std::to_string(i) + "\"";
  EXPECT_EQ(ParamOfError(many + "]}"), "stop");
}

TEST(OpenAiRequestTest, UnsupportedFieldsAreRefusedByName) {
  EXPECT_EQ(ParamOfError(R"({"prompt": "x", "suffix": "y"})"), "suffix");
  EXPECT_EQ(ParamOfError(R"({"prompt": "x", "best_of": 3})"), "best_of");
  EXPECT_EQ(ParamOfError(R"({"prompt": "x", "echo": true, "stream_options": {}})"),
            "stream_options");
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  EXPECT_EQ(ParamOfError(chat + R"("tools": [{"type": "function"}]})", true), "tools");
  EXPECT_EQ(ParamOfError(chat + R"("tool_choice": "auto"})", true), "tool_choice");
  EXPECT_EQ(ParamOfError(chat + R"("response_format": {"type": "json_object"}})", true),
            "response_format");
  EXPECT_EQ(ParamOfError(chat + R"("echo": true})", true), "echo");
  EXPECT_EQ(ParamOfError(chat + R"("top_logprobs": 2})", true), "top_logprobs");
  // What is neutral is accepted.
  EXPECT_TRUE(Parse(chat + R"("tools": [], "tool_choice": "none",
                              "response_format": {"type": "text"}})",
                    true)
                  .ok());
}

TEST(OpenAiRequestTest, ChatMessagesAndLogprobs) {
  absl::StatusOr<CompletionRequest> r = Parse(
      R"({"messages": [{"role": "system", "content": "s"},
                       {"role": "user", "content": [{"type": "text", "text": "t"}]},
                       {"role": "assistant", "content": null}],
          "logprobs": true, "top_logprobs": 3, "stream": true,
          "stream_options": {"include_usage": true}, "max_completion_tokens": 7})",
      true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1]["content"][0]["text"], "t");
  EXPECT_EQ(r->logprobs, 3);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->max_tokens, 7);
  r = Parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->logprobs, 0);
  EXPECT_EQ(r->max_tokens, RequestLimits{}.max_new_tokens);  // chat: up to the limit
  EXPECT_EQ(ParamOfError(R"({"messages": []})", true), "messages");
  EXPECT_EQ(ParamOfError(R"({"messages": [{"content": "x"}]})", true), "messages[0].role");
  EXPECT_EQ(
      ParamOfError(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true),
      "messages[0].content");
  // The messages keep the client's key order (templates' tojson shows it).
  r = Parse(R"({"messages": [{"role": "user", "content": "x", "b": 1, "a": 2}]})", true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->messages[0].dump(), R"({"role":"user","content":"x","b":1,"a":2})");
}

TEST(OpenAiErrorTest, StatusesByKindAndPhase) {
  const HttpError bad = ToHttpError(FieldError("top_p", "no"), ErrorPhase::kRequest);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.type, "invalid_request_error");
  EXPECT_EQ(bad.param, "top_p");
  const HttpError limit = ToHttpError(absl::ResourceExhaustedError("long"), ErrorPhase::kRequest);
  EXPECT_EQ(limit.status, 400);
  EXPECT_EQ(limit.code, "context_length_exceeded");
  EXPECT_EQ(limit.retry_after_s, 0);
  const HttpError busy = ToHttpError(absl::ResourceExhaustedError("full"), ErrorPhase::kServing);
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.retry_after_s, 1);
  EXPECT_EQ(ToHttpError(absl::UnavailableError("drain"), ErrorPhase::kServing).status, 503);
  EXPECT_EQ(ToHttpError(absl::UnauthenticatedError("who"), ErrorPhase::kRequest).status, 401);
  EXPECT_EQ(ToHttpError(absl::NotFoundError("what"), ErrorPhase::kRequest).status, 404);
  EXPECT_EQ(ToHttpError(absl::InternalError("oops"), ErrorPhase::kServing).status, 500);
  const json body = json::parse(ErrorBody(bad));
  EXPECT_EQ(body["error"]["message"], "top_p: no");
  EXPECT_EQ(body["error"]["param"], "top_p");
  EXPECT_TRUE(body["error"]["code"].is_null());
  // Bytes that are not UTF-8 in a message still make valid JSON.
  EXPECT_NO_THROW(json::parse(ErrorBody(MakeHttpError(400, "t", std::string("\xff\xfe")))));
}

}  // namespace
}  // namespace attnserve::server::openai
