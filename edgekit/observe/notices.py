"""The other libraries' warnings that matter, each turned into one line with the fix.

Everything a library prints during a build goes to the stage's log file (`edgekit.observe.stagelog`); the
terminal shows only the lines below, once per stage, when their pattern is found in that stage's
output. Add an entry when a library warning changes what a user should do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Notable:
    pattern: re.Pattern[str]
    say: str  # what it means, in one line, with the fix


NOTABLE: tuple[Notable, ...] = (
    Notable(
        re.compile(r"incorrect regex pattern.*fix_mistral_regex", re.S),
        "tokenizer: transformers says the pre-tokenizer regex is Mistral's faulty one (its `fix_mistral_regex` "
        'warning) → for a Mistral-family model give the fixed tokenizer: [model] tokenizer = "hf://ORG/NAME"; '
        "transformers 4.57 also says this of any local tokenizer over 100k tokens, where edgekit's tokenizer "
        "check against llama.cpp is the one to trust",
    ),
    Notable(
        re.compile(r"byte fallback option which is not implemented in the fast tokenizers"),
        "tokenizer: the fast tokenizer built from tokenizer.model lacks byte fallback and can tokenize differently "
        "→ ship the model's own tokenizer.json, or set [model] tokenizer to a folder that has one",
    ),
    Notable(
        re.compile(r"Some weights of \S+ were not initialized from the model checkpoint"),
        "reference: some weights were not in the checkpoint and were initialised at random → the checkpoint does "
        "not match config.json's architecture; check the source files",
    ),
    Notable(
        re.compile(r"falling back to\s+\w+"),
        "quantize: some tensors fell back from K-quants (rows not a multiple of 256) → the report lists the types "
        "actually written; choose Q8_0 or F16 if the fallback types fail the gates",
    ),
)


def notable(text: str) -> list[str]:
    """The lines to show for `text` (a log record or a chunk of a log), in table order."""
    return [n.say for n in NOTABLE if n.pattern.search(text)]
