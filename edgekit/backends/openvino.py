"""OpenVINO IR backend (NNCF weight compression). Implementation pending (issue 5)."""

from __future__ import annotations

from typing import Any

from edgekit.backends.base import Backend


class OpenVINOBackend(Backend):
    name = "openvino"
    schemes = ("INT8", "INT4")
    extra = "openvino"
    required_modules = ("openvino", "nncf", "optimum.intel")

    def versions(self, env: Any) -> dict[str, str | None]:
        raise NotImplementedError

    def convert(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    def quantize(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def open_runner(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
