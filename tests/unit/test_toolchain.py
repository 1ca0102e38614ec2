from __future__ import annotations

import io
import tarfile
from pathlib import Path

from edgekit.toolchain import _commit_from_changelog, _extract_converter

CHANGELOG = """# Changelog
## [Unreleased]
## [0.3.36]
- feat: update llama.cpp to ggml-org/llama.cpp@0c1e57098
## [0.3.35]
- feat: update llama.cpp to ggml-org/llama.cpp@4df29be4f
"""


def test_commit_comes_from_the_matching_changelog_section() -> None:
    assert _commit_from_changelog(CHANGELOG, "0.3.36") == "0c1e57098"
    assert _commit_from_changelog(CHANGELOG, "0.3.35") == "4df29be4f"
    assert _commit_from_changelog(CHANGELOG, "9.9.9") is None


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
