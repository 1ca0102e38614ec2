"""A GGUF source's tokenizer is the ground truth: a target that exports the checkpoint dequantized from it (OpenVINO,
ONNX Runtime) ships the Hugging Face tokenizer of that checkpoint, which must cut the eval text into the same
ids as llama.cpp does, or its figures compare other token streams. Checked at planning time, in seconds, before
any conversion or reference; a target it fails is refused alone (`BuildBackend.unsupported`, through
`ModelInfo.tokenizer_differs`) while the GGUF targets build on llama.cpp's ids.
"""

from __future__ import annotations

from pathlib import Path

from edgekit._util.versions import dist_version
from edgekit.plan.tasks import FetchTask
from edgekit.signoff.evaldata import EvalText, first_difference
from edgekit.store.memo import remembered

FIX = (
    'give the model\'s original tokenizer in [model] tokenizer: tokenizer = "hf://ORG/NAME" with '
    'tokenizer_revision, or tokenizer = "path/to/folder" holding its tokenizer files'
)


def gguf_tokenizer_difference(fetch: FetchTask, text: EvalText, cache_root: Path) -> str | None:
    """Why the Hugging Face tokenizer of a GGUF source's checkpoint is not llama.cpp's on `text` (with the fix),
    or None when both cut it into the same ids."""
    versions = {d: dist_version(d) for d in ("llama-cpp-python", "transformers", "tokenizers")}
    inputs = {"source": fetch.key, "text": text.sha256, "versions": versions}
    found = remembered(cache_root, "tokenizer-checks", inputs, lambda: _compare(fetch, text))
    if found["position"] is None:
        return None
    which = "the tokenizer rebuilt from its metadata"
    if fetch.tokenizer is not None:
        which = f"the tokenizer from {fetch.tokenizer.uri}"
    return (
        f"{which} tokenizes the eval text differently from llama.cpp's reading of the GGUF: first difference at "
        f"token {found['position']} of {found['compared']} (llama.cpp {found['expected']}, Hugging Face "
        f"{found['got']}), so its export would score other tokens; {FIX}"
    )


def _compare(fetch: FetchTask, text: EvalText) -> dict[str, object]:
    from edgekit.sources.gguf import llama_cpp_tokenize
    from edgekit.sources.tokenizer import reference_tokenizer

    tokenizer_dir = fetch.tokenizer.location if fetch.tokenizer else ""
    hf = reference_tokenizer(fetch.kind, fetch.uri, fetch.location, fetch.revision, tokenizer_dir).tokenize(text.text)
    ground = llama_cpp_tokenize(Path(fetch.location), text.text)
    position = first_difference(ground, hf)
    shown = slice(position, position + 5) if position is not None else slice(0)
    return {"position": position, "expected": ground[shown], "got": hf[shown], "compared": min(len(ground), len(hf))}
