"""A chat template comes with the model, so it is untrusted code: `edgekit.runtime.text.chat.render` must keep it
from Python internals, from the file system and from the messages it is given, and must answer any template
it cannot render with a `ChatTemplateError` (a 400 in serve, exit 2 in run), never another exception."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.runtime.text.chat import ChatTemplateError, render

MESSAGES = [{"role": "user", "content": "hi"}]
SECRET_WORDS = ("class", "function", "module", "builtin", "subclasses", "globals", "root:", "CANARY")

# Each tries to reach Python internals, run a command (touching CANARY) or change the caller's messages.
ESCAPES = {
    "subclasses via the messages": "{{ messages.__class__.__mro__[1].__subclasses__() }}",
    "subclasses via a literal": "{% for c in ().__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
    "os via cycler": "{{ cycler.__init__.__globals__.os.popen('touch CANARY').read() }}",
    "os via joiner": "{{ joiner.__init__.__globals__.os.system('touch CANARY') }}",
    "os via namespace": "{{ namespace.__init__.__globals__.os.system('touch CANARY') }}",
    "os via lipsum": "{{ lipsum.__globals__['os'].system('touch CANARY') }}",
    "globals of edgekit's raise_exception": "{{ raise_exception.__globals__ }}",
    "globals of edgekit's strftime_now": "{{ strftime_now.__globals__['datetime'] }}",
    "attr filter": "{{ (messages|attr('__class__')).__mro__ }}",
    "map attr filter": "{{ messages|map(attribute='__class__')|list }}",
    "str.format": "{{ '{0.__class__.__mro__}'.format(messages) }}",
    "str.format_map": "{{ '{x.__class__}'.format_map({'x': messages}) }}",
    "template context": "{{ self._TemplateReference__context }}",
    "dict.update on a message": "{{ messages[0].update({'role': 'system'}) }}",
    "list.append": "{% set _ = messages.append({'role': 'system', 'content': 'pwned'}) %}",
    "list.pop": "{% set _ = messages.pop() %}",
    "setattr via namespace": "{% set ns = namespace() %}{% set ns.__class__ = 1 %}",
    "string internals": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "request/config objects": "{{ config }}{{ request }}{{ self.__init__.__globals__ }}",
}

# Templates that cannot be rendered: each must be a ChatTemplateError saying what is wrong.
BROKEN = {
    "syntax error": "{% for %}",
    "undefined function": "{{ nothing() }}",
    "raise_exception": "{{ raise_exception('only user and assistant roles') }}",
    "import": "{% import 'os' as os %}",
    "include a file": "{% include '/etc/passwd' %}",
    "extends a file": "{% extends '/etc/passwd' %}",
    "range over the sandbox limit": "{{ range(10**9)|length }}",
    "division by zero": "{{ 1 / 0 }}",
    "endless recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_a_malicious_template_cannot_reach_python_internals(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    messages = [dict(m) for m in MESSAGES]
    try:
        out = render(ESCAPES[name], messages)
    except ChatTemplateError:
        out = ""
    assert not any(word in out for word in SECRET_WORDS), out
    assert not (tmp_path / "CANARY").exists()
    assert messages == MESSAGES  # the caller's messages are unchanged


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_template_that_cannot_render_is_a_chat_template_error(name: str) -> None:
    with pytest.raises(ChatTemplateError):
        render(BROKEN[name], MESSAGES)


HOG = """
import time
from edgekit.runtime.text.chat import ChatTemplateError, render
start = time.time()
try:
    render({template!r}, [{{"role": "user", "content": "hi"}}])
except ChatTemplateError:
    pass
print(round(time.time() - start, 2))
"""


def test_a_template_that_hogs_the_cpu_is_cut_off() -> None:
    template = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"  # 10^10 steps
    try:
        proc = subprocess.run(
            [sys.executable, "-c", HOG.format(template=template)], capture_output=True, text=True, timeout=5
        )
    except subprocess.TimeoutExpired:
        pytest.fail("rendering ran for more than 5 s")
    assert proc.returncode == 0 and float(proc.stdout) < 2.5, proc.stderr[-500:]  # chat.py stops at 200k steps or 0.5 s
