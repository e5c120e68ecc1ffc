#!/usr/bin/env python3
"""The reference for tests/test_chat_template.cpp: renders a chat template with jinja2 configured
as Hugging Face transformers configures it (transformers.utils.chat_template_utils:
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension, the
{% generation %} tag, json.dumps as `tojson`, and the globals raise_exception and strftime_now),
called as apply_chat_template calls it.

Reads on stdin one JSON request, or a JSON list of them, and prints the result (or the list of
results) as JSON. A request is either
  {"template": SRC, "messages": [...], "add_generation_prompt": bool, "bos_token": str?,
   "eos_token": str?, "tools": [...]?, "documents": [...]?, "extra": {...}?, "now": ISO?}
(a chat rendering: tools and documents default to None, extra holds more template variables) or
  {"template": SRC, "variables": {...}, "now": ISO?}
(the template rendered with exactly those variables). `now` fixes what strftime_now() reads.
A result is {"ok": true, "text": ...} or {"ok": false, "error": str(exception), "type": name}.
Needs python3-jinja2 (>= 3.1), nothing else.
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %}: renders its body (transformers also
    records where it lies, for assistant token masks, which a rendering does not show)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return (now or datetime.now()).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(req):
    now = datetime.fromisoformat(req["now"]) if req.get("now") else None
    try:
        template = environment(now).from_string(req["template"])
        if "variables" in req:
            text = template.render(**req["variables"])
        else:
            kwargs = {k: req[k] for k in ("bos_token", "eos_token") if req.get(k) is not None}
            kwargs.update(req.get("extra") or {})
            text = template.render(messages=req["messages"], tools=req.get("tools"), documents=req.get("documents"),
                                   add_generation_prompt=req.get("add_generation_prompt", True), **kwargs)
        return {"ok": True, "text": text}
    except Exception as e:  # the message is what a server would report
        return {"ok": False, "error": str(e), "type": type(e).__name__}


def main():
    req = json.loads(sys.stdin.read())
    out = [render(r) for r in req] if isinstance(req, list) else render(req)
    sys.stdout.write(json.dumps(out, ensure_ascii=False))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
