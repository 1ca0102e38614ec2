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
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgekit.backends.base import Backend, BuildEnv, Checkpoint, Gates, LogitsRunner
from edgekit.errors import StageError
from edgekit.fsutil import ensure_free_space
from edgekit.gguf_info import tensor_summary
from edgekit.procutil import die_with_parent
from edgekit.progress import Progress
from edgekit.versions import dist_version

F16_FILE = "model-f16.gguf"
ARTIFACT_FILE = "model.gguf"
CONVERT_LOG = "convert.log"
QUANTIZE_LOG = "quantize.log"
# Approximate bytes per parameter of each scheme, for the disk-space check before writing.
BYTES_PER_PARAM = {"F16": 2.0, "Q8_0": 1.07, "Q5_K_M": 0.72, "Q4_K_M": 0.62}
FALLBACK = re.compile(r"required for type\s+(\w+)\)\s*->\s*falling back to\s+(\w+)")


class GGUFBackend(Backend):
    name = "gguf"
    schemes = ("Q4_K_M", "Q5_K_M", "Q8_0", "F16")
    extra = "gguf"
    required_modules = ("llama_cpp", "gguf", "torch", "transformers")
    # From llama.cpp's published KL-divergence figures for Llama-3-8B on wikitext-2 (mean KLD: Q8_0 ≈ 0.0014,
    # Q5_K_M ≈ 0.011, Q4_K_M ≈ 0.031), with about 4x headroom for small models, which have fewer
    # redundant weights and lose more to the same scheme. Recipes override with [validation.gates].
    default_scheme_gates: ClassVar[dict[str, Gates]] = {
        "F16": Gates(kld_mean_max=0.002, ppl_ratio_max=1.005, top1_min=0.98, task_drop_max=0.03),
        "Q8_0": Gates(kld_mean_max=0.006, ppl_ratio_max=1.02, top1_min=0.93, task_drop_max=0.05),
        "Q5_K_M": Gates(kld_mean_max=0.045, ppl_ratio_max=1.06, top1_min=0.85, task_drop_max=0.08),
        "Q4_K_M": Gates(kld_mean_max=0.12, ppl_ratio_max=1.15, top1_min=0.80, task_drop_max=0.10),
    }

    def versions(self, env: BuildEnv) -> dict[str, str | None]:
        from edgekit.toolchain import get_converter

        converter = get_converter(env.cache_root, env.llama_cpp_dir)
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

        converter = get_converter(env.cache_root, env.llama_cpp_dir)
        weights = sum(p.stat().st_size for p in checkpoint.path.glob("*.safetensors"))
        ensure_free_space(out_dir, 3 * weights)  # raw F16 + stamped copy, F32 checkpoints shrink
        raw = out_dir / "converter-output.gguf"
        cmd = [
            sys.executable, str(converter.script), str(checkpoint.path),
            "--outfile", str(raw), "--outtype", "f16", "--model-name", provenance.get("name", "model"),
        ]  # fmt: skip
        with progress.task("convert  HF → GGUF F16 (llama.cpp convert_hf_to_gguf.py)"):
            _run_logged(cmd, out_dir / CONVERT_LOG, "convert", env={"HF_HUB_OFFLINE": "1", "NO_LOCAL_GGUF": ""})
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
        ensure_free_space(out_dir, int(summary_in["params"] * BYTES_PER_PARAM[scheme]) + 2**20)
        fallbacks: Counter[str] = Counter()
        if scheme == "F16":
            shutil.copyfile(source, target)
        else:
            cmd = [sys.executable, "-m", "edgekit.backends._llama_quantize", str(source), str(target), scheme, "0"]
            with progress.task(f"quantize  GGUF {scheme} (llama_model_quantize)"):
                log = _run_logged(cmd, out_dir / QUANTIZE_LOG, f"quantize {scheme}")
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


def _run_logged(cmd: list[str], log_path: Path, what: str, env: dict[str, str] | None = None) -> str:
    import os

    full_env = {**os.environ, **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v != ""}
    full_env["TQDM_DISABLE"] = "1"
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, preexec_fn=die_with_parent())
    text = log_path.read_text(encoding="utf-8", errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-15:])
        raise StageError(what, f"failed with exit code {proc.returncode}:\n{tail}", f"full log: {log_path}")
    return text
