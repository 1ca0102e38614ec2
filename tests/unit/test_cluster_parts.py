"""The parts of the cluster build that need no cluster: boxes in recipes and plans, Ray options from declared
resources, a shared cache that checks hashes, runtime configs per box, the fleet report. The real cluster
runs in tests/e2e/test_cluster.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from edgekit.backends.base import BuildEnv
from edgekit.errors import BoxesMissing, ClusterError, RecipeError, RuntimeConfigError
from edgekit.executors.base import Workspace
from edgekit.executors.cluster import RayExecutor
from edgekit.observe.progress import SilentProgress
from edgekit.plan.boxes import Box, boxes_to_bench
from edgekit.plan.keys import task_key
from edgekit.plan.tasks import BenchTask, Resources, Task
from edgekit.recipe.load import parse_recipe
from edgekit.report.fleet import build_fleet_report
from edgekit.report.fleet_render import write_fleet_reports
from edgekit.runtime import machine
from edgekit.runtime.box import agent_command, label_value
from edgekit.runtime.config import BOX_ENV, load_runtime_config, render_runtime_toml
from edgekit.store.cache import StageCache

MINIMAL = '[model]\nsource = "m"\n[[targets]]\nbackend = "gguf"\nscheme = "Q8_0"\n'
BASE = {"artifact": "a", "n_threads": 4, "n_threads_batch": 4}


def test_bench_boxes_are_names_given_once() -> None:
    recipe = parse_recipe((MINIMAL + '[[bench.boxes]]\nname = "gw-a"\n[[bench.boxes]]\nname = "arm.1"\n').encode(),
                          Path("r.toml"))  # fmt: skip
    assert [b.name for b in recipe.spec.bench.boxes] == ["gw-a", "arm.1"]
    for bad, says in (('name = "gw-a"\n[[bench.boxes]]\nname = "gw-a"', "twice"), ('nme = "x"', "name")):
        with pytest.raises(RecipeError, match=says):
            parse_recipe((MINIMAL + "[[bench.boxes]]\n" + bad + "\n").encode(), Path("r.toml"))


def test_boxes_the_cluster_lacks_are_refused_listing_those_it_has() -> None:
    offered = {"gw-a": Box("gw-a", {"fingerprint": "f1"}), "gw-b": Box("gw-b")}
    assert boxes_to_bench(("gw-b", "gw-a"), offered) == (offered["gw-b"], offered["gw-a"])
    assert boxes_to_bench(("local",), offered) == () and boxes_to_bench((), None) == ()
    with pytest.raises(BoxesMissing) as failed:
        boxes_to_bench(("gw-a", "arm"), offered)
    assert (
        failed.value.exit_code == 2 and "boxes offered: gw-a, gw-b" in str(failed.value) and "arm" in str(failed.value)
    )
    with pytest.raises(BoxesMissing, match="boxes offered: none"):
        boxes_to_bench(("gw-a",), None)  # the local executor offers no boxes


class _Reference(Task):
    stage = "reference"
    device = "cuda"

    def resources(self, threads: int) -> Resources:
        return Resources(cpus=threads, gpus=1.0)


def _node(cpus: float, memory: float, **extra: float) -> dict[str, Any]:
    return {"Resources": {"CPU": cpus, "memory": memory, **extra}, "Alive": True}


def test_ray_options_come_from_the_declared_resources_within_the_largest_node(tmp_path: Path) -> None:
    tools = Workspace(StageCache(tmp_path), BuildEnv(tmp_path, threads=8))
    nodes = [_node(1, 2**30, **{"box:gw-a": 1}), _node(2, 4 * 2**30, **{"box:gw-b": 1})]
    executor = RayExecutor(tools, SilentProgress(), lambda: nodes)
    bench = BenchTask(artifacts=(), settings={}, machine="f", versions={}, box="gw-b")
    assert executor.options(bench)["resources"] == {"box:gw-b": 1} and executor.options(bench)["num_cpus"] == 2
    local_bench = BenchTask(artifacts=(), settings={}, machine="f", versions={})
    assert executor.options(local_bench)["num_cpus"] == 2 and "resources" not in executor.options(local_bench)
    pinned = RayExecutor(tools, SilentProgress(), lambda: nodes, here=lambda: "the build machine's node")
    assert pinned.options(local_bench)["scheduling_strategy"] == "the build machine's node"  # its key: this machine
    assert "scheduling_strategy" not in pinned.options(bench)
    assert executor.options(bench)["max_retries"] >= 1 and executor.options(bench)["retry_exceptions"] is False
    with pytest.raises(ClusterError, match="GPU"):
        executor.options(_Reference())
    with_gpu = RayExecutor(tools, SilentProgress(), lambda: [*nodes, _node(4, 2**30, GPU=1)])
    assert with_gpu.options(_Reference())["num_gpus"] == 1


def test_a_shared_cache_checks_every_files_sha256_on_read(tmp_path: Path) -> None:
    key = task_key("stage", {"a": 1})
    StageCache(tmp_path).get_or_produce("stage", key, {"a": 1}, lambda out: (out / "f").write_text("good") and None)
    (tmp_path / "stage" / key / "f").write_text("evil")  # same size, other bytes
    assert StageCache(tmp_path).lookup("stage", key) is not None  # a local cache checks sizes only
    assert StageCache(tmp_path, verify=True).lookup("stage", key) is None


def test_partials_of_other_hosts_are_left_to_them(tmp_path: Path) -> None:
    other = tmp_path / "stage" / ".abc@elsewhere.pid999999999.x.partial"
    other.mkdir(parents=True)
    assert StageCache(tmp_path).clean_partials() == 0 and other.exists()


def _bundle_with_boxes(tmp_path: Path) -> Path:
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime.toml").write_text(render_runtime_toml(BASE))
    here = {"name": "here", "fingerprint": machine.fingerprint(), "labels": {"arch": "x86_64"}}
    (tmp_path / "runtime" / "here.toml").write_text(render_runtime_toml({**BASE, "n_threads": 2}, box=here))
    far = {"name": "far", "fingerprint": "0000", "labels": {}}
    (tmp_path / "runtime" / "far.toml").write_text(render_runtime_toml({**BASE, "n_threads": 16}, box=far))
    return tmp_path


def test_a_box_takes_its_runtime_by_name_or_by_fingerprint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = _bundle_with_boxes(tmp_path)
    monkeypatch.delenv(BOX_ENV, raising=False)
    assert load_runtime_config(bundle).n_threads == 2  # this machine's fingerprint
    assert load_runtime_config(bundle, box="far").n_threads == 16
    monkeypatch.setenv(BOX_ENV, "far")
    assert load_runtime_config(bundle).n_threads == 16
    with pytest.raises(RuntimeConfigError, match="far, here"):
        load_runtime_config(bundle, box="nowhere")
    (bundle / "runtime" / "here.toml").unlink()
    monkeypatch.delenv(BOX_ENV)
    assert load_runtime_config(bundle).n_threads == 4  # no match: runtime.toml


def test_agent_labels_and_command() -> None:
    assert label_value("Intel(R) Xeon(R) CPU @ 2.20GHz") == "Intel-R-Xeon-R-CPU-2.20GHz"
    assert len(label_value("x" * 100)) == 63 and label_value("()") == "unknown"
    command = agent_command("gw-a", "10.0.0.1:6379", {"arch": "x86_64"}, block=False)
    assert command[1:4] == ["start", "--address", "10.0.0.1:6379"] and "--block" not in command
    assert json.loads(command[command.index("--resources") + 1]) == {"box:gw-a": 1}
    assert command[command.index("--labels") + 1] == "edgekit.box/arch=x86_64"


def _report(bundle: str, benches: dict[str, Any]) -> dict[str, Any]:
    artifacts = [{"name": "q8", "backend": "gguf", "scheme": "Q8_0", "verdict": "pass", "size": 2**20},
                 {"name": "q4", "backend": "gguf", "scheme": "Q4_K_M", "verdict": "fail", "size": 2**19}]  # fmt: skip
    return {"bundle": bundle, "artifacts": artifacts, "bench": None, "benches": benches}


def test_fleet_report_is_artifact_by_box(tmp_path: Path) -> None:
    measured = {"artifacts": {"q8": {"decode_tok_s": {"median": 50.0}, "ttft_ms": 12.0, "peak_rss_mib": 300.0},
                              "q4": {"skipped": "engine missing"}}}  # fmt: skip
    fleet = build_fleet_report([("dist/a", _report("a", {"gw-a": measured, "gw-b": measured})),
                                ("dist/b", _report("b", {}))])  # fmt: skip
    assert fleet["boxes"] == ["gw-a", "gw-b"] and len(fleet["rows"]) == 2 * 2 + 2
    row = next(r for r in fleet["rows"] if r["box"] == "gw-b" and r["artifact"] == "q8")
    assert (row["decode_tok_s"], row["ttft_ms"], row["peak_rss_mib"], row["verdict"]) == (50.0, 12.0, 300.0, "pass")
    assert next(r for r in fleet["rows"] if r["artifact"] == "q4" and r["box"])["not_measured"] == "engine missing"
    json_path, md_path, html_path = write_fleet_reports(tmp_path, fleet)
    assert json.loads(json_path.read_text()) == fleet
    assert "| a | q8 | gw-b | pass | 1.0 MiB | 50 | 12 | 300 |" in md_path.read_text()
    assert "<td>gw-a</td>" in html_path.read_text() and "engine missing" in html_path.read_text()


def test_an_address_nobody_listens_at_fails_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "edgekit", "build", "--cluster", "127.0.0.1:1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 3 and time.monotonic() - started < 60
    has_ray = importlib.util.find_spec("ray") is not None
    assert ("cannot reach the Ray cluster at 127.0.0.1:1" if has_ray else "needs Ray") in done.stderr


def test_the_report_has_one_benchmark_table_per_box() -> None:
    from edgekit.report.render import render
    from tests.support.sample_report import sample_report

    figures = {"gguf-Q4_K_M": {"decode_tok_s": 41.5, "ttft_ms": 80.0}}
    report = {**sample_report(), "benches": {"gw-b": {"artifacts": figures}, "gw-a": {"artifacts": figures}}}
    md, html = render(report)
    assert md.index("## Benchmark on box gw-a") < md.index("## Benchmark on box gw-b")
    assert "| decode, one sequence (tok/s) | 41.5 |" in md and "## Benchmark\n" not in md
    assert '<h2 id="bench-gw-b">Benchmark on box gw-b</h2>' in html
