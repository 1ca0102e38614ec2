"""ONNX Runtime backend (dynamic INT8). Implementation pending (issue 5)."""

from __future__ import annotations

from typing import Any

from edgekit.backends.base import Backend


class ONNXRuntimeBackend(Backend):
    name = "onnxruntime"
    schemes = ("INT8",)
    extra = "onnx"
    required_modules = ("onnxruntime", "onnx", "optimum.onnxruntime")

    def versions(self, env: Any) -> dict[str, str | None]:
        raise NotImplementedError

    def convert(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    def quantize(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def open_runner(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
