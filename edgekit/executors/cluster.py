"""The Ray executor: every task of the DAG becomes a Ray task, placed by Ray from the resources it declares.

A task asks for what `Task.resources` says (CPUs and memory sized from the model, `num_gpus=1` for a
reference on CUDA, the custom resource `box:NAME` for a bench on a box); its upstream tasks' results
are its ObjectRef arguments, so Ray starts it when they are done. Nothing here schedules or queues:
the driver looks each task up in the shared cache (found: not sent at all), submits the others once
(tasks of several recipes with one key are one Ray task), and waits. A worker that dies (OOM, a
kill, a lost node) is retried by Ray up to `max_retries` times; a stage that raises is not retried.

The cache must be a path every node sees (NFS or the like): entries are written to a temp folder and
renamed, and every read checks each file's recorded sha256 (`StageCache(verify=True)`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

from edgekit.errors import ClusterError, StageError
from edgekit.executors.base import TaskEvent, Workspace, execute
from edgekit.observe.progress import Progress
from edgekit.plan.boxes import Box
from edgekit.plan.make import dependency_order
from edgekit.plan.task_base import Stage, Task
from edgekit.runtime.box import BOX_RESOURCE, LABEL_PREFIX
from edgekit.store.cache import CacheEntry

MAX_RETRIES = 3
POLL_SECONDS = 0.5


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClusterError("--cluster needs Ray, which is not installed", "pip install 'edgekit[cluster]'") from None
    return ray


def _reachable(address: str) -> None:
    """Fail at once on an address nobody listens at (Ray itself keeps retrying for minutes)."""
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {exc}",
                           "start one with `ray start --head`, or check --cluster (HOST:PORT)") from None  # fmt: skip


class RayCluster:
    """A Ray cluster: the boxes it offers, and executors that run tasks on it (connected when first needed,
    so a build whose every task is cached never waits for Ray)."""

    def __init__(self, address: str, progress: Progress | None = None) -> None:
        _ray()
        self.address, self.progress = address, progress
        self.dashboard_url: str | None = None
        self._connected = False

    def connect(self) -> None:
        if self._connected:
            return
        _reachable(self.address)
        try:
            context = _ray().init(address=self.address, logging_level="WARNING", log_to_driver=False,
                                  configure_logging=False)  # fmt: skip
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterError(f"cannot connect to the Ray cluster at {self.address}: {exc}",
                               "start one with `ray start --head` or check --cluster") from None  # fmt: skip
        self._connected = True
        self.dashboard_url = getattr(context, "dashboard_url", None) or None
        if self.progress is not None and self.dashboard_url:
            url = self.dashboard_url if "://" in self.dashboard_url else f"http://{self.dashboard_url}"
            self.progress.log(f"Ray dashboard: {url}")

    def nodes(self) -> list[dict[str, Any]]:
        self.connect()
        return [n for n in _ray().nodes() if n.get("Alive")]

    def boxes(self) -> dict[str, Box]:
        """Every box a live node offers (`box:NAME` resource), with the labels its agent read."""
        found: dict[str, Box] = {}
        for node in self.nodes():
            labels = {k.removeprefix(LABEL_PREFIX): v for k, v in (node.get("Labels") or {}).items()
                      if k.startswith(LABEL_PREFIX)}  # fmt: skip
            for resource in node.get("Resources", {}):
                if resource.startswith(BOX_RESOURCE):
                    name = resource.removeprefix(BOX_RESOURCE)
                    found[name] = Box(name, labels)
        return found

    def executor(self, space: Workspace, progress: Progress) -> RayExecutor:
        return RayExecutor(space, progress, self.nodes, here=self.here)

    def here(self) -> Any:
        """A placement on the node this build runs on (a Ray Client build: the head)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(_ray().get_runtime_context().get_node_id(), soft=False)

    def close(self) -> None:
        if self._connected:
            _ray().shutdown()


def _events_actor() -> Any:
    ray = _ray()

    @ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
    class Events:
        """Where workers say that a task started (and what its stage logs), for the driver's progress lines."""

        def __init__(self) -> None:
            self.pending: list[tuple[str, str, str]] = []

        def add(self, kind: str, key: str, text: str) -> None:
            self.pending.append((kind, key, text))

        def drain(self) -> list[tuple[str, str, str]]:
            out, self.pending = self.pending, []
            return out

    return Events.remote()  # type: ignore[attr-defined]  # ray.remote wraps the class in an ActorClass


def _drain(ray: Any, events: Any) -> list[tuple[str, str, str]]:
    """What workers said since the last call; nothing when the events actor is gone (e.g. killed for memory)."""
    try:
        return ray.get(events.drain.remote(), timeout=30)
    except ray.exceptions.RayError:
        return []


class _ForwardedTask:
    def advance(self, amount: float = 1) -> None:
        pass

    def update(self, description: str) -> None:
        pass


class _ForwardingProgress:
    """A stage's progress inside a Ray worker: log lines go to the driver through the events actor."""

    def __init__(self, events: Any, key: str) -> None:
        self.events, self.key = events, key

    @contextlib.contextmanager
    def task(self, description: str, total: float | None = None, unit: str = "") -> Any:
        yield _ForwardedTask()

    def log(self, message: str) -> None:
        self.events.add.remote("log", self.key, message)

    def warn(self, message: str) -> None:
        self.events.add.remote("warn", self.key, message)

    def stage_started(self, label: str) -> None:
        """The driver says where the task started, from the "started" event."""

    def stage_finished(self, label: str, seconds: float, *, reused: bool, made_seconds: float | None = None) -> None:
        """The driver shows the task done when Ray returns its entry."""


def _run_on_worker(task: Task, space: Workspace, events: Any, *upstream: CacheEntry) -> tuple[CacheEntry, float]:
    """In a Ray worker: say where this attempt runs, then run the task against the shared cache."""
    ray = _ray()
    where = f"{socket.gethostname()} ({ray.util.get_node_ip_address()}) pid {os.getpid()}"
    with contextlib.suppress(ray.exceptions.RayError):  # progress only: never a reason to fail the task
        ray.get(events.add.remote("started", task.key, where))  # delivered before any work: a retry is seen
    started = time.perf_counter()
    entry = execute(task, {e.key: e for e in upstream}, space, _ForwardingProgress(events, task.key))
    return entry, time.perf_counter() - started


class RayExecutor:
    """Runs a DAG on a Ray cluster; `events` and `attempts` say what ran, what was reused, what was retried."""

    def __init__(
        self,
        space: Workspace,
        progress: Progress,
        nodes: Callable[[], Sequence[Mapping[str, Any]]],
        here: Callable[[], Any] | None = None,
    ) -> None:
        self.space, self.progress = space, progress
        self._here = here  # where a bench of the build machine runs (its key holds this machine's fingerprint)
        self.events: list[TaskEvent] = []
        self.attempts: dict[str, list[str]] = {}  # key → where each attempt started
        self._nodes = nodes  # asked only when a task has to run

    @cached_property
    def _largest(self) -> dict[str, float]:
        nodes = self._nodes()
        return {r: max((float(n["Resources"].get(r, 0)) for n in nodes), default=0.0) for r in ("CPU", "GPU", "memory")}

    @cached_property
    def _box_cpus(self) -> dict[str, float]:
        return {r: float(n["Resources"].get("CPU", 1)) for n in self._nodes() for r in n["Resources"]
                if r.startswith(BOX_RESOURCE)}  # fmt: skip

    def options(self, task: Task) -> dict[str, Any]:
        """The Ray options of a task: its declared resources, within what the largest node has."""
        need = task.resources(self.space.threads)
        options: dict[str, Any] = {"name": task.label, "max_retries": MAX_RETRIES, "retry_exceptions": False}
        if need.box:
            # the whole box: no other task shares it while it is measured
            resource = BOX_RESOURCE + need.box
            options.update(num_cpus=self._box_cpus.get(resource, 1), resources={resource: 1})
            return options
        options["num_cpus"] = max(0.5, min(float(need.cpus), self._largest["CPU"] or 1.0))
        if task.stage == Stage.BENCH and self._here is not None:
            options["scheduling_strategy"] = self._here()
        if need.memory_mib and self._largest["memory"]:
            options["memory"] = min(need.memory_mib * 2**20, int(self._largest["memory"]))
        if need.gpus:
            if not self._largest["GPU"]:
                raise ClusterError(f"{task.label} needs a GPU (reference_device = \"cuda\") and no node has one",
                                   "join a GPU node, or set [validation] reference_device = \"auto\"")  # fmt: skip
            options["num_gpus"] = need.gpus
        elif task.stage == Stage.REFERENCE and getattr(task, "device", "") == "auto" and self._largest["GPU"]:
            options["num_gpus"] = 1  # "auto" prefers CUDA: a GPU node computes it when the cluster has one
        return options

    def run(self, tasks: Sequence[Task], known: Mapping[str, CacheEntry] | None = None) -> dict[str, CacheEntry]:
        ray = _ray()
        entries: dict[str, CacheEntry] = dict(known or {})  # a ladder's next candidate: its upstream has run
        ordered = [t for t in dependency_order(list(tasks)) if t.cached and t.key not in entries]
        for task in ordered:
            started = time.perf_counter()
            if (found := self.space.cache.lookup(task.stage, task.key)) is not None:
                entries[task.key] = found
                self.events.append(TaskEvent(task.stage, task.key, task.label, True, time.perf_counter() - started))
        todo = [t for t in ordered if t.key not in entries]
        if not todo:
            return entries
        options = {t.key: {**self.options(t), "num_returns": 2} for t in todo}  # every check before any work
        events = _events_actor()
        remote = ray.remote(_run_on_worker)
        refs: dict[str, Any] = {}  # key → (entry ref, seconds ref)
        for task in todo:
            closure = dependency_order(list(task.deps()))  # what a stage may read: its whole upstream
            upstream = [refs[t.key][0] if t.key in refs else entries[t.key] for t in closure if t.cached]
            refs[task.key] = remote.options(**options[task.key]).remote(task, self.space, events, *upstream)
        with _MatrixProgress(self.progress, len(ordered), len(ordered) - len(todo)) as shown:
            self._wait(ray, {refs[t.key][0]: t for t in todo}, {t.key: refs[t.key][1] for t in todo}, events, entries,
                       shown)  # fmt: skip
        self.space.cache.clean_partials()  # a killed attempt's temp folder (its process is gone)
        return entries

    def _wait(self, ray: Any, pending: dict[Any, Task], seconds: dict[str, Any], events: Any,
              entries: dict[str, CacheEntry], shown: _MatrixProgress) -> None:  # fmt: skip
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
            self._show(_drain(ray, events), {t.key: t for t in pending.values()}, shown)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    entry, took = ray.get([ref, seconds[task.key]])
                except ray.exceptions.RayTaskError as exc:
                    raise (exc.cause if isinstance(exc.cause, Exception) else exc) from None
                except ray.exceptions.RayError as exc:  # the worker or its node died, every attempt
                    what = f"failed on the cluster after {MAX_RETRIES} retries: {type(exc).__name__}"
                    raise StageError(task.label, what, "see the Ray dashboard or `ray logs`") from None
                entries[task.key] = entry
                self.events.append(TaskEvent(task.stage, task.key, task.label, entry.reused, took))
                shown.done(task.key)

    def _show(self, drained: list[tuple[str, str, str]], by_key: dict[str, Task], shown: _MatrixProgress) -> None:
        for kind, key, text in drained:
            task = by_key.get(key)
            label = task.label if task else key[:12]
            if kind in ("log", "warn"):
                self.progress.log(f"{label}: {text}") if kind == "log" else self.progress.warn(text)
                continue
            tries = self.attempts.setdefault(key, [])
            tries.append(text)
            if len(tries) > 1:
                self.progress.log(f"{label}: retry {len(tries) - 1} of {MAX_RETRIES} on {text} "
                                  f"(the worker of attempt {len(tries) - 1} died)")  # fmt: skip
            else:
                self.progress.log(f"{label}: started on {text}")
            shown.running(key, label)


class _MatrixProgress:
    """One line per running task, and the whole matrix as done/total."""

    def __init__(self, progress: Progress, total: int, done: int) -> None:
        self.progress, self.total, self.initial = progress, total, done
        self.stack = contextlib.ExitStack()
        self.lines: dict[str, contextlib.ExitStack] = {}

    def __enter__(self) -> _MatrixProgress:
        self.overall = self.stack.enter_context(
            self.progress.task("tasks done (reused included)", total=self.total, unit="tasks")
        )
        self.overall.advance(self.initial)
        return self

    def running(self, key: str, label: str) -> None:
        if key not in self.lines:
            line = contextlib.ExitStack()
            line.enter_context(self.progress.task(f"  {label}"))
            self.lines[key] = line

    def done(self, key: str) -> None:
        if (line := self.lines.pop(key, None)) is not None:
            line.close()
        self.overall.advance(1)

    def __exit__(self, *exc: object) -> None:
        for line in self.lines.values():
            line.close()
        self.stack.close()
