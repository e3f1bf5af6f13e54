// Unit tests of the Jinja chat-template engine: expressions, statements, filters, whitespace
// control, errors and limits (hostile templates must stop quickly at a bound).
#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/text/chat_template.h"

namespace attnserve::server::text {
namespace {

std::string Render(const std::string& src,
                   nlohmann::ordered_json extra = nlohmann::ordered_json::object(),
                   ChatTemplateLimits limits = {}) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(src, limits);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::array();
  in.extra = std::move(extra);
  in.now = std::chrono::system_clock::time_point(std::chrono::seconds(1721952000));  // 2024-07-26
  absl::StatusOr<std::string> r = t->Render(in);
  if (!r.ok()) return "ERROR: " + std::string(r.status().message());
  return *r;
}

absl::Status RenderStatus(const std::string& src, ChatTemplateLimits limits = {}) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(src, limits);
  if (!t.ok()) return t.status();
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::array();
  return t->Render(in).status();
}

TEST(JinjaExpressions, Arithmetic) {
  EXPECT_EQ(Render("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 % 3 }}|{{ 10 / 4 }}|{{ 2 ** 10 }}"),
            "7|3|2|2.5|1024");
  EXPECT_EQ(Render("{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 3 / 1 }}|{{ 1e-5 }}"),
            "1.0|0.30000000000000004|1e+20|3.0|1e-05");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}"), "a1None|ababab|[1, 2]");
}

TEST(JinjaExpressions, PrintingAndTruthiness) {
  EXPECT_EQ(Render("{{ none }}|{{ true }}|{{ False }}|{{ undefined_var }}|{{ [1, 'a', none] }}"),
            "None|True|False||[1, 'a', None]");
  EXPECT_EQ(Render("{{ {'a': 1, 'b': [true]} }}|{{ (1, 2) }}|{{ ('x',) }}"),
            "{'a': 1, 'b': [True]}|(1, 2)|('x',)");
  EXPECT_EQ(Render("{% if '' or [] or {} or 0 or none %}T{% else %}F{% endif %}"), "F");
  EXPECT_EQ(Render("{{ 'yes' if x else 'no' }}|{{ 'a' if false }}|", {{"x", 1}}), "yes||");
}

TEST(JinjaExpressions, ComparisonsAndMembership) {
  EXPECT_EQ(Render("{{ 'abc' < 'abd' }}{{ 1 == 1.0 }}{{ [1, 2] == [1, 2] }}{{ 'b' in 'abc' }}"
                   "{{ 3 not in [1, 2] }}{{ 'k' in {'k': 1} }}"),
            "TrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(Render("{{ not x is defined }}|{{ x is not defined and true }}"), "True|True");
}

TEST(JinjaExpressions, AccessAndSlicing) {
  nlohmann::ordered_json ctx = {{"m", {{"role", "user"}, {"content", "héllo"}}}, {"l", {1, 2, 3}}};
  EXPECT_EQ(Render("{{ m.role }}|{{ m['content'] }}|{{ m.missing }}|{{ l[-1] }}|{{ l[1:] }}", ctx),
            "user|héllo||3|[2, 3]");
  EXPECT_EQ(Render("{{ m.content[::-1] }}|{{ m.content|length }}|{{ m.content[1:3] }}", ctx),
            "olléh|5|él");
  EXPECT_EQ(Render("{{ foo.bar }}"), "ERROR: chat template: 'foo' is undefined (line 1)");
  EXPECT_EQ(Render("{{ m.x.y }}", ctx),
            "ERROR: chat template: 'dict object' has no attribute 'x' (line 1)");
}

TEST(JinjaStatements, ForLoop) {
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.length }}{{ loop.revindex }};{% endfor %}"),
            "10TrueFalse33;21FalseFalse32;32FalseTrue31;");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}"),
            "a=1,b=2,");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"),
            "2242");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}"
                   "{% if x == 3 %}{% break %}{% endif %}{% endfor %}"),
            "13");
  EXPECT_EQ(Render("{% for x in 'ab' %}{% for y in [1, 2] %}{{ loop.index }}{{ x }}{% endfor %}"
                   "{{ loop.index }}{% endfor %}"),
            "1a2a11b2b2");
  EXPECT_EQ(Render("{% for x in [1, 2] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}"),
            "-2;1-;");
}

TEST(JinjaStatements, ScopingAndNamespace) {
  EXPECT_EQ(
      Render("{% set c = 0 %}{% for i in [1, 2] %}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}"),
      "110");
  EXPECT_EQ(Render("{% set ns = namespace(c=0) %}{% for i in [1, 2] %}{% set ns.c = ns.c + 1 %}"
                   "{% endfor %}{{ ns.c }}"),
            "2");
  EXPECT_EQ(
      Render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set x %}block {{ a }}{% endset %}{{ x }}"),
      "12block 1");
}

TEST(JinjaStatements, Macros) {
  EXPECT_EQ(Render("{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }}|{{ f(1, b=3) }}"),
            "1-2|1-3");
  EXPECT_EQ(Render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"),
            "[in]");
  EXPECT_EQ(Render("{% filter upper %}abc{% endfilter %}"), "ABC");
  EXPECT_EQ(Render("{% generation %}gen{% endgeneration %}"), "gen");
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(Render("{% if true %}\n  x\n{% endif %}\n"), "  x\n");
  EXPECT_EQ(Render("  {% if true %}a{% endif %}  b"), "a  b");
  EXPECT_EQ(Render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(Render("a {{- 'b' -}} c\n{# comment #}\nd"), "abc\nd");
  EXPECT_EQ(Render("  {%+ if true %}a{% endif %}"), "  a");
  EXPECT_EQ(Render("{{ 'x' }}\n"), "x");
  EXPECT_EQ(Render("a\r\nb"), "a\nb");
}

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(Render("{{ '  a b  '|trim }}|{{ 'Hello World'|upper }}|{{ 'hello world'|title }}|"
                   "{{ 'hELLO'|capitalize }}|{{ 'abc'|replace('b', 'x') }}|{{ 'a<b'|e }}"),
            "a b|HELLO WORLD|Hello World|Hello|axc|a&lt;b");
  EXPECT_EQ(Render("{{ 'a\nb'|indent(2) }}|{{ 'x'|center(5) }}|{{ 'one two'|wordcount }}"),
            "a\n  b|  x  |2");
  EXPECT_EQ(Render("{{ x|default('d') }}|{{ ''|default('d', true) }}|{{ ''|d('d') }}"), "d|d|");
  EXPECT_EQ(Render("{{ '3'|int + 1 }}|{{ 'x'|int }}|{{ '2.5'|float }}|{{ 3|string }}"),
            "4|0|2.5|3");
}

TEST(JinjaFilters, Collections) {
  nlohmann::ordered_json ctx = {
      {"ms", {{{"role", "system"}, {"n", 2}}, {{"role", "user"}, {"n", 1}}}}};
  EXPECT_EQ(Render("{{ ms|selectattr('role', 'equalto', 'user')|list|length }}|"
                   "{{ ms|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }}|"
                   "{{ ms|sort(attribute='n')|map(attribute='role')|list }}|"
                   "{{ ['a', 'b']|map('upper')|join }}",
                   ctx),
            "1|system|['user', 'system']|AB");
  EXPECT_EQ(Render("{{ [3, 1, 2]|sort }}|{{ [1, 2]|reverse|list }}|{{ [1, 1, 2]|unique|list }}|"
                   "{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}|{{ [1, 2]|sum }}|{{ [4, 2]|min }}"),
            "[1, 2, 3]|[2, 1]|[1, 2]|13|3|2");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 2}|dictsort }}|{{ {'b': 1}|items|list }}|"
                   "{{ [1, 2, 3]|batch(2)|list }}|{{ [0, 1, '']|select|list }}"),
            "[('a', 2), ('b', 1)]|[('b', 1)]|[[1, 2], [3]]|[1]");
  EXPECT_EQ(Render("{{ -3|abs }}|{{ 2.5|round }}|{{ 2.567|round(2) }}|{{ 5|round }}"),
            "3|2.0|2.57|5");
}

TEST(JinjaFilters, ToJson) {
  nlohmann::ordered_json ctx = {{"d", {{"b", 1}, {"a", {"x", nullptr, true, 1.5}}}},
                                {"s", "é\"\n\x01"}};
  EXPECT_EQ(Render("{{ d|tojson }}", ctx), R"({"b": 1, "a": ["x", null, true, 1.5]})");
  EXPECT_EQ(Render("{{ [1, {'a': []}]|tojson(indent=2) }}"), "[\n  1,\n  {\n    \"a\": []\n  }\n]");
  EXPECT_EQ(Render("{{ s|tojson }}", ctx), "\"é\\\"\\n\\u0001\"");
}

TEST(JinjaTests, Builtins) {
  EXPECT_EQ(
      Render("{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}"
             "{{ {} is mapping }}{{ [] is iterable }}{{ none is none }}{{ true is boolean }}"
             "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'ab' is lower }}"
             "{{ 'AB' is upper }}{{ 1 is in [1] }}{{ x is undefined }}{{ range is callable }}"),
      "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
}

TEST(JinjaMethods, StringListDict) {
  EXPECT_EQ(
      Render("{{ '  a b '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,c'.split(',', 1) }}|"
             "{{ ' a  b '.split() }}|{{ 'abc'.startswith(('x', 'a')) }}|{{ 'abc'.endswith('c') }}|"
             "{{ 'hello'.find('l') }}|{{ 'a-b'.replace('-', '+') }}|{{ 'a\\nb'.splitlines() }}"),
      "a b|a|['a', 'b,c']|['a', 'b']|True|True|2|a+b|['a', 'b']");
  EXPECT_EQ(
      Render("{% set l = [] %}{% set _ = l.append(1) %}{{ l }}|{{ {'a': 1}.get('b', 2) }}|"
             "{{ {'a': 1}.keys()|list }}|{{ [1, 2, 1].count(1) }}|{{ '{} {}'.format(1, 'x') }}"),
      "[1]|2|['a']|2|1 x");
}

TEST(JinjaGlobals, RangeRaiseStrftime) {
  EXPECT_EQ(Render("{{ range(3)|list }}{{ range(1, 7, 2)|list }}"), "[0, 1, 2][1, 3, 5]");
  EXPECT_EQ(Render("{{ strftime_now('%d %b %Y') }}"), "26 Jul 2024");
  EXPECT_EQ(Render("{{ dict(a=1) }}"), "{'a': 1}");
  absl::Status st = RenderStatus("{{ raise_exception('Roles must alternate') }}");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Roles must alternate"), std::string::npos);
}

TEST(JinjaErrors, SyntaxAndRuntime) {
  for (const char* bad : {"{% if x %}", "{{ x ", "{% for %}", "{{ 'abc }}", "{# no end",
                          "{% endfor %}", "{{ (1 }}", "{% bogus %}", "{% break %}", "{{ 1 + }}"}) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(bad);
    EXPECT_FALSE(t.ok()) << bad;
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(t.status().message().find("line 1"), std::string::npos) << t.status().message();
    }
  }
  absl::Status st = RenderStatus("{{ x|nosuchfilter }}");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("nosuchfilter"), std::string::npos);
  EXPECT_EQ(RenderStatus("{{ 1 / 0 }}").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RenderStatus("{{ 'a' + 1 }}").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RenderStatus("{{ none.x.y }}").code(), absl::StatusCode::kInvalidArgument);
}

// Hostile templates stop at a bound, quickly.
class JinjaLimits : public ::testing::TestWithParam<const char*> {};

TEST_P(JinjaLimits, StopsQuicklyWithResourceExhausted) {
  auto start = std::chrono::steady_clock::now();
  absl::Status st = RenderStatus(GetParam());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_LT(seconds, 1.0) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, JinjaLimits,
    ::testing::Values(
        "{% for i in range(1000000000) %}x{% endfor %}",
        "{% for i in range(60000) %}{% for j in range(60000) %}{% endfor %}{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}",
        "{{ 'x' * 10**9 }}", "{{ range(10**12)|length }}",
        "{% for i in range(60000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}",
        "{% set l = [] %}{% for i in range(60000) %}{% set _ = l.append(l) %}{% endfor %}{{ l }}",
        "{{ [1] * 1000000000 }}"));

TEST(JinjaLimitsRender, SelfReferenceDoesNotCrash) {
  EXPECT_EQ(Render("{% set l = [] %}{% set _ = l.append(l) %}{{ l == l }}{{ (l|string)[:6] }}"),
            "True[[[[[[");
  absl::Status st =
      RenderStatus("{% set l = [] %}{% set _ = l.append(l) %}{% set _ = l.append(l) %}{{ l }}");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_FALSE(RenderStatus("{% set l = [] %}{% set _ = l.append(l) %}{{ l|tojson }}").ok());
}

TEST(JinjaLimitsParse, DeepNesting) {
  std::string deep(200, '(');
  deep = "{{ " + deep + "1" + std::string(200, ')') + " }}";
  EXPECT_EQ(ChatTemplate::Parse(deep).status().code(), absl::StatusCode::kResourceExhausted);
  std::string ifs;
  for (int i = 0; i < 100; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 100; ++i) ifs += "{% endif %}";
  EXPECT_EQ(ChatTemplate::Parse(ifs).status().code(), absl::StatusCode::kResourceExhausted);
  std::string chain = "{{ 1";
  for (int i = 0; i < 1000; ++i) chain += " + 1";
  EXPECT_EQ(ChatTemplate::Parse(chain + " }}").status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace attnserve::server::text
