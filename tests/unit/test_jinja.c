/* test_jinja.c - the Jinja interpreter: features against outputs recorded
 * from Python's Jinja2 (configured as Hugging Face's apply_chat_template:
 * trim_blocks, lstrip_blocks, loopcontrols, HF's tojson), errors with
 * template lines, and hostile input: unterminated tags, deep nesting, huge
 * loops and output, runaway recursion, invalid UTF-8 and NUL bytes. */
#include "chat/chat.h"
#include "chat/jinja.h"
#include "test.h"

#include "power.h"

#include <stdbool.h>
#include <time.h>

/* Template, expected output (NULL: rendering or parsing must fail). */
static const struct {
  const char *tmpl, *want;
} k_cases[] = {
    {"{{ 1.0 }}|{{ none }}|{{ true }}|{{ ['a', 'b'] }}|{{ {'a': 1} }}|{{ (1,) }}|{{ 1e16 }}|{{ 0.0001 }}|{{ 1/3 }}|{{ -0.0 }}",
     "1.0|None|True|['a', 'b']|{'a': 1}|(1,)|1e+16|0.0001|0.3333333333333333|-0.0"},
    {"{{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 2**-1 }} {{ 7.5 // 2 }} {{ 10/4 }} {{ 3 - 5 }} {{ 2 * 3.5 }}",
     "3 -4 2 -2 1024 0.5 3.0 2.5 -2 7.0"},
    {"{{ \"a\" ~ 1 ~ none ~ true }} {{ \"ab\" + \"cd\" }} {{ [1] + [2, 3] }} {{ \"ab\" * 3 }} {{ 1 + true }}",
     "a1NoneTrue abcd [1, 2, 3] ababab 2"},
    {"{{ 1 < 2 }} {{ \"a\" < \"b\" }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ \"1\" == 1 }} {{ none == none }} {{ [1] != [1] }}",
     "True True True True False True False"},
    {"{{ \"b\" in \"abc\" }} {{ 2 in [1, 2] }} {{ \"k\" in {\"k\": 1} }} {{ 3 not in [1] }} {{ not true }} {{ 0 or \"x\" }} {{ 1 and 2 }} {{ none or [] }}",
     "True True True True False x 2 []"},
    {"{{ \"yes\" if 1 else \"no\" }}|{{ \"x\" if false }}|{{ 1 if 0 else 2 if 0 else 3 }}",
     "yes||3"},
    {"{{ \"abcdef\"[1:3] }} {{ \"abcdef\"[::-1] }} {{ \"abcdef\"[-2:] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][5:] }} {{ \"h\303\251llo\"[1:3] }} {{ \"h\303\251llo\"[-1] }} {{ [1,2,3][-1] }}",
     "bc fedcba ef [1, 3] [] \303\251l o 3"},
    {"{{ \"a\\tb\\n\" }}|{{ 'it\\'s' }}|{{ \"\\u00e9\\x41\" }}|{{ [\"it's\", 'a\"b', \"x\\ny\"] }}",
     "a\tb\n|it's|\303\251A|[\"it's\", 'a\"b', 'x\\ny']"},
    {"{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
     "10TrueFalse332;21FalseFalse321;32FalseTrue310;"},
    {"{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }};{% endfor %}",
     "-2-a;1-3-b;2--a;"},
    {"{% for x in [] %}A{% else %}empty{% endfor %}|{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}",
     "empty|2242"},
    {"{% for k, v in {\"a\": 1, \"b\": 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k in {\"x\": 1, \"y\": 2} %}{{ k }}{% endfor %}",
     "a=1;b=2;xy"},
    {"{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}|{% for c in \"h\303\251j\" %}[{{ c }}]{% endfor %}",
     "37|[h][\303\251][j]"},
    {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "0134"},
    {"{% set x = 0 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
     "0120"},
    {"{% set ns = namespace(total=0, items=[]) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}",
     "6"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d) = [3, 4] %}{{ c }}{{ d }}",
     "1234"},
    {"{% set t %}  block {{ 1 + 1 }} {% endset %}[{{ t }}]{% set u | upper %}shout{% endset %}{{ u }}",
     "[  block 2 ]SHOUT"},
    {"{% macro greet(name, greeting=\"Hello\") %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet(\"A\") }} {{ greet(\"B\", \"Hi\") }} {{ greet(greeting=\"Yo\", name=\"C\") }}",
     "Hello, A! Hi, B! Yo, C!"},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
     "54321"},
    {"{% filter upper %}hello {{ \"x\" }}{% endfilter %}",
     "HELLO X"},
    {"{# comment #}a{#- trim -#}  b {{- \" c \" -}} d",
     "ab c d"},
    {"{% raw %}{{ not evaluated }}{% endraw %}",
     "{{ not evaluated }}"},
    {"{% generation %}gen{% endgeneration %}", "gen"}, /* HF's AssistantTracker: a no-op marker */
    {"  {% if true %}\n    indented\n  {% endif %}\nend",
     "    indented\nend"},
    {"{{ \"  x  \"|trim }}|{{ \"xxhixx\"|trim(\"x\") }}|{{ [1, 2]|length }}|{{ \"h\303\251llo\"|length }}|{{ {\"a\": 1}|count }}|{{ \"Hello\"|upper }}{{ \"Hello\"|lower }}",
     "x|hi|2|5|1|HELLOhello"},
    {"{{ \"hello world-foo\"|title }}|{{ \"hELLO wORLD\"|capitalize }}|{{ \"a-b-c\"|replace(\"-\", \"+\") }}|{{ \"aaa\"|replace(\"a\", \"b\", 2) }}",
     "Hello World-Foo|Hello world|a+b+c|bba"},
    {"{{ [1, 2, 3]|join(\", \") }}|{{ [\"a\", \"b\"]|join }}|{{ [{\"n\": \"x\"}, {\"n\": \"y\"}]|join(\"/\", attribute=\"n\") }}",
     "1, 2, 3|ab|x/y"},
    {"{{ undefined_var|default(\"dflt\") }}|{{ \"\"|default(\"e\", true) }}|{{ \"\"|default(\"e\") }}|{{ none|d(\"n\") }}|{{ 0|default(5, boolean=true) }}",
     "dflt|e||None|5"},
    {"{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ \"abc\"|first }}{{ \"abc\"|last }}",
     "13ac"},
    {"{{ {\"a\": 1, \"b\": 2}|items|list }}|{{ {\"a\": 1}|tojson }}",
     "[('a', 1), ('b', 2)]|{\"a\": 1}"},
    {"{{ [{\"r\": \"user\"}, {\"r\": \"sys\"}, {\"r\": \"user\"}]|selectattr(\"r\", \"equalto\", \"user\")|list|length }}|{{ [{\"a\": 1}, {\"b\": 2}]|selectattr(\"a\", \"defined\")|list }}|{{ [{\"a\": none}, {\"a\": 1}]|rejectattr(\"a\", \"none\")|list }}|{{ [1, \"a\", 2]|select(\"string\")|list }}|{{ [1, 2, 3, 4]|reject(\"odd\")|list }}",
     "2|[{'a': 1}]|[{'a': 1}]|['a']|[2, 4]"},
    {"{{ [{\"n\": \"a\"}, {\"n\": \"b\"}]|map(attribute=\"n\")|join }}|{{ [\"a\", \"b\"]|map(\"upper\")|list }}|{{ [1, 2]|map(\"string\")|list }}|{{ [{\"x\": 1}, {}]|map(attribute=\"x\", default=0)|list }}",
     "ab|['A', 'B']|['1', '2']|[1, 0]"},
    {"{{ \"abc\"|list }}|{{ 42|string }}|{{ \"12\"|int + 1 }}|{{ \"x\"|int }}|{{ \"x\"|int(7) }}|{{ 3.9|int }}|{{ \"1.5\"|float }}|{{ 2|float }}|{{ -3|abs }}|{{ 2.5|round }}|{{ 3.14159|round(2) }}|{{ 2.1|round(0, \"ceil\") }}|{{ 2.9|round(method=\"floor\") }}",
     "['a', 'b', 'c']|42|13|0|7|3|1.5|2.0|3|2.0|3.14|3.0|2.0"},
    {"{{ \"<a href='x'>&</a>\"|e }}|{{ \"<b>\"|safe }}|{{ \"a\\nb\\n\\nc\"|indent(2) }}|{{ \"a\\nb\"|indent(2, true) }}|{{ \"a\\n\\nb\"|indent(width=3, blank=true) }}",
     "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;|<b>|a\n  b\n\n  c|  a\n  b|a\n   \n   b"},
    {"{{ [3, 1, 2, 1]|unique|list }}|{{ [\"A\", \"a\", \"b\"]|unique|list }}|{{ [1, 2, 3]|reverse|list }}|{{ \"abc\"|reverse }}|{{ [3, 1, 2]|sort }}|{{ [\"b\", \"A\", \"c\"]|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ [{\"k\": 2}, {\"k\": 1}]|sort(attribute=\"k\") }}",
     "[3, 1, 2]|['A', 'b']|[3, 2, 1]|cba|[1, 2, 3]|['A', 'b', 'c']|[3, 2, 1]|[{'k': 1}, {'k': 2}]"},
    {"{{ [1, 2, 3]|sum }}|{{ [{\"v\": 1}, {\"v\": 2}]|sum(attribute=\"v\") }}|{{ [3, 1, 2]|min }}|{{ [3, 1, 2]|max }}|{{ [\"b\", \"A\"]|min }}|{{ \"one two  three\"|wordcount }}|{{ []|max }}",
     "6|3|1|3|A|3|"},
    {"{{ {\"a\": [1, 2], \"b\": {\"c\": \"\303\251\"}}|tojson }}|{{ {\"a\": [1, 2], \"b\": {}}|tojson(indent=2) }}|{{ [1.5, none, true, \"\\\"q\\\"\\n\"]|tojson }}|{{ {\"b\": 1, \"a\": 2}|tojson(sort_keys=true) }}|{{ \"x\"|tojson(separators=(\",\", \":\")) }}",
     "{\"a\": [1, 2], \"b\": {\"c\": \"\303\251\"}}|{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}|[1.5, null, true, \"\\\"q\\\"\\n\"]|{\"a\": 2, \"b\": 1}|\"x\""},
    {"{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ \"a\" is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is iterable }}{{ [] is sequence }}{{ true is boolean }}{{ true is true }}{{ false is false }}{{ range is callable }}",
     "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue"},
    {"{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is in [1, 2] }}{{ \"abc\" is lower }}{{ \"ABC\" is upper }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 1 is equalto 1 }}{{ 1 is not none }}{{ \"a\" is not string }}",
     "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalse"},
    {"{{ \"abc\".startswith(\"ab\") }}{{ \"abc\".endswith(\"bc\") }}{{ \"abc\".startswith((\"x\", \"a\")) }}|{{ \"a,b,,c\".split(\",\") }}|{{ \"  a b  \".split() }}|{{ \"a b c\".split(\" \", 1) }}|{{ \"a.b.c\".rsplit(\".\", 1) }}|{{ \"a b c\".rsplit(None, 1) }}",
     "TrueTrueTrue|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a.b', 'c']|['a b', 'c']"},
    {"{{ \"  x  \".strip() }}|{{ \"xxyxx\".strip(\"x\") }}|{{ \"  x  \".lstrip() }}|{{ \"  x  \".rstrip() }}|{{ \"ab\".upper() }}{{ \"AB\".lower() }}|{{ \"a-b\".replace(\"-\", \"\") }}|{{ \"hello world\".title() }}|{{ \"hello\".capitalize() }}",
     "x|y|x  |  x|ABab|ab|Hello World|Hello"},
    {"{{ \"hello\".find(\"l\") }}{{ \"hello\".rfind(\"l\") }}{{ \"hello\".find(\"z\") }}{{ \"hello\".count(\"l\") }}|{{ \"{} and {}\".format(1, \"b\") }}|{{ \"{0}{1}{0}\".format(\"a\", \"b\") }}|{{ \"{name}\".format(name=\"n\") }}|{{ \", \".join([\"a\", \"b\"]) }}|{{ \"123\".isdigit() }}{{ \"abc\".isalpha() }}{{ \"  \".isspace() }}{{ \"a1\".isdigit() }}",
     "23-12|1 and b|aba|n|a, b|TrueTrueTrueFalse"},
    {"{{ {\"a\": 1}.get(\"a\") }}{{ {\"a\": 1}.get(\"b\") }}{{ {\"a\": 1}.get(\"b\", 2) }}|{{ {\"a\": 1, \"b\": 2}.keys()|list }}|{{ {\"a\": 1, \"b\": 2}.values()|list }}",
     "1None2|['a', 'b']|[1, 2]"},
    {"{% set l = [1, 2] %}{% set _ = l.append(3) %}{{ l }}{{ l.pop() }}{{ l }}{{ l.index(2) }}{{ l.count(1) }}{% set _ = l.extend([4, 5]) %}{% set _ = l.insert(0, 0) %}{{ l }}",
     "[1, 2, 3]3[1, 2]11[0, 1, 2, 4, 5]"}, /* Jinja2 sandboxes list mutation; supported here */
    {"{{ range(3)|list }}|{{ range(1, 4)|list }}|{{ range(10, 0, -3)|list }}|{{ dict(a=1, b=2) }}|{{ namespace(a=1).a }}",
     "[0, 1, 2]|[1, 2, 3]|[10, 7, 4, 1]|{'a': 1, 'b': 2}|1"},
    {"{{ strftime_now(\"%Y-%m-%d %H:%M\") }}",
     "2026-07-04 12:00"},
    {"{{ \"%s-%d\"|format(\"a\", 3) }}|{{ \"%s!\" % \"hi\" }}|{{ \"%.2f\" % 3.14159 }}",
     "a-3|hi!|3.14"},
    {"{{ d.a.b }}|{{ d[\"a\"][\"b\"] }}|{{ d.missing }}|{{ d.list[1] }}|{{ d.list[9] }}|{{ d.a.missing is defined }}|{{ d.items is defined }}",
     "7|7||2||False|True"},
    {"{{ x.y }}", NULL},  /* UndefinedError: 'x' is undefined */
    {"{{ x + 1 }}", NULL},  /* UndefinedError: 'x' is undefined */
    {"{{ raise_exception(\"custom failure\") }}", NULL},  /* TemplateError: custom failure */
    {"{{ 1 / 0 }}", NULL},  /* ZeroDivisionError: division by zero */
    {"{{ \"a\" < 1 }}", NULL},  /* TypeError: '<' not supported between instances of 'str' and 'int' */
    {"{% include \"x.html\" %}", NULL},  /* TypeError: no loader for this environment specified */
    {"{{ foo|nosuchfilter }}", NULL},  /* TemplateAssertionError: No filter named 'nosuchfilter'. */
    {"{% for x in 5 %}{% endfor %}", NULL},  /* TypeError: 'int' object is not iterable */
    {"{{ none.x }}|{{ (1, 2)[0] }}|{{ \"x\" ~ [1, \"a\"] }}|{{ [1, [2, (3,)]] }}|{{ {\"k\": none, 1: true} }}",
     "|1|x[1, 'a']|[1, [2, (3,)]]|{'k': None, 1: True}"},
    {"{% if messages[0][\"role\"] == \"system\" %}S{% elif messages|length > 1 %}M{% else %}E{% endif %}|{{ messages[-1].content }}|{{ messages|map(attribute=\"role\")|join(\",\") }}",
     "S|hi |system,user"},
    {"{%- for m in messages %}\n<{{ m.role }}>{{ m.content | trim }}\n{%- endfor %}\n{{- \"\\n\" }}done\n",
     "<system>sys<user>hi\ndone"},
    {"{% macro m(a) %}{{ a }}{{ b }}{% endmacro %}{% set b = 'B' %}{{ m(1) }}",
     "1B"},
    {"{% set ns = namespace(f=false) %}{% for i in range(3) %}{% if i == 1 %}{% set ns.f = true %}{% endif %}{% endfor %}{{ ns.f }}",
     "True"},
    {"{% for a in [[1,2],[3]] %}{% for b in a %}{{ loop.index }}/{{ loop.length }}{% endfor %}|{{ loop.index }}{% endfor %}",
     "1/22/2|11/1|2"},
    {"{{ [1,2,3]|map('string')|join('-') }} {{ [\"a\",\"b\"]|map('upper')|join }} {{ [1.5, 2.5]|map('round')|list }}",
     "1-2-3 AB [2.0, 2.0]"},
    {"{{ {'b': 1, 'a': 2}|dictsort }} {{ [1, 2, 3, 4, 5]|batch(2)|list }}",
     "[('a', 2), ('b', 1)] [[1, 2], [3, 4], [5]]"},
    {"{{ \"%5s|%-5s|%05d\" % (\"a\", \"b\", 42) }}",
     "    a|b    |00042"},
    {"{{ \"%x|%X|%o|%#x|%#o|%5x|%-5x|%05x|%+x|%.3x|%#06x\" % (-255, 255, -8, 255, 8, -255, 255, -255, 255, -1, 255) }}",
     "-ff|FF|-10|0xff|0o10|  -ff|ff   |-00ff|+ff|-001|0x00ff"},
    {"{{ none | selectattr(\"a\") | list }}|{{ none | map(\"upper\") | list }}|{{ \"\" | reject | list }}|{{ false | select | list }}",
     "[]|[]|[]|[]"},
    {"{{ \"<b>\"|safe + \"<i>\" }}|{{ \"a&\" + \"<b>\"|safe }}|{{ (\"x\"|e) ~ \"<\" }}|{{ \"<\"|e|e }}|{{ (\"'\"|safe + '\"') + \"&\" }}",
     "<b>&lt;i&gt;|a&amp;<b>|x<|&lt;|'&#34;&amp;"},
    {"{{ \"%.2s|%-4.1s|%3d|%.3d|%+.1e\" % (\"abc\", \"xyz\", 5, 7, 12345.678) }}",
     "ab|x   |  5|007|+1.2e+04"},
    {"{{ 'abc' ~ 1.5 ~ [1] }} {{ 1 ~ 2 }}",
     "abc1.5[1] 12"},
    {"{{ -1 ** 2 }} {{ (-1) ** 2 }} {{ 2 ** 3 ** 2 }} {{ not 1 == 2 }} {{ 1 + 2 * 3 - 4 / 2 }}",
     "1 1 64 True 5.0"},
    {"{{ \"a\" if \"\" else \"b\" }}{{ [] or \"empty\" }}{{ 0 and 1 }}",
     "bempty0"},
    {"{% if not messages is defined %}nd{% endif %}{{ messages is not defined }}",
     "False"},
    {"{{ \"x\".join([\"a\",\"b\"]) }} {{ \" \".join(\"abc\") }}",
     "axb a b c"},
    {"{{ [0.1 + 0.2, 1e100, 123456789.0, 1.5e-10, 100.0, 3.0e15, 3.0e16] }}",
     "[0.30000000000000004, 1e+100, 123456789.0, 1.5e-10, 100.0, 3000000000000000.0, 3e+16]"},
    {"{{ {\"a\": {\"b\": [1, {\"c\": null}]}}|tojson(indent=1) }}", NULL},  /* TypeError */
    {"{% set x = [1, 2, 3] %}{{ x[1:] }}{{ x[:-1] }}{{ x[10:] }}{{ x[-10:] }}{{ x[::-2] }}{{ \"hello\"[1:-1] }}",
     "[2, 3][1, 2][][1, 2, 3][3, 1]ell"},
    {"{{ \"Hello World\"|lower|replace(\"world\", \"there\")|title }}",
     "Hello There"},
    {"{{ \"a b\" | wordcount }}{{ \"a\\nb\\n\"|indent(4) }}|{{ \"\"|indent }}|{{ \"x\\n\"|indent(2, blank=true) }}",
     "2a\n    b\n||x\n  "},
    {"{%- set content = \"  <think>x</think>answer  \" -%}{{ content.split(\"</think>\")[-1].strip() }}|{{ content.split(\"<think>\")[0] }}|{{ content.rstrip(\"\\n\").split(\"</think>\")[0].lstrip(\"\\n \") }}",
     "answer|  |<think>x"},
    {"{% for x in range(3) %}{{ x }}{% if not loop.last %}, {% endif %}{% endfor %}",
     "0, 1, 2"},
    {"{{ (1, 2) }}{{ () }}{{ [()] }}{{ {'a': (1,)} }}",
     "(1, 2)()[()]{'a': (1,)}"},
    {"{% set d = {'a': 1} %}{{ d.a }}{{ d['a'] }}{{ d.get('a') }}{{ d.keys() | list }}{{ 'a' in d }}{{ d | length }}",
     "111['a']True1"},
    {"{{ \"h\303\251llo w\303\266rld\"|upper }} {{ \"\303\211COLE\"|lower }}",
     "H\303\211LLO W\303\226RLD \303\251cole"},
    {"{{ 1 == true }}{{ 0 == false }}{{ 1.0 is integer }}{{ true is number }}{{ true is integer }}",
     "TrueTrueFalseTrueFalse"},
    {"{{ none|string }}{{ none|tojson }}{{ undefined_x|string }}|{{ [none]|tojson }}",
     "Nonenull|[null]"},
    {"{% for i in range(3) %}{% set y = i %}{% endfor %}{{ y }}",
     ""},
    {"{{ range(5)[1:3]|list }}{{ range(0)|list }}{{ range(2, -2, -1)|list }}\n",
     "[1, 2][][2, 1, 0, -1]"},
    {"a\n  {% raw %}\n  x\n  {% endraw %}\nb",
     "a\n\n  x\nb"},
    {"a\n  {% raw -%}\n  x\n  {%- endraw %}\nb",
     "a\nxb"},
};

static const char *k_vars = "{\"d\": {\"a\": {\"b\": 7}, \"list\": [1, 2]}, \"messages\": [{\"role\": \"system\", "
                            "\"content\": \" sys \"}, {\"role\": \"user\", \"content\": \"hi \"}]}";

/* 2026-07-04T12:00:00 UTC */
#define FIXED_NOW ((int64_t)1783166400)

static int render(const char *tmpl, size_t len, const json_t *vars, const jinja_limits *lim, char **out,
                  size_t *out_len, char *err) {
  jinja_template *t = NULL;
  int rc = jinja_parse(tmpl, len, 0, &t, err);
  if (rc) {
    CHECK(t == NULL);
    return rc;
  }
  rc = jinja_render(t, vars, lim, out, out_len, err);
  jinja_destroy(t);
  return rc;
}

/* Renders and expects an error of status want_rc whose message contains
 * want_msg. */
static void expect_error(const char *tmpl, size_t len, const jinja_limits *lim, int want_rc, const char *want_msg) {
  char err[PW_ERRMAX] = "", *out = NULL;
  size_t n = 0;
  int rc = render(tmpl, len, NULL, lim, &out, &n, err);
  CHECK_MSG(rc == want_rc, "rc %d (want %d) for %.60s: %s", rc, want_rc, tmpl, err);
  CHECK_MSG(strstr(err, want_msg) != NULL, "error '%s' lacks '%s'", err, want_msg);
  CHECK(strchr(err, '\n') == NULL);
  CHECK(out == NULL);
  free(out);
}

static void test_table(void) {
  json_t *vars = json_loads(k_vars, 0, NULL);
  CHECK(vars != NULL);
  jinja_limits lim = {.now = FIXED_NOW};
  int ok = 0, n = (int)(sizeof k_cases / sizeof k_cases[0]);
  for (int i = 0; i < n; i++) {
    char err[PW_ERRMAX] = "", *out = NULL;
    size_t len = 0;
    int rc = render(k_cases[i].tmpl, strlen(k_cases[i].tmpl), vars, &lim, &out, &len, err);
    bool pass;
    if (k_cases[i].want) {
      pass = rc == 0 && len == strlen(k_cases[i].want) && memcmp(out, k_cases[i].want, len) == 0;
      CHECK_MSG(pass, "case %d: %s\n  want: %s\n  got:  %s (rc %d: %s)", i, k_cases[i].tmpl, k_cases[i].want,
                out ? out : "(null)", rc, err);
    } else {
      pass = rc != 0 && out == NULL && strncmp(err, "template line ", 14) == 0;
      if (strstr(k_cases[i].tmpl, "raise_exception")) pass = rc == PW_ETEMPLATE && !strcmp(err, "custom failure");
      CHECK_MSG(pass, "case %d: %s: expected an error, got rc %d '%s' / %s", i, k_cases[i].tmpl, rc, err,
                out ? out : "(null)");
    }
    ok += pass;
    free(out);
  }
  fprintf(stderr, "feature table: %d/%d\n", ok, n);
  json_decref(vars);
}

static void test_errors(void) {
  jinja_limits lim = {0};
  /* line numbers */
  static const char *const e1 = "line1\nline2\n{{ x | nosuch }}", *e2 = "a\n\n\n{% if x %}\nb",
                           *e3 = "\n{{ x.y }}", *e4 = "{% for %}", *e5 = "a\n{% for m in [1] %}\n{{ m.x.y }}{% endfor %}";
  expect_error(e1, strlen(e1), &lim, PW_ETEMPLATE, "template line 3: unknown filter 'nosuch'");
  expect_error(e2, strlen(e2), &lim, PW_ETEMPLATE, "template line 5: unexpected end of template, expected 'endif' (block opened on line 4)");
  expect_error(e3, strlen(e3), &lim, PW_ETEMPLATE, "template line 2: 'x' is undefined");
  expect_error(e4, strlen(e4), &lim, PW_ETEMPLATE, "template line 1");
  expect_error(e5, strlen(e5), &lim, PW_ETEMPLATE, "template line 3: 'x' is undefined");
  /* an undefined attribute met while sorting: the message must not read the
   * computed attribute name after it was freed (found by fuzzing; ASan) */
  static const char *const e6 = "{{ [{'a': 1}, {'a': 2}] | max(attribute='ro' ~ 'de') }}",
                           *e7 = "{{ [{'a': 1}, {'a': 2}] | sort(attribute='x') | list }}",
                           *e8 = "{% set k = 'ro' ~ 'de' %}{{ ({'a': 1}[k] ~ 'x') }}{{ [1, 'a'] | sort(attribute=k) }}";
  expect_error(e6, strlen(e6), &lim, PW_ETEMPLATE, "is undefined");
  expect_error(e7, strlen(e7), &lim, PW_ETEMPLATE, "is undefined");
  expect_error(e8, strlen(e8), &lim, PW_ETEMPLATE, "template line 1");
  /* unterminated things */
  static const char *const bad[] = {"{{", "{{ x", "{%", "{% if", "{% if x %}", "{# c", "{{ 'abc }}", "{% raw %}x",
                                    "{% for x in y %}", "{% macro m( %}", "{{ (1 }}", "{{ [1, }}", "{{ {1: }}",
                                    "{% set %}", "{% endif %}", "{% else %}", "{{ 1 + }}", "{% break %}",
                                    "{{ x is }}", "{{ \"\\x4\" }}", "{% extends 'a' %}", "{% import 'a' as b %}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[PW_ERRMAX] = "";
    jinja_template *t = NULL;
    int rc = jinja_parse(bad[i], strlen(bad[i]), 0, &t, err);
    CHECK_MSG(rc == PW_ETEMPLATE && t == NULL, "'%s' parsed (rc %d)", bad[i], rc);
    CHECK_MSG(strncmp(err, "template line 1: ", 17) == 0, "'%s': %s", bad[i], err);
    jinja_destroy(t);
  }
  jinja_destroy(NULL);
}

static char *repeat(const char *s, int n, const char *mid, const char *tail, int m) {
  size_t a = strlen(s), b = strlen(mid), c = strlen(tail);
  char *o = malloc(a * (size_t)n + b + c * (size_t)m + 1), *p = o;
  for (int i = 0; i < n; i++, p += a) memcpy(p, s, a);
  memcpy(p, mid, b);
  p += b;
  for (int i = 0; i < m; i++, p += c) memcpy(p, tail, c);
  *p = 0;
  return o;
}

/* % formatting: width and precision are bounded by the output limit, the
 * output counts against it, and a long field is never cut short. */
static void test_percent_limits(void) {
  jinja_limits lim = {0};
  static const char *const huge_prec = "{{ '%.999999999f' % 1.5 }}", *huge_width = "{{ '%999999999d' % 1 }}",
                           *huge_s = "{{ '%-999999999s|' % 'a' }}", *huge_g = "{{ '%.99999999999999999999g' % 1.5 }}";
  expect_error(huge_prec, strlen(huge_prec), &lim, PW_ELIMIT, "format precision exceeds the output limit");
  expect_error(huge_width, strlen(huge_width), &lim, PW_ELIMIT, "format width exceeds the output limit");
  expect_error(huge_s, strlen(huge_s), &lim, PW_ELIMIT, "format width exceeds the output limit");
  expect_error(huge_g, strlen(huge_g), &lim, PW_ELIMIT, "format precision exceeds the output limit");
  /* within the parse bound but past a small render limit: counted, refused */
  jinja_limits small = {.max_output = 1000};
  static const char *const mid_prec = "{{ '%.990f' % 1.5 }}{{ '%.990f' % 1.5 }}", *mid_w = "{{ '%5000s' % 1 }}";
  expect_error(mid_prec, strlen(mid_prec), &small, PW_ELIMIT, "output exceeds 1000 bytes");
  expect_error(mid_w, strlen(mid_w), &small, PW_ELIMIT, "width exceeds the output limit");
  /* fields longer than any internal scratch buffer arrive whole */
  static const struct {
    const char *tmpl;
    size_t len;
    char first, last;
  } whole[] = {
      {"{{ '%200s' % 'x' }}", 200, ' ', 'x'},
      {"{{ '%-300s' % 'x' }}", 300, 'x', ' '},
      {"{{ '%.150f' % 1.5 }}", 152, '1', '0'},
      {"{{ '%0400d' % -7 }}", 400, '-', '7'},
      {"{{ '%.5000d' % 7 }}", 5000, '0', '7'},
      {"{{ '%d' % 1e300 }}{{ '%d' % -1e300 }}", 39, '9', '8'}, /* saturated, defined */
  };
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
    char err[PW_ERRMAX] = "", *out = NULL;
    size_t n = 0;
    int rc = render(whole[i].tmpl, strlen(whole[i].tmpl), NULL, &lim, &out, &n, err);
    CHECK_MSG(rc == 0, "%s: rc %d %s", whole[i].tmpl, rc, err);
    CHECK_MSG(n == whole[i].len, "%s: %zu bytes, want %zu", whole[i].tmpl, n, whole[i].len);
    if (rc == 0 && n) {
      CHECK_MSG(out[0] == whole[i].first && out[n - 1] == whole[i].last, "%s: '%c'..'%c'", whole[i].tmpl, out[0],
                out[n - 1]);
    }
    free(out);
  }
}

/* from_json (the filter DeepSeek V3.2/V4 templates use; Python's json.loads
 * is the reference): values, key order, and clean errors. */
static void test_from_json(void) {
  jinja_limits lim = {0};
  static const struct {
    const char *tmpl, *want;
  } ok[] = {
      {"{% set a = '{\"b\": 1, \"a\": [true, null, 2.5, \"\\u00e9\"]}' | from_json %}{{ a }}|{{ a.a[3] }}|{{ a.items() | list }}",
       "{'b': 1, 'a': [True, None, 2.5, '\xc3\xa9']}|\xc3\xa9|[('b', 1), ('a', [True, None, 2.5, '\xc3\xa9'])]"},
      {"{{ '3' | from_json + 1 }}|{{ '\"s\"' | from_json }}|{{ 'null' | from_json is none }}", "4|s|True"},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    char err[PW_ERRMAX] = "", *out = NULL;
    size_t n = 0;
    int rc = render(ok[i].tmpl, strlen(ok[i].tmpl), NULL, &lim, &out, &n, err);
    CHECK_MSG(rc == 0 && n == strlen(ok[i].want) && !memcmp(out, ok[i].want, n), "%s: rc %d %s: %s", ok[i].tmpl, rc,
              err, out ? out : "");
    free(out);
  }
  static const char *const bad = "{{ '{\"a\": ' | from_json }}", *notstr = "{{ 1 | from_json }}";
  expect_error(bad, strlen(bad), &lim, PW_ETEMPLATE, "from_json: invalid JSON");
  expect_error(notstr, strlen(notstr), &lim, PW_ETEMPLATE, "from_json");
  /* nesting is bounded like the variables' */
  char *deep = repeat("[", 5000, "", "]", 5000);
  char *tmpl = malloc(strlen(deep) + 32);
  sprintf(tmpl, "{{ '%s' | from_json }}", deep);
  char err[PW_ERRMAX] = "", *out = NULL;
  size_t n = 0;
  int rc = render(tmpl, strlen(tmpl), NULL, &lim, &out, &n, err);
  CHECK_MSG(rc != 0 && out == NULL, "deep from_json rendered (rc %d)", rc);
  free(out);
  free(tmpl);
  free(deep);
}

static void test_hostile(void) {
  jinja_limits lim = {0};
  /* 10000 nested ifs: a clean depth error, no stack overflow */
  char *deep = repeat("{% if true %}", 10000, "x", "{% endif %}", 10000);
  expect_error(deep, strlen(deep), &lim, PW_ELIMIT, "nesting deeper than");
  free(deep);
  deep = repeat("(", 100000, "1", ")", 100000);
  char *tmpl = malloc(strlen(deep) + 8);
  sprintf(tmpl, "{{ %s }}", deep);
  expect_error(tmpl, strlen(tmpl), &lim, PW_ELIMIT, "nesting deeper than");
  free(tmpl);
  free(deep);
  deep = repeat("[", 50000, "", "]", 50000);
  tmpl = malloc(strlen(deep) + 8);
  sprintf(tmpl, "{{ %s }}", deep);
  free(deep);
  deep = tmpl;
  expect_error(deep, strlen(deep), &lim, PW_ELIMIT, "nesting deeper than");
  free(deep);
  /* nesting within the limit renders */
  deep = repeat("{% for i in [1] %}", 60, "x", "{% endfor %}", 60);
  char err[PW_ERRMAX] = "", *out = NULL;
  size_t n;
  CHECK_EQ_INT(render(deep, strlen(deep), NULL, &lim, &out, &n, err), 0);
  CHECK(out && !strcmp(out, "x"));
  free(out);
  free(deep);

  /* huge loops: bounded, quickly */
  clock_t t0 = clock();
  const char *big = "{% for i in range(100000000) %}x{% endfor %}";
  expect_error(big, strlen(big), &lim, PW_ELIMIT, "loop iterations");
  big = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  expect_error(big, strlen(big), &lim, PW_ELIMIT, "loop iterations");
  big = "{% set ns = namespace(l=[1]) %}{% for i in ns.l %}{% set _ = ns.l.append(i) %}{% endfor %}";
  char err2[PW_ERRMAX] = "";
  out = NULL;
  CHECK_EQ_INT(render(big, strlen(big), NULL, &lim, &out, &n, err2), 0); /* iterates a snapshot */
  free(out);
  jinja_limits small = {.max_iterations = 1000};
  big = "{% for i in range(2000) %}{% endfor %}";
  expect_error(big, strlen(big), &small, PW_ELIMIT, "loop iterations");
  /* huge output */
  big = "{% for i in range(200000) %}xxxxxxxxxx{% endfor %}";
  expect_error(big, strlen(big), &lim, PW_ELIMIT, "output exceeds");
  big = "{{ 'x' * 100000000 }}";
  expect_error(big, strlen(big), &lim, PW_ELIMIT, "exceeds");
  big = "{% set s = namespace(v='xxxxxxxxxxxxxxxx') %}{% for i in range(30) %}{% set s.v = s.v ~ s.v %}{% endfor %}";
  expect_error(big, strlen(big), &lim, PW_ELIMIT, "exceeds");
  jinja_limits tiny = {.max_output = 10};
  big = "{{ 'abcdefghijk' }}";
  expect_error(big, strlen(big), &tiny, PW_ELIMIT, "output exceeds 10 bytes");
  /* memory bound */
  jinja_limits mem = {.max_memory = 1 << 20};
  big = "{% set ns = namespace(l=[]) %}{% for i in range(200000) %}{% set _ = ns.l.append([i, i]) %}{% endfor %}";
  expect_error(big, strlen(big), &mem, PW_ELIMIT, "memory");
  /* runaway recursion */
  big = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
  expect_error(big, strlen(big), &lim, PW_ELIMIT, "macro calls nest deeper than 200");
  big = "{% macro f(n) %}{% for i in range(2) %}{{ f(n + 1) }}{% endfor %}{% endmacro %}{{ f(0) }}";
  expect_error(big, strlen(big), &lim, PW_ELIMIT, "deeper than");
  /* self-referencing values: cycles are freed, printing them is bounded */
  big = "{% set ns = namespace(l=[]) %}{% set _ = ns.l.append(ns.l) %}{{ ns.l }}";
  expect_error(big, strlen(big), &lim, PW_ELIMIT, "deeper than");
  big = "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me.me is defined }}";
  out = NULL;
  CHECK_EQ_INT(render(big, strlen(big), NULL, &lim, &out, &n, err), 0);
  CHECK(out && !strcmp(out, "True"));
  free(out);
  /* a deep value built by a loop is freed without recursion */
  big = "{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}ok";
  out = NULL;
  CHECK_EQ_INT(render(big, strlen(big), NULL, &lim, &out, &n, err), 0);
  CHECK(out && !strcmp(out, "ok"));
  free(out);
  double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  fprintf(stderr, "hostile bounds checked in %.2f s\n", secs);
  CHECK(secs < 30);

  /* invalid UTF-8 and NUL bytes in values and templates: no crash, bytes kept */
  json_t *vars = json_object();
  json_object_set_new(vars, "s", json_stringn_nocheck("a\0b\xff\xc3", 5));
  const char *t = "{{ s }}|{{ s|length }}|{{ s|tojson }}|{{ s[::-1]|length }}|{{ s.upper() }}|{{ [s] }}|{{ s|trim }}"
                  "|{{ s.split('b') }}|{{ s[3] }}";
  out = NULL;
  int rc = render(t, strlen(t), vars, &lim, &out, &n, err);
  CHECK_MSG(rc == 0, "%s", err);
  CHECK(n > 5 && memcmp(out, "a\0b\xff\xc3|5|", 8) == 0);
  free(out);
  static const char tmpl_nul[] = "x\0y{{ '\xff' }}\xc3";
  out = NULL;
  rc = render(tmpl_nul, sizeof tmpl_nul - 1, vars, &lim, &out, &n, err);
  CHECK_MSG(rc == 0, "%s", err);
  CHECK(n == 5 && memcmp(out, "x\0y\xff\xc3", 5) == 0);
  free(out);
  json_decref(vars);
  /* arbitrary bytes as a template never crash (parse or render errors are fine) */
  uint64_t s = 99;
  for (int i = 0; i < 3000; i++) {
    char buf[64];
    static const char *const frags[] = {"{{", "}}", "{%", "%}", "{#", "#}", "if ", "for ", "x", " in ", "endif",
                                        "endfor", "(", ")", "[", "]", "'", "\"", "|", "-", "+", ".", ",", "=",
                                        "set ", "macro ", "\xff", "\n", " ", "1", "loop", "range(3)"};
    size_t k = 0;
    for (int j = 0; j < 12; j++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      const char *f = frags[(s >> 33) % (sizeof frags / sizeof frags[0])];
      size_t fl = strlen(f);
      if (k + fl >= sizeof buf) break;
      memcpy(buf + k, f, fl);
      k += fl;
    }
    out = NULL;
    render(buf, k, NULL, &lim, &out, &n, err);
    free(out);
  }
}

static void test_chat_api(void) {
  char err[PW_ERRMAX] = "", *out = NULL;
  size_t n = 0;
  json_t *vars = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
                            "\"content\": null}], \"add_generation_prompt\": true}",
                            0, NULL);
  const char *t = chat_default_template();
  CHECK_EQ_INT(chat_render(t, strlen(t), vars, NULL, &out, &n, err), 0);
  CHECK_STR(out ? out : "", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n");
  free(out);
  json_decref(vars);
  /* strftime_now: fixed time in UTC */
  chat_render_opts o = {.now = (time_t)FIXED_NOW};
  const char *st = "{{ strftime_now('%d %b %Y') }}";
  out = NULL;
  CHECK_EQ_INT(chat_render(st, strlen(st), NULL, &o, &out, &n, err), 0);
  CHECK_STR(out ? out : "", "04 Jul 2026");
  free(out);
  out = NULL;
  CHECK_EQ_INT(chat_render(st, strlen(st), NULL, NULL, &out, &n, err), 0); /* now: some date */
  CHECK(out && strlen(out) == 11);
  free(out);
  /* options bound the output */
  chat_render_opts lim = {.max_output = 4};
  out = NULL;
  CHECK_EQ_INT(chat_render("hello", 5, NULL, &lim, &out, &n, err), PW_ELIMIT);
  CHECK(out == NULL);
  /* flatten */
  json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": "
                            "\"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"c\"}]",
                            0, NULL);
  CHECK_EQ_INT(chat_flatten_content(msgs, err), 0);
  CHECK_STR(json_string_value(json_object_get(json_array_get(msgs, 0), "content")), "a\nb");
  CHECK_STR(json_string_value(json_object_get(json_array_get(msgs, 1), "content")), "c");
  json_decref(msgs);
  msgs = json_loads("[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]", 0, NULL);
  CHECK_EQ_INT(chat_flatten_content(msgs, err), PW_EINVAL);
  CHECK(strstr(err, "image_url") != NULL);
  json_decref(msgs);
  CHECK_EQ_INT(chat_flatten_content(NULL, err), PW_EINVAL);
}

/* A Llama-3-style template over 10 messages: well under a millisecond. */
static void test_speed(void) {
  const char *t =
      "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
      "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
      "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Today Date: ' + strftime_now('%d %b %Y') }}"
      "{{- system_message }}{{- '<|eot_id|>' }}{%- for message in messages %}"
      "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
      "'<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}"
      "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
  json_t *msgs = json_array();
  json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", "You are helpful."));
  for (int i = 0; i < 9; i++)
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", i % 2 ? "assistant" : "user", "content",
                                          "Some message text of moderate length, as in a chat."));
  json_t *vars = json_pack("{s:o,s:b,s:s,s:s}", "messages", msgs, "add_generation_prompt", 1, "bos_token",
                           "<|begin_of_text|>", "eos_token", "<|eot_id|>");
  char err[PW_ERRMAX];
  jinja_template *tp = NULL;
  CHECK_EQ_INT(jinja_parse(t, strlen(t), 0, &tp, err), 0);
  jinja_limits lim = {.now = FIXED_NOW};
  struct timespec a, b;
  const int reps = 2000;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < reps && tp; i++) {
    char *out = NULL;
    size_t n;
    int rc = jinja_render(tp, vars, &lim, &out, &n, err);
    if (rc) CHECK_MSG(rc == 0, "%s", err);
    free(out);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / reps;
  fprintf(stderr, "render of a 10-message conversation: %.1f us\n", us);
#ifndef __SANITIZE_ADDRESS__
  CHECK(us < 1000);
#endif
  jinja_destroy(tp);
  json_decref(vars);
}

int main(void) {
  test_percent_limits();
  test_from_json();
  test_table();
  test_errors();
  test_hostile();
  test_chat_api();
  test_speed();
  TEST_DONE();
}
