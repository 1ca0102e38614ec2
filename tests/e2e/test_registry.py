"""Shipping the real default bundle through a real OCI registry (Debian's docker-registry on loopback):
push → install with TLS and htpasswd users, `oras` reading what edgekit wrote, a runtime.toml-only release
that transfers kilobytes, and the faults of the road between (a proxy that cuts, flips or stalls a layer, a
kill mid-pull, an unknown tag, a manifest missing a layer, an untrusted key, a full disk).

distribution's htpasswd has no per-user rights: "ci" pushes and the boxes pull as "box", each with its own
password, but that registry would let "box" push too. The last test puts a token server in front (the Bearer
protocol of GHCR, Harbor and ECR), which grants "box" pull only: there its push is refused.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from edgekit.manifest import verify_bundle
from edgekit.pipeline.build import BuildResult
from edgekit.ship.trust import TRUST_DIR_ENV
from tests.support.cli_in_process import run_cli as cli
from tests.support.processes import wait_until
from tests.support.registry import Fault, Proxy, Registry, TokenServer, running_registry
from tests.support.stage_cache import linked_copy

USERS = {"ci": "ci-secret", "box": "box-secret"}
BIG = 50 * 2**20  # the proxy's faults hit the model files, not the small files' tar before them


@dataclass
class Releases:
    dir: Path
    bundles: dict[str, Path]  # r0 (the default build), r1 (only runtime.toml changed), rogue (an untrusted key)
    env: dict[str, str]  # the box's trust policy


def _relabel(bundle: Path, dest: Path, release: int, *, runtime_note: str | None = None) -> Path:
    """A copy of `bundle` at another release; with `runtime_note`, runtime.toml changed too (and listed so)."""
    linked_copy(bundle, dest)
    (dest / "model.sig").unlink(missing_ok=True)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["release"] = release
    if runtime_note:
        runtime = dest / "runtime.toml"
        text = runtime.read_text() + f"# {runtime_note}\n"
        runtime.unlink()  # a hard link to the build's file: replace it, never write into it
        runtime.write_text(text)
        record = next(f for f in manifest["files"] if f["path"] == "runtime.toml")
        import hashlib

        record.update(size=runtime.stat().st_size, sha256=hashlib.sha256(runtime.read_bytes()).hexdigest())
    (dest / "manifest.json").unlink()
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return dest


@pytest.fixture(scope="module")
def releases(default_build: BuildResult, tmp_path_factory: pytest.TempPathFactory) -> Releases:
    from edgekit.ship.keys import generate_keypair
    from edgekit.ship.sign import sign_bundle

    root = tmp_path_factory.mktemp("registry")
    for name in ("fleet", "rogue"):
        generate_keypair(root / "keys" / f"{name}.key", root / "keys" / f"{name}.pub")
    bundles = {
        "r0": _relabel(default_build.bundle, root / "r0" / "smollm2-135m", 0),
        "r1": _relabel(default_build.bundle, root / "r1" / "smollm2-135m", 1, runtime_note="release 1: a note"),
        "rogue": _relabel(default_build.bundle, root / "rogue" / "smollm2-135m", 7),
    }
    for name, bundle in bundles.items():
        sign_bundle(bundle, root / "keys" / ("rogue.key" if name == "rogue" else "fleet.key"))
    (root / "trusted-keys").mkdir()
    shutil.copy(root / "keys" / "fleet.pub", root / "trusted-keys")
    return Releases(root, bundles, {TRUST_DIR_ENV: str(root / "trusted-keys")})


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def _status(root: Path, env: dict[str, str]) -> dict[str, Any]:
    return _json(cli("status", "--root", str(root), "--json", env=env))  # type: ignore[arg-type]


def _copy_box(box: Path, dest: Path) -> None:
    """Another box in the same state: `current` stays a link, the slots' files are hard links (never edited)."""
    shutil.copytree(box, dest, symlinks=True, copy_function=os.link)


def _docker_config(folder: Path, host: str, user: str, password: str) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return {"DOCKER_CONFIG": str(folder)}


# --- TLS, users, and an independent client ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_registry(releases: Releases) -> Iterator[Registry]:
    with running_registry(releases.dir / "tls-registry", tls=True, users=USERS) as registry:
        yield registry


def test_push_then_install_over_tls_with_credentials_and_oras_reads_the_artifact(
    tls_registry: Registry, releases: Releases, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = f"oci://{tls_registry.host}/fleet/smollm2:stable"
    ca = ["--ca-file", str(tls_registry.ca)]
    pushed = _json(cli("push", str(releases.bundles["r0"]), ref, *ca, "--json",
                       env={"EDGEKIT_REGISTRY_USER": "ci", "EDGEKIT_REGISTRY_PASSWORD": USERS["ci"]}))  # fmt: skip
    manifest = verify_bundle(releases.bundles["r0"])
    big = [f for f in manifest["files"] if f["size"] >= 2**20]
    assert pushed["layers"] == 3 + len(big) and pushed["uploaded"] == pushed["size"]
    assert pushed["digest"].startswith("sha256:") and pushed["reference"].endswith(pushed["digest"])

    # oras reads it: the ModelPack manifest, and every file at its path (the models byte for byte).
    import oras.client

    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls_registry.ca))
    client = oras.client.OrasClient(hostname=tls_registry.host, auth_backend="basic")
    client.login(username="box", password=USERS["box"], hostname=tls_registry.host)
    target = f"{tls_registry.host}/fleet/smollm2:stable"
    oci_manifest = client.get_manifest(target)
    assert oci_manifest["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    assert oci_manifest["config"]["mediaType"] == "application/vnd.cncf.model.config.v1+json"
    pulled = Path(releases.dir / "oras")
    client.pull(target=target, outdir=str(pulled))
    for record in big:
        assert (pulled / record["path"]).stat().st_size == record["size"], record["path"]
    assert json.loads((pulled / "manifest.json").read_text())["name"] == manifest["name"]

    # The box pulls as "box", its credentials in a Docker config file, the registry's CA given.
    box = releases.dir / "tls-box"
    env = {**releases.env, **_docker_config(releases.dir / "docker-box", tls_registry.host, "box", USERS["box"])}
    installed = _json(cli("install", ref, "--root", str(box), *ca, "--json", env=env))  # type: ignore[arg-type]
    assert installed["source"]["digest"] == pushed["digest"] and installed["pack_sha256"] is None
    slot = _status(box, releases.env)["slots"][0]
    assert slot["current"] and slot["install"]["source"]["pinned"] == pushed["reference"]


def test_the_registry_refuses_anonymous_boxes_and_wrong_passwords_and_nothing_is_installed(
    tls_registry: Registry, releases: Releases
) -> None:
    ref = f"oci://{tls_registry.host}/fleet/smollm2:stable"
    box = releases.dir / "refused-box"
    no_creds = {**releases.env, "DOCKER_CONFIG": str(releases.dir / "no-docker-config")}
    anonymous = cli("install", ref, "--root", str(box), "--ca-file", str(tls_registry.ca), env=no_creds)  # type: ignore[arg-type]
    assert anonymous.returncode == 4 and "asks for credentials and none were given" in anonymous.stderr
    wrong = {**releases.env, "EDGEKIT_REGISTRY_USER": "box", "EDGEKIT_REGISTRY_PASSWORD": "not-it"}
    refused = cli("install", ref, "--root", str(box), "--ca-file", str(tls_registry.ca), env=wrong)  # type: ignore[arg-type]
    assert refused.returncode == 4 and "refused the credentials of 'box'" in refused.stderr, refused.stderr
    untrusted_tls = cli("install", ref, "--root", str(box), env=no_creds)  # type: ignore[arg-type]
    assert untrusted_tls.returncode == 3 and "TLS verification failed" in untrusted_tls.stderr
    plain = cli("install", ref.replace("127.0.0.1", "registry.example.com"), "--insecure", "--root", str(box),
                env=no_creds)  # type: ignore[arg-type]  # fmt: skip
    assert plain.returncode == 2 and "only for a registry on loopback" in plain.stderr
    assert not list((box / "slots").iterdir())


# --- a plain registry on loopback, behind a proxy that misbehaves ----------------------------------------------


@dataclass
class Road:
    registry: Registry
    proxy: Proxy
    pushed: dict[str, dict[str, Any]]

    def ref(self, tag: str) -> str:
        return f"oci://{self.proxy.host}/fleet/smollm2:{tag}"


@pytest.fixture(scope="module")
def road(releases: Releases) -> Iterator[Road]:
    with running_registry(releases.dir / "plain-registry") as registry:
        proxy = Proxy(registry.host)
        pushed = {}
        for name in ("r0", "r1", "rogue"):
            ref = f"oci://{registry.host}/fleet/smollm2:{name}"
            pushed[name] = _json(cli("push", str(releases.bundles[name]), ref, "--insecure", "--json"))
        try:
            yield Road(registry, proxy, pushed)
        finally:
            proxy.close()


def _install(road: Road, releases: Releases, tag: str, box: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("install", road.ref(tag), "--root", str(box), "--insecure", "--json", *args, env=releases.env)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def box_at_r0(road: Road, releases: Releases) -> Path:
    box = releases.dir / "box"
    installed = _json(_install(road, releases, "r0", box))
    assert installed["source"]["transfer"]["reused"] == 0
    return box


@pytest.fixture
def box(box_at_r0: Path, tmp_path: Path) -> Path:
    """A box running release 0, of its own (the module's box stays at release 0)."""
    _copy_box(box_at_r0, tmp_path / "box")
    return tmp_path / "box"


def test_a_runtime_toml_only_release_transfers_under_one_percent_of_the_bundle(
    road: Road, releases: Releases, box: Path
) -> None:
    assert road.pushed["r1"]["uploaded"] < road.pushed["r1"]["size"] / 100  # the registry held the model files
    moved = _json(_install(road, releases, "r1", box))["source"]["transfer"]
    print(f"runtime.toml-only release: fetched {moved['fetched']:,} of {moved['total']:,} bytes "
          f"({100 * moved['fetched'] / moved['total']:.3f} %), reused {moved['reused']:,}")  # fmt: skip
    assert moved["fetched"] < moved["total"] / 100 and moved["reused"] > 0.98 * moved["total"]
    assert [s["release"] for s in _status(box, releases.env)["slots"] if s["current"]] == [1]


def test_a_connection_cut_mid_layer_resumes_with_a_range_request(
    road: Road, releases: Releases, tmp_path: Path
) -> None:
    road.proxy.fault = Fault(cut=5 * 2**20, min_size=BIG)
    moved = _json(_install(road, releases, "r0", tmp_path / "box"))["source"]["transfer"]
    ranges = [int(r.removeprefix("bytes=").rstrip("-")) for r in road.proxy.fault.seen if r]
    assert moved["retries"] == 1 and len(ranges) == 1 and 0 < ranges[0] <= 5 * 2**20  # from what reached the disk
    assert moved["fetched"] == moved["total"]  # not one byte that reached the disk fetched twice


def test_a_byte_changed_on_the_way_is_refused_and_the_box_keeps_its_release(
    road: Road, releases: Releases, box: Path, tmp_path: Path
) -> None:
    before = os.readlink(box / "current")
    road.proxy.fault = Fault(flip=123_456, min_size=0, times=100)
    fresh = tmp_path / "fresh"
    refused = _install(road, releases, "r1", fresh)
    road.proxy.fault = Fault(times=0)
    assert refused.returncode == 4, refused.stderr
    assert "does not match its digest" in refused.stderr and "nothing was installed" in refused.stderr
    assert not [p for p in (fresh / "slots").rglob("*") if p.is_file()]
    assert os.readlink(box / "current") == before


def test_an_unknown_tag_a_missing_layer_and_an_untrusted_key_are_refused(
    road: Road, releases: Releases, tmp_path: Path
) -> None:
    box = tmp_path / "box"
    unknown = _install(road, releases, "no-such-tag", box)
    assert unknown.returncode == 2 and "has no such tag or digest" in unknown.stderr

    # A manifest that lost a model file's layer, under its own tag (what a broken mirror would serve).
    url = f"http://{road.registry.host}/v2/fleet/smollm2/manifests"
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    manifest = httpx.get(f"{url}/r0", headers=accept).json()
    manifest["layers"] = [layer for layer in manifest["layers"] if not layer["annotations"][
        "org.cncf.model.filepath"].endswith("gguf-Q8_0.gguf")]  # fmt: skip
    put = httpx.put(f"{url}/broken", content=json.dumps(manifest),
                    headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})  # fmt: skip
    assert put.status_code == 201, put.text
    missing = _install(road, releases, "broken", box)
    assert missing.returncode == 4 and "a layer is missing" in missing.stderr and "gguf-Q8_0.gguf" in missing.stderr

    rogue = _install(road, releases, "rogue", box)
    assert rogue.returncode == 4 and "nothing was installed" in rogue.stderr, rogue.stderr
    assert not [p for p in (box / "slots").rglob("*") if p.is_file()]


def _killed_install(road: Road, releases: Releases, tag: str, box: Path, fault: Fault, reached: int) -> None:
    """`edgekit install` in its own process, killed with SIGKILL once `reached` bytes of the layer the proxy
    stalls are on the box's disk."""
    road.proxy.fault = fault
    env = {**os.environ, **releases.env}
    args = ["install", road.ref(tag), "--root", str(box), "--insecure"]
    proc = subprocess.Popen([sys.executable, "-m", "edgekit", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip

    def stalled() -> bool:
        return any(p.stat().st_size >= reached for p in (box / "downloads").glob("*.part"))

    wait_until(stalled, proc, "the pull reached the stall")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    road.proxy.fault = Fault(times=0)


def test_a_pull_killed_mid_layer_resumes_from_where_it_stopped(road: Road, releases: Releases, tmp_path: Path) -> None:
    box, stall = tmp_path / "box", 20 * 2**20
    _killed_install(road, releases, "r1", box, Fault(stall_after=stall, min_size=BIG), reached=stall)
    killed = _status(box, releases.env)
    assert killed["current"] is None and killed["slots"] == [] and len(killed["partial"]) == 1
    moved = _json(_install(road, releases, "r1", box))["source"]["transfer"]
    assert moved["resumed"] >= stall and moved["fetched"] + moved["resumed"] == moved["total"]
    assert _status(box, releases.env)["partial"] == [] and not (box / "downloads").exists()


def test_a_kill_mid_pull_keeps_the_running_release(road: Road, releases: Releases, box: Path) -> None:
    before = os.readlink(box / "current")
    # the small files' tar, r1's one new layer: killed once its download has started
    _killed_install(road, releases, "r1", box, Fault(stall_after=2**20), reached=0)
    assert os.readlink(box / "current") == before
    served = _status(box, releases.env)
    assert served["current"] == before and [s["release"] for s in served["slots"] if s["current"]] == [0]
    assert all(s["verification"]["state"] == "ok" for s in served["slots"])


def test_pull_writes_a_pack_an_air_gapped_box_installs(road: Road, releases: Releases, tmp_path: Path) -> None:
    pulled = _json(cli("pull", road.ref("r0"), "-o", str(tmp_path), "--insecure", "--json"))
    assert pulled["digest"] == road.pushed["r0"]["digest"] and Path(pulled["path"]).name == "smollm2-135m-0.edgekit"
    assert not list(tmp_path.glob(".edgekit-pull-*"))
    installed = _json(cli("install", pulled["path"], "--root", str(tmp_path / "box"), "--json", env=releases.env))  # type: ignore[arg-type]
    assert installed["source"] == {"kind": "pack", "path": pulled["path"], "sha256": pulled["sha256"]}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 700 MiB filesystem (tmpfs; mounting needs root): room for the default bundle once."""
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700m", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, f"mounting a tmpfs needs root (CAP_SYS_ADMIN): {proc.stderr}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_refused_before_the_pull_and_a_disk_filling_midway_leaves_nothing(
    road: Road, releases: Releases, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box, ballast = small_disk / "box", small_disk / "ballast"
    ballast.write_bytes(b"\0" * 300 * 2**20)  # now the layers do not fit
    refused = _install(road, releases, "r0", box)
    assert refused.returncode == 3 and "not enough disk space" in refused.stderr, refused.stderr
    assert not [p for p in (box / "slots").rglob("*") if p.is_file()]
    ballast.unlink()

    # The check passes, then something else fills the disk (the seam: right after the check, in this process).
    from edgekit.ship import install

    checked = install.ensure_free_space

    def then_fill(path: Path, needed: int, **kw: Any) -> None:
        checked(path, needed, **kw)
        ballast.write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - 50 * 2**20))

    monkeypatch.setattr(install, "ensure_free_space", then_fill)
    filled = _install(road, releases, "r0", box)
    assert filled.returncode == 3 and "the disk filled up while unpacking" in filled.stderr, filled.stderr
    assert "nothing was installed" in filled.stderr and _status(box, releases.env)["slots"] == []
    ballast.unlink()
    monkeypatch.undo()
    assert _install(road, releases, "r0", box).returncode == 0  # room again: it resumes and goes through


# --- Bearer tokens with per-user rights (GHCR, Harbor and ECR work this way) -----------------------------------


def test_bearer_tokens_let_ci_push_and_boxes_only_pull(releases: Releases, tmp_path: Path) -> None:
    tokens = TokenServer(tmp_path / "tokens", {"ci": (USERS["ci"], {"pull", "push"}),
                                               "box": (USERS["box"], {"pull"})})  # fmt: skip
    try:
        with running_registry(tmp_path / "token-registry", tokens=tokens) as registry:
            ref = f"oci://{registry.host}/fleet/smollm2:stable"
            as_ci = {"EDGEKIT_REGISTRY_USER": "ci", "EDGEKIT_REGISTRY_PASSWORD": USERS["ci"]}
            as_box = {"EDGEKIT_REGISTRY_USER": "box", "EDGEKIT_REGISTRY_PASSWORD": USERS["box"]}
            pushed = _json(cli("push", str(releases.bundles["r0"]), ref, "--insecure", "--json", env=as_ci))
            refused = cli("push", str(releases.bundles["r1"]), ref.replace("stable", "r1"), "--insecure", env=as_box)
            assert refused.returncode == 4 and "refused the credentials of 'box'" in refused.stderr, refused.stderr
            assert "for pull,push on fleet/smollm2" in refused.stderr
            installed = _json(cli("install", ref, "--root", str(tmp_path / "box"), "--insecure", "--json",
                                  env={**releases.env, **as_box}))  # type: ignore[arg-type]  # fmt: skip
            assert installed["source"]["digest"] == pushed["digest"]
            anonymous = cli("install", ref, "--root", str(tmp_path / "box2"), "--insecure",
                            env={**releases.env, "DOCKER_CONFIG": str(tmp_path / "none")})  # type: ignore[arg-type]  # fmt: skip
            assert anonymous.returncode == 4 and "asks for credentials" in anonymous.stderr
            assert ("box", "pull") in tokens.issued and ("ci", "pull,push") in tokens.issued
    finally:
        tokens.close()


def test_a_part_that_holds_every_byte_is_used_without_asking_the_registry(
    road: Road, releases: Releases, box_at_r0: Path, tmp_path: Path
) -> None:
    """A kill between a layer's last write and its rename leaves a complete .part: the next pull only hashes it."""
    manifest = verify_bundle(releases.bundles["r0"])
    record = max(manifest["files"], key=lambda f: f["size"])
    box = tmp_path / "box"
    (box / "downloads").mkdir(parents=True)
    shutil.copyfile(box_at_r0 / "current" / record["path"], box / "downloads" / f"sha256-{record['sha256']}.part")
    road.proxy.fault = Fault(times=0)
    moved = _json(_install(road, releases, "r0", box))["source"]["transfer"]
    assert moved["resumed"] == record["size"] and moved["retries"] == 0
    assert moved["fetched"] + moved["resumed"] == moved["total"]
