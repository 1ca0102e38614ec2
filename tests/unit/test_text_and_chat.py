"""Incremental UTF-8 and stop strings; chat templates in the jinja2 sandbox."""

from __future__ import annotations

import pytest

from edgekit.errors import UsageError
from edgekit.runtime.text.chat import ChatTemplateError, normalise_messages, render
from edgekit.runtime.text.stream import TextStream


def test_utf8_split_across_tokens_is_held_until_complete() -> None:
    stream = TextStream()
    data = "né🙂".encode()
    out = [stream.feed(data[i : i + 1]) for i in range(len(data))]
    assert "".join(out) + stream.flush() == "né🙂"
    assert out[1] == "" and out[2] == "é"


def test_stop_strings_are_never_partly_emitted() -> None:
    stream = TextStream(["<END>"])
    assert stream.feed(b"hello <E") == "hello "
    assert stream.feed(b"N") == ""
    assert stream.feed(b"D> more") == ""
    assert stream.stopped and stream.text == "hello "
    other = TextStream(["<END>"])
    assert other.feed(b"a <E") == "a " and other.feed(b"x") == "<Ex" and other.flush() == ""


def test_chat_template_renders_chatml() -> None:
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    text = render(template, normalise_messages([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]))
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_chat_template_cannot_escape_the_sandbox() -> None:
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(ChatTemplateError, match="unsafe or broken"):
        render(escape, [{"role": "user", "content": "x"}])
    mutate = "{% set _ = messages.append({'role': 'system', 'content': 'pwned'}) %}{{ messages | length }}"
    with pytest.raises(ChatTemplateError):
        render(mutate, [{"role": "user", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="roles"):
        render("{{ raise_exception('only user and assistant roles') }}", [{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    "messages",
    [[], "hi", [{"content": "x"}], [{"role": "wizard", "content": "x"}], [{"role": "user", "content": 5}]],
)
def test_bad_messages_are_refused(messages: object) -> None:
    with pytest.raises(UsageError):
        normalise_messages(messages)
