"""llama.cpp GGUF backend.

convert:  HF checkpoint → GGUF F16 with llama.cpp's own convert_hf_to_gguf.py (same llama.cpp
          version as the installed llama-cpp-python), stamped with provenance metadata.
quantize: F16 → Q4_K_M / Q5_K_M / Q6_K / Q8_0, or Q4_0 / IQ4_NL (the formats llama.cpp repacks at load time
          for ARM's NEON, i8mm and SVE kernels, and AVX2 on x86), with llama_model_quantize from the bindings, or with
          the `llama-quantize` binary when the target pulls a lever (importance matrix, per-tensor
          types; see `quantize_needs`). The tensor types actually written are read back, because K-quants
          silently fall back to other types on rows that are not a multiple of 256.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from edgekit._util.fsutil import ensure_free_space
from edgekit._util.hashing import sha256_file
from edgekit._util.versions import dist_version
from edgekit.backends.base import BuildBackend, BuildEnv, ModelInfo, QuantizeInputs, QuantizeNeeds, SensitivityProbe
from edgekit.backends.child import run_logged
from edgekit.backends.gguf import llama_tools
from edgekit.backends.gguf.counting import QUANTIZED_TENSOR, converted_mib
from edgekit.backends.gguf.gates import DEFAULT_GATES
from edgekit.backends.gguf.info import metadata, tensor_summary
from edgekit.backends.gguf.options import GGUFOptions, option_problems
from edgekit.errors import RecipeProblem, StageError, UsageError
from edgekit.observe.progress import Progress
from edgekit.observe.tally import RunningCount, growth
from edgekit.signoff.gates import Gates
from edgekit.store.memo import remembered

F16_FILE = "model-f16.gguf"
ARTIFACT_FILE = "model.gguf"
CONVERT_LOG = "convert.log"
QUANTIZE_LOG = "quantize.log"
IMATRIX_SPARE_TOKENS = 64  # the range's text, tokenized again by llama-imatrix, may come out a little shorter
QUANTIZE_CHILD = "edgekit.backends.gguf.quantize_child"
FALLBACK = re.compile(r"required for type\s+(\w+)\)\s*->\s*falling back to\s+(\w+)")


class GGUFBuild(BuildBackend[GGUFOptions]):
    name = "gguf"
    converts_gguf = True
    schemes = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16", "Q4_0", "IQ4_NL")
    extra = "gguf"
    required_modules = ("llama_cpp", "gguf", "torch", "transformers")
    options_model = GGUFOptions
    default_scheme_gates: ClassVar[dict[str, Gates]] = DEFAULT_GATES
    default_ladder: ClassVar[tuple[tuple[str, dict[str, Any]], ...]] = (
        ("Q4_K_M", {}), ("Q4_K_M", {"imatrix": True}), ("Q5_K_M", {}), ("Q6_K", {}), ("Q8_0", {}),
    )  # fmt: skip
    # Approximate bytes per parameter of each scheme, for the disk-space checks before writing.
    bytes_per_param: ClassVar[dict[str, float]] = {"convert": 2.0, "F16": 2.0, "Q8_0": 1.07, "Q6_K": 0.83,
                                                   "Q5_K_M": 0.72, "Q4_K_M": 0.62, "Q4_0": 0.6,
                                                   "IQ4_NL": 0.6}  # fmt: skip

    def check_target(self, scheme: str, options: GGUFOptions) -> list[RecipeProblem]:
        return option_problems(scheme, options)

    def needs_calibration(self, scheme: str, options: GGUFOptions) -> bool:
        """An importance matrix reads calibration text (`llama-imatrix`, a stage before quantizing)."""
        return options.imatrix and scheme != "F16"

    def calibration_tokens(self, scheme: str, options: GGUFOptions) -> int:
        """The matrix's windows, and a few tokens to spare: llama.cpp tokenizes the text of the range again."""
        if not self.needs_calibration(scheme, options):
            return 0
        return options.imatrix_chunks * options.imatrix_context + IMATRIX_SPARE_TOKENS

    def quantize_needs(self, scheme: str, options: GGUFOptions) -> QuantizeNeeds[GGUFOptions]:
        """The importance matrix to compute first, llama.cpp's tools (built?), the twin without the matrix."""
        from edgekit.toolchain import llama_tool, tools_identity

        if not options.uses_tools or scheme == "F16":
            tools = None
        else:
            llama_tool("llama-quantize")  # missing: ToolchainError (exit 3) with the fix, before any work
            tools = tools_identity()
        if options.imatrix:
            llama_tool("llama-imatrix")
        plain = GGUFOptions.model_validate(options.model_dump(exclude={"imatrix", "imatrix_chunks", "imatrix_context"}))
        return QuantizeNeeds(
            imatrix=(options.imatrix_chunks, options.imatrix_context) if options.imatrix else None,
            tools=tools,
            without={"imatrix": plain} if options.imatrix else {},
            sensitivity=(options.sensitivity_windows, options.sensitivity_budget_seconds)
            if options.sensitivity
            else None,
        )

    def measure_sensitivity(
        self, artifact: Path, base: Path, measure: SensitivityProbe, out_dir: Path
    ) -> dict[str, Any]:
        from edgekit.backends.gguf.sensitivity import layer_sensitivity

        return layer_sensitivity(artifact, base, measure, out_dir)

    def check_model(self, scheme: str, options: GGUFOptions, model: ModelInfo, env: BuildEnv) -> list[RecipeProblem]:
        if not options.tensor_overrides:
            return []
        from edgekit.toolchain import get_converter

        if model.kind == "gguf":  # the header says: fast, and nothing to remember (bad input writes nothing)
            names: list[str] | None = llama_tools.gguf_tensor_names(model.location)
        else:
            converter = get_converter(env.llama_cpp_dir)
            inputs = llama_tools.memo_inputs(model.kind, model.location, converter.identity())

            def compute() -> list[str] | None:
                return llama_tools.tensor_names(model.kind, model.location, converter.script)

            def keep(found: list[str] | None) -> bool:  # remembered only when the recipe is good
                return found is not None and bool(found) and not llama_tools.override_problems(options, found)

            names = remembered(env.cache_root, "tensor-names", inputs, compute, keep)
        return [] if names is None else llama_tools.override_problems(options, names)

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
        self, checkpoint: Path, out_dir: Path, env: BuildEnv, progress: Progress, provenance: dict[str, str]
    ) -> None:
        from edgekit.toolchain import get_converter

        converter = get_converter(env.llama_cpp_dir)
        weights = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
        ensure_free_space(out_dir, 3 * weights)  # raw F16 + stamped copy, F32 checkpoints shrink
        raw = out_dir / "converter-output.gguf"
        cmd = [
            sys.executable, str(converter.script), str(checkpoint),
            "--outfile", str(raw), "--outtype", "f16", "--model-name", provenance.get("name", "model"),
        ]  # fmt: skip
        mib = converted_mib(checkpoint)
        label = "convert  HF → GGUF F16 (llama.cpp convert_hf_to_gguf.py)"
        with progress.task(label, total=mib, unit="MiB") as t, growth(raw, t, mib):
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
        label = f"convert  GGUF → GGUF F16 ({source.name}, llama_model_quantize)"
        with progress.task(label, total=tensor_summary(source)["tensor_count"], unit="tensors") as t:
            run_logged(cmd, out_dir / CONVERT_LOG, "convert", on_line=RunningCount(t, QUANTIZED_TENSOR))
        with progress.task("convert  stamp provenance metadata"):
            stamp_metadata(raw, out_dir / F16_FILE, provenance)
        raw.unlink()

    def quantize(self, inputs: QuantizeInputs[GGUFOptions]) -> tuple[str, dict[str, Any]]:
        scheme, options, out_dir, imatrix = inputs.scheme, inputs.options, inputs.out_dir, inputs.imatrix
        source = inputs.converted / F16_FILE
        target = out_dir / ARTIFACT_FILE
        summary_in = tensor_summary(source)
        ensure_free_space(out_dir, int(summary_in["params"] * self.bytes_per_param[scheme]) + 2**20)
        fallbacks: Counter[str] = Counter()
        if scheme == "F16":
            shutil.copyfile(source, target)
        elif options.uses_tools:
            if problems := llama_tools.override_problems(options, llama_tools.gguf_tensor_names(source)):
                raise UsageError("; ".join(f"{p.key}: {p.problem}" for p in problems), "fix the target's options")
            stamp = {"edgekit.imatrix.sha256": sha256_file(imatrix)} if imatrix is not None else {}
            label = f"quantize  GGUF {scheme} (llama-quantize{' --imatrix' if imatrix else ''})"
            with inputs.progress.task(label, total=summary_in["tensor_count"], unit="tensors") as t:
                counted = RunningCount(t, QUANTIZED_TENSOR)
                log = llama_tools.quantize_with_tool(source, target, scheme, options, imatrix, out_dir / QUANTIZE_LOG,
                                                     inputs.env.threads, stamp, counted)  # fmt: skip
            fallbacks.update(f"{a.upper()}→{b.upper()}" for a, b in FALLBACK.findall(log))
        else:
            cmd = [sys.executable, "-m", QUANTIZE_CHILD, str(source), str(target), scheme, "0"]
            label = f"quantize  GGUF {scheme} (llama_model_quantize)"
            with inputs.progress.task(label, total=summary_in["tensor_count"], unit="tensors") as t:
                log = run_logged(cmd, out_dir / QUANTIZE_LOG, f"quantize {scheme}",
                                 on_line=RunningCount(t, QUANTIZED_TENSOR))  # fmt: skip
            fallbacks.update(f"{a.upper()}→{b.upper()}" for a, b in FALLBACK.findall(log))
        summary = tensor_summary(target)
        details: dict[str, Any] = {
            "format": "gguf",
            "file_type": summary["file_type"],
            "tensor_types": summary["tensor_types"],
            "bits_per_weight": summary["bits_per_weight"],
            "params": summary["params"],
            "bytes_per_token": summary["bytes_per_token"],
            "tied_embeddings": summary["tied_embeddings"],
            "fallbacks": dict(fallbacks),
            **lever_details(options, target),
        }
        if fallbacks:
            details["note"] = (
                f"{sum(fallbacks.values())} tensors fell back from K-quants ({', '.join(sorted(fallbacks))}) "
                "because their rows are not a multiple of 256; the file type still says "
                f"{scheme}, the tensor types above are what was written"
            )
        return ARTIFACT_FILE, details


def lever_details(options: GGUFOptions, artifact: Path) -> dict[str, Any]:
    """The levers as the artifact records them: overrides asked for, and the importance matrix llama-quantize wrote."""
    found: dict[str, Any] = {}
    given = {"output_tensor_type": options.output_tensor_type, "token_embedding_type": options.token_embedding_type}
    asked: dict[str, Any] = {k: v for k, v in given.items() if v}
    if options.tensor_overrides:
        asked["tensor_overrides"] = [o.model_dump() for o in options.tensor_overrides]
    if asked:
        found["tensor_type_overrides"] = asked
    if options.imatrix:
        found["imatrix"] = metadata(artifact, ("quantize.imatrix", "edgekit.imatrix"))
    return found


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
