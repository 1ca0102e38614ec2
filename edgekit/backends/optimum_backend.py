"""What the OpenVINO and ONNX Runtime build sides share: optimum exports the checkpoint in a child process
(`export_in_child`), the backend's quantizer compresses that export in another (`quantize_in_child`), and
the artifact is a folder: the model, its tokenizer and the Hugging Face side files the engine reads.

Both need transformers to know the model type (the default `unsupported`) and optimum's exporter to export
it as a decoder with past key values.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

from edgekit._util.fsutil import ensure_free_space
from edgekit.backends.base import BuildBackend, BuildEnv, ModelInfo, OptionsT, QuantizeInputs
from edgekit.backends.calibration import add_calibration, remove_calibration
from edgekit.backends.child import run_child
from edgekit.backends.support import exporter_reason
from edgekit.observe.progress import Progress

ARTIFACT_DIR = "model"
CONVERT_LOG = "convert.log"
QUANTIZE_LOG = "quantize.log"


class OptimumBuild(BuildBackend[OptionsT]):
    exporter: ClassVar[str]  # optimum's exporter: "openvino" or "onnx"
    child: ClassVar[str]  # the module run as `python -m child SPEC.json` to export and to quantize
    checkpoint_files: ClassVar[tuple[str, ...]]  # side files copied from the checkpoint into the export
    artifact_files: ClassVar[tuple[str, ...]]  # files copied from the export into the artifact folder

    def unsupported(self, model: ModelInfo, env: BuildEnv) -> str | None:
        """transformers must know the model type (the default), and optimum's exporter must export it."""
        why = super().unsupported(model, env)
        if why is not None or model.model_type is None:
            return why
        return exporter_reason(model.model_type, self.exporter, env.cache_root)

    def export_in_child(self, checkpoint: Path, out_dir: Path, env: BuildEnv, progress: Progress, label: str,
                        free_bytes: int, spec: dict[str, Any]) -> None:  # fmt: skip
        """The child's export of `checkpoint` into `out_dir` (`spec`: what it takes besides the folders), then
        the side files the export did not write."""
        ensure_free_space(out_dir, free_bytes)
        spec = {"task": "export", "checkpoint": str(checkpoint), "out": str(out_dir), **spec}
        with progress.task(label):
            run_child(self.child, spec, out_dir / CONVERT_LOG, f"convert {self.name}", env.threads)
        for name in self.checkpoint_files:
            if (checkpoint / name).is_file() and not (out_dir / name).exists():
                shutil.copyfile(checkpoint / name, out_dir / name)

    def quantize_in_child(
        self, inputs: QuantizeInputs[OptionsT], label: str, free_bytes: int, spec: dict[str, Any],
        calibrate: tuple[int, int, str] | None,
    ) -> tuple[Path, str, dict[str, Any] | None]:  # fmt: skip
        """The child's quantization of the export into the artifact folder (`spec`: its task and options), with
        `calibrate` = (windows, tokens per window, what reads them) when it is data-aware; then the files the
        artifact carries. Returns the artifact folder, the child's log and the calibration record."""
        out_dir = inputs.out_dir
        artifact = out_dir / ARTIFACT_DIR
        artifact.mkdir()
        ensure_free_space(out_dir, free_bytes)
        spec = {"converted": str(inputs.converted), "out": str(artifact), **spec}
        record = None
        if calibrate is not None:
            record = add_calibration(spec, out_dir, inputs.calibration, *calibrate)
        with inputs.progress.task(label):
            try:
                log = run_child(self.child, spec, out_dir / QUANTIZE_LOG, f"quantize {self.name} {inputs.scheme}",
                                inputs.env.threads)  # fmt: skip
            finally:
                remove_calibration(out_dir)
        for name in self.artifact_files:
            if (inputs.converted / name).is_file():
                shutil.copyfile(inputs.converted / name, artifact / name)
        return artifact, log, record
