"""The OpenVINO backend's child-process work (see `edgekit.backends._child`).

    export:   HF checkpoint → stateful FP16 IR with optimum-intel (`OVModelForCausalLM`,
              export=True, task text-generation-with-past), provenance in the IR's rt_info, and the
              tokenizer → openvino_tokenizer.xml / openvino_detokenizer.xml with openvino-tokenizers.
    compress: FP16 IR → NNCF `compress_weights` (INT8_ASYM/SYM, INT4_ASYM/SYM with group size,
              ratio, AWQ, scale estimation), data-aware ones calibrated on token windows.

Usage: python -m edgekit.backends.openvino.child SPEC.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.backends.calibration import calibration_windows
from edgekit.backends.child import read_spec

MODEL_XML = "openvino_model.xml"


def export(spec: dict[str, Any]) -> None:
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from optimum.intel import OVModelForCausalLM
    from transformers import AutoTokenizer

    checkpoint, out = Path(spec["checkpoint"]), Path(spec["out"])
    started = time.time()
    model = OVModelForCausalLM.from_pretrained(
        checkpoint,
        export=True,  # explicit: offline, a local path is otherwise mistaken for a Hub id
        task="text-generation-with-past",
        load_in_8bit=False,  # FP16 weights: every scheme is compressed from this one export
        compile=False,
        local_files_only=True,
    )
    for key, value in spec["provenance"].items():
        model.model.set_rt_info(str(value), ["edgekit", key.replace(".", "_")])
    model.save_pretrained(out)
    print(f"exported the IR in {time.time() - started:.1f} s", flush=True)
    hf_tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    # No special tokens added (the engine's contract: BOS is the caller's choice), special tokens
    # skipped when decoding, and raw bytes out (a token may end inside a UTF-8 character).
    tokenizer, detokenizer = convert_tokenizer(
        hf_tokenizer,
        with_detokenizer=True,
        add_special_tokens=False,
        skip_special_tokens=True,
        utf8_replace_mode="disable",
    )
    ov.save_model(tokenizer, out / "openvino_tokenizer.xml")
    ov.save_model(detokenizer, out / "openvino_detokenizer.xml")
    print("converted the tokenizer with openvino-tokenizers", flush=True)


def _calibration(spec: dict[str, Any]) -> Any:
    """The plan's calibration token ids as `samples` windows, each a fresh sequence."""
    import nncf
    from nncf.definitions import NNCF_DATASET_RESET_STATE_KEY

    length = spec["calibration_tokens"]
    items = [
        {
            "input_ids": window[None],
            "attention_mask": np.ones((1, length), dtype=np.int64),
            "position_ids": np.arange(length, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, dtype=np.int32),
            NNCF_DATASET_RESET_STATE_KEY: True,  # each window starts from an empty KV state
        }
        for window in calibration_windows(spec)
    ]
    return nncf.Dataset(items)


def compress(spec: dict[str, Any]) -> None:
    import nncf
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

    converted, out = Path(spec["converted"]), Path(spec["out"])
    model = ov.Core().read_model(converted / MODEL_XML)
    kwargs: dict[str, Any] = {"mode": getattr(nncf.CompressWeightsMode, spec["mode"])}
    if spec["mode"].startswith("INT4"):
        kwargs.update(
            group_size=spec["group_size"],
            ratio=spec["ratio"],
            awq=spec["awq"],
            scale_estimation=spec["scale_estimation"],
            advanced_parameters=AdvancedCompressionParameters(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST),
        )
        if spec.get("calibration_file"):
            kwargs["dataset"] = _calibration(spec)
            kwargs["subset_size"] = spec["calibration_samples"]
    started = time.time()
    compressed = nncf.compress_weights(model, **kwargs)
    print(f"compressed in {time.time() - started:.1f} s", flush=True)
    # As optimum-intel does after compressing: the FP export pins the KV cache to f16 in rt_info;
    # a compressed model leaves it to the plugin (u8 on CPU).
    if compressed.has_rt_info(["runtime_options", "KV_CACHE_PRECISION"]):
        options = compressed.get_rt_info("runtime_options").value
        if str(options.get("KV_CACHE_PRECISION")) == "f16":
            options.pop("KV_CACHE_PRECISION")
            compressed.set_rt_info(options, "runtime_options")
    compressed.set_rt_info(nncf.__version__, ["edgekit", "nncf_version"])
    ov.save_model(compressed, out / MODEL_XML, compress_to_fp16=False)


def main(argv: list[str]) -> int:
    spec = read_spec(argv)
    {"export": export, "compress": compress}[spec["task"]](spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
