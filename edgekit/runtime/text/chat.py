"""Chat templates, rendered the way transformers renders them, but always in a jinja2 sandbox.

A chat template is code that came with the model: it runs in `ImmutableSandboxedEnvironment`, so
it cannot reach Python internals or mutate the messages it is given, it cannot load other
templates (the loader refuses everything), and its work is bounded: template code runs under a
line budget and a deadline, and operations that build huge values in one step (`'x' * 10**9`,
`10**10**10`, `'{:>999999999}'.format(…)`, `center(10**9)`) are refused. Whatever goes wrong while
rendering is a `ChatTemplateError` (400 in serve, exit 2 in run).
"""

from __future__ import annotations

import json
import operator
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import DictLoader
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from edgekit.errors import UsageError

# Bounds on one render. A ChatML conversation of 256 messages runs a few thousand template lines.
MAX_TEMPLATE_LINES = 200_000
MAX_RENDER_SECONDS = 0.5
MAX_VALUE_ITEMS = 1_000_000  # longest string or list one operation may build
MAX_EXPONENT = 256
MAX_INT_BITS = 100_000
_BIG_NUMBER = re.compile(r"\d{7,}")
_PADDING_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})

ROLES = ("system", "user", "assistant", "tool", "developer")
MESSAGE_KEYS = ("role", "content")  # what the template is given; any other key is refused, never dropped
TOOL_KEYS = ("tool_calls", "tool_call_id")  # a native tool template's history (serve's tools/ checked them)
TEXT_PART_KEYS = ("type", "text")
MAX_MESSAGES = 256


class ChatTemplateError(UsageError):
    pass


def _raise(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the messages: {message}", "check the roles and their order")


def _refuse(what: str) -> SecurityError:
    return SecurityError(f"the template tried to {what}")


def _bounded(value: Any, name: str) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_VALUE_ITEMS:
        raise _refuse(f"pad or size text to {value:,} characters ({name})")
    return value


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%"})

    def call_binop(self, context: Any, op: str, left: Any, right: Any) -> Any:
        if op == "**" and isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
            raise _refuse(f"raise a number to the power {right}")
        if op in ("*", "**") and isinstance(left, int) and isinstance(right, int):
            bits = left.bit_length() * abs(right) if op == "**" else left.bit_length() + right.bit_length()
            if bits > MAX_INT_BITS:
                raise _refuse(f"compute a number of {bits:,} bits")
        if op == "*":
            for seq, times in ((left, right), (right, left)):
                if (
                    isinstance(seq, str | list | tuple)
                    and isinstance(times, int)
                    and len(seq) * times > MAX_VALUE_ITEMS
                ):
                    raise _refuse(f"repeat a value {times:,} times")
        if op == "%" and isinstance(left, str) and _BIG_NUMBER.search(left):
            raise _refuse("format with a huge width")
        return {"*": operator.mul, "**": operator.pow, "%": operator.mod}[op](left, right)

    def wrap_str_format(self, value: Any) -> Any:
        target = getattr(value, "__self__", None)
        if isinstance(target, str) and _BIG_NUMBER.search(target):
            raise _refuse("format with a huge width")
        return super().wrap_str_format(value)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(getattr(__obj, "__self__", None), str) and getattr(__obj, "__name__", "") in _PADDING_METHODS:
            for value in (*args, *kwargs.values()):
                _bounded(value, __obj.__name__)
        return super().call(__context, __obj, *args, **kwargs)


def _environment() -> _Sandbox:
    env = _Sandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols"],
        loader=DictLoader({}),  # {% include %}, {% import %} and {% extends %} find nothing
    )
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    for name in ("center", "indent", "wordwrap", "truncate"):
        original = env.filters[name]

        def guarded(value: Any, *args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            for arg in (*args, *kwargs.values()):
                _bounded(arg, _name)
            return _original(value, *args, **kwargs)

        env.filters[name] = guarded
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class _Budget:
    """A trace function for template code only: stops a render past MAX_TEMPLATE_LINES or its deadline."""

    def __init__(self) -> None:
        self.lines = 0
        self.deadline = time.monotonic() + MAX_RENDER_SECONDS

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        return self._line if frame.f_code.co_filename == "<template>" else None

    def _line(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines += 1
            if self.lines > MAX_TEMPLATE_LINES or (self.lines % 512 == 0 and time.monotonic() > self.deadline):
                raise _refuse(f"run for more than {MAX_TEMPLATE_LINES:,} steps or {MAX_RENDER_SECONDS} s")
        return self._line


def find_template(engine: Any, bundle: Path | None) -> str | None:
    """The engine's own template (GGUF metadata), else the bundle's tokenizer files."""
    template = getattr(engine, "chat_template", None)
    if template:
        return template
    if bundle is None:
        return None
    jinja_file = bundle / "tokenizer" / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    config = bundle / "tokenizer" / "tokenizer_config.json"
    if config.is_file():
        value = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(value, str):
            return value
    return None


def normalise_messages(messages: Any) -> list[dict[str, Any]]:
    """OpenAI-style messages → [{role, content}] with text content (and, for a template with its own tool format,
    the `tool_calls` / `tool_call_id` serve's tools/ passed on); raises UsageError on bad input."""
    if not isinstance(messages, list) or not messages:
        raise UsageError("`messages` must be a non-empty list", 'send [{"role": "user", "content": "..."}]')
    if len(messages) > MAX_MESSAGES:
        raise UsageError(f"{len(messages)} messages", f"send at most {MAX_MESSAGES}")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise UsageError(f"messages[{i}] needs a string `role`", f"one of {', '.join(ROLES)}")
        if message["role"] not in ROLES:
            raise UsageError(f"messages[{i}].role is {message['role']!r}", f"use one of {', '.join(ROLES)}")
        _only_keys(message, (*MESSAGE_KEYS, *TOOL_KEYS), f"messages[{i}]")
        content = message.get("content", "")
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = _text_of_parts(content, i)
        if not isinstance(content, str):
            raise UsageError(f"messages[{i}].content must be a string", "send text content")
        try:
            content.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(f"messages[{i}].content is not valid UTF-8 text", "it holds a lone surrogate") from None
        out.append({"role": message["role"], "content": content, **{k: message[k] for k in TOOL_KEYS if k in message}})
    return out


def _only_keys(value: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    extra = [key for key in value if key not in keys]
    if extra:
        raise UsageError(f"{where} has `{extra[0]}`, which edgekit does not implement", f"send only {', '.join(keys)}")


def _text_of_parts(content: list[Any], i: int) -> str:
    parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    if len(parts) != len(content):
        raise UsageError(f"messages[{i}].content has non-text parts", "this model takes text only")
    for j, part in enumerate(content):
        _only_keys(part, TEXT_PART_KEYS, f"messages[{i}].content[{j}]")
    if not all(isinstance(text, str) for text in parts):
        raise UsageError(f"messages[{i}].content has a text part whose text is not a string", "send text")
    return "".join(parts)


def render(
    template: str,
    messages: list[dict[str, Any]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    previous = sys.gettrace()
    try:
        compiled = _environment().from_string(template)
        sys.settrace(_Budget())
        try:
            text = compiled.render(
                messages=[dict(m) for m in messages],
                bos_token=bos_token,
                eos_token=eos_token,
                add_generation_prompt=add_generation_prompt,
                tools=tools,
            )
        finally:
            sys.settrace(previous)
    except ChatTemplateError:
        raise
    except (Exception, RecursionError) as exc:  # untrusted code: every failure is the template's
        raise ChatTemplateError(
            f"the chat template failed: {type(exc).__name__}: {str(exc)[:300]}",
            "the template is unsafe or broken; fix tokenizer/chat_template in the source model",
        ) from None
    return text
