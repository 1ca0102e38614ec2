"""Shipping the real default bundle (SmolLM2-135M, three GGUF quantizations and OpenVINO INT8) to a box:
keygen → sign → verify → pack → install → status → rollback, with the box's trust policy in force for
`run`, `serve`, `bench`, `tune`, `run.sh` and the image build step; the systemd unit checked by
`systemd-analyze verify`.

Release 0 is the session's default build; release 1 is `--release 1` of the same recipe (every stage
reused: only the bundle is assembled). The box is a folder (`--root`) and its trust policy a folder of
public keys (EDGEKIT_TRUST_DIR). Faults and bad input: test_ship_faults.py (tiny model) and
tests/unit/test_ship_pack.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from edgekit.cli.common import load_schema, schema_version
from edgekit.manifest import verify_bundle
from edgekit.pipeline.build import BuildResult
from edgekit.ship.trust import TRUST_DIR_ENV
from tests.support.stage_cache import linked_copy

BIN = Path(sys.executable).parent


@dataclass
class Shipped:
    dir: Path
    env: dict[str, str]  # the box's trust policy: EDGEKIT_TRUST_DIR with fleet.pub
    bundles: dict[str, Path]
    packs: dict[str, dict[str, Any]] = field(default_factory=dict)  # `edgekit pack --json`
    box: Path = Path()
    steps: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def edgekit(self, *args: str, trusted: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(self.env if trusted else {})}
        if not trusted:
            env.pop(TRUST_DIR_ENV, None)
        return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True, text=True,
                              timeout=timeout, env=env)  # fmt: skip

    def step(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        self.steps[name] = proc = self.edgekit(*args)
        return proc


def _build_release(release: int, out: Path, cache: Path) -> Path:
    """`edgekit build --release N` of the default recipe in this process: every stage is reused, the bundle made."""
    from edgekit.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["edgekit", "build", "--release", str(release), "--out", str(out), "--cache-dir",
                                 str(cache)])  # fmt: skip
        try:
            main()
        except SystemExit as done:  # only on failure: a successful build returns
            raise AssertionError(f"edgekit build --release {release} exited {done.code}") from None
    return out / "smollm2-135m"


@pytest.fixture(scope="module")
def shipped(default_build: BuildResult, tmp_path_factory: pytest.TempPathFactory, stage_cache_root: Path) -> Shipped:
    root = tmp_path_factory.mktemp("ship")
    bundles = {
        "r0": linked_copy(default_build.bundle, root / "r0" / "smollm2-135m"),
        "r1": _build_release(1, root / "r1", stage_cache_root),
    }
    shipped = Shipped(root, {TRUST_DIR_ENV: str(root / "trusted-keys")}, bundles)
    shipped.step("keygen", "keygen", "--out", str(root / "keys"), "--name", "fleet")
    (root / "trusted-keys").mkdir()
    shutil.copy(root / "keys" / "fleet.pub", root / "trusted-keys" / "fleet.pub")
    for name, bundle in bundles.items():
        shipped.step(f"sign {name}", "sign", str(bundle), "--key", str(root / "keys" / "fleet.key"))
        shipped.step(f"verify {name}", "verify", str(bundle), "--key", str(root / "keys" / "fleet.pub"), "--json")
    shipped.step("pack r0", "pack", str(bundles["r0"]), "-o", str(root), "--json")
    shipped.step("pack r1", "pack", str(bundles["r1"]), "-o", str(root), "--zstd", "--json")
    shipped.packs = {n: json.loads(shipped.steps[f"pack {n}"].stdout) for n in ("r0", "r1")}
    shipped.box = root / "box"
    for name in ("r0", "r1"):
        shipped.step(f"install {name}", "install", shipped.packs[name]["path"], "--root", str(shipped.box), "--json")
    shipped.step("status", "status", "--root", str(shipped.box), "--json", "--verify")
    shipped.step("rollback", "rollback", "--root", str(shipped.box), "--json")
    shipped.step("status after rollback", "status", "--root", str(shipped.box))
    return shipped


def test_build_release_records_the_release_and_every_artifacts_smoke_record(shipped: Shipped) -> None:
    r0, r1 = (verify_bundle(shipped.bundles[n]) for n in ("r0", "r1"))
    assert (r0["release"], r1["release"]) == (0, 1)
    assert [a["smoke"] for a in r0["artifacts"]] == [a["smoke"] for a in r1["artifacts"]]  # cached, the same
    for artifact in r1["artifacts"]:
        assert len(artifact["smoke"]["prompts"]) == 3, artifact["name"]
        assert artifact["smoke"]["tolerance"]["source"].startswith("3 × the noise floor (bfloat16 reference")
    assert "edgekit.service" in {f["path"] for f in r1["files"]}


def _swapped(shipped: Shipped, artifact: str, other: str) -> Path:
    """Release 2 of the bundle with `artifact`'s model file replaced by `other`'s, the manifest saying so and
    the fleet's key signing it: what a build that bundled the wrong file would ship. Only the smoke test
    can tell."""
    swapped = shipped.dir / "swapped" / "smollm2-135m"
    shutil.copytree(shipped.bundles["r1"], swapped)
    (swapped / "model.sig").unlink()
    manifest = json.loads((swapped / "manifest.json").read_text())
    by_name = {a["name"]: a for a in manifest["artifacts"]}
    target, source = by_name[artifact], by_name[other]
    shutil.copyfile(swapped / source["path"], swapped / target["path"])
    for record in (target, *(f for f in manifest["files"] if f["path"] == target["path"])):
        record.update(sha256=source["sha256"], size=source["size"])
    manifest["release"] = 2
    (swapped / "manifest.json").write_text(json.dumps(manifest))
    assert shipped.edgekit("sign", str(swapped), "--key", str(shipped.dir / "keys" / "fleet.key")).returncode == 0
    return swapped


def test_a_bundle_carrying_another_quantization_fails_the_smoke_test_and_the_box_keeps_its_release(
    shipped: Shipped,
) -> None:
    def current() -> list[int]:
        status = json.loads(shipped.edgekit("status", "--root", str(shipped.box), "--json").stdout)
        return [s["release"] for s in status["slots"] if s["current"]]

    before = current()
    swapped = _swapped(shipped, "gguf-Q8_0", "gguf-Q4_K_M")
    pack = json.loads(shipped.edgekit("pack", str(swapped), "-o", str(shipped.dir / "swapped"), "--json").stdout)
    proc = shipped.edgekit("install", pack["path"], "--root", str(shipped.box))
    assert proc.returncode == 5, proc.stderr
    assert "gguf-Q8_0, log-probabilities of the recorded tokens" in proc.stderr, proc.stderr
    assert "gguf-Q4_K_M, log-probabilities" not in proc.stderr and "nothing was switched" in proc.stderr
    assert current() == before


def test_keygen_sign_and_verify_the_default_bundle(shipped: Shipped) -> None:
    for name in ("keygen", "sign r0", "sign r1", "verify r0", "verify r1"):
        assert shipped.steps[name].returncode == 0, f"{name}: {shipped.steps[name].stderr}"
    checked = json.loads(shipped.steps["verify r0"].stdout)
    assert checked["ok"] and checked["signature"]["key"].endswith("fleet.pub") and len(checked["files"]) > 20
    assert (shipped.dir / "keys" / "fleet.key").stat().st_mode & 0o077 == 0


def test_pack_names_the_file_by_release_and_the_bundle_packs_to_the_same_bytes(shipped: Shipped) -> None:
    r0, r1 = shipped.packs["r0"], shipped.packs["r1"]
    assert Path(r0["path"]).name == "smollm2-135m-0.edgekit" and Path(r1["path"]).name == "smollm2-135m-1.edgekit"
    assert r1["zstd"] and not r0["zstd"] and r0["files"] == len(verify_bundle(shipped.bundles["r0"])["files"]) + 2
    again = shipped.edgekit("pack", str(shipped.bundles["r0"]), "-o", str(shipped.dir / "again.edgekit"), "--json")
    assert json.loads(again.stdout)["sha256"] == r0["sha256"]
    (shipped.dir / "again.edgekit").unlink()


def test_install_twice_then_status_lists_both_slots_with_their_releases_and_state(shipped: Shipped) -> None:
    first, second = (json.loads(shipped.steps[f"install {n}"].stdout) for n in ("r0", "r1"))
    assert first["release"] == 0 and first["previous"] is None and first["pack_sha256"] == shipped.packs["r0"]["sha256"]
    assert second["release"] == 1 and second["previous"]["release"] == 0 and second["removed"] == []
    assert set(second["smoke"].values()) == {"match"} and len(second["smoke"]) == 4  # three GGUF and OpenVINO
    status = json.loads(shipped.steps["status"].stdout)
    by_release = {s["release"]: s for s in status["slots"]}
    assert by_release[1]["current"] and by_release[0]["previous"] and status["partial"] == []
    for slot in status["slots"]:
        assert slot["verification"]["state"] == "ok" and "fleet.pub" in slot["verification"]["checked"]
        assert slot["install"]["signed_by"].endswith("fleet.pub") and slot["verdicts"]["gguf-Q4_K_M"] == "pass"
    assert [h["action"] for h in status["history"]] == ["install", "install"]


def test_rollback_switches_back_to_the_previous_release(shipped: Shipped) -> None:
    rolled = json.loads(shipped.steps["rollback"].stdout)
    assert rolled["release"] == 0 and rolled["previous"]["release"] == 1
    assert os.readlink(shipped.box / "current") == rolled["slot"]
    human = shipped.steps["status after rollback"]
    assert human.returncode == 0 and "← current" in human.stdout and "(previous)" in human.stdout


@pytest.mark.parametrize(
    ("step", "schema"),
    [("pack r0", "pack"), ("pack r1", "pack"), ("install r0", "install"), ("install r1", "install"),
     ("status", "status"), ("rollback", "rollback")],
)  # fmt: skip
def test_each_ship_json_document_validates_against_its_schema(shipped: Shipped, step: str, schema: str) -> None:
    ran = shipped.steps[step]
    assert ran.returncode == 0, f"{step}: {ran.stderr}"
    document = json.loads(ran.stdout)
    jsonschema.validate(document, load_schema(schema))
    assert document["schema"] == f"edgekit.{schema}" and document["version"] == schema_version(schema)


def test_the_installed_unit_passes_systemd_analyze_verify(shipped: Shipped, tmp_path: Path) -> None:
    """The unit as a box runs it: its paths rewritten from /var/lib/edgekit to this test's install root."""
    systemd_analyze = shutil.which("systemd-analyze")
    assert systemd_analyze, "Debian's systemd package provides systemd-analyze (scripts/install.sh --dev)"
    unit = (shipped.box / "current" / "edgekit.service").read_text()
    assert "MemoryMax=" in unit and "DynamicUser=yes" in unit and "ProtectSystem=strict" in unit
    assert "ExecStartPre=/var/lib/edgekit/current/run.sh verify" in unit and "Restart=on-failure" in unit
    memory = int(unit.split("MemoryMax=")[1].split("M")[0])
    report = json.loads((shipped.box / "current" / "report.json").read_text())
    peak = max(report["bench"]["artifacts"]["gguf-Q4_K_M"]["peak_rss_mib_by_sequences"].values())
    assert memory >= 1.5 * peak and memory % 64 == 0
    (tmp_path / "edgekit.service").write_text(unit.replace("/var/lib/edgekit", str(shipped.box)))
    proc = subprocess.run([systemd_analyze, "verify", str(tmp_path / "edgekit.service")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stderr.strip() == "" and proc.stdout.strip() == "", proc.stderr


# --- the trust policy on run, serve, bench, tune, run.sh and the image ----------------------------------------


def _rewritten_manifest(shipped: Shipped) -> Path:
    """The signed release 0 with its manifest rewritten after signing (consistent with every file)."""
    bundle = linked_copy(shipped.bundles["r0"], shipped.dir / "rewritten" / "smollm2-135m")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["default_artifact"] = "gguf-Q8_0"
    (bundle / "manifest.json").unlink()  # a hard link: replace it, never write into it
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


def test_run_refuses_unsigned_and_rewritten_bundles_and_runs_a_signed_one(
    shipped: Shipped, default_build: BuildResult
) -> None:
    prompt = ["--prompt", "The capital of France is", "--max-tokens", "8"]
    unsigned = shipped.edgekit("run", str(default_build.bundle), *prompt)
    assert unsigned.returncode == 4 and "is not signed" in unsigned.stderr and "trust policy" in unsigned.stderr
    signed = shipped.edgekit("run", str(shipped.box / "current"), *prompt)
    assert signed.returncode == 0 and signed.stdout.strip(), signed.stderr
    rewritten = shipped.edgekit("run", str(_rewritten_manifest(shipped)), *prompt)
    assert rewritten.returncode == 4 and "is not what was signed: manifest.json differs" in " ".join(
        rewritten.stderr.split()
    )
    assert shipped.edgekit("run", str(default_build.bundle), *prompt, trusted=False).returncode == 0  # no policy


def test_serve_bench_and_tune_refuse_an_unsigned_bundle_and_serve_a_signed_one(
    shipped: Shipped, default_build: BuildResult
) -> None:
    for command in (["serve", "--port", "0"], ["bench", "--runs", "1"], ["tune", "--runs", "1"]):
        proc = shipped.edgekit(command[0], str(default_build.bundle), *command[1:], timeout=120)
        assert proc.returncode == 4 and "is not signed" in proc.stderr, f"{command}: {proc.stderr}"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, **shipped.env}
    proc = subprocess.Popen([sys.executable, "-m", "edgekit", "serve", str(shipped.box / "current"), "--port",
                             str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline, status = time.time() + 180, None
        while time.time() < deadline and status != 200:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code
            except httpx.HTTPError:
                time.sleep(0.2)
        assert status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_run_sh_and_the_image_build_step_enforce_the_policy(shipped: Shipped, default_build: BuildResult) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **shipped.env}
    prompt = ["run", "--prompt", "Hello", "--max-tokens", "4"]
    signed = subprocess.run(["sh", str(shipped.box / "current" / "run.sh"), *prompt], capture_output=True,
                            text=True, env=env, timeout=300)  # fmt: skip
    assert signed.returncode == 0, signed.stderr
    unsigned = subprocess.run(["sh", str(default_build.bundle / "run.sh"), *prompt], capture_output=True,
                              text=True, env=env, timeout=300)  # fmt: skip
    assert unsigned.returncode == 4 and "is not signed" in unsigned.stderr
    image = [sys.executable, "-m", "edgekit.runtime.image"]
    context = linked_copy(default_build.bundle, shipped.dir / "context")
    refused = subprocess.run([*image, str(context)], capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode == 4 and "is not signed" in refused.stderr
    context = linked_copy(shipped.bundles["r0"], shipped.dir / "signed-context")
    (context / "fleet.pub").write_bytes((shipped.dir / "keys" / "fleet.pub").read_bytes())  # a key in the context
    kept = subprocess.run([*image, str(context)], capture_output=True, text=True, env=env, timeout=300)
    assert kept.returncode == 0 and "model.sig" not in kept.stdout and "fleet.pub" in kept.stdout, kept.stderr
