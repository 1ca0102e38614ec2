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

from edgekit.backends.base import BuildBackend, BuildEnv, ModelInfo
from edgekit.backends.child import run_logged
from edgekit.backends.gguf.gates import DEFAULT_GATES
from edgekit.backends.gguf.info import tensor_summary
from edgekit.errors import StageError
from edgekit.fsutil import ensure_free_space
from edgekit.gates import Gates
from edgekit.hashing import sha256_file
from edgekit.memo import remembered
from edgekit.progress import Progress
from edgekit.records import Checkpoint
from edgekit.versions import dist_version

F16_FILE = "model-f16.gguf"
ARTIFACT_FILE = "model.gguf"
CONVERT_LOG = "convert.log"
QUANTIZE_LOG = "quantize.log"
QUANTIZE_CHILD = "edgekit.backends.gguf.quantize_child"
FALLBACK = re.compile(r"required for type\s+(\w+)\)\s*->\s*falling back to\s+(\w+)")


class GGUFBuild(BuildBackend):
    name = "gguf"
    converts_gguf = True
    schemes = ("Q4_K_M", "Q5_K_M", "Q8_0", "F16")
    extra = "gguf"
    required_modules = ("llama_cpp", "gguf", "torch", "transformers")
    default_scheme_gates: ClassVar[dict[str, Gates]] = DEFAULT_GATES
    # Approximate bytes per parameter of each scheme, for the disk-space check before writing.
    bytes_per_param: ClassVar[dict[str, float]] = {"F16": 2.0, "Q8_0": 1.07, "Q5_K_M": 0.72, "Q4_K_M": 0.62}

    def unsupported(self, model: ModelInfo, env: BuildEnv) -> str | None:
        """A GGUF source: llama.cpp must read its vocabulary. A checkpoint: llama.cpp's converter must know its
        architecture and tokenizer, which a vocabulary-only conversion (seconds, no weights read) shows."""
        if model.kind == "gguf":
            from edgekit.sources.gguf import llama_cpp_reads

            return llama_cpp_reads(model.location)
        from edgekit.toolchain import get_converter

        converter = get_converter(env.llama_cpp_dir)
        files = _small_files(model.location)
        inputs = {"converter": converter.identity(), "files": [[p.name, sha256_file(p)] for p in files]}
        return remembered(env.cache_root, "support-checks", inputs, lambda: _vocab_only(converter.script, model))

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

    def convert_gguf(
        self, source: Path, out_dir: Path, env: BuildEnv, progress: Progress, provenance: dict[str, str]
    ) -> None:
        """A GGUF source as the F16 GGUF every scheme quantizes from, without a trip through transformers.

        llama.cpp's quantizer dequantizes and writes F16 (`allow_requantize`); it copies every metadata key
        of the source (tokenizer, pre-tokenizer, chat template, special tokens, RoPE settings) unchanged.
        """
        ensure_free_space(out_dir, 6 * source.stat().st_size)  # F16 of a 4-bit source, and its stamped copy
        raw = out_dir / "dequantized.gguf"
        cmd = [sys.executable, "-m", QUANTIZE_CHILD, str(source), str(raw), "F16", "0", "--allow-requantize"]
        with progress.task(f"convert  GGUF → GGUF F16 ({source.name}, llama_model_quantize)"):
            run_logged(cmd, out_dir / CONVERT_LOG, "convert")
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
        calibration: Sequence[int] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        source = converted / F16_FILE
        target = out_dir / ARTIFACT_FILE
        summary_in = tensor_summary(source)
        ensure_free_space(out_dir, int(summary_in["params"] * self.bytes_per_param[scheme]) + 2**20)
        fallbacks: Counter[str] = Counter()
        if scheme == "F16":
            shutil.copyfile(source, target)
        else:
            cmd = [sys.executable, "-m", QUANTIZE_CHILD, str(source), str(target), scheme, "0"]
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


def _small_files(folder: Path) -> list[Path]:
    """A checkpoint folder's config and tokenizer files (what a vocabulary-only conversion reads)."""
    suffixes = (".json", ".model", ".txt", ".tiktoken", ".jinja")
    return sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix in suffixes and not p.name.endswith(".index.json")
    )


def _vocab_only(script: Path, model: ModelInfo) -> str | None:
    """Why llama.cpp's converter refuses the checkpoint's architecture or tokenizer, or None."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edgekit-vocab-") as tmp:
        # Only the config and tokenizer files: the converter never sees (let alone unpickles) a weight file.
        small = Path(tmp) / "model"
        small.mkdir()
        for path in _small_files(model.location):
            shutil.copyfile(path, small / path.name)
        cmd = [sys.executable, str(script), str(small), "--vocab-only", "--outfile", f"{tmp}/vocab.gguf"]
        try:
            run_logged(cmd, Path(tmp) / "convert.log", "convert", env={"NO_LOCAL_GGUF": ""})
        except StageError as exc:
            lines = [line.strip() for line in exc.message.splitlines() if line.strip()]
            reason = next((line for line in reversed(lines) if "Error" in line or "not supported" in line), lines[-1])
            return f"llama.cpp's converter refuses {model.architecture}: {reason}"
    return None


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
