#include "server/rpc/openai/completion_response.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace attnserve::server::openai {
namespace {

using json = nlohmann::json;

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string SseEvent(const json& value) { return "data: " + Dump(value) + "\n\n"; }

CompletionAssembler::CompletionAssembler(const CompletionRequest& request, ResponseHeader header,
                                         const text::Tokenizer* tokenizer, int choices,
                                         std::vector<std::string> echo_texts, int64_t prompt_tokens)
    : request_(request),
      header_(std::move(header)),
      tokenizer_(tokenizer),
      choices_(choices),
      prompt_tokens_(prompt_tokens) {
  for (int i = 0; i < choices && i < static_cast<int>(echo_texts.size()); ++i) {
    choices_[i].text = std::move(echo_texts[i]);
    choices_[i].text_offset = static_cast<int64_t>(choices_[i].text.size());
  }
}

std::string CompletionAssembler::TokenString(int64_t id) const {
  if (request_.tokens_as_ids) return absl::StrCat("token_id:", id);
  return tokenizer_ != nullptr ? std::string(tokenizer_->TokenBytes(id)) : std::string();
}

json CompletionAssembler::Logprobs(Choice& choice,
                                   const std::vector<scheduler::SampledToken>& tokens) {
  if (request_.chat) {
    json content = json::array();
    for (const scheduler::SampledToken& t : tokens) {
      auto entry = [&](int64_t id, float logprob) {
        const std::string s = TokenString(id);
        json bytes = json::array();
        for (const unsigned char c : s) bytes.push_back(static_cast<int>(c));
        return json{{"token", s}, {"logprob", logprob}, {"bytes", bytes}};
      };
      json item = entry(t.token, t.logprob);
      json top = json::array();
      for (const scheduler::TokenLogprob& a : t.top) top.push_back(entry(a.token, a.logprob));
      item["top_logprobs"] = top;
      content.push_back(item);
    }
    return json{{"content", content}};
  }
  json out{{"tokens", json::array()},
           {"token_logprobs", json::array()},
           {"top_logprobs", json::array()},
           {"text_offset", json::array()}};
  for (const scheduler::SampledToken& t : tokens) {
    const std::string s = TokenString(t.token);
    out["tokens"].push_back(s);
    out["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const scheduler::TokenLogprob& a : t.top) top[TokenString(a.token)] = a.logprob;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(choice.text_offset);
    choice.text_offset += static_cast<int64_t>(s.size());
  }
  return out;
}

json CompletionAssembler::Usage() const {
  return json{{"prompt_tokens", prompt_tokens_},
              {"completion_tokens", completion_tokens_},
              {"total_tokens", prompt_tokens_ + completion_tokens_}};
}

json CompletionAssembler::ChunkObject() const {
  json chunk{{"id", header_.id},
             {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
             {"created", header_.created},
             {"model", header_.model},
             {"choices", json::array()}};
  if (request_.include_usage) chunk["usage"] = nullptr;
  if (!header_.session_id.empty()) chunk["session_id"] = header_.session_id;
  return chunk;
}

std::string CompletionAssembler::StreamChunks(const std::vector<ChoiceEvent>& events) {
  std::string out;
  // Echoed prompts go first, once.
  if (request_.echo) {
    json chunk = ChunkObject();
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i].role_sent || choices_[i].text.empty()) continue;
      chunk["choices"].push_back(json{{"index", i},
                                      {"text", choices_[i].text},
                                      {"logprobs", nullptr},
                                      {"finish_reason", nullptr}});
      choices_[i].role_sent = true;
    }
    if (!chunk["choices"].empty()) out += SseEvent(chunk);
  }
  for (const ChoiceEvent& e : events) {
    Choice& c = choices_[e.index];
    completion_tokens_ += static_cast<int64_t>(e.tokens.size());
    if (e.finished && !e.status.ok()) {
      if (error_.ok()) error_ = e.status;
      continue;
    }
    json choice{{"index", e.index}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (request_.logprobs >= 0 && !e.tokens.empty()) choice["logprobs"] = Logprobs(c, e.tokens);
    if (request_.chat) {
      json delta = json::object();
      if (!c.role_sent) {
        delta["role"] = "assistant";
        c.role_sent = true;
        if (e.text.empty()) delta["content"] = "";
      }
      if (!e.text.empty()) delta["content"] = e.text;
      choice["delta"] = delta;
    } else {
      choice["text"] = e.text;
    }
    if (e.finished) choice["finish_reason"] = e.finish_reason;
    // A token whose text is still held back (a possible stop string) sends nothing yet.
    const bool empty = e.text.empty() && !e.finished && choice["logprobs"].is_null() &&
                       (!request_.chat || choice["delta"].empty());
    if (empty) continue;
    json chunk = ChunkObject();
    chunk["choices"].push_back(choice);
    out += SseEvent(chunk);
  }
  return out;
}

std::string CompletionAssembler::StreamEnd() const {
  std::string out;
  if (request_.include_usage) {
    json chunk = ChunkObject();
    chunk["usage"] = Usage();
    out += SseEvent(chunk);
  }
  return out + "data: [DONE]\n\n";
}

std::string CompletionAssembler::StreamError(const HttpError& error) {
  return "data: " + ErrorBody(error) + "\n\ndata: [DONE]\n\n";
}

void CompletionAssembler::Add(const std::vector<ChoiceEvent>& events) {
  for (const ChoiceEvent& e : events) {
    Choice& c = choices_[e.index];
    completion_tokens_ += static_cast<int64_t>(e.tokens.size());
    if (request_.logprobs >= 0 && !e.tokens.empty()) {
      json more = Logprobs(c, e.tokens);
      if (c.logprobs.is_null()) {
        c.logprobs = std::move(more);
      } else if (request_.chat) {
        for (json& item : more["content"]) c.logprobs["content"].push_back(std::move(item));
      } else {
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
          for (json& item : more[key]) c.logprobs[key].push_back(std::move(item));
        }
      }
    }
    c.text += e.text;
    if (e.finished) {
      if (!e.status.ok() && error_.ok()) error_ = e.status;
      c.finish_reason = e.finish_reason;
    }
  }
}

std::string CompletionAssembler::Body() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice{{"index", i},
                {"logprobs", request_.logprobs >= 0 && c.logprobs.is_null()
                                 ? (request_.chat ? json{{"content", json::array()}}
                                                  : json{{"tokens", json::array()},
                                                         {"token_logprobs", json::array()},
                                                         {"top_logprobs", json::array()},
                                                         {"text_offset", json::array()}})
                                 : c.logprobs},
                {"finish_reason", c.finish_reason}};
    if (request_.chat) {
      choice["message"] = json{{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choices.push_back(choice);
  }
  json body{{"id", header_.id},
            {"object", request_.chat ? "chat.completion" : "text_completion"},
            {"created", header_.created},
            {"model", header_.model},
            {"choices", choices},
            {"usage", Usage()}};
  if (!header_.session_id.empty()) body["session_id"] = header_.session_id;
  return Dump(body);
}

}  // namespace attnserve::server::openai
