from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from edgekit.cli.errors import hint
from edgekit.errors import ToolchainError
from edgekit.observe.progress import SilentProgress
from edgekit.toolchain import TOOL_SETS, build_tools, llama_tool, tools_dir, tools_identity
from edgekit.toolchain.converter import _extract_converter
from edgekit.toolchain.sdist import commit_from_changelog
from edgekit.toolchain.tools import _wheel_linkage, wheel_build

CHANGELOG = """# Changelog
## [Unreleased]
## [0.3.36]
- feat: update llama.cpp to ggml-org/llama.cpp@0c1e57098
## [0.3.35]
- feat: update llama.cpp to ggml-org/llama.cpp@4df29be4f
"""


def test_commit_comes_from_the_matching_changelog_section() -> None:
    assert commit_from_changelog(CHANGELOG, "0.3.36") == "0c1e57098"
    assert commit_from_changelog(CHANGELOG, "0.3.35") == "4df29be4f"
    assert commit_from_changelog(CHANGELOG, "9.9.9") is None


def test_only_the_converter_files_are_extracted(tmp_path: Path) -> None:
    archive = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in {
            "llama_cpp_python-0.3.36/CHANGELOG.md": CHANGELOG,
            "llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py": "print('hi')",
            "llama_cpp_python-0.3.36/vendor/llama.cpp/conversion/llama.py": "x = 1",
            "llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py/gguf/__init__.py": "",
            "llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama.cpp": "int main(){}",
            "llama_cpp_python-0.3.36/llama_cpp/__init__.py": "",
        }.items():
            blob = data.encode()
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    changelog = _extract_converter(archive, tmp_path / "out")
    found = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert found == ["conversion/llama.py", "convert_hf_to_gguf.py", "gguf-py/gguf/__init__.py"]
    assert "0c1e57098" in changelog


def test_a_missing_tool_says_how_to_build_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEKIT_TOOLCHAIN", str(tmp_path))
    with pytest.raises(ToolchainError) as caught:
        llama_tool("llama-bench")
    assert "llama-bench is not built" in caught.value.message and "edgekit toolchain --tools" in hint(caught.value)
    with pytest.raises(ToolchainError) as caught:
        llama_tool("llama-server")
    assert "edgekit toolchain --server" in hint(caught.value)
    with pytest.raises(ValueError, match=r"not one of the llama\.cpp tools"):
        llama_tool("llama-cli")


def test_tool_sets_are_data_and_name_each_tool_once() -> None:
    tools = [t for s in TOOL_SETS.values() for t in s.targets]
    assert len(tools) == len(set(tools))
    assert {"llama-quantize", "llama-imatrix", "llama-perplexity", "llama-bench"} <= set(TOOL_SETS["tools"].targets)
    assert TOOL_SETS["server"].targets == ("llama-server",)
    assert ("LLAMA_BUILD_SERVER", "ON") in TOOL_SETS["server"].cmake and TOOL_SETS["server"].flag == "--server"


def test_a_built_tool_is_found_and_nothing_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEKIT_TOOLCHAIN", str(tmp_path))
    folder = tools_dir("tools")
    folder.mkdir(parents=True)
    (folder / "llama-quantize").write_text("")
    info = {"format": 1, "linkage": "x", "build_seconds": 1.0, "wheel_build": wheel_build()}
    (folder / "BUILD.json").write_text(json.dumps(info))
    assert llama_tool("llama-quantize") == folder / "llama-quantize"
    assert build_tools(["tools"], SilentProgress()) == [folder]  # already built: no download, no cmake
    assert tools_identity()["linkage"] == "x"


def test_tools_linked_against_another_build_of_the_wheel_are_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGEKIT_TOOLCHAIN", str(tmp_path))
    folder = tools_dir("tools")
    folder.mkdir(parents=True)
    (folder / "llama-quantize").write_text("")
    info = {"format": 1, "linkage": "x", "build_seconds": 1.0, "wheel_build": "another-build"}
    (folder / "BUILD.json").write_text(json.dumps(info))
    with pytest.raises(ToolchainError) as refused:
        llama_tool("llama-quantize")
    assert "another build of llama-cpp-python" in str(refused.value)
    assert "edgekit toolchain --tools" in str(refused.value.hint)


def test_wheel_linkage_names_the_wheels_libraries(tmp_path: Path) -> None:
    linkage = _wheel_linkage(tmp_path / "src", tmp_path / "cmake")
    assert linkage is not None, "the llama-cpp-python wheel has shared libraries in llama_cpp/lib"
    assert {p.name for p in linkage.libraries} == {"libllama.so.0", "libggml.so.0", "libggml-base.so.0",
                                                   "libggml-cpu.so.0"}  # fmt: skip
    options = dict(linkage.cmake)
    assert options["LLAMA_USE_SYSTEM_GGML"] == "ON" and (tmp_path / "cmake" / "ggml-config.cmake").is_file()
    hook = (tmp_path / "cmake" / "llama-hook.cmake").read_text()
    assert "add_library(llama SHARED IMPORTED GLOBAL)" in hook and "libllama.so" in hook
