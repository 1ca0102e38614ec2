"""The gguf backend's levers, run with llama.cpp's own tools (`edgekit toolchain --tools`).

`llama-imatrix` computes an importance matrix on the calibration text; `llama-quantize` quantizes with it
(`--imatrix`) and with per-tensor types (`--output-tensor-type`, `--token-embedding-type`, `--tensor-type`),
writing `quantize.imatrix.*` into the GGUF as it always does. Paths handed to the tools are relative to
their working folder, so the metadata they write is the same on every machine.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgekit._util.gguf_file import read_gguf
from edgekit._util.hashing import sha256_file
from edgekit._util.suggest import did_you_mean
from edgekit.backends.child import run_logged
from edgekit.backends.gguf.options import GGUFOptions
from edgekit.errors import RecipeProblem

IMATRIX_FILE = "imatrix.gguf"
CALIBRATION_FILE = "calibration.txt"
IMATRIX_LOG = "imatrix.log"
# convert_hf_to_gguf.py logs every tensor it writes: "INFO:hf-to-gguf:blk.0.attn_q.weight, torch.float16 --> F16, …"
CONVERTER_TENSOR = re.compile(r"^INFO:hf-to-gguf:([\w.]+),\s+\S+\s+-->\s+\w+, shape", re.M)


def compute_imatrix(model: Path, text: str, chunks: int, context: int, out_dir: Path, threads: int | None) -> str:
    """`llama-imatrix` on the first `chunks` windows of `text`, into out_dir/imatrix.gguf; returns its log."""
    from edgekit.toolchain import llama_tool

    tool = llama_tool("llama-imatrix")
    (out_dir / CALIBRATION_FILE).write_text(text, encoding="utf-8")
    cmd = [str(tool), "-m", str(model), "-f", CALIBRATION_FILE, "-o", IMATRIX_FILE, "-c", str(context),
           "--chunks", str(chunks), "--no-ppl", "-t", str(threads or 1)]  # fmt: skip
    try:
        return run_logged(cmd, out_dir / IMATRIX_LOG, "imatrix", cwd=out_dir)
    finally:
        (out_dir / CALIBRATION_FILE).unlink(missing_ok=True)


def imatrix_summary(path: Path) -> dict[str, Any]:
    """What an imatrix file says about itself: chunks, tokens per chunk, entries, the dataset named."""
    reader = read_gguf(path)

    def field(key: str) -> Any:
        value = reader.fields.get(key)
        return value.contents() if value is not None else None

    return {
        "chunks": field("imatrix.chunk_count"),
        "chunk_tokens": field("imatrix.chunk_size"),
        "entries": sum(1 for t in reader.tensors if t.name.endswith(".in_sum2")),
        "datasets": field("imatrix.datasets"),
        "sha256": sha256_file(path),
    }


def quantize_with_tool(
    source: Path, target: Path, scheme: str, options: GGUFOptions, imatrix: Path | None, log: Path, threads: int | None,
    provenance: dict[str, str], on_line: Callable[[str], None] | None = None,
) -> str:  # fmt: skip
    """`llama-quantize` with the target's levers; returns its log (fallback warnings included). `on_line` sees
    its output line by line as it comes (a progress count)."""
    from edgekit.toolchain import llama_tool

    cmd = [str(llama_tool("llama-quantize"))]
    cwd = None
    if imatrix is not None:
        cwd = imatrix.parent  # quantize.imatrix.file is written as given: a bare file name, the same everywhere
        cmd += ["--imatrix", imatrix.name]
    if options.output_tensor_type:
        cmd += ["--output-tensor-type", options.output_tensor_type.lower()]
    if options.token_embedding_type:
        cmd += ["--token-embedding-type", options.token_embedding_type.lower()]
    for override in options.tensor_overrides:
        cmd += ["--tensor-type", f"{override.pattern}={override.type.lower()}"]
    for key, value in provenance.items():
        cmd += ["--override-kv", f"{key}=str:{value}"]
    cmd += [str(source), str(target), scheme, str(threads or 1)]
    return run_logged(cmd, log, f"quantize {scheme} (llama-quantize)", cwd=cwd, on_line=on_line)


def tensor_names(kind: str, location: Path, converter_script: Path | None) -> list[str] | None:
    """The tensor names the gguf backend will write for this model, or None when they need the weights first.

    A GGUF source keeps its names; a safetensors checkpoint folder gets them from a dry run of llama.cpp's
    converter (it maps every weight's name without writing anything). Otherwise quantizing checks them.
    """
    if kind == "gguf":
        return gguf_tensor_names(location)
    if kind != "dir" or converter_script is None or not any(location.glob("*.safetensors")):
        return None  # an hf:// source before its weights are fetched, or pickles (never loaded before the fetch)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edgekit-names-") as tmp:
        cmd = [sys.executable, str(converter_script), str(location), "--dry-run", "--outfile", f"{tmp}/dry.gguf"]
        log = run_logged(cmd, Path(tmp) / "convert.log", "convert", env={"NO_LOCAL_GGUF": ""})
    return CONVERTER_TENSOR.findall(log)


def gguf_tensor_names(path: Path) -> list[str]:
    """The tensor names in a GGUF file's header."""
    return [t.name for t in read_gguf(path).tensors]


def override_problems(options: GGUFOptions, names: list[str]) -> list[RecipeProblem]:
    """Every tensor override pattern must match a tensor of this model (as llama-quantize searches: lower case)."""
    kinds = sorted({re.sub(r"^blk\.\d+\.", "", n) for n in names})
    problems = []
    for i, override in enumerate(options.tensor_overrides):
        pattern = re.compile(override.pattern.lower())
        if not any(pattern.search(n) for n in names):
            hint = did_you_mean(override.pattern, kinds)
            problems.append(
                RecipeProblem(
                    f"options.tensor_overrides[{i}].pattern",
                    f"{override.pattern!r} matches no tensor of this model; its tensors are named like "
                    f"blk.0.{next((k for k in kinds if k.startswith('attn')), kinds[0])} "
                    f"({len(names)} tensors: {', '.join(kinds[:12])}{'…' if len(kinds) > 12 else ''})",
                    hint,
                )
            )
    return problems


def memo_inputs(kind: str, location: Path, converter: dict[str, Any]) -> dict[str, Any]:
    """What the tensor names of a model depend on (its files, the converter), for `edgekit.store.memo.remembered`."""
    files = [location] if location.is_file() else sorted(p for p in location.iterdir() if p.is_file())
    stats = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    return {"kind": kind, "files": stats, "converter": converter}
