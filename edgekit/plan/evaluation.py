"""The scored data of a build, resolved once at planning time: text, token ids, windows, cloze items, tasks.

Every token id comes from one tokenizer (`edgekit.plan.eval_tokenizer`: the Hugging Face tokenizer, or
llama.cpp's reading of a GGUF source whose every target is a GGUF), so every stage scores the same tokens.
Tokenizing costs a tokenizer load; the result is remembered in the cache under the hash of everything it
depends on (the source's fetch key covers its tokenizer files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgekit._util.hashing import sha256_file
from edgekit.plan.eval_tokenizer import EvalTokenizer, open_tokenizer, tokenizer_versions
from edgekit.plan.tasks import FetchTask
from edgekit.recipe.schema import ValidationSection
from edgekit.signoff.evaldata import (
    ChoiceTask,
    ClozeItem,
    EvalPlan,
    EvalText,
    Prompt,
    TaskItem,
    TokenIds,
    cloze_items,
    load_text,
    make_windows,
    multiple_choice_task,
)
from edgekit.sources import resolve_path
from edgekit.sources.tokenizer import TokenizerKind
from edgekit.store.memo import remembered

MEMO_FORMAT = 2  # 2: lm-eval pair tokenization, chat prompts


def eval_plan(
    cfg: ValidationSection, base_dir: Path, fetch: FetchTask, cache_root: Path, tokenizer: TokenizerKind
) -> EvalPlan:
    text = load_text(cfg.text, base_dir)
    task_files = [resolve_path(t, base_dir) for t in cfg.tasks]
    inputs = {
        "format": MEMO_FORMAT,
        "source": fetch.key,
        "text": text.sha256,
        "context_length": cfg.context_length,
        "max_tokens": cfg.max_tokens,
        "cloze": cfg.cloze.model_dump(),
        "tasks": [sha256_file(p) for p in task_files],
        "prompts": list(cfg.prompts),
        "tokenizer": tokenizer_versions(tokenizer),
    }

    def tokenize() -> dict[str, Any]:
        with open_tokenizer(fetch, tokenizer) as opened:
            return _tokenize(cfg, text, task_files, opened)

    tokenized = remembered(cache_root, "eval-plans", inputs, tokenize)
    return _from_tokenized(cfg, text, tokenized, tokenizer)


def _tokenize(cfg: ValidationSection, text: EvalText, task_files: list[Path], tokenizer: EvalTokenizer
              ) -> dict[str, Any]:  # fmt: skip
    if cfg.cloze.enabled:
        ids, offsets = tokenizer.tokenize_with_offsets(text.text)
    else:
        ids, offsets = tokenizer.tokenize(text.text), []
    windows = make_windows(ids, cfg.context_length, cfg.max_tokens)
    cloze = (
        cloze_items(text.text, offsets, windows, cfg.cloze.items, cfg.cloze.min_word_chars) if cfg.cloze.enabled else []
    )
    tasks = [
        multiple_choice_task(p, tokenizer.tokenize, cfg.context_length // 2, tokenizer.prefix_token_id)
        for p in task_files
    ]
    prompts = [(text, tokenizer.chat_prompt_ids(text)) for text in cfg.prompts]
    return {
        "prompts": [[text, ids, tokenizer.stop_ids] for text, ids in prompts if ids is not None],
        "ids": windows.ids.tolist(),
        "cloze": [[c.window, c.start, c.end] for c in cloze],
        "tasks": [
            {
                "name": t.name,
                "kind": t.kind,
                "sha256": t.sha256,
                "items": [[list(i.ids), i.split, i.group, i.choice, i.answer, i.nbytes] for i in t.items],
            }
            for t in tasks
        ],
    }


def _from_tokenized(cfg: ValidationSection, text: EvalText, tokenized: dict[str, Any], tokenizer: TokenizerKind
                    ) -> EvalPlan:  # fmt: skip
    tasks = tuple(
        ChoiceTask(t["name"], t["kind"], tuple(TaskItem(tuple(i[0]), *i[1:]) for i in t["items"]), t["sha256"])
        for t in tokenized["tasks"]
    )
    return EvalPlan(
        text=text,
        ids=TokenIds.of(np.asarray(tokenized["ids"], dtype=np.int32)),
        context_length=cfg.context_length,
        max_tokens=cfg.max_tokens,
        cloze=tuple(ClozeItem(*c) for c in tokenized["cloze"]),
        cloze_settings=cfg.cloze.model_dump(),
        tasks=tasks,
        prompts=tuple(Prompt(text, tuple(ids), tuple(stop)) for text, ids, stop in tokenized["prompts"]),
        tokenizer=tokenizer,
    )
