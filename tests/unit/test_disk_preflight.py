"""The build checks free disk for every stage's outputs before the first stage: a build that cannot finish stops
with exit 3 and the numbers, and writes nothing."""

from __future__ import annotations

from pathlib import Path

from edgekit.backends.catalog import build_backend
from edgekit.plan.disk import _safetensors_parameters
from tests.support.cli_in_process import run_cli

# About 4.4 trillion weights: no disk here takes its FP16 checkpoint, let alone the GGUF conversions.
HUGE = "synthetic://llama?hidden=32768&layers=256&heads=256&intermediate=131072"
RECIPE = """
[model]
source = "{source}"

[[targets]]
backend = "gguf"
scheme = "Q8_0"

[validation]
enabled = false

[bench]
enabled = false

[bundle]
name = "huge"
"""


def test_a_build_the_disk_cannot_take_stops_before_its_first_stage(tmp_path: Path) -> None:
    (tmp_path / "recipe.toml").write_text(RECIPE.format(source=HUGE))
    cache, out = tmp_path / "cache", tmp_path / "out"
    done = run_cli("build", str(tmp_path / "recipe.toml"), "--cache-dir", str(cache), "--out", str(out))
    assert done.returncode == 3, done.stderr
    for says in ("not enough disk space", "fetch", "convert gguf", "quantize gguf-Q8_0", "bundle", "GiB",
                 "nothing was written"):  # fmt: skip
        assert says in done.stderr, (says, done.stderr)
    assert not (cache / "fetch").exists() and not (cache / "convert").exists() and not out.exists()


def test_the_estimates_come_from_the_headers_and_each_backends_bytes_per_weight(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"a": np.zeros((3, 5), np.float16), "b": np.zeros(7, np.float32)}, str(tmp_path / "m.safetensors"))
    assert _safetensors_parameters(tmp_path) == 22
    gguf = build_backend("gguf")
    assert gguf.disk_bytes(None, 10**9) == 2 * 10**9  # the F16 conversion
    assert gguf.disk_bytes("Q4_K_M", 10**9) < gguf.disk_bytes("Q8_0", 10**9) < gguf.disk_bytes("F16", 10**9)
    assert build_backend("onnxruntime").disk_bytes(None, 10**9) == 4 * 10**9  # an FP32 export
