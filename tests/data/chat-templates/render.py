#!/usr/bin/python3
"""Renders every <name>.jinja here with Python's Jinja2 for every case of
cases.json and writes <name>.expected.json: per case the exact output, or
the error the template raised. Used at development time (Debian's
python3-jinja2) to make the expected outputs that test_chat_templates
compares the project's renderer against; the tests never run Python.

Jinja2 is configured as Hugging Face's apply_chat_template does: sandboxed,
trim_blocks, lstrip_blocks, the loopcontrols extension, a tojson filter that
keeps non-ASCII text, raise_exception(msg) and strftime_now(fmt). One
addition: a from_json filter (json.loads), which DeepSeek's V3.2/V4
templates call on string tool-call arguments and which runtimes serving
those templates provide.

usage: python3 render.py [NAME.jinja ...]   (default: all)"""
import datetime, glob, json, os, sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


def env_for(date):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return date.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.filters["from_json"] = json.loads
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    with open(os.path.join(HERE, "cases.json")) as f:
        doc = json.load(f)
    date = datetime.datetime.strptime(doc["date_for_strftime_now"], "%Y-%m-%dT%H:%M:%S")
    env = env_for(date)
    names = sys.argv[1:] or sorted(os.path.basename(p) for p in glob.glob(os.path.join(HERE, "*.jinja")))
    for name in names:
        with open(os.path.join(HERE, name)) as f:
            try:
                tmpl = env.from_string(f.read())
            except jinja2.exceptions.TemplateSyntaxError as e:
                print("%s: not rendered: %s" % (name, e), file=sys.stderr)
                continue
        out = []
        for case in doc["cases"]:
            vars = dict(doc["special"])
            vars["messages"] = case["messages"]
            vars["add_generation_prompt"] = case["add_generation_prompt"]
            if "tools" in case:
                vars["tools"] = case["tools"]
            try:
                out.append({"case": case["name"], "output": tmpl.render(**vars)})
            except Exception as e:  # the template raised: the expected result is that error
                out.append({"case": case["name"], "error": "%s: %s" % (type(e).__name__, e)})
        with open(os.path.join(HERE, name[:-6] + ".expected.json"), "w") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print("%s: %d cases, %d errors" % (name, len(out), sum("error" in o for o in out)))


if __name__ == "__main__":
    main()
