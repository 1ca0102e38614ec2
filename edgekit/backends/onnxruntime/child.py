"""The ONNX Runtime backend's child-process work (see `edgekit.backends._child`).

    export:   HF checkpoint → optimum's ONNX export (text-generation-with-past: past key values in,
              present out), then `onnxruntime.quantization.quant_pre_process` (ONNX Runtime graph
              optimisation and symbolic shape inference, which the quantizer needs to see every MatMul).
    quantize: the preprocessed model → `quantize_dynamic` (int8 weights, activations quantized at
              run time), MatMuls listed by pattern or found to take outlier activations left in float.

Usage: python -m edgekit.backends.onnxruntime.child SPEC.json
"""

from __future__ import annotations

import fnmatch
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.backends.calibration import calibration_windows
from edgekit.backends.child import read_spec
from edgekit.sources.weights import CheckpointTensors

MODEL = "model.onnx"
EXTERNAL_DATA = "model.onnx_data"
EXTERNAL_ABOVE = 1_800_000_000  # protobuf's 2 GB limit, with room for the graph itself


def _fp32_bytes(checkpoint: Path) -> int:
    """The size of the FP32 ONNX export of `checkpoint`'s weights (optimum exports in FP32)."""
    return 4 * sum(t.numel for t in CheckpointTensors(checkpoint).tensors.values())


def export(spec: dict[str, Any]) -> None:
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from optimum.exporters.onnx import main_export

    checkpoint, out = Path(spec["checkpoint"]), Path(spec["out"])
    raw = out / "export"
    started = time.time()
    main_export(
        str(checkpoint),
        str(raw),
        task="text-generation-with-past",
        do_validation=False,
        local_files_only=True,
        library_name="transformers",
        # optimum's post-processing (dropping the duplicate of a tied embedding) serializes the whole model
        # as one protobuf, which fails above 2 GB ("Failed to serialize proto"): a larger export keeps both
        no_post_process=_fp32_bytes(checkpoint) > EXTERNAL_ABOVE,
    )
    print(f"exported in {time.time() - started:.1f} s", flush=True)
    started = time.time()
    external = sum(p.stat().st_size for p in raw.iterdir() if p.name.startswith("model.onnx")) > EXTERNAL_ABOVE
    quant_pre_process(
        str(raw / MODEL),
        str(out / MODEL),
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        external_data_location=EXTERNAL_DATA if external else None,
    )
    print(f"preprocessed (optimisation + shape inference) in {time.time() - started:.1f} s", flush=True)
    for path in raw.iterdir():
        if not path.name.startswith("model.onnx"):
            shutil.copyfile(path, out / path.name)
    shutil.rmtree(raw)


def outlier_ratios(model_path: Path, windows: list[np.ndarray], work: Path) -> dict[str, float]:
    """For each weight MatMul: its input's max |x| over the calibration tokens ÷ the median token's max |x|.

    Dynamic quantization gives a whole call one activation scale, set by its largest value; a high
    ratio means most tokens keep only a few of the 256 levels. Position 0 is left out: the engine
    prefills it on its own (its attention-sink activations never share a scale with other tokens).
    """
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(model_path), load_external_data=True)
    inits = {i.name for i in model.graph.initializer}
    matmuls = [n for n in model.graph.node if n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in inits]
    outputs = {o.name for o in model.graph.output}
    for node in matmuls:
        if node.input[0] not in outputs:
            model.graph.output.append(onnx.helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, None))
            outputs.add(node.input[0])
    augmented = work / "augmented.onnx"
    onnx.save(model, str(augmented), save_as_external_data=True, location="augmented.onnx_data")
    del model
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(augmented), options, providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    names = sorted({n.input[0] for n in matmuls})
    peak = dict.fromkeys(names, 0.0)
    per_token: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for window in windows:
        n = len(window)
        feed: dict[str, np.ndarray] = {"input_ids": window[None], "attention_mask": np.ones((1, n), dtype=np.int64)}
        if "position_ids" in inputs:
            feed["position_ids"] = np.arange(n, dtype=np.int64)[None]
        for name, info in inputs.items():
            if name.startswith("past_key_values."):
                feed[name] = np.zeros((1, info.shape[1], 0, info.shape[3]), dtype=np.float32)
        for name, value in zip(names, session.run(names, feed), strict=True):
            token_max = np.abs(value.reshape(-1, n, value.shape[-1])[:, 1:]).max(-1).ravel()
            peak[name] = max(peak[name], float(token_max.max()))
            per_token[name].append(token_max)
    del session
    augmented.unlink()
    (work / "augmented.onnx_data").unlink(missing_ok=True)
    ratios = {}
    for node in matmuls:
        median = float(np.median(np.concatenate(per_token[node.input[0]])))
        ratios[node.name] = peak[node.input[0]] / median if median > 0 else float("inf")
    return ratios


def quantize(spec: dict[str, Any]) -> None:
    import json

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    converted, out = Path(spec["converted"]), Path(spec["out"])
    source = converted / MODEL
    graph = onnx.load(str(source), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    matmuls = [n.name for n in graph.node if n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in inits]
    excluded: dict[str, str] = {}
    for pattern in spec["keep_float"]:
        for name in fnmatch.filter(matmuls, pattern):
            excluded.setdefault(name, f"keep_float {pattern!r}")
    if spec.get("calibration_file"):
        ratios = outlier_ratios(source, calibration_windows(spec), out.parent)
        for name, ratio in sorted(ratios.items(), key=lambda kv: -kv[1]):
            if ratio > spec["outlier_ratio"]:
                excluded.setdefault(name, f"outlier ratio {ratio:.1f}")
        top = sorted(ratios.items(), key=lambda kv: -kv[1])[:10]
        (out.parent / "outliers.json").write_text(json.dumps({"ratios": ratios, "top": top}, indent=1))
    external = (converted / EXTERNAL_DATA).exists()
    started = time.time()
    quantize_dynamic(
        str(source),
        str(out / MODEL),
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul", "Gather"] if spec["quantize_embedding"] else ["MatMul"],
        per_channel=spec["per_channel"],
        reduce_range=spec["reduce_range"],
        nodes_to_exclude=sorted(excluded),
        use_external_data_format=external,
    )
    print(f"quantized in {time.time() - started:.1f} s; {len(excluded)} MatMuls left in float", flush=True)
    model = onnx.load(str(out / MODEL), load_external_data=False)
    for key, value in {**spec["provenance"], "edgekit.quantization": json.dumps(spec["summary"])}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.save(model, str(out / MODEL))
    (out.parent / "excluded.json").write_text(json.dumps(excluded, indent=1))


def main(argv: list[str]) -> int:
    spec = read_spec(argv)
    {"export": export, "quantize": quantize}[spec["task"]](spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
