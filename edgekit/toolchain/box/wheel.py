"""llama-cpp-python compiled here for a box of another architecture, with Debian's cross-compiler.

PyPI ships llama-cpp-python only as source, and a box should not need a compiler. So the source package of
the installed version (the same llama.cpp commit as the build side's runtime) is compiled with
`<triplet>-gcc`/`g++` for the box's architecture, generically (`GGML_NATIVE` off, one `-march` every box of
the fleet runs), into a wheel kept in the toolchain cache once per version and options. OpenMP is off: ggml
then uses its own thread pool, and the wheel needs nothing on the box but glibc and libstdc++ (a box's
minimal Debian has no libgomp).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock

from edgekit._util.hashing import sha256_json
from edgekit.errors import ToolchainError
from edgekit.observe.progress import Progress
from edgekit.toolchain.box.arch import BoxArch
from edgekit.toolchain.sdist import llama_cpp_python_version, toolchain_root

ELF_MACHINES = {"aarch64": 183, "x86_64": 62}  # e_machine in the ELF header
BUILD_LOG = "build.log"


def cross_cmake_options(arch: BoxArch, march: str) -> dict[str, str]:
    return {
        "CMAKE_SYSTEM_NAME": "Linux",
        "CMAKE_SYSTEM_PROCESSOR": arch.system_processor,
        "CMAKE_C_COMPILER": f"{arch.gnu_triplet}-gcc",
        "CMAKE_CXX_COMPILER": f"{arch.gnu_triplet}-g++",
        "GGML_NATIVE": "OFF",
        "GGML_CPU_ARM_ARCH": march,
        "GGML_OPENMP": "OFF",
        "LLAVA_BUILD": "OFF",
    }


def wheel_folder(arch: BoxArch, march: str) -> Path:
    key = sha256_json(cross_cmake_options(arch, march))[:12]
    return toolchain_root() / "box" / arch.name / f"llama-cpp-python-{llama_cpp_python_version()}-{key}"


def llama_wheel(arch: BoxArch, march: str, progress: Progress, jobs: int | None = None) -> Path:
    """The cross-compiled wheel for `arch` (built once per llama-cpp-python version and options, under a lock)."""
    folder = wheel_folder(arch, march)
    if found := _wheel_in(folder):
        return found
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f".{folder.name}.lock")):
        if found := _wheel_in(folder):
            return found
        compiler = f"{arch.gnu_triplet}-g++"
        if shutil.which(compiler) is None:
            raise ToolchainError(f"the {arch.name} cross-compiler {compiler} is not installed",
                                 f"apt-get install g++-{arch.gnu_triplet} (Debian)")  # fmt: skip
        work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".partial"))
        try:
            with progress.task(f"toolchain  cross-compile llama-cpp-python {llama_cpp_python_version()} for "
                               f"{arch.name} (-march={march}), once per version"):  # fmt: skip
                _compile(arch, march, work, jobs or os.cpu_count() or 1)
            wheel = _checked(_wheel_in(work), arch, work)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(work, folder)
            return folder / wheel.name
        except BaseException:
            if (work / BUILD_LOG).is_file():
                shutil.copyfile(work / BUILD_LOG, folder.parent / f"{folder.name}-failed.log")
            shutil.rmtree(work, ignore_errors=True)
            raise


def _compile(arch: BoxArch, march: str, work: Path, jobs: int) -> None:
    options = cross_cmake_options(arch, march)
    env = {
        **os.environ,
        "CMAKE_ARGS": " ".join(f"-D{k}={v}" for k, v in options.items()),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs),
        # The wheel's platform tag: scikit-build-core takes it from here instead of this machine's.
        "_PYTHON_HOST_PLATFORM": f"linux-{arch.name}",
    }
    requirement = f"llama-cpp-python=={llama_cpp_python_version()}"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
           "--no-binary", "llama-cpp-python", requirement, "-w", str(work)]  # fmt: skip
    log = work / BUILD_LOG
    with open(log, "w", encoding="utf-8") as out:
        out.write(f"$ CMAKE_ARGS='{env['CMAKE_ARGS']}' {' '.join(cmd)}\n")
        out.flush()
        if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode != 0:
            tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
            raise ToolchainError(f"cross-compiling llama-cpp-python for {arch.name} failed:\n{tail}",
                                 "the full log is kept beside the wheel's folder as <folder>-failed.log")  # fmt: skip


def _wheel_in(folder: Path) -> Path | None:
    wheels = sorted(folder.glob("llama_cpp_python-*.whl")) if folder.is_dir() else []
    return wheels[0] if wheels else None


def _checked(wheel: Path | None, arch: BoxArch, work: Path) -> Path:
    """The wheel is tagged for the box and its shared libraries are the box's machine code."""
    if wheel is None or not wheel.name.endswith(f"-{arch.wheel_platform}.whl"):
        raise ToolchainError(f"the cross-compiled wheel is not tagged {arch.wheel_platform}: "
                             f"{wheel.name if wheel else 'no wheel'} in {work}", "rerun with --debug")  # fmt: skip
    with zipfile.ZipFile(wheel) as zipped:
        libraries = [n for n in zipped.namelist() if "/lib/lib" in n and ".so" in n]
        wrong = [n for n in libraries if _elf_machine(zipped.read(n)[:20]) != ELF_MACHINES[arch.name]]
    if not libraries or wrong:
        raise ToolchainError(f"the cross-compiled wheel holds libraries that are not {arch.name} code: "
                             f"{', '.join(wrong) or 'none at all'}", "rerun with --debug")  # fmt: skip
    return wheel


def _elf_machine(header: bytes) -> int | None:
    if header[:4] != b"\x7fELF" or len(header) < 20:
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
