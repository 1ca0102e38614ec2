"""A GGUF source's tokenizer is the ground truth: the Hugging Face tokenizer the reference and the OpenVINO and
ONNX exports use must cut the eval text into the same ids as llama.cpp does, or every figure compares
different token streams. Checked at planning time, in seconds, before any conversion or reference."""

from __future__ import annotations

from pathlib import Path

from edgekit._util.versions import dist_version
from edgekit.errors import SourceTokenizerError
from edgekit.plan.tasks import FetchTask
from edgekit.signoff.evaldata import EvalText, first_difference
from edgekit.store.memo import remembered


def check_gguf_tokenizer(fetch: FetchTask, text: EvalText, cache_root: Path) -> None:
    """Raise SourceTokenizerError when the HF tokenizer and llama.cpp tokenize `text` differently."""
    versions = {d: dist_version(d) for d in ("llama-cpp-python", "transformers", "tokenizers")}
    inputs = {"source": fetch.key, "text": text.sha256, "versions": versions}
    found = remembered(cache_root, "tokenizer-checks", inputs, lambda: _compare(fetch, text))
    if found["position"] is not None:
        raise SourceTokenizerError(fetch.uri, fetch.tokenizer.uri if fetch.tokenizer else None, **found)


def _compare(fetch: FetchTask, text: EvalText) -> dict[str, object]:
    from edgekit.sources.gguf import llama_cpp_tokenize
    from edgekit.sources.tokenizer import reference_tokenizer

    tokenizer_dir = fetch.tokenizer.location if fetch.tokenizer else ""
    hf = reference_tokenizer(fetch.kind, fetch.uri, fetch.location, fetch.revision, tokenizer_dir).tokenize(text.text)
    ground = llama_cpp_tokenize(Path(fetch.location), text.text)
    position = first_difference(ground, hf)
    shown = slice(position, position + 5) if position is not None else slice(0)
    return {"position": position, "expected": ground[shown], "got": hf[shown], "compared": min(len(ground), len(hf))}
