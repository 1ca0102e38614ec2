"""The runtime for a box of another CPU architecture: llama-cpp-python cross-compiled, and every wheel it needs."""

from edgekit.toolchain.box.arch import ARCHES, PYTHON, BoxArch, box_arch
from edgekit.toolchain.box.runtime import RUNTIME_JSON, BoxRuntime, box_runtime
from edgekit.toolchain.box.wheel import llama_wheel

__all__ = ["ARCHES", "PYTHON", "RUNTIME_JSON", "BoxArch", "BoxRuntime", "box_arch", "box_runtime", "llama_wheel"]
