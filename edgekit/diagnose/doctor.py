"""`edgekit doctor`: what this box can do and what is missing, one check per line, each with its fix.

Nothing here downloads, builds or imports a heavy library: packages are found by their installed
distributions, the converter and llama.cpp's tools by their files, the CPU by /proc/cpuinfo.
A check's status is `ok`, `warn` (works, but something will be slow or surprising) or `missing`
(absent; the fix says whether that matters).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from functools import cache
from importlib.metadata import packages_distributions, requires
from pathlib import Path
from typing import Any

from edgekit import __version__
from edgekit._util.versions import dist_version
from edgekit.runtime import machine
from edgekit.runtime.numa import read_topology

LOW_DISK = 2 * 2**30  # the default build keeps about 2 GiB in the cache
LOW_MEMORY = 2 * 2**30
LLAMA_TOOLS = ("llama-quantize", "llama-imatrix", "llama-perplexity", "llama-bench")
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@dataclass(frozen=True)
class Check:
    group: str  # system, backends, toolchain, cpu, memory, disk, extras
    name: str
    status: str  # ok | warn | missing
    value: str
    fix: str | None = None


@dataclass(frozen=True)
class Package:
    dist: str
    version: str | None


def diagnose(cache_dir: Path | None = None, out_dir: Path | None = None) -> list[Check]:
    from edgekit.store.cache import default_cache_root

    cache = cache_dir or default_cache_root()
    out = out_dir or Path.cwd() / "dist"
    checks = [
        Check(
            "system",
            "python",
            "ok" if sys.version_info >= (3, 11) else "missing",
            platform.python_version(),
            None if sys.version_info >= (3, 11) else "edgekit needs Python 3.11 or newer",
        ),
        Check("system", "edgekit", "ok", f"{__version__} ({Path(__file__).resolve().parents[1]})"),
    ]
    checks += backend_checks() + toolchain_checks()
    checks += cpu_checks(platform.machine(), machine.cpu_flags(), machine.cpu_model())
    checks += [*memory_checks(), disk_check("cache", cache), disk_check("output", out), *extra_checks()]
    return checks


def summary(checks: list[Check]) -> dict[str, Any]:
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("ok", "warn", "missing")}
    return {"checks": [asdict(c) for c in checks], "summary": counts}


# --- packages -----------------------------------------------------------------------------------------


def _dist_of(module: str) -> str:
    """The distribution that provides import name `module`, without importing it: the usual spellings first
    (optimum.intel → optimum-intel, optimum.exporters.onnx → optimum-onnx, llama_cpp → llama-cpp-python), then
    the installed distributions' file lists (slow: read once)."""
    parts = module.lower().replace("_", "-").split(".")
    for name in ("-".join(parts), f"{parts[0]}-{parts[-1]}", parts[0], f"{parts[0]}-python"):
        if dist_version(name) is not None:
            return name
    return (_top_level_distributions().get(module.split(".")[0]) or [parts[0]])[0]


@cache
def _top_level_distributions() -> dict[str, list[str]]:
    return dict(packages_distributions())


def _extra_dists(extra: str, seen: frozenset[str] = frozenset()) -> list[str]:
    """The distributions edgekit's `extra` pins (`name==version`), following extras that name other extras."""
    found: list[str] = []
    for line in requires("edgekit") or []:
        spec, _, marker = line.partition(";")
        if not re.search(rf"extra\s*==\s*['\"]{re.escape(extra)}['\"]", marker):
            continue
        if nested := re.match(r"\s*edgekit\[([^\]]+)\]", spec):
            for name in nested.group(1).split(","):
                if name.strip() not in seen:
                    found += _extra_dists(name.strip(), seen | {extra})
        elif "==" in spec:
            found.append(spec.split("==")[0].split("[")[0].strip())
    return list(dict.fromkeys(found))


def backend_packages() -> dict[str, list[Package]]:
    """Each registered backend's packages (build side and box side) with their installed versions."""
    from edgekit.backends.catalog import load_build
    from edgekit.registry import specs

    packages: dict[str, list[Package]] = {}
    for name, spec in specs().items():
        dists: list[str] = []
        # A third-party build side that cannot be imported, or an extra that is not edgekit's: list what we can.
        with contextlib.suppress(Exception):
            dists += [_dist_of(m) for m in load_build(spec).required_modules]
        with contextlib.suppress(Exception):
            dists += _extra_dists(spec.runtime_extra)
        unique = list(dict.fromkeys(d.replace("_", "-").lower() for d in dists))
        packages[name] = [Package(d, dist_version(d)) for d in unique]
    return packages


def backend_checks() -> list[Check]:
    from edgekit.registry import specs

    checks = []
    for name, packages in backend_packages().items():
        missing = [p.dist for p in packages if p.version is None]
        value = ", ".join(f"{p.dist} {p.version or '—'}" for p in packages)
        extra = specs()[name].runtime_extra
        fix = f"missing {', '.join(missing)}: pip install 'edgekit[{_build_extra(name)}]' to build, "
        fix += f"'edgekit[{extra}]' to run only"
        checks.append(Check("backends", name, "missing" if missing else "ok", value, fix if missing else None))
    return checks


def _build_extra(backend: str) -> str:
    from edgekit.backends.catalog import load_build
    from edgekit.registry import specs

    try:
        return str(load_build(specs()[backend]).extra)
    except Exception:
        return backend


# --- toolchain ----------------------------------------------------------------------------------------


def llama_cpp_tools(root: Path | None = None) -> dict[str, Path | None]:
    """llama.cpp's own tools built into the toolchain cache (`edgekit toolchain --tools`) for the installed
    llama-cpp-python, by name (None when absent)."""
    from edgekit.errors import EdgekitError
    from edgekit.toolchain import llama_cpp_python_version, toolchain_root
    from edgekit.toolchain.sdist import version_dir

    if root is None:
        try:
            root = version_dir(llama_cpp_python_version(), "tools")
        except EdgekitError:
            root = toolchain_root()
    found: dict[str, Path | None] = {}
    for name in LLAMA_TOOLS:
        hits = sorted(p for p in root.rglob(name) if p.is_file() and os.access(p, os.X_OK)) if root.is_dir() else []
        found[name] = hits[0] if hits else None
    return found


def toolchain_checks() -> list[Check]:
    from edgekit.errors import EdgekitError
    from edgekit.toolchain import cached_converter

    problem: str | None
    try:
        converter = cached_converter()
    except EdgekitError as exc:
        converter, problem = None, exc.message
    else:
        problem = None
    if converter is not None:
        commit = converter.llama_cpp_commit or "unknown commit"
        checks = [Check("toolchain", "converter", "ok", f"{converter.script} (llama.cpp {commit})")]
    else:
        checks = [
            Check(
                "toolchain",
                "converter",
                "warn",
                problem or "not fetched yet",
                "fetched on the first GGUF build from the package registry; `edgekit toolchain` does it now",
            )
        ]
    tools = llama_cpp_tools()
    have = [n for n, p in tools.items() if p is not None]
    absent = [n for n, p in tools.items() if p is None]
    value = ", ".join(have) if have else "none built"
    fix = f"optional ({', '.join(absent)}): `edgekit toolchain --tools` builds them" if absent else None
    checks.append(Check("toolchain", "llama.cpp tools", "missing" if absent else "ok", value, fix))
    return checks


# --- the machine --------------------------------------------------------------------------------------

# (name, any of these kernel flags, why it matters when absent)
X86_FLAGS = (
    ("AVX2", {"avx2"}, "llama.cpp and ONNX Runtime fall back to SSE kernels: several times slower"),
    ("AVX-512", {"avx512f"}, "optional: wider vectors for F16/Q8_0 kernels"),
    ("AVX-VNNI", {"avx_vnni", "avx512_vnni"}, "8-bit dot products are emulated; ONNX Runtime INT8 then uses "
                                              "7-bit weights (the plan chooses it)"),
    ("AMX", {"amx_tile", "amx_int8", "amx_bf16"}, "optional: matrix tiles OpenVINO uses for INT8/BF16"),
)  # fmt: skip
ARM_FLAGS = (
    ("NEON", {"asimd", "neon"}, "no SIMD: every backend is slow here"),
    ("dotprod", {"asimddp"}, "8-bit dot products are emulated: Q8_0 and INT8 run slower"),
    ("i8mm", {"i8mm"}, "optional: int8 matrix multiply llama.cpp uses for Q4_0/Q8_0 repacking"),
)


def cpu_checks(arch: str, flags: frozenset[str], model: str) -> list[Check]:
    """The CPU model and the instruction sets the kernels use (`arch` from platform.machine())."""
    checks = [Check("cpu", "model", "ok", f"{model} ({arch})")]
    table = X86_FLAGS if arch in ("x86_64", "AMD64", "i686") else ARM_FLAGS if arch in ("aarch64", "arm64") else ()
    essential = {"AVX2", "NEON"}
    for name, names, why in table:
        present = sorted(flags & names)
        if present:
            checks.append(Check("cpu", name, "ok", ", ".join(present)))
        else:
            checks.append(Check("cpu", name, "warn" if name in essential else "missing", "absent", why))
    physical, logical = machine.physical_cores(), machine.logical_cores()
    checks.append(Check("cpu", "cores", "ok", f"{physical} physical, {logical} logical (this process may use)"))
    nodes = read_topology().nodes
    numactl = shutil.which("numactl")
    numa_fix = "install numactl: run.sh binds a model to one node with it" if len(nodes) > 1 and not numactl else None
    checks.append(Check("cpu", "NUMA nodes", "warn" if numa_fix else "ok",
                        f"{len(nodes)}" + (f" (numactl {numactl})" if numactl else ""), numa_fix))  # fmt: skip
    return checks


def memory_checks(meminfo: str | None = None, thp: str | None = None) -> list[Check]:
    if meminfo is None:
        meminfo = _read(Path("/proc/meminfo"))
    values = {k.strip(): v.split()[0] for k, _, v in (line.partition(":") for line in meminfo.splitlines()) if v}
    total, available = int(values.get("MemTotal", 0)) * 1024, int(values.get("MemAvailable", 0)) * 1024
    low = available < LOW_MEMORY
    checks = [
        Check(
            "memory",
            "memory",
            "warn" if low else "ok",
            f"{total / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available",
            "under 2 GiB free: the reference model of a build may not fit; close something" if low else None,
        )
    ]
    setting = re.search(r"\[(\w+)\]", thp if thp is not None else _read(THP))
    pages = int(values.get("HugePages_Total", 0))
    mode = setting.group(1) if setting else "unknown"
    value = f"transparent: {mode}; reserved: {pages} × {values.get('Hugepagesize', '?')} kB"
    fix = f"echo madvise > {THP} (as root): fewer TLB misses on large models" if mode == "never" else None
    checks.append(Check("memory", "huge pages", "warn" if fix else "ok", value, fix))
    return checks  # fmt: skip


def disk_check(what: str, path: Path) -> Check:
    probe = Path(path).expanduser().absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    low = free < LOW_DISK
    fix = f"under {LOW_DISK / 2**30:.0f} GiB free: point {'EDGEKIT_CACHE' if what == 'cache' else '--out'} at a " \
          "larger disk" if low else None  # fmt: skip
    return Check("disk", f"free in {what}", "warn" if low else "ok", f"{free / 2**30:.1f} GiB free at {path}", fix)


def extra_checks() -> list[Check]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    browser = Check("extras", "headless Chromium", "ok" if chromium and driver else "missing",
                    f"{chromium or 'no browser'}, {driver or 'no chromedriver'}",
                    None if chromium and driver else "only the report's browser test needs it: apt-get install "
                    "chromium chromium-driver (scripts/install.sh --dev does it as root)")  # fmt: skip
    ray = dist_version("ray")
    cluster = Check("extras", "Ray", "ok" if ray else "missing", ray or "not installed",
                    None if ray else "optional, to run builds on a Ray cluster: pip install 'ray==2.60.0'")  # fmt: skip
    return [browser, cluster]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
