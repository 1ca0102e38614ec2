"""The architecture matrix: which backend builds which architecture from which source form, and why not.

`tests/contract/test_architectures.py` builds every cell and checks that the outcome is the one written
here; `scripts/arch_matrix.py` writes the table in docs/models.md from the same data, so the docs say what
the tests prove.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.arch_zoo import ARCHES

FORMS = {
    "folder": "a Hugging Face folder",
    "hub": "hf:// with a revision (a local Hub cache)",
    "gguf": "a GGUF file (made by llama.cpp's converter)",
}
TARGETS = {"gguf": "Q8_0", "openvino": "INT8", "onnxruntime": "INT8"}


@dataclass(frozen=True)
class Cell:
    builds: bool
    why: str = ""  # a preflight refusal: words its message must carry
    # a GGUF whose rebuilt tokenizer differs: an export of it needs `[model] tokenizer` (the original files)
    tokenizer: bool = False


BUILDS = Cell(True)
BPE_REFUSED = Cell(False, "BPE pre-tokenizer was not recognized")


def cell(arch: str, form: str, backend: str) -> Cell:
    if arch == "qwen2" and backend == "gguf":
        return BPE_REFUSED  # a byte-level BPE trained here: llama.cpp's converter knows only published ones
    if form == "gguf" and arch in ("gemma3_text", "phi3") and backend != "gguf":  # gguf: llama.cpp's own ids
        return Cell(True, tokenizer=True)
    return BUILDS


def backends(arch: str, form: str) -> list[str]:
    """What a case builds. From an hf:// source only the fetch differs from the folder form (same files, same
    conversions), so every backend runs there for llama, and one that builds for the other architectures."""
    if form == "hub" and arch != "llama":
        return [next(b for b in TARGETS if cell(arch, "folder", b).builds)]
    return list(TARGETS)


def forms(arch: str) -> list[str]:
    """qwen2 has no GGUF form: llama.cpp's converter refuses its tokenizer, so no GGUF of it exists."""
    return [f for f in FORMS if not (arch == "qwen2" and f == "gguf")]


CASES = [(arch, form) for arch in ARCHES for form in forms(arch)]
