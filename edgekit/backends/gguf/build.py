"""llama.cpp GGUF backend.

convert:  HF checkpoint → GGUF F16 with llama.cpp's own convert_hf_to_gguf.py (same llama.cpp
          version as the installed llama-cpp-python), stamped with provenance metadata.
quantize: F16 → Q4_K_M / Q5_K_M / Q8_0 with llama_model_quantize from the bindings. The tensor
          types actually written are read back, because K-quants silently fall back to other
          types on rows that are not a multiple of 256.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgekit.backends.base import BuildBackend, BuildEnv, LogitsRunner
from edgekit.backends.child import run_logged
from edgekit.backends.gguf.gates import DEFAULT_GATES
from edgekit.backends.gguf.info import tensor_summary
from edgekit.fsutil import ensure_free_space
from edgekit.gates import Gates
from edgekit.progress import Progress
from edgekit.records import Checkpoint
from edgekit.versions import dist_version

F16_FILE = "model-f16.gguf"
ARTIFACT_FILE = "model.gguf"
CONVERT_LOG = "convert.log"
QUANTIZE_LOG = "quantize.log"
FALLBACK = re.compile(r"required for type\s+(\w+)\)\s*->\s*falling back to\s+(\w+)")


class GGUFBuild(BuildBackend):
    name = "gguf"
    schemes = ("Q4_K_M", "Q5_K_M", "Q8_0", "F16")
    extra = "gguf"
    required_modules = ("llama_cpp", "gguf", "torch", "transformers")
    default_scheme_gates: ClassVar[dict[str, Gates]] = DEFAULT_GATES
    # Approximate bytes per parameter of each scheme, for the disk-space check before writing.
    bytes_per_param: ClassVar[dict[str, float]] = {"F16": 2.0, "Q8_0": 1.07, "Q5_K_M": 0.72, "Q4_K_M": 0.62}

    def versions(self, env: BuildEnv) -> dict[str, str | None]:
        from edgekit.toolchain import get_converter

        converter = get_converter(env.llama_cpp_dir)
        return {
            "llama-cpp-python": dist_version("llama-cpp-python"),
            "llama.cpp": converter.llama_cpp_commit,
            "convert_hf_to_gguf.py": converter.script_sha256,
            "converter_origin": converter.origin,
            "gguf": dist_version("gguf"),
        }

    # --- build -----------------------------------------------------------------------------------

    def convert(
        self, checkpoint: Checkpoint, out_dir: Path, env: BuildEnv, progress: Progress, provenance: dict[str, str]
    ) -> None:
        from edgekit.toolchain import get_converter

        converter = get_converter(env.llama_cpp_dir)
        weights = sum(p.stat().st_size for p in checkpoint.path.glob("*.safetensors"))
        ensure_free_space(out_dir, 3 * weights)  # raw F16 + stamped copy, F32 checkpoints shrink
        raw = out_dir / "converter-output.gguf"
        cmd = [
            sys.executable, str(converter.script), str(checkpoint.path),
            "--outfile", str(raw), "--outtype", "f16", "--model-name", provenance.get("name", "model"),
        ]  # fmt: skip
        with progress.task("convert  HF → GGUF F16 (llama.cpp convert_hf_to_gguf.py)"):
            run_logged(cmd, out_dir / CONVERT_LOG, "convert", env={"NO_LOCAL_GGUF": ""})
        with progress.task("convert  stamp provenance metadata"):
            stamp_metadata(raw, out_dir / F16_FILE, provenance)
        raw.unlink()

    def quantize(
        self,
        converted: Path,
        scheme: str,
        options: Any,
        out_dir: Path,
        env: BuildEnv,
        progress: Progress,
        calibration_text: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        source = converted / F16_FILE
        target = out_dir / ARTIFACT_FILE
        summary_in = tensor_summary(source)
        ensure_free_space(out_dir, int(summary_in["params"] * self.bytes_per_param[scheme]) + 2**20)
        fallbacks: Counter[str] = Counter()
        if scheme == "F16":
            shutil.copyfile(source, target)
        else:
            cmd = [sys.executable, "-m", "edgekit.backends.gguf.quantize_child", str(source), str(target), scheme, "0"]
            with progress.task(f"quantize  GGUF {scheme} (llama_model_quantize)"):
                log = run_logged(cmd, out_dir / QUANTIZE_LOG, f"quantize {scheme}")
            fallbacks.update(f"{a.upper()}→{b.upper()}" for a, b in FALLBACK.findall(log))
        summary = tensor_summary(target)
        details = {
            "format": "gguf",
            "file_type": summary["file_type"],
            "tensor_types": summary["tensor_types"],
            "bits_per_weight": summary["bits_per_weight"],
            "params": summary["params"],
            "bytes_per_token": summary["bytes_per_token"],
            "tied_embeddings": summary["tied_embeddings"],
            "fallbacks": dict(fallbacks),
        }
        if fallbacks:
            details["note"] = (
                f"{sum(fallbacks.values())} tensors fell back from K-quants ({', '.join(sorted(fallbacks))}) "
                "because their rows are not a multiple of 256; the file type still says "
                f"{scheme}, the tensor types above are what was written"
            )
        return ARTIFACT_FILE, details

    # --- validation seam --------------------------------------------------------------------------

    def open_runner(self, artifact: Path, n_ctx: int, threads: int | None = None) -> LogitsRunner:
        return LlamaLogitsRunner(artifact, n_ctx=n_ctx, threads=threads)


class LlamaLogitsRunner:
    """Logits for token ids from llama.cpp (all positions), for validation."""

    def __init__(self, path: Path, n_ctx: int, threads: int | None = None) -> None:
        from llama_cpp import Llama

        self.name = path.name
        self._llm = Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_batch=min(n_ctx, 512),
            logits_all=True,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )

    @property
    def vocab_size(self) -> int:
        return int(self._llm.n_vocab())

    def tokenize(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        self._llm.reset()
        self._llm.eval(list(ids))
        return np.array(self._llm.scores[: len(ids)], dtype=np.float32, copy=True)

    def close(self) -> None:
        self._llm.close()


def stamp_metadata(src: Path, dst: Path, values: dict[str, str]) -> None:
    """Copy a GGUF adding string metadata (general.source.*, edgekit.*), with gguf-py's own copier."""
    import logging

    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    logging.getLogger("gguf-new-metadata").setLevel(logging.WARNING)
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    alignment = reader.fields.get("general.alignment")
    if alignment is not None:
        writer.data_alignment = int(alignment.contents())
    new = {k: MetadataDetails(gguf.GGUFValueType.STRING, str(v)) for k, v in values.items() if k != "name"}
    copy_with_new_metadata(reader, writer, new, remove_metadata=[])
