"""Ray is an extra (`edgekit[cluster]`): with it unimportable, every module imports, the cluster's unit tests
pass, and `--cluster` / `edgekit agent` say how to install it (exit 3) instead of failing with a traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HIDE_RAY = textwrap.dedent(
    """
    import importlib.abc, sys

    class HideRay(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "ray" or name.startswith("ray."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, HideRay())
    """
)


def run_without_ray(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", HIDE_RAY + textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_every_module_and_the_cluster_unit_tests_work_without_ray() -> None:
    done = run_without_ray(
        """
        import importlib, pkgutil, pytest, edgekit
        for module in pkgutil.walk_packages(edgekit.__path__, "edgekit."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
        assert "ray" not in sys.modules
        # (its test of a CLI subprocess is left out: a child process would import the real Ray)
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/unit/test_cluster_parts.py",
                              "-k", "not nobody_listens"]))
        """
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout


def test_cluster_commands_say_how_to_install_ray() -> None:
    for args in (
        ["build", "--cluster", "auto"],
        ["agent", "--box", "gw", "--address", "h:6379", "--bandwidth-mib", "0"],
    ):
        done = run_without_ray(f"from edgekit.cli import main\nsys.argv = ['edgekit', *{args!r}]\nmain()\n")
        assert done.returncode == 3, done.stderr[-2000:]
        assert "pip install 'edgekit[cluster]'" in done.stderr and "Traceback" not in done.stderr
