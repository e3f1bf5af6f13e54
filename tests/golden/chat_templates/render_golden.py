#!/usr/bin/python3
"""Renders every chat template x case with the real Jinja (python3-jinja2 3.1.2) the way Hugging
Face transformers' apply_chat_template does (src/transformers/utils/chat_template_utils.py:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker,
jinja2.ext.loopcontrols]), its tojson filter and the raise_exception / strftime_now globals), and
writes expected.json: {template: {case: {"output": text} | {"error": message, "raised": bool}}}.

strftime_now formats a fixed time (cases.json's now_unix_seconds, UTC) so the output is
reproducible; the C++ engine takes the same time through ChatTemplateInputs::now.

  /usr/bin/python3 tests/golden/chat_templates/render_golden.py            # writes expected.json
  /usr/bin/python3 tests/golden/chat_templates/render_golden.py --check    # CTest: compares
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


class GenerationExtension(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers' AssistantTracker
    also records the span, which a plain render does not use)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


class RaisedError(TemplateError):
    pass


def make_env(now):
    def raise_exception(message):
        raise RaisedError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' definition: json.dumps with ensure_ascii=False and Python's separators.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationExtension, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    with open(os.path.join(HERE, "cases.json"), encoding="utf-8") as f:
        spec = json.load(f)
    now = datetime.datetime.fromtimestamp(spec["now_unix_seconds"], tz=datetime.timezone.utc)
    env = make_env(now)
    expected = {}
    for name, tokens in spec["templates"].items():
        with open(os.path.join(HERE, name + ".jinja"), encoding="utf-8") as f:
            template = env.from_string(f.read())
        out = {}
        for case_name, case in spec["cases"].items():
            if "only" in case and name not in case["only"]:
                continue
            context = dict(case.get("extra", {}))
            context.update(messages=case["messages"],
                           add_generation_prompt=case["add_generation_prompt"],
                           bos_token=tokens["bos_token"], eos_token=tokens["eos_token"])
            try:
                out[case_name] = {"output": template.render(**context)}
            except RaisedError as e:
                out[case_name] = {"error": str(e), "raised": True}
            except Exception as e:  # a Python error inside the template (TypeError, ...)
                out[case_name] = {"error": "%s: %s" % (type(e).__name__, e), "raised": False}
        expected[name] = out
    path = os.path.join(HERE, "expected.json")
    n = sum(len(v) for v in expected.values())
    if "--check" in sys.argv:
        # CTest: the stored outputs are what this machine's jinja2 renders now.
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if stored != expected:
            differ = [(t, c) for t in expected for c in expected[t]
                      if stored.get(t, {}).get(c) != expected[t][c]]
            print("expected.json differs from python3-jinja2 %s on %d renders, e.g. %s" %
                  (jinja2.__version__, len(differ), differ[:5]))
            sys.exit(1)
        print("%d renders of python3-jinja2 %s match expected.json" % (n, jinja2.__version__))
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")
    errors = sum(1 for v in expected.values() for c in v.values() if "error" in c)
    print("%d renders (%d expected errors) -> expected.json" % (n, errors))


if __name__ == "__main__":
    main()
