// Golden test: every real chat template in tests/golden/chat_templates x every case of cases.json
// must render byte-identically to the real Jinja (expected.json, written by render_golden.py with
// python3-jinja2 the way transformers renders). Where Jinja raised, our render must fail too, and
// for raise_exception with a message containing the raised one.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/text/chat_template.h"

namespace attnserve::server::text {
namespace {

const std::string kDir = std::string(ATTNSERVE_SOURCE_DIR) + "/tests/golden/chat_templates/";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplateGolden, MatchesJinja) {
  nlohmann::ordered_json spec = nlohmann::ordered_json::parse(ReadAll(kDir + "cases.json"));
  nlohmann::ordered_json expected = nlohmann::ordered_json::parse(ReadAll(kDir + "expected.json"));
  ASSERT_GE(spec["templates"].size(), 10u);
  int renders = 0;
  for (auto& [name, tokens] : spec["templates"].items()) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(ReadAll(kDir + name + ".jinja"));
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    ASSERT_TRUE(expected.contains(name)) << name;
    for (auto& [case_name, want] : expected[name].items()) {
      const nlohmann::ordered_json& c = spec["cases"][case_name];
      ChatTemplateInputs in;
      in.messages = c["messages"];
      in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      in.bos_token = tokens["bos_token"].get<std::string>();
      in.eos_token = tokens["eos_token"].get<std::string>();
      if (c.contains("extra")) in.extra = c["extra"];
      in.now = std::chrono::system_clock::time_point(
          std::chrono::seconds(spec["now_unix_seconds"].get<int64_t>()));
      absl::StatusOr<std::string> got = t->Render(in);
      ++renders;
      if (want.contains("output")) {
        ASSERT_TRUE(got.ok()) << name << " / " << case_name << ": " << got.status();
        EXPECT_EQ(*got, want["output"].get<std::string>()) << name << " / " << case_name;
      } else {
        ASSERT_FALSE(got.ok()) << name << " / " << case_name << " rendered:\n" << *got;
        EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
        if (want["raised"].get<bool>()) {
          EXPECT_NE(got.status().message().find(want["error"].get<std::string>()),
                    std::string::npos)
              << name << " / " << case_name << ": " << got.status();
        }
      }
    }
  }
  EXPECT_GE(renders, 100);
}

// Malformed templates (every prefix of the real ones, at a stride) parse or fail cleanly, and
// those that parse render or fail cleanly: no crash, no hang.
TEST(ChatTemplateGolden, TruncatedTemplatesFailCleanly) {
  nlohmann::ordered_json spec = nlohmann::ordered_json::parse(ReadAll(kDir + "cases.json"));
  ChatTemplateInputs in;
  in.messages = spec["cases"]["system_multi_turn"]["messages"];
  int parsed = 0, failed = 0;
  for (auto& [name, tokens] : spec["templates"].items()) {
    const std::string source = ReadAll(kDir + name + ".jinja");
    for (size_t n = 0; n < source.size(); n += 5) {
      absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source.substr(0, n));
      if (!t.ok()) {
        ++failed;
        EXPECT_TRUE(t.status().code() == absl::StatusCode::kInvalidArgument ||
                    t.status().code() == absl::StatusCode::kResourceExhausted)
            << t.status();
        continue;
      }
      ++parsed;
      absl::StatusOr<std::string> r = t->Render(in);
      if (!r.ok()) {
        EXPECT_TRUE(r.status().code() == absl::StatusCode::kInvalidArgument ||
                    r.status().code() == absl::StatusCode::kResourceExhausted)
            << r.status();
      }
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(failed, 0);
}

TEST(ChatTemplate, CopiesShareTheParsedTemplate) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("{{ messages[0].content }}");
  ASSERT_TRUE(t.ok());
  ChatTemplate copy = *t;
  EXPECT_EQ(&copy.source(), &t->source());
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(*copy.Render(in), "hi");
}

TEST(ChatTemplate, LoadModelChatTemplate) {
  const std::string dir = ::testing::TempDir() + "/chat_template_model";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir + "/tokenizer_config.json")
        << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
               "chat_template": [{"name": "tool_use", "template": "T"},
                                 {"name": "default", "template": "{{ bos_token }}D"}]})";
  }
  absl::StatusOr<ModelChatTemplate> m = LoadModelChatTemplate(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->bos_token, "<s>");
  EXPECT_EQ(m->eos_token, "</s>");
  ASSERT_TRUE(m->chat_template.has_value());
  EXPECT_EQ(m->chat_template->source(), "{{ bos_token }}D");
  { std::ofstream(dir + "/chat_template.jinja") << "J"; }
  m = LoadModelChatTemplate(dir);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->chat_template->source(), "J");
  std::filesystem::remove(dir + "/chat_template.jinja");
  { std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "x"})"; }
  m = LoadModelChatTemplate(dir);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->chat_template.has_value());
  EXPECT_EQ(LoadModelChatTemplate(dir + "/nope").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace attnserve::server::text
