"""llama.cpp's own command-line tools, built once per llama-cpp-python version from its source package.

`llama-quantize` (importance matrices, per-tensor types), `llama-imatrix`, `llama-perplexity`, `llama-bench`
and, on request, `llama-server` are not installed with llama-cpp-python. `edgekit toolchain --tools` builds
them with cmake from the source package of the installed version — the same llama.cpp commit as the runtime
and the converter — into the toolchain cache: in a temporary folder renamed into place when complete, under a
file lock, so a killed or concurrent build never leaves a half-built tool. Nothing is copied into this repo.

The tools link against the ggml libraries the llama-cpp-python wheel already built from the same commit
(`llama_cpp/lib`), through llama.cpp's own `LLAMA_USE_SYSTEM_GGML` switch: ggml's CPU kernels are not
compiled a second time, and a tool runs exactly the kernels the runtime runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from edgekit._util.hashing import sha256_file, sha256_json
from edgekit.errors import ToolchainError, ToolsNotBuilt
from edgekit.observe.progress import Progress
from edgekit.toolchain.sdist import (
    commit_from_changelog,
    download_sdist,
    extract_vendor,
    llama_cpp_python_version,
    read_changelog,
    version_dir,
)

BUILD_INFO = "BUILD.json"
BUILD_LOG = "build.log"
BUILD_FORMAT = 1


@dataclass(frozen=True)
class ToolSet:
    """Tools built together: cmake targets, the options they need, the `edgekit toolchain` flag that builds them."""

    name: str
    targets: tuple[str, ...]
    cmake: tuple[tuple[str, str], ...] = ()

    @property
    def flag(self) -> str:
        return f"--{self.name}"


TOOL_SETS: dict[str, ToolSet] = {
    s.name: s
    for s in (
        ToolSet("tools", ("llama-quantize", "llama-imatrix", "llama-perplexity", "llama-bench")),
        ToolSet("server", ("llama-server",), (("LLAMA_BUILD_SERVER", "ON"),)),
    )
}
# Every build: release, no network libraries, nothing but the requested targets; binaries find the shared
# libraries copied beside them ($ORIGIN), so the folder can be renamed into place.
CMAKE_OPTIONS: tuple[tuple[str, str], ...] = (
    ("CMAKE_BUILD_TYPE", "Release"),
    ("LLAMA_CURL", "OFF"),
    ("LLAMA_OPENSSL", "OFF"),
    ("LLAMA_BUILD_TESTS", "OFF"),
    ("LLAMA_BUILD_EXAMPLES", "OFF"),
    ("LLAMA_BUILD_SERVER", "OFF"),
    ("LLAMA_BUILD_APP", "OFF"),
    ("BUILD_SHARED_LIBS", "ON"),
    ("CMAKE_BUILD_WITH_INSTALL_RPATH", "ON"),
    ("CMAKE_INSTALL_RPATH", "$ORIGIN"),
)


def tool_set(tool: str) -> ToolSet:
    for toolset in TOOL_SETS.values():
        if tool in toolset.targets:
            return toolset
    known = ", ".join(t for s in TOOL_SETS.values() for t in s.targets)
    raise ValueError(f"{tool!r} is not one of the llama.cpp tools edgekit builds ({known})")


def tools_dir(set_name: str, pkg_version: str | None = None) -> Path:
    return version_dir(pkg_version or llama_cpp_python_version(), "tools") / set_name


def llama_tool(tool: str) -> Path:
    """The path of a built llama.cpp tool (`llama-bench`, `llama-server`…) of the installed llama-cpp-python."""
    toolset = tool_set(tool)
    pkg_version = llama_cpp_python_version()
    path = tools_dir(toolset.name, pkg_version) / tool
    if not path.is_file() or not (path.parent / BUILD_INFO).is_file():
        raise ToolsNotBuilt(tool, pkg_version, path.parent, toolset.flag)
    if _stale(path.parent):
        raise ToolchainError(
            f"llama.cpp's {tool} in {path.parent} was linked against another build of llama-cpp-python "
            f"{pkg_version} (the wheel was reinstalled since)",
            f"run `edgekit toolchain {toolset.flag}` to link the tools against the installed wheel again",
        )
    return path


def wheel_libraries() -> tuple[Path, ...]:
    """The shared libraries of the installed llama-cpp-python wheel (llama_cpp/lib/lib*.so.N), or () without."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return ()
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return tuple(sorted(p for name in WHEEL_LIBS for p in lib.glob(f"lib{name}.so.*") if p.name.count(".") == 2))


def wheel_build() -> str | None:
    """Which build of the wheel is installed: a digest of its shared libraries (two builds of one version differ
    when compiled with other flags), or None when it has none."""
    libraries = wheel_libraries()
    return sha256_json({p.name: sha256_file(p) for p in libraries})[:16] if libraries else None


def _stale(folder: Path) -> bool:
    """Tools linked against the wheel's libraries must be linked again when another build of the wheel is installed."""
    info = json.loads((folder / BUILD_INFO).read_text(encoding="utf-8"))
    return info.get("linkage") != FROM_SOURCE.describe and info.get("wheel_build") != wheel_build()


def tools_info(set_name: str = "tools") -> dict[str, Any] | None:
    """What a built tool set records about itself (commit, options, linkage), or None when not built."""
    info = tools_dir(set_name) / BUILD_INFO
    return json.loads(info.read_text(encoding="utf-8")) if info.is_file() else None


def tools_identity() -> dict[str, Any]:
    """What determines a tool's output (part of the cache key of tasks that run one)."""
    info = tools_info() or {}
    keys = ("format", "llama_cpp_python", "llama_cpp_commit", "cmake_options", "linkage", "wheel_build")
    return {k: info.get(k) for k in keys}


def build_tools(sets: Sequence[str], progress: Progress, jobs: int | None = None) -> list[Path]:
    """Build the tool sets not built yet (once per version, under a lock); return their folders."""
    pkg_version = llama_cpp_python_version()
    wanted = [TOOL_SETS[s] for s in sets]
    root = version_dir(pkg_version, "tools")

    def missing() -> list[ToolSet]:
        return [s for s in wanted if not (root / s.name / BUILD_INFO).is_file() or _stale(root / s.name)]

    if missing():  # built sets are complete (renamed into place): no lock needed to use them
        root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(root.parent / f".{root.name}.lock")):
            if todo := missing():
                _build(pkg_version, todo, root, progress, jobs or os.cpu_count() or 1)
    return [root / s.name for s in wanted]


def _build(pkg_version: str, sets: list[ToolSet], root: Path, progress: Progress, jobs: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root, prefix=".build-", suffix=".partial"))
    try:
        started = time.monotonic()
        with progress.task(f"toolchain  download the llama-cpp-python {pkg_version} source package"):
            archive = download_sdist(pkg_version, work, "llama.cpp's tools")
            extract_vendor(archive, work / "src")
        commit = commit_from_changelog(read_changelog(archive), pkg_version)
        targets = [t for s in sets for t in s.targets]
        options = CMAKE_OPTIONS + tuple(o for s in sets for o in s.cmake)
        log, build = work / BUILD_LOG, work / "build"
        linkage = _wheel_linkage(work / "src", work / "cmake") or FROM_SOURCE
        with progress.task(f"toolchain  build {', '.join(targets)} (cmake, {jobs} jobs)") as shown:
            try:
                _cmake(work / "src", build, options + linkage.cmake, targets, jobs, log)
            except ToolchainError:
                if linkage is FROM_SOURCE:
                    raise
                # Linking against the wheel is an optimisation: if this llama.cpp's build files no longer allow
                # it, compile everything from the source package instead (slower, same commit).
                shown.update(f"toolchain  build {', '.join(targets)} from source (cmake, {jobs} jobs)")
                shutil.move(log, work / "wheel-linkage.log")
                shutil.rmtree(build)
                linkage = FROM_SOURCE
                _cmake(work / "src", build, options, targets, jobs, log)
        seconds = time.monotonic() - started
        for toolset in sets:
            info = {
                "format": BUILD_FORMAT,
                "llama_cpp_python": pkg_version,
                "llama_cpp_commit": commit,
                "targets": list(toolset.targets),
                "cmake_options": dict(CMAKE_OPTIONS + toolset.cmake),
                "linkage": linkage.describe,
                "wheel_build": wheel_build() if linkage is not FROM_SOURCE else None,
                "generator": _generator()[0],
                "jobs": jobs,
                "build_seconds": round(seconds, 1),
            }
            _install(build / "bin", toolset, linkage, info, log, root)
    except BaseException:
        _keep_failed_log(work / BUILD_LOG, root)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass(frozen=True)
class Linkage:
    """How the tools get libllama and ggml: cmake options, shared libraries to copy beside them, a description."""

    cmake: tuple[tuple[str, str], ...]
    libraries: tuple[Path, ...]
    describe: str


FROM_SOURCE = Linkage((), (), "llama and ggml compiled from the source package (GGML_NATIVE, as the wheel)")
WHEEL_LIBS = ("llama", "ggml", "ggml-base", "ggml-cpu")
# llama.cpp's top-level CMakeLists adds libllama with `add_subdirectory(src)` and installs it; this hook (run
# right after its `project()`) puts the wheel's libllama there instead, and drops install rules (we install
# nothing: the tools are copied out of the build folder).
LLAMA_HOOK = """# written by edgekit: link llama.cpp's tools against the libllama of the llama-cpp-python wheel
function(add_subdirectory dir)
  if(dir STREQUAL "src" AND CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
    add_library(llama SHARED IMPORTED GLOBAL)
    set_target_properties(llama PROPERTIES IMPORTED_LOCATION "{llama}"
      INTERFACE_INCLUDE_DIRECTORIES "${{CMAKE_SOURCE_DIR}}/include" INTERFACE_LINK_LIBRARIES ggml)
  else()
    _add_subdirectory(${{ARGV}})
  endif()
endfunction()
function(install)
endfunction()
"""


def _wheel_linkage(src: Path, config_dir: Path) -> Linkage | None:
    """libllama and ggml as the installed llama-cpp-python wheel built them, or None when it has no shared libraries.

    ggml comes through llama.cpp's own `LLAMA_USE_SYSTEM_GGML` (a `ggml-config.cmake` naming the wheel's files);
    libllama through the hook above. Neither is compiled again, and the tools run the runtime's own code.
    """
    sonamed = wheel_libraries()
    if len(sonamed) != len(WHEEL_LIBS):
        return None
    found = {name: sonamed[0].parent / f"lib{name}.so" for name in WHEEL_LIBS}
    if not all(p.is_file() for p in found.values()):
        return None
    config_dir.mkdir(parents=True)
    lines = ["include(CMakeFindDependencyMacro)", "find_dependency(Threads)"]
    for name in WHEEL_LIBS[1:]:
        lines += [
            f"add_library(ggml::{name} SHARED IMPORTED)",
            f'set_target_properties(ggml::{name} PROPERTIES IMPORTED_LOCATION "{found[name]}" '
            f'INTERFACE_INCLUDE_DIRECTORIES "{src / "ggml" / "include"}")',
        ]
    lines.append("set_property(TARGET ggml::ggml APPEND PROPERTY INTERFACE_LINK_LIBRARIES ggml::ggml-base)")
    (config_dir / "ggml-config.cmake").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (config_dir / "llama-hook.cmake").write_text(LLAMA_HOOK.format(llama=found["llama"]), encoding="utf-8")
    options = (
        ("LLAMA_USE_SYSTEM_GGML", "ON"),
        ("ggml_DIR", str(config_dir)),
        ("CMAKE_PROJECT_llama.cpp_INCLUDE", str(config_dir / "llama-hook.cmake")),
        ("CMAKE_SKIP_INSTALL_RULES", "ON"),
    )
    return Linkage(options, tuple(sonamed), "libllama and ggml of the llama-cpp-python wheel (llama_cpp/lib); "
                   "the tools and llama.cpp's common library compiled from the source package")  # fmt: skip


def _generator() -> tuple[str, list[str]]:
    ninja = shutil.which("ninja")
    return ("Ninja", ["-G", "Ninja"]) if ninja else ("Unix Makefiles", [])


def _cmake(src: Path, build: Path, options: Sequence[tuple[str, str]], targets: list[str], jobs: int,
           log: Path) -> None:  # fmt: skip
    if shutil.which("cmake") is None:
        raise ToolchainError("cmake is not installed", "install cmake (3.21 or newer) and a C++17 compiler")
    configure = ["cmake", "-S", str(src), "-B", str(build), *_generator()[1], *(f"-D{k}={v}" for k, v in options)]
    compile_ = ["cmake", "--build", str(build), "-j", str(jobs), "--target", *targets]
    with open(log, "w", encoding="utf-8") as out:
        for cmd in (configure, compile_):
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
                raise ToolchainError(
                    f"building llama.cpp's tools failed:\n{tail}",
                    "check that a C++17 compiler and cmake ≥ 3.21 are installed; the full log is kept in "
                    "the toolchain folder as build-failed.log",
                )


def _install(bin_dir: Path, toolset: ToolSet, linkage: Linkage, info: dict[str, Any], log: Path,
             root: Path) -> None:  # fmt: skip
    """Copy the set's binaries with every shared library they load into a folder renamed into place."""
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{toolset.name}.", suffix=".partial"))
    try:
        for path in [*bin_dir.glob("*.so*"), *linkage.libraries]:
            shutil.copy2(path, staging / path.name, follow_symlinks=False)
        for tool in toolset.targets:
            shutil.copy2(bin_dir / tool, staging / tool)
            _check_runs(staging / tool)
        shutil.copy2(log, staging / BUILD_LOG)
        (staging / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        final = root / toolset.name
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _check_runs(tool: Path) -> None:
    """The binary starts and finds its libraries (it prints its usage for --help)."""
    proc = subprocess.run([str(tool), "--help"], capture_output=True, text=True, timeout=60)
    if "usage" not in (proc.stdout + proc.stderr).lower():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise ToolchainError(f"the freshly built {tool.name} does not start:\n{tail}", "rerun with --debug")


def _keep_failed_log(log: Path, root: Path) -> None:
    if log.is_file():
        shutil.copyfile(log, root / "build-failed.log")
