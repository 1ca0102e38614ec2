"""The Ray executor on a real two-node cluster on loopback, with the tiny model (tests/support/tiny_project.py).

The head is `ray start --head` offering `box:gateway-a`; the second node joins with `edgekit agent --box
gateway-b` (labels read from this machine). Each node has 1 CPU and a 200 MB object store; both are
stopped with `ray stop` when the module's tests end, pass or fail. Builds are real `edgekit build`
processes; the cache is a folder both nodes see (the path form of a shared cache).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

import edgekit
from edgekit.manifest import verify_bundle
from tests.support.tiny_project import TINY_BENCH as BENCH
from tests.support.tiny_project import build_env, make_project

HEAD_IP, NODE_IP = "127.0.0.2", "127.0.0.3"  # loopback addresses: each node has its own, traffic stays local
OBJECT_STORE = str(200 * 2**20)
VALIDATION = """
[validation]
max_tokens = 512
context_length = 128
noise_floor_dtype = "none"
bootstrap_resamples = 100
"""
TARGETS = "".join(
    f'\n[[targets]]\nbackend = "gguf"\nscheme = "{s}"\nrequired = false\n' for s in ("Q8_0", "Q4_K_M", "F16")
)
BOXES = '\n[[bench.boxes]]\nname = "gateway-a"\n\n[[bench.boxes]]\nname = "gateway-b"\n'


def recipe(name: str, targets: str = TARGETS, rest: str = VALIDATION + BENCH + BOXES) -> str:
    return f'[model]\nsource = "model"\n{targets}{rest}\n[bundle]\nname = "{name}"\n'


@dataclass(frozen=True)
class Cluster:
    address: str
    env: dict[str, str]
    cache: Path  # the shared stage cache of these tests' cluster builds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HEAD_IP, 0))
        return s.getsockname()[1]


def _ray(*args: str, env: dict[str, str]) -> None:
    ray_bin = str(Path(sys.executable).parent / "ray")
    done = subprocess.run([ray_bin, *args], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, llama_cpp_dir: Path) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("ray")
    env = build_env(root / "cache", llama_cpp_dir)
    # the workers import this checkout's edgekit, whatever the environment's install points at
    env["PYTHONPATH"] = os.pathsep.join([str(Path(edgekit.__file__).parents[1]), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "200"
    port = _free_port()
    address = f"{HEAD_IP}:{port}"
    try:
        _ray("start", "--head", "--node-ip-address", HEAD_IP, "--port", str(port), "--num-cpus", "1",
             "--resources", '{"box:gateway-a": 1}', "--object-store-memory", OBJECT_STORE,
             "--dashboard-host", "127.0.0.1", "--dashboard-port", str(_free_port()), "--disable-usage-stats",
             env=env)  # fmt: skip
        agent = [sys.executable, "-m", "edgekit", "agent", "--box", "gateway-b", "--address", address,
                 "--node-ip-address", NODE_IP, "--num-cpus", "1", "--object-store-memory", OBJECT_STORE,
                 "--bandwidth-mib", "16", "--no-block"]  # fmt: skip
        joined = subprocess.run(agent, env=env, capture_output=True, text=True, timeout=180)
        assert joined.returncode == 0, joined.stderr + joined.stdout
        assert "fingerprint" in joined.stdout and "joined" in joined.stdout
        yield Cluster(address, env, root / "cache")
    finally:
        subprocess.run([str(Path(sys.executable).parent / "ray"), "stop"], env=env, capture_output=True, timeout=120)


def edgekit_build(cluster: Cluster, project: Path, *args: str, cache: Path | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "edgekit", "build", *args, "--cache-dir", str(cache or cluster.cache)]
    return subprocess.Popen(cmd, cwd=project, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def finished(proc: subprocess.Popen[str], timeout: float = 420) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def started_lines(log: str) -> Counter[str]:
    """How often each task started ('LABEL: started on HOST (IP) pid N' in the build's log)."""
    return Counter(m.group(1) for m in re.finditer(r"^\S*\s*(\S.*?): started on ", log, re.M))


def comparable_manifest(bundle: Path, measured: tuple[str, ...]) -> dict[str, object]:
    """manifest.json without its timestamp and without the files that hold measurements (timings, dates) or what
    other libraries printed while each stage ran there (logs/: times, hosts, which build made each entry)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest.pop("created")
    manifest["files"] = [f for f in manifest["files"] if not f["path"].startswith((*measured, "logs/"))]
    return manifest


def test_two_recipes_on_two_boxes_share_tasks_and_equal_a_local_build(
    cluster: Cluster, tiny_model: Path, tmp_path: Path, stage_cache_root: Path
) -> None:
    project = make_project(tmp_path / "p", tiny_model, recipe("tiny-a"))
    (project / "b.toml").write_text(recipe("tiny-b"))
    code, log = finished(edgekit_build(cluster, project, "recipe.toml", "b.toml", "--cluster", cluster.address))
    assert code == 0, log[-3000:]
    # shared source × three targets: one fetch, convert, reference, three quantize, validate and smoke (the greedy
    # ids a box's install checks), one bench per box
    starts = started_lines(log)
    assert sum(starts.values()) == 14 and set(starts.values()) == {1}, starts
    assert {"bench 3 artifacts on gateway-a", "bench 3 artifacts on gateway-b", "reference"} <= set(starts)
    assert "14 tasks for 2 bundle(s): 14 ran, 0 reused" in log
    assert re.search(r"Ray dashboard: http://127\.0\.0\.1:\d+", log)
    dist = project / "dist"
    for name in ("tiny-a", "tiny-b"):
        bundle = dist / name
        verify_bundle(bundle)
        report = json.loads((bundle / "report.json").read_text())
        assert sorted(report["benches"]) == ["gateway-a", "gateway-b"] and report["bench"] is None
        assert "## Benchmark on box gateway-a" in (bundle / "report.md").read_text()
        box_b = (bundle / "runtime" / "gateway-b.toml").read_text()
        assert 'name = "gateway-b"' in box_b and "physical-cores" in box_b  # the agent's labels
    fleet = json.loads((dist / "fleet-report.json").read_text())
    assert len(fleet["rows"]) == 2 * 3 * 2 and fleet["boxes"] == ["gateway-a", "gateway-b"]
    assert all(r["decode_tok_s"] and r["verdict"] for r in fleet["rows"])
    assert "gateway-b" in (dist / "fleet-report.html").read_text()

    # the same recipes on this machine, without Ray: the same artifacts, byte for byte
    local = subprocess.run(
        [sys.executable, "-m", "edgekit", "build", "recipe.toml", "b.toml", "--boxes", "local", "--out", "local",
         "--cache-dir", str(stage_cache_root)],
        cwd=project, env=cluster.env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert local.returncode == 0, local.stderr[-3000:]
    # edgekit.service: its MemoryMax comes from the largest peak RSS the benches measured
    measured = ("report.", "plots/", "runtime.toml", "runtime/", "edgekit.service")
    for name in ("tiny-a", "tiny-b"):
        ray_manifest, local_manifest = (comparable_manifest(d / name, measured) for d in (dist, project / "local"))
        assert [a["sha256"] for a in ray_manifest["artifacts"]] == [a["sha256"] for a in local_manifest["artifacts"]]
        assert ray_manifest == local_manifest


def _kill_when_running(proc: subprocess.Popen[str], title: str, timeout: float = 300) -> int:
    """SIGKILL the Ray worker whose process title is `title` once it has run it for a second; returns its pid."""
    deadline = time.monotonic() + timeout
    seen: dict[int, float] = {}
    while time.monotonic() < deadline and proc.poll() is None:
        for p in psutil.process_iter(["cmdline"]):
            running = " ".join(p.info["cmdline"] or []).startswith(title)
            if running and time.monotonic() - seen.setdefault(p.pid, time.monotonic()) > 1.0:
                p.send_signal(signal.SIGKILL)
                return p.pid
        time.sleep(0.05)
    raise AssertionError(f"no worker ran {title!r}")


def test_a_killed_worker_is_retried_and_leaves_nothing_partial(cluster: Cluster, tiny_model: Path,
                                                               tmp_path: Path) -> None:  # fmt: skip
    body = '\n[[targets]]\nbackend = "gguf"\nscheme = "Q5_K_M"\n'
    project = make_project(
        tmp_path / "p",
        tiny_model,
        recipe("tiny-kill", body, "\n[validation]\nenabled = false\n\n[bench]\nenabled = false\n"),
    )
    proc = edgekit_build(cluster, project, "recipe.toml", "--cluster", cluster.address)
    killed = _kill_when_running(proc, "ray::quantize gguf-Q5_K_M")
    code, log = finished(proc)
    assert code == 0, log[-3000:]
    assert re.search(rf"quantize gguf-Q5_K_M: started on .* pid {killed}\b", log)
    assert re.search(r"quantize gguf-Q5_K_M: retry 1 of \d+ on .*\(the worker of attempt 1 died\)", log), log[-3000:]
    assert not list(cluster.cache.glob("*/.*.partial")), "a partial entry is left in the cache"
    assert not list(cluster.cache.glob("*/.*")), "a temp folder is left in the cache"
    verify_bundle(project / "dist" / "tiny-kill")

    local_cache = tmp_path / "local-cache"
    for stage in ("fetch", "convert"):  # the quantization itself runs again, here
        shutil.copytree(cluster.cache / stage, local_cache / stage)
    local = subprocess.run([sys.executable, "-m", "edgekit", "build", "recipe.toml", "--out", "local", "--cache-dir",
                            str(local_cache)], cwd=project, env=cluster.env, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert local.returncode == 0, local.stderr[-3000:]
    ray_manifest, local_manifest = (comparable_manifest(d / "tiny-kill", ("report.", "plots/"))
                                    for d in (project / "dist", project / "local"))  # fmt: skip
    assert ray_manifest == local_manifest


def test_a_box_the_cluster_lacks_fails_at_planning_time(cluster: Cluster, tiny_model: Path, tmp_path: Path) -> None:
    rest = VALIDATION + BENCH + '\n[[bench.boxes]]\nname = "missing"\n'
    project = make_project(tmp_path / "p", tiny_model, recipe("tiny-missing", rest=rest))
    started = time.monotonic()
    code, log = finished(edgekit_build(cluster, project, "recipe.toml", "--cluster", cluster.address), timeout=120)
    assert code == 2, log
    assert "missing" in log and "boxes offered: gateway-a, gateway-b" in log
    assert time.monotonic() - started < 60 and "started on" not in log  # before any task, not after a timeout


def test_a_ladder_runs_its_candidates_on_the_cluster(cluster: Cluster, tiny_model: Path, llama_tools: Path,
                                                     tmp_path: Path) -> None:  # fmt: skip
    """scheme = "auto" on Ray: each candidate (the matrix candidate's imatrix too) is a Ray task; a gate no
    candidate can meet makes the ladder run every rung and keep the closest."""
    body = ('\n[[targets]]\nbackend = "gguf"\nscheme = "auto"\nrequired = false\nladder = ["Q8_0", { scheme = '
            '"Q4_K_M", options = { imatrix = true, imatrix_chunks = 2, imatrix_context = 128 } }]\n'
            "[targets.gates]\nkld_mean_max = 1e-9\n")  # fmt: skip
    project = make_project(
        tmp_path / "p", tiny_model, recipe("tiny-ladder", body, VALIDATION + "\n[bench]\nenabled = false\n")
    )
    # A cache of its own: the module's shared one may already hold the tiny model's Q8_0 from another test.
    build = edgekit_build(cluster, project, "recipe.toml", "--cluster", cluster.address, cache=tmp_path / "cache")
    code, log = finished(build)
    assert code == 0, log[-3000:]
    starts = started_lines(log)
    for what in ("quantize gguf-auto.Q8_0", "quantize gguf-auto.Q4_K_M-imatrix", "imatrix 2×128", "validate"):
        assert sum(s.startswith(what) for s in starts) == (2 if what == "validate" else 1), (what, starts)
    (ladder,) = json.loads((project / "dist" / "tiny-ladder" / "report.json").read_text())["ladders"]
    verdicts = [c["verdict"] for c in ladder["candidates"]]  # built and judged, none passing (Q8_0 may be inconclusive)
    assert not ladder["passed"] and len(verdicts) == 2 and not {"pass", "not built"} & set(verdicts), verdicts
    verify_bundle(project / "dist" / "tiny-ladder")
