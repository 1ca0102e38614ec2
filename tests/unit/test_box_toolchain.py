"""The box toolchain's checks, without compiling: architectures, -march, the wheel's tag and machine code, and
finding the checkout edgekit's own wheel is built from. (The real cross-compiled wheel: tests/e2e/test_arm64_box.py.)"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from edgekit.errors import ToolchainError, UsageError
from edgekit.toolchain.box.arch import box_arch
from edgekit.toolchain.box.runtime import _source_tree
from edgekit.toolchain.box.wheel import _checked, cross_cmake_options

REPO = Path(__file__).resolve().parents[2]
ELF_HEADER = {"aarch64": b"\x7fELF\x02\x01\x01" + bytes(11) + (183).to_bytes(2, "little"),
              "x86_64": b"\x7fELF\x02\x01\x01" + bytes(11) + (62).to_bytes(2, "little")}  # fmt: skip


def test_architectures_and_march() -> None:
    arch = box_arch("arm64")
    assert arch.name == "aarch64" and arch.march(None) == "armv8-a"
    assert arch.march("armv8.2-a+dotprod+i8mm") == "armv8.2-a+dotprod+i8mm"
    with pytest.raises(UsageError, match="not an aarch64 architecture"):
        arch.march("native; rm -rf /")
    with pytest.raises(UsageError, match="no box runtime is built for 'riscv64'"):
        box_arch("riscv64")
    options = cross_cmake_options(arch, "armv8-a")
    assert options["CMAKE_CXX_COMPILER"] == "aarch64-linux-gnu-g++" and options["GGML_NATIVE"] == "OFF"
    assert options["GGML_OPENMP"] == "OFF" and options["GGML_CPU_ARM_ARCH"] == "armv8-a"
    assert "manylinux_2_17_aarch64" in arch.pip_platforms and "linux_aarch64" in arch.pip_platforms


@pytest.mark.parametrize(
    ("name", "library", "problem"),
    [
        ("llama_cpp_python-0.3.36-py3-none-linux_aarch64.whl", "aarch64", None),
        ("llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl", "aarch64", "is not tagged linux_aarch64"),
        ("llama_cpp_python-0.3.36-py3-none-linux_aarch64.whl", "x86_64", "are not aarch64 code: llama_cpp/lib/"),
    ],
)
def test_the_cross_compiled_wheel_must_be_tagged_and_built_for_the_box(
    tmp_path: Path, name: str, library: str, problem: str | None
) -> None:
    wheel = tmp_path / name
    with zipfile.ZipFile(wheel, "w") as zipped:
        zipped.writestr("llama_cpp/lib/libllama.so", ELF_HEADER[library] + bytes(100))
    if problem is None:
        assert _checked(wheel, box_arch("aarch64"), tmp_path) == wheel
    else:
        with pytest.raises(ToolchainError, match=problem):
            _checked(wheel, box_arch("aarch64"), tmp_path)


def test_the_checkout_is_found_behind_an_egg_info_in_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running from the checkout, setuptools' edgekit.egg-info (no direct_url.json) is found before the venv's."""
    egg = tmp_path / "edgekit.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: edgekit\nVersion: 0.1.0\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert _source_tree() == REPO  # the test suite runs from an editable install (scripts/install.sh)
