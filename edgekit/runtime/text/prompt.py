"""Prompts → token ids: plain completions, and chat messages through the model's chat template."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.runtime.engines import Engine
from edgekit.runtime.text import chat


def is_utf8(text: str) -> bool:
    """False for text Python can hold but UTF-8 cannot encode (lone surrogates, e.g. from JSON "\\ud800")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def completion_ids(engine: Engine, text: str) -> list[int]:
    """A plain prompt, with the BOS token when the model's vocabulary asks for one."""
    ids = engine.tokenize(text)
    if getattr(engine, "add_bos", False):
        ids = [engine.bos_id, *ids]  # type: ignore[attr-defined]
    return ids


def chat_text(engine: Engine, bundle: Path | None, messages: Any, tools: list[dict[str, Any]] | None = None) -> str:
    template = chat.find_template(engine, bundle)
    if not template:
        raise UsageError(
            "this model has no chat template", "use /v1/completions (or `edgekit run` without --chat) instead"
        )
    token_text = getattr(engine, "token_text", None)
    special: dict[str, str] = {}
    if token_text is not None:
        eos = getattr(engine, "eos_id", min(engine.eos_ids, default=0))
        special = {"bos_token": token_text(getattr(engine, "bos_id", eos)), "eos_token": token_text(eos)}
    rendered = chat.normalise_messages(messages)
    return chat.render(template, rendered, add_generation_prompt=True, tools=tools, **special)


def chat_ids(
    engine: Engine, bundle: Path | None, messages: Any, tools: list[dict[str, Any]] | None = None
) -> list[int]:
    """Messages (and the tools, for a template that lists them) rendered by the chat template; its special tokens
    (e.g. <|im_start|>) are parsed as such."""
    return engine.tokenize(chat_text(engine, bundle, messages, tools), special=True)
