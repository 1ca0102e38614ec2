"""llama.cpp's converter and command-line tools, of the same llama.cpp commit as the installed runtime.

Both come from the source package of the installed llama-cpp-python release (`sdist`), cached once per
version in the toolchain folder (`toolchain_root()`), never copied into this repository: the converter
(`get_converter`) is fetched on first use; the tools (`llama_tool`) are built by `edgekit toolchain --tools`.
"""

from edgekit.toolchain.converter import CONVERTER_SCRIPT, Converter, cached_converter, get_converter
from edgekit.toolchain.sdist import llama_cpp_python_version, toolchain_root
from edgekit.toolchain.tools import (
    TOOL_SETS,
    ToolSet,
    build_tools,
    llama_tool,
    tools_dir,
    tools_identity,
    tools_info,
)

__all__ = [
    "CONVERTER_SCRIPT",
    "TOOL_SETS",
    "Converter",
    "ToolSet",
    "build_tools",
    "cached_converter",
    "get_converter",
    "llama_cpp_python_version",
    "llama_tool",
    "toolchain_root",
    "tools_dir",
    "tools_identity",
    "tools_info",
]
